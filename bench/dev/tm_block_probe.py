"""Probe (issue 22): time-major GAE, each thread walking its own rows in time, with the loads of
``D`` steps issued together before the steps that use them.

``bench/dev/tm_seq_probe.py`` refuted the plain version of this kernel (a load a step): every step
waited one memory latency (4096x128: 60 us, 128 steps of ~470 ns; ``num_stages`` changed nothing,
Triton does not pipeline those loads). Here the step loop is unrolled ``D`` times in the
kernel's text (a code generator can do this): each block of ``D`` steps first issues the loads of
all its steps (``D`` [BLOCK_N] vectors of adjacent rows per input, each coalesced), then runs
the ``D`` steps' arithmetic and stores, so a thread has ``D`` loads a tensor in flight instead of
one. ``--buffers 2`` also issues the next block's loads before the current block's arithmetic
(double buffering). Prediction (bench/NOTES.md, open question 7): where the rows are many
(16384x1024: 16384 rows, 512 warps), D = 16 brings 16384x1024 from 500 us to near the
bandwidth floor (67 us) and to about the rows layout's time; where rows are few (1024x1024: 32
warps) the GPU stays mostly idle and it loses to today's tiles.

It computes GAE without truncations (rewards, values, terminateds, last_value [N]), as
tm_seq_probe does, checked against scangen's own call on the same inputs, and is timed beside
scangen's time-major and rows calls as CUDA-graph replays over rotated input sets.

    PYTHONPATH=. python3 bench/dev/tm_block_probe.py --out $OUT/tm_block.txt
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/dev/tm_block_probe.py --check-only --shapes 37x32
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import sys
import tempfile

import torch
import triton

import scangen
# the same calls, floors and baselines as tm_seq_probe: GAE without truncations
from tm_seq_probe import Report, baseline, graph_us, inputs, mismatch

OUTS = ["advantages", "returns"]
WINDOW = 16  # the segment kernel's look-back window (predecessors read per round)


def load_lines(D: int, prefix: str, base: str, mask: str, ind: str) -> list[str]:
    """The loads of D steps (rewards, values, terminateds at ``base + j * N``), all issued
    before the first is used: ``{prefix}r{j}``, ``{prefix}v{j}``, ``{prefix}d{j}``."""
    out = []
    for j in range(D):
        o = f"{base} + {j} * N" if j else base
        out += [f"{ind}{prefix}r{j} = tl.load(r_ptr + {o}, mask={mask}, other=0.0)",
                f"{ind}{prefix}v{j} = tl.load(v_ptr + {o}, mask={mask}, other=0.0)",
                f"{ind}{prefix}d{j} = tl.load(d_ptr + {o}, mask={mask}, other=0)"]
    return out


def kernel_source(D: int, buffers: int) -> str:
    """The text of a block kernel: ``D`` steps unrolled, reverse in time, T a multiple of D."""
    L = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
         "def gae_tm_block(r_ptr, v_ptr, d_ptr, lv_ptr, adv_ptr, ret_ptr, N, T, gamma, lam,",
         "                 BLOCK_N: tl.constexpr):",
         "    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)",
         "    m = rows < N",
         "    A = tl.zeros([BLOCK_N], dtype=tl.float32)",
         "    vn = tl.load(lv_ptr + rows, mask=m, other=0.0).to(tl.float32)  # the value after T-1",
         f"    nb = T // {D}"]

    def steps(prefix, base, ind):
        out = []
        for j in reversed(range(D)):
            o = f"{base} + {j} * N" if j else base
            out += [f"{ind}v = {prefix}v{j}.to(tl.float32)",
                    f"{ind}nd = 1.0 - {prefix}d{j}.to(tl.float32)",
                    f"{ind}A = {prefix}r{j}.to(tl.float32) + gamma * nd * vn - v + gamma * lam * nd * A",
                    f"{ind}tl.store(adv_ptr + {o}, A, mask=m)",
                    f"{ind}tl.store(ret_ptr + {o}, A + v, mask=m)",
                    f"{ind}vn = v"]
        return out

    if buffers == 1:
        L += ["    for kb in range(0, nb):",
              f"        base = (T - {D} * (kb + 1)).to(tl.int64) * N + rows"]
        L += load_lines(D, "", "base", "m", "        ")
        L += steps("", "base", "        ")
    else:
        L += [f"    base = (T - {D}).to(tl.int64) * N + rows"]
        L += load_lines(D, "c", "base", "m", "    ")
        L += ["    for kb in range(0, nb):",
              f"        nbase = base - {D} * N",
              "        nm = m & (nbase >= 0)  # none past the first step"]
        L += load_lines(D, "n", "nbase", "nm", "        ")
        L += steps("c", "base", "        ")
        for j in range(D):
            L += [f"        cr{j} = nr{j}", f"        cv{j} = nv{j}", f"        cd{j} = nd{j}"]
        L += ["        base = nbase"]
    return "\n".join(L) + "\n"


def seg_source(D: int) -> str:
    """A segment kernel: a program per (tile of BLOCK_N rows, segment of D steps), the D steps'
    loads issued together, each row's chain run from zero with the product of its betas beside
    it, the carry into the segment found by the decoupled look-back over the row tile's later
    segments (scangen.kernels.lookback.lookback_rows, as today's time-major look-back family),
    then the D outputs. T a multiple of D."""
    L = ["import triton", "import triton.language as tl", "",
         "from scangen.kernels.lookback import lookback_rows", "", "", "@triton.jit",
         "def gae_tm_seg(r_ptr, v_ptr, d_ptr, lv_ptr, adv_ptr, ret_ptr, ws, N, T, gamma, lam,",
         "               BLOCK_N: tl.constexpr, WINDOW: tl.constexpr):",
         "    n_tiles = tl.cdiv(N, BLOCK_N)",
         f"    S = T // {D}",
         "    pid = tl.program_id(0)",
         "    tile = pid % n_tiles",
         "    step = pid // n_tiles  # 0: the last segment in time, the first in scan order",
         "    seg = S - 1 - step",
         "    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)",
         "    m = rows < N",
         f"    base = (seg * {D}).to(tl.int64) * N + rows",
         "    segs = rows * 0 + seg",
         f"    vn = tl.load(v_ptr + base + {D} * N, mask=m & (segs < S - 1), other=0.0).to(tl.float32)",
         "    vn += tl.load(lv_ptr + rows, mask=m & (segs == S - 1), other=0.0).to(tl.float32)"]
    L += load_lines(D, "", "base", "m", "    ")
    L += ["    A = tl.zeros([BLOCK_N], dtype=tl.float32)", "    P = A + 1.0"]
    for j in reversed(range(D)):
        L += [f"    nd = 1.0 - d{j}.to(tl.float32)",
              f"    A = r{j}.to(tl.float32) + gamma * nd * vn - v{j}.to(tl.float32) + gamma * lam * nd * A",
              "    P = gamma * lam * nd * P",
              f"    A{j} = A", f"    P{j} = P", f"    vn = v{j}.to(tl.float32)"]
    L += ["    nw = n_tiles * S * BLOCK_N",
          "    carry = lookback_rows(ws, ws + nw, ws + 2 * nw, tile * S + step, step, A, P, A * 0.0,",
          "                          BLOCK_N, WINDOW, False, tl.float32)"]
    for j in range(D):
        o = f"base + {j} * N" if j else "base"
        L += [f"    A = A{j} + P{j} * carry",
              f"    tl.store(adv_ptr + {o}, A, mask=m)",
              f"    tl.store(ret_ptr + {o}, A + v{j}.to(tl.float32), mask=m)"]
    return "\n".join(L) + "\n"


_KERNELS: dict = {}
_DIR = tempfile.mkdtemp(prefix="tm_block_")


def kernel(D: int, buffers: int):
    """The jitted kernel (Triton reads a kernel's source from its file: written, then imported)."""
    key = (D, buffers)
    if key not in _KERNELS:
        path = os.path.join(_DIR, f"tm_block_{D}_{buffers}.py")
        with open(path, "w") as f:
            f.write(seg_source(D) if buffers == 0 else kernel_source(D, buffers))
        spec = importlib.util.spec_from_file_location(f"tm_block_{D}_{buffers}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _KERNELS[key] = mod.gae_tm_seg if buffers == 0 else mod.gae_tm_block
    return _KERNELS[key]


def block_call(kw_tm, gamma, lam, D, buffers, block_n, warps):
    """kw_tm: [T, N] tensors (and last_value [N]); returns (advantages, returns) as [T, N]."""
    r = kw_tm["rewards"]
    T, N = r.shape
    adv, ret = torch.empty_like(r), torch.empty_like(r)
    if buffers == 0:  # the segment kernel: a workspace of all-one bits per call (a memset)
        n_words = triton.cdiv(N, block_n) * (T // D) * block_n
        ws = torch.full((3 * n_words,), -1, dtype=torch.int32, device=r.device).view(torch.float32)
        kernel(D, 0)[(triton.cdiv(N, block_n) * (T // D),)](
            r, kw_tm["values"], kw_tm["terminateds"], kw_tm["last_value"], adv, ret, ws, N, T,
            gamma, lam, BLOCK_N=block_n, WINDOW=WINDOW, num_warps=warps, num_stages=1)
        return adv, ret
    kernel(D, buffers)[(triton.cdiv(N, block_n),)](
        r, kw_tm["values"], kw_tm["terminateds"], kw_tm["last_value"], adv, ret, N, T, gamma,
        lam, BLOCK_N=block_n, num_warps=warps, num_stages=1)
    return adv, ret


def ints(s):
    return [int(x) for x in s.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x1024,4096x128,32768x16,16384x64,1024x1024,"
                                        "256x8192")
    ap.add_argument("--steps", default="8,16,32", help="D: steps whose loads go together")
    ap.add_argument("--buffers", default="1,2",
                    help="1: block kernel; 2: double-buffered; 0: segment kernel with look-back")
    ap.add_argument("--block-n", default="32,64,128")
    ap.add_argument("--warps", default="1,2,4")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gamma, lam = 0.99, 0.95
    say = Report("tm_block_probe", device)
    grid = [c for c in itertools.product(ints(args.steps), ints(args.buffers),
                                         ints(args.block_n), ints(args.warps))
            if c[2] >= 32 * c[3] or device != "cuda"]
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        cands = [c for c in grid if T % c[0] == 0]
        kw, tm = inputs(N, T, 0, device)
        want = scangen.compute_gae(**kw, gamma=gamma, lambda_=lam, outputs=OUTS)
        bad = []
        for D, nbuf, bn, w in cands:
            if device != "cuda" and (bn, w) != (cands[0][2], cands[0][3]):
                continue
            err = mismatch(block_call(tm, gamma, lam, D, nbuf, bn, w), want)
            if err is not None:
                bad.append((D, nbuf, bn, w, err))
        say(f"{shape}: check {'ok' if not bad else bad} ({len(cands)} candidates)")
        if device != "cuda" or args.check_only:
            continue
        floor_us, sets, rows_us, tmsg_us, line = baseline(N, T, say.bw, say.l2, gamma, lam,
                                                          device)
        tm_sets = itertools.cycle([s[1] for s in sets])
        say(line)
        res = []
        for D, nbuf, bn, w in cands:
            us = graph_us(lambda: block_call(next(tm_sets), gamma, lam, D, nbuf, bn, w))
            res.append((us, D, nbuf, bn, w))
        res.sort()
        for us, D, nbuf, bn, w in res[:5]:
            say(f"   block D={D} buffers={nbuf} bn={bn} w={w}: {us:.1f} us "
                f"({100 * floor_us / us:.0f}% floor, {us / rows_us:.2f}x rows, "
                f"{us / tmsg_us:.2f}x scangen time-major)")
        for D, nbuf in itertools.product(ints(args.steps), ints(args.buffers)):
            mine = [r for r in res if r[1:3] == (D, nbuf)]  # the best of each, for the trend
            if not mine:
                continue
            us, _, _, bn, w = mine[0]
            extra = ""
            if nbuf == 0:  # the workspace's memset, timed alone (scangen keeps a workspace
                # per plan and needs none: runtime.workspace)
                n = 3 * triton.cdiv(N, bn) * (T // D) * bn
                ms = graph_us(lambda: torch.full((n,), -1, dtype=torch.int32, device="cuda"))
                extra = f"; its memset alone {ms:.1f} us"
            say(f"   best D={D} buffers={nbuf}: {us:.1f} us (bn={bn} w={w}){extra}")
        del sets
        torch.cuda.empty_cache()
    say.close(args.out)


if __name__ == "__main__":
    sys.exit(main())
