#!/usr/bin/env python3
"""Probe (issue 22, bench/NOTES.md open question 22): the time-major look-back's waits as three
launches with none. Eligibility traces over ``[T, N]`` buffers (``time_dim=0``), hand-written
here (a probe, not generated):

1. ``aggregates``: each (tile of BN rows, chunk of BT steps) loads its chunk and writes the
   chunk's composed affine map per row (two words); no program waits on another;
2. ``carries``: one program per BN rows scans those maps along the chunks (a [chunks, BN] tile)
   and writes each chunk's incoming state;
3. ``apply``: each (tile, chunk) loads its chunk again (from L2 where the call's inputs fit it),
   scans it from its carry and stores the traces.

The open question: the look-back's waits are most of the gap to the rows layout at few long rows
(NOTES, open question 15: eligibility traces 64x65536 38.4 us as generated, 15.2 without waits,
11.0 without waits or stores); a reduce-then-scan was "predicted to lose" from 1.7x the reads.
Here the second read comes from L2 where the inputs fit it (64x65536: 33.5 MB), so the
prediction is tested, not assumed. Timed as CUDA-graph replays (20 calls a graph over rotated
input sets, 3x the L2), interleaved with scangen's time-major and rows calls, outputs checked
against scangen's.

    PYTHONPATH=. python3 bench/dev/tm_twopass_probe.py --out $OUT/tm_twopass.txt
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/dev/tm_twopass_probe.py --check-only --shapes 37x300
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch
import triton
import triton.language as tl

import scangen
from scangen.benchmark.floors import cache_bytes
from scangen.benchmark.suite import rotated
from scangen.benchmark.timing import captured, device_interleaved
from scangen.testing import make_inputs, time_major_buffers

CALLS = 20


@triton.jit
def _combine(a0, b0, a1, b1):  # (a0, b0) first in time
    return a1 + b1 * a0, b1 * b0


@triton.jit
def _chunk_maps(g_ptr, d_ptr, N, T, gl, BN: tl.constexpr, BT: tl.constexpr, W: tl.constexpr):
    # This program's (tile of BN rows, chunk c) and the chunk's prefix maps in column order
    # (column j: step (j % W) * (BT / W) + j // W, so each warp holds a run of steps in
    # registers; the layout of runtime.launch.lane_warps).
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    tile, c = pid % n_tiles, pid // n_tiles
    rows = tl.multiple_of(tile * BN + tl.arange(0, BN), 1)  # a row a lane (runtime.launch.lanes)
    cols = tl.arange(0, BT)
    pos = (cols % W) * (BT // W) + cols // W
    t = (c * BT + pos).to(tl.int64)
    ok = (rows < N)[:, None] & (t < T)[None, :]
    g = tl.load(g_ptr + rows[:, None] + t[None, :] * N, mask=ok, other=0.0)
    tp = tl.maximum(t - 1, 0)
    dp = tl.load(d_ptr + rows[:, None] + tp[None, :] * N, mask=ok & (t > 0)[None, :], other=0)
    alpha = tl.where(ok, g, 0.0)
    beta = tl.where(ok, gl * (1.0 - dp.to(tl.float32)), 1.0)
    S: tl.constexpr = BT // W
    a_r, b_r = tl.associative_scan((tl.reshape(alpha, (BN, S, W)), tl.reshape(beta, (BN, S, W))),
                                   1, _combine)
    far = (tl.arange(0, S) == S - 1)[None, :, None]
    a_w = tl.sum(tl.where(far, a_r, 0.0), axis=1)  # [BN, W] each run's map
    b_w = tl.sum(tl.where(far, b_r, 0.0), axis=1)
    a_w, b_w = tl.associative_scan((a_w, b_w), 1, _combine)
    return rows, c, a_r, b_r, a_w, b_w, t, ok


@triton.jit
def aggregates(g_ptr, d_ptr, agg_a, agg_b, N, T, gl, BN: tl.constexpr, BT: tl.constexpr,
               W: tl.constexpr):
    rows, c, _, _, a_w, b_w, _, _ = _chunk_maps(g_ptr, d_ptr, N, T, gl, BN, BT, W)
    last = (tl.arange(0, W) == W - 1)[None, :]
    ok = rows < N
    tl.store(agg_a + c * N + rows, tl.sum(tl.where(last, a_w, 0.0), axis=1), mask=ok)
    tl.store(agg_b + c * N + rows, tl.sum(tl.where(last, b_w, 0.0), axis=1), mask=ok)


@triton.jit
def carries(agg_a, agg_b, seed_ptr, carry, N, NCH, BN: tl.constexpr, CP: tl.constexpr):
    # carry[c] = (maps of chunks 0 .. c-1 composed)(seed): an inclusive scan of the maps shifted
    # by one chunk (chunk 0: the identity)
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    ch = tl.arange(0, CP)
    prev = ch - 1
    ok = (prev >= 0)[:, None] & (prev < NCH)[:, None] & (rows < N)[None, :]
    a = tl.load(agg_a + prev[:, None] * N + rows[None, :], mask=ok, other=0.0)
    b = tl.load(agg_b + prev[:, None] * N + rows[None, :], mask=ok, other=1.0)
    a, b = tl.associative_scan((a, b), 0, _combine)
    seed = tl.load(seed_ptr + rows, mask=rows < N, other=0.0)
    tl.store(carry + ch[:, None] * N + rows[None, :], a + b * seed[None, :],
             mask=(ch < NCH)[:, None] & (rows < N)[None, :])


@triton.jit
def apply(g_ptr, d_ptr, carry, z_ptr, N, T, gl, BN: tl.constexpr, BT: tl.constexpr,
          W: tl.constexpr):
    rows, c, a_r, b_r, a_w, b_w, t, ok = _chunk_maps(g_ptr, d_ptr, N, T, gl, BN, BT, W)
    run = tl.arange(0, W)[None, :]
    frm = tl.broadcast_to(tl.maximum(run - 1, 0), (BN, W))
    a_w = tl.gather(a_w, frm, 1)[:, None, :]  # the runs before each run, composed
    b_w = tl.gather(b_w, frm, 1)[:, None, :]
    a_c, b_c = _combine(a_w, b_w, a_r, b_r)
    first = (run == 0)[:, None, :]
    a = tl.reshape(tl.where(first, a_r, a_c), (BN, BT))
    b = tl.reshape(tl.where(first, b_r, b_c), (BN, BT))
    z0 = tl.load(carry + c * N + rows, mask=rows < N, other=0.0)
    tl.store(z_ptr + rows[:, None] + t[None, :] * N, a + b * z0[:, None], mask=ok)


def twopass(gradients, dones, seed_values, gamma, lambda_, BN=32, BT=256, W=8, ws=None, SB=32,
            parts="asb"):
    """Eligibility traces of [T, N] buffers in three launches; ``ws``: (agg_a, agg_b, carry)."""
    T, N = gradients.shape
    nch = triton.cdiv(T, BT)
    if ws is None:
        ws = tuple(torch.empty(nch, N, device=gradients.device) for _ in range(3))
    agg_a, agg_b, carry = ws
    z = torch.empty_like(gradients)
    gl = gamma * lambda_
    grid = (triton.cdiv(N, BN) * nch,)
    if "a" in parts:
        aggregates[grid](gradients, dones, agg_a, agg_b, N, T, gl, BN=BN, BT=BT, W=W, num_warps=W)
    if "s" in parts:  # SB rows a program
        carries[(triton.cdiv(N, SB),)](agg_a, agg_b, seed_values, carry, N, nch, BN=SB,
                                       CP=triton.next_power_of_2(nch), num_warps=4)
    if "b" in parts:
        apply[grid](gradients, dones, carry, z, N, T, gl, BN=BN, BT=BT, W=W, num_warps=W)
    return z


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="64x65536,256x8192,512x4096,1024x1024,128x1024")
    ap.add_argument("--tiles", default="32x256x8,32x128x4,32x512x8", help="BNxBTxW, comma-separated")
    ap.add_argument("--out", default=None)
    ap.add_argument("--carry-rows", default="32", help="rows a program of the carries kernel, comma-separated")
    ap.add_argument("--parts", action="store_true", help="also time each launch alone")
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    dev = torch.device("cpu" if interp or not torch.cuda.is_available() else "cuda")
    tiles = [tuple(map(int, s.split("x"))) for s in args.tiles.split(",")]
    lines = []
    if dev.type == "cuda":
        lines.append(f"# tm_twopass_probe: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
                     f"triton {triton.__version__}, {platform.node()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
        lines.append("# device time per call (one of 20 in a CUDA graph over rotated inputs), "
                     "medians of interleaved replays; eligibility traces, fp32")
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        rows_set = make_inputs("eligibility_traces", N, T, seed=0, device=dev)
        tm_set = time_major_buffers(rows_set)
        ref = scangen.compute_eligibility_traces(**tm_set, time_dim=0)
        for bn, bt, w in tiles:
            if interp:
                bt = min(bt, 64)
            z = twopass(**tm_set, BN=bn, BT=bt, W=w)
            diff = float((z - ref).abs().max())
            print(f"check {shape} {bn}x{bt}x{w}: max diff {diff:.1e}", flush=True)
            assert diff < 1e-3 * max(1.0, float(ref.abs().max())), diff
        if args.check_only or dev.type != "cuda":
            continue
        budget = 3 * cache_bytes(dev)
        fns = {}
        sets, _ = rotated(rows_set, budget, 16)
        fns["rows"] = [lambda s=s: scangen.compute_eligibility_traces(**s) for s in sets]
        tsets, _ = rotated(tm_set, budget, 16)
        fns["time-major"] = [lambda s=s: scangen.compute_eligibility_traces(**s, time_dim=0) for s in tsets]
        for bn, bt, w in tiles:
            nch = triton.cdiv(T, bt)
            ws = tuple(torch.empty(nch, N, device=dev) for _ in range(3))
            for sb in args.carry_rows.split(","):
                fns[f"twopass {bn}x{bt}x{w} s{sb}"] = [
                    lambda s=s, ws=ws, bn=bn, bt=bt, w=w, sb=int(sb):
                    twopass(**s, BN=bn, BT=bt, W=w, ws=ws, SB=sb) for s in tsets]
            if args.parts:
                twopass(**tm_set, BN=bn, BT=bt, W=w, ws=ws)  # the workspace filled
                for part in ("a", "s", "b"):
                    fns[f"part {part} {bn}x{bt}x{w}"] = [
                        lambda s=s, ws=ws, bn=bn, bt=bt, w=w, part=part:
                        twopass(**s, BN=bn, BT=bt, W=w, ws=ws, SB=4, parts=part) for s in tsets]
        graphs = {k: captured(v, CALLS)[0] for k, v in fns.items()}
        t = device_interleaved({k: g.replay for k, g in graphs.items()}, rounds=3,
                               warmup_ms=5.0, rep_ms=20.0)
        us = {k: t[k].median_s * 1e6 / CALLS for k in graphs}
        line = f"{shape:>10s}  " + "  ".join(f"{k} {v:7.2f}" for k, v in us.items()) + \
            f"  | time-major/rows {us['time-major'] / us['rows']:.2f}, best twopass/rows " \
            f"{min(v for k, v in us.items() if k.startswith('twopass')) / us['rows']:.2f}"
        print(line, flush=True)
        lines.append(line)
        del graphs, sets, tsets, fns
        torch.cuda.empty_cache()
    if args.out and lines:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
