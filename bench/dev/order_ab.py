#!/usr/bin/env python3
"""A/B of the step order of kernels that take GROUPED (Retrace): natural (reverse scan) against
grouped (the chunk's steps reversed, scanned forward), per shape, on bench/rltriton.py's inputs,
as CUDA-graph replays of 20 calls over rotated input sets (the harness's device column), with
rl-triton beside them; rounds interleaved, medians.

    PYTHONPATH=. python3 bench/dev/order_ab.py [--shapes 16384x64,...] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--algo", default="retrace")
ap.add_argument("--shapes", default="32768x16,16384x64,4096x128,128x1024,1024x1024,16384x1024,"
                                    "256x8192")
ap.add_argument("--rounds", type=int, default=5)
args = ap.parse_args()
sys.argv = ["rltriton.py", "--out", tempfile.mkdtemp()]
import rltriton as H
import torch

from scangen import runtime
from scangen.runtime import launch_params


def graph(thunks, calls=20):
    for t in thunks:
        t()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            thunks[i % len(thunks)]()
    return g


def replay_us(g, calls=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (10 * calls)


for shape in args.shapes.split(","):
    N, T = map(int, shape.split("x"))
    m = H.master(args.algo, N, T)
    sets = [H.build(args.algo, {k: v.clone() if torch.is_tensor(v) else v for k, v in m.items()})
            for _ in range(8)]
    graphs = {}
    for order, grouped in (("natural", False), ("grouped", True)):
        launch_params.GROUPED_ORDER = grouped
        runtime.PLANS.clear()
        graphs[order] = graph([H.side_fn("sg", args.algo, sg) for sg, _, _ in sets])
    launch_params.GROUPED_ORDER = True
    runtime.PLANS.clear()
    graphs["rl-triton"] = graph([H.side_fn("rt", args.algo, rt) for _, rt, _ in sets])
    times = {k: [] for k in graphs}
    for _ in range(args.rounds):
        for k, g in graphs.items():
            times[k].append(replay_us(g))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.algo} {shape:>11s}: natural {med['natural']:7.2f} us, grouped "
          f"{med['grouped']:7.2f} us ({med['natural'] / med['grouped']:.2f}x), rl-triton "
          f"{med['rl-triton']:7.2f} us", flush=True)
