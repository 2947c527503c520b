"""A/B of the lean entry kernels (scangen.abi.lean_args) against the full kernels, on CUDA.

For each built-in and shape, fp32, rows: the full call (host-timed back to back, as
bench/rltriton.py's "call" column) with ``scangen.runtime.launch.LEAN`` on and off, in
alternating phases (each phase builds its own plan: the flag is read when a plan is built),
beside the empty launch timed in the same phases; and the outputs of both, which must agree.

    PYTHONPATH=. python3 bench/dev/lean_ab.py --out "$OUT" [--shapes 4096x128,...] [--phases 3]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import scangen
from scangen.benchmark.empty_kernels import empty_launch
from scangen.benchmark.timing import block_time, calibrate
from scangen.runtime import PLANS, launch
from scangen.testing.helpers import make_inputs

ALGOS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
         "eligibility_traces", "episodic_prefix_sum", "masked_gae")
SHAPES = "4096x128,128x1024,32768x16,16384x64"


def _sample(fn, n, samples=5):
    sync = torch.cuda.synchronize
    return statistics.median(block_time(fn, n, sync) for _ in range(samples))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--tag", default="lean-ab")
    args = ap.parse_args()
    dev = torch.device("cuda")
    x = torch.empty(1, device=dev)
    rows = []
    for algo in args.algos.split(","):
        fn = getattr(scangen, f"compute_{algo}")
        for shape in args.shapes.split(","):
            N, T = map(int, shape.split("x"))
            kw = make_inputs(algo, N, T, seed=0, device=dev)
            call = lambda: fn(**kw)  # noqa: E731
            res = {"lean": [], "full": [], "launch": []}
            outs = {}
            for _ in range(args.phases):
                for mode in ("lean", "full"):
                    launch.LEAN = mode == "lean"
                    PLANS.clear()
                    outs[mode] = call()
                    for _ in range(20):
                        call()
                    n = calibrate(call, 0.02, torch.cuda.synchronize)
                    res[mode].append(_sample(call, n))
                    n0 = calibrate(lambda: empty_launch(x, 1), 0.02, torch.cuda.synchronize)
                    res["launch"].append(_sample(lambda: empty_launch(x, 1), n0))
            launch.LEAN = True
            a, b = (o if isinstance(o, tuple) else (o,) for o in (outs["lean"], outs["full"]))
            diff = max(float((p - q).abs().max()) for p, q in zip(a, b))
            lean, full, empty = (statistics.median(res[k]) * 1e6 for k in ("lean", "full", "launch"))
            rows.append(dict(algo=algo, shape=shape, lean_us=lean, full_us=full, launch_us=empty,
                             lean_x_launch=lean / empty, full_x_launch=full / empty,
                             lean_over_full=lean / full, max_abs_diff=diff,
                             lean_samples=res["lean"], full_samples=res["full"]))
            print(f"{algo:20s} {shape:10s} lean {lean:7.2f} us  full {full:7.2f} us  "
                  f"launch {empty:6.2f} us  lean/launch {lean / empty:4.2f}  "
                  f"full/launch {full / empty:4.2f}  diff {diff:.1e}", flush=True)
    meta = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), host=platform.node(),
                gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=__import__("triton").__version__, argv=" ".join(__import__("sys").argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.tag}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    lines = [f"# Lean entry kernels against full kernels ({meta['gpu']}, torch {meta['torch']}, "
             f"Triton {meta['triton']}, {meta['date']})", "",
             "Full call, host-timed back to back (median of phases, each the median of 5 blocks "
             "of ~20 ms); empty launch timed in the same phases.", "",
             "| algo | N x T | lean us | full us | lean / full | launch us | lean / launch | "
             "full / launch | max diff |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['shape']} | {r['lean_us']:.2f} | {r['full_us']:.2f} | "
                     f"{r['lean_over_full']:.3f} | {r['launch_us']:.2f} | {r['lean_x_launch']:.2f} | "
                     f"{r['full_x_launch']:.2f} | {r['max_abs_diff']:.1e} |")
    (out / f"{args.tag}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
