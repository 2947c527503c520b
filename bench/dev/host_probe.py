"""Probe: where a full call's host time goes (bench/rltriton.py's call column), per op and shape.

Plain loops (``--cells``): the plan, its config and fast path, the wall and host time a call
over cycled input sets, and a profile of 40 calls. ``--harness``: the cell as bench/rltriton.py
builds it (its inputs, two sets, interleaved beside rl-triton and the empty launch). Found
(2026-12-01): V-trace 64x65536 takes 38.7 us a call both ways, where rltriton.py had read 199-203
us; the harness had calibrated on the plan's second launch (its fast-path build) and timed
single-call samples (fixed there: a warm-up call per input set).

    PYTHONPATH=. python3 bench/dev/host_probe.py --cells vtrace:64x65536,gae:64x65536
    PYTHONPATH=.:third_party/rl-triton/src python3 bench/dev/host_probe.py --harness vtrace:64x65536
"""
import argparse
import itertools
import time

import torch

import scangen
from scangen import runtime, testing
from scangen.benchmark.inputs import apply_no_trunc

ap = argparse.ArgumentParser()
ap.add_argument("--cells", default="vtrace:64x65536,eligibility_traces:64x65536,gae:64x65536")
ap.add_argument("--sets", type=int, default=4)
ap.add_argument("--harness", default="", help="cells timed as bench/rltriton.py times them")
args = ap.parse_args()
for cell in ([] if args.harness else args.cells.split(",")):
    algo, shape = cell.split(":")
    N, T = map(int, shape.split("x"))
    fn = getattr(scangen, "compute_" + algo)
    sets = []
    for s in range(args.sets):
        kw = testing.make_inputs(algo, N, T, seed=s, dtype=torch.float32)
        kw = apply_no_trunc("compute_" + algo, kw) if algo not in ("eligibility_traces", "episodic_prefix_sum") else kw
        sets.append({k: v.cuda() if torch.is_tensor(v) else v for k, v in kw.items()})
    runtime.PLANS.clear()
    for kw in sets * 3:
        fn(**kw)
    torch.cuda.synchronize()
    plans = list(runtime.PLANS.values())
    print(f"{cell}: {len(plans)} plans; configs {[p.config for p in plans]}; fast path {[p.lp.fast is not None for p in plans]}")
    for label, pool in (("cycling sets", sets), ("one set", sets[:1])):
        cyc = itertools.cycle(pool)
        host = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            h = time.perf_counter()
            fn(**next(cyc))
            host.append(time.perf_counter() - h)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 200
        host.sort()
        print(f"  {label}: wall {wall * 1e6:.1f} us a call; host part median {host[100] * 1e6:.1f} us, "
              f"p90 {host[180] * 1e6:.1f}, max {host[-1] * 1e6:.1f}")
    cyc = itertools.cycle(sets)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(40):
            fn(**next(cyc))
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


def harness(cell: str) -> None:
    """The same cell as bench/rltriton.py builds and times it (its inputs, two input sets, the
    interleaved rounds beside rl-triton and the empty launch), then one profiled block of
    scangen calls right after a block of rl-triton's."""
    import sys as _sys
    from pathlib import Path
    _sys.argv = ["rltriton.py", "--out", "/tmp/host_probe"]
    _sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import rltriton as R
    from scangen.benchmark import timing
    name, shape = cell.split(":")
    N, T = map(int, shape.split("x"))
    m = R.master(name, N, T)
    sg_kw, rt_kw, _ = R.build(name, m)
    copy = R.build(name, {a: v.clone() if torch.is_tensor(v) else v for a, v in m.items()})
    sg = timing.cycling([R.side_fn("sg", name, sg_kw), R.side_fn("sg", name, copy[0])])
    rt = timing.cycling([R.side_fn("rt", name, rt_kw), R.side_fn("rt", name, copy[1])])
    sg(), rt()
    sync = torch.cuda.synchronize
    for label, fns in (("sg alone", {"sg": sg}), ("with rl-triton", {"sg": sg, "rt": rt, "launch": R.launch})):
        t = timing.interleaved(fns, rounds=5, target_s=0.01, sync=sync)
        print(f"{cell} harness, {label}: " + ", ".join(f"{k} {v.median_s * 1e6:.1f} us (n={v.n_inner})" for k, v in t.items()))
    sync()
    for _ in range(15):
        rt()
    sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            sg()
        sync()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__" and args.harness:
    for cell in args.harness.split(","):
        harness(cell)
