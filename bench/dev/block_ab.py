"""The block family (runtime.config, time-major buffers of many rows) against the rule without
it (config.BLOCK = False: the time-major stream tiles) and against the same data in rows, for
every op that has a block kernel, as CUDA-graph replays over rotated input sets, in one process,
in the order block, old, old, block (the first measurement of a case tends to be the slower).

Each case is first checked: the block family's outputs against the float64 torch path.

    PYTHONPATH=. python3 bench/dev/block_ab.py --out $OUT
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

import scangen
from scangen import runtime
from scangen.runtime import config
from scangen.testing import as_time_major, assert_close, make_inputs

ALGOS = ["gae", "vtrace", "lambda_returns", "discounted_returns", "eligibility_traces",
         "episodic_prefix_sum", "masked_gae"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--shapes", default="16384x1024,16384x128,16384x64,32768x16,65536x32,"
                                        "8192x1024")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from triton.testing import do_bench, do_bench_cudagraph
    a = torch.empty(2**29, device="cuda")
    b = torch.empty_like(a)
    bw = 2 * a.numel() * 4 / do_bench(lambda: b.copy_(a), warmup=25, rep=100) / 1e6
    del a, b
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    lines = [f"# block_ab: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy "
             f"{bw:,.0f} GB/s; fp32 with truncations; graph replays over rotated input sets; "
             "us (% of the floor: bytes in and out of the call / copy bandwidth)",
             "", "| algo | N x T | block | time-major tiles (old rule) | block / old | rows | "
             "block / rows | check |", "|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    t0 = time.time()
    for name, shape in itertools.product(args.algos.split(","), args.shapes.split(",")):
        N, T = map(int, shape.split("x"))
        fn = getattr(scangen, f"compute_{name}")
        base = make_inputs(name, N, T, seed=0, device="cuda")
        nbytes = sum(v.numel() * v.element_size() for v in base.values() if torch.is_tensor(v))
        outs = fn(**base)
        nbytes += sum(o.numel() * o.element_size() for o in (outs if isinstance(outs, tuple)
                                                              else (outs,)))
        floor = nbytes / bw / 1e3
        n_sets = max(1, min(12, -(-3 * l2 // nbytes)))
        rows_sets = [make_inputs(name, N, T, seed=k, device="cuda") for k in range(n_sets)]
        tm_sets = [as_time_major(s) for s in rows_sets]
        config.BLOCK = True
        runtime.PLANS.clear()
        check = "ok"
        try:
            got = fn(**tm_sets[0])
            ref = fn(**{k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
                        for k, v in tm_sets[0].items()}, backend="torch")
            for g, r in zip(got if isinstance(got, tuple) else (got,),
                            ref if isinstance(ref, tuple) else (ref,)):
                assert_close(g.double().cpu(), r.cpu(), dtype=g.dtype, name=name)
        except AssertionError as e:
            check = f"FAIL {str(e)[:80]}"

        def graph(sets, block):
            config.BLOCK = block
            runtime.PLANS.clear()
            it = itertools.cycle(sets)
            return 1e3 * do_bench_cudagraph(lambda: fn(**next(it)), rep=20,
                                            return_mode="median")

        new = [graph(tm_sets, True)]
        old = [graph(tm_sets, False), graph(tm_sets, False)]
        new.append(graph(tm_sets, True))
        rows = graph(rows_sets, True)
        nb, ob = min(new), min(old)
        line = (f"| {name} | {N}x{T} | {nb:.1f} ({100 * floor / nb:.0f}%) | {ob:.1f} "
                f"({100 * floor / ob:.0f}%) | {nb / ob:.2f}x | {rows:.1f} | {nb / rows:.2f}x | "
                f"{check} |")
        print(line, flush=True)
        lines.append(line)
        del rows_sets, tm_sets
        torch.cuda.empty_cache()
    config.BLOCK = True
    lines.append(f"\n# {time.time() - t0:.0f} s")
    if args.out:
        with open(f"{args.out}/block_ab.md", "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
