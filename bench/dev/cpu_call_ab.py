"""Small CPU calls (the numba backend's host path): this checkout against another, or the views of
a call's tensors built by NumPy against torch's, with the other costs of the call unchanged.

    python bench/dev/cpu_call_ab.py --base /tmp/wt_old [--rounds 5]   # git worktree add /tmp/wt_old REV
    python bench/dev/cpu_call_ab.py --views

``--base``: alternating processes, one a side a round (the two trees cannot share a process: the
generated modules and the runtime change together), each timing every case
(``scangen.benchmark.timing.interleaved``: the median of 7 blocks of ~20 ms after 20 warm-up
calls, one thread, the numba disk cache warm); the medians over rounds and their ratio.
``--views``: one process; each case's plan with NumPy's views of contiguous tensors
(``runtime.numba._array``) and with torch's (``_Plan.direct`` emptied), the two interleaved
(``interleaved``, 15 rounds), outputs compared first. CPU.md records the runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = [("gae", 4, 128, False), ("vtrace", 4, 128, False), ("retrace", 4, 128, False),
         ("eligibility_traces", 4, 128, False), ("gae", 4, 128, True), ("gae", 8, 2048, False),
         ("gae", 64, 1024, False), ("masked_gae", 16, 256, False)]


def _call(algo, N, T, tm):
    import torch

    import scangen
    from scangen.testing import as_time_major, make_inputs
    kw = make_inputs(algo, N, T, seed=0, device="cpu")
    if tm:  # [T, N] buffers: as_time_major's views transposed (scangen.testing's
        # time_major_buffers, which a --base tree may predate)
        kw = {k: v.transpose(0, 1) if torch.is_tensor(v) and v.dim() >= 2 else v
              for k, v in as_time_major(kw).items()}
        kw["time_dim"] = 0
    f = getattr(scangen, f"compute_{algo}")
    return lambda: f(**kw)


def _name(algo, N, T, tm):
    return f"{algo} {N}x{T}{' time-major' if tm else ''}"


def measure() -> dict:
    """Every case's time a call in this process (us): the median of 7 blocks."""
    import torch

    from scangen.benchmark.timing import interleaved
    torch.set_num_threads(1)
    out = {}
    for case in CASES:
        call = _call(*case)
        for _ in range(20):
            call()
        out[_name(*case)] = interleaved({"call": call}, rounds=7)["call"].median_s * 1e6
    return out


def base_ab(base: Path, rounds: int) -> None:
    runs = {"base": [], "checkout": []}
    for tree, key in ((base, "base"), (ROOT, "checkout")):  # first calls: numba's disk cache
        subprocess.run([sys.executable, __file__, "--measure"], check=True, capture_output=True,
                       cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    for _ in range(rounds):
        for tree, key in ((base, "base"), (ROOT, "checkout")):
            p = subprocess.run([sys.executable, __file__, "--measure"], check=True,
                               capture_output=True, text=True, cwd=tree,
                               env={**os.environ, "PYTHONPATH": str(tree)})
            runs[key].append(json.loads(p.stdout.splitlines()[-1]))
    print(f"# base {base}, checkout {ROOT}; medians of {rounds} alternating processes a side, "
          "us a call, one thread")
    for name in runs["base"][0]:
        b = statistics.median(r[name] for r in runs["base"])
        c = statistics.median(r[name] for r in runs["checkout"])
        print(f"{name:32s} base {b:8.1f}  checkout {c:8.1f}  checkout/base {c / b:.3f}")


def views_ab() -> None:
    import torch

    from scangen.benchmark.timing import interleaved
    from scangen.runtime import plans
    torch.set_num_threads(1)
    print("# one process; views of contiguous tensors by NumPy (new) against torch's (old), "
          "interleaved; us a call, medians of 15 blocks")
    for case in CASES:
        call = _call(*case)
        for _ in range(5):
            call()
        algo, N, T, _ = case
        lps = [p.lp for p in plans.PLANS.values() if p.op.name == algo and p.lp.numba is not None
               and p.lp.numba.steps == N * T]
        kept = {id(lp): lp.numba.direct for lp in lps}

        def mode(new, lps=lps, kept=kept):
            for lp in lps:
                lp.numba.direct = kept[id(lp)] if new else [None] * len(kept[id(lp)])
        outs = {}
        for new in (False, True):
            mode(new)
            r = call()
            outs[new] = r if isinstance(r, tuple) else (r,)
        same = all(torch.equal(a, b) for a, b in zip(outs[False], outs[True]))
        t = interleaved({"old": call, "new": call}, rounds=15,
                        settings={"old": (lambda: mode(False), None), "new": (lambda: mode(True), None)})
        mode(True)
        o, w = t["old"].median_s * 1e6, t["new"].median_s * 1e6
        print(f"{_name(*case):32s} torch views {o:8.1f}  NumPy views {w:8.1f}  new/old {w / o:.3f}"
              f"  outputs equal {same}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="another checkout (a git worktree) to time against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--views", action="store_true")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure()))
    elif args.views:
        views_ab()
    elif args.base:
        base_ab(args.base.resolve(), args.rounds)
    else:
        ap.error("give --base DIR or --views")


if __name__ == "__main__":
    main()
