#!/usr/bin/env python3
"""The kernels one call launches, and its device time as a CUDA-graph replay of 20 and of 200
calls, for scangen and rl-triton on bench/rltriton.py's own inputs (one input set: L2-warm).

    PYTHONPATH=. python3 bench/dev/kernels_per_call.py [--algos gae,retrace] [--shapes 128x1024]

A call that launches more than one kernel pays a graph node per kernel; the 20-call replay (the
harness's "device" column) carries more of the graph's own launch than the 200-call one.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--algos", default="gae,eligibility_traces,episodic_prefix_sum,vtrace,retrace")
ap.add_argument("--shapes", default="128x1024,4096x128,16384x64")
args = ap.parse_args()
sys.argv = ["rltriton.py", "--out", tempfile.mkdtemp()]  # the harness parses its own arguments
import rltriton as H
import torch
from torch.profiler import ProfilerActivity, profile


def graph_us(fn, calls):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(20):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    return best


for name in args.algos.split(","):
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        sg, rt, _ = H.build(name, H.master(name, N, T))
        for side, kw in (("scangen", sg), ("rl-triton", rt)):
            fn = H.side_fn("sg" if side == "scangen" else "rt", name, kw)
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
            kernels = Counter()
            dev = Counter()
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kernels[e.name[:60]] += 1
                    dev[e.name[:60]] += e.device_time
            per_call = ", ".join(f"{k} x{v / 10:g} ({dev[k] / v:.2f} us)" for k, v in kernels.items())
            print(f"{name:20s} {shape:>9s} {side:9s} graph/20 {graph_us(fn, 20):6.2f} us, "
                  f"graph/200 {graph_us(fn, 200):6.2f} us | {per_call}", flush=True)
