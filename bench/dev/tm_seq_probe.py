"""Probe (issue 22): a time-major GAE kernel in which each thread walks its own rows in time.

Today's time-major kernels give the rows the vector lanes and scan along time across lanes and
warps (``tl.associative_scan`` over a [rows, steps] tile; bench/NOTES.md, open question 7).
This hand-written kernel has no scan at all: a program owns ``BLOCK_N`` adjacent rows, loops
over time one step at a time, and carries the state in registers; each step's loads are one
[BLOCK_N] vector of adjacent rows, coalesced, and their addresses do not depend on the state,
so Triton's software pipeliner can prefetch ``num_stages - 1`` steps ahead. The question: how
close does that come to the rows layout's device time, at which shapes?

It computes GAE without truncations (rewards, values, terminateds, last_value [N]; the call
bench/rltriton.py times), checked against scangen's own call on the same inputs, and is
timed beside scangen's time-major and rows calls as CUDA-graph replays over rotated input
sets (do_bench_cudagraph; the sets hold 3x the L2 or more).

    PYTHONPATH=. python3 bench/dev/tm_seq_probe.py --out $OUT/tm_seq.txt
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/dev/tm_seq_probe.py --check-only --shapes 37x19
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch
import triton
import triton.language as tl

import scangen
from scangen import testing
from scangen.benchmark.inputs import apply_no_trunc

OUTS = ["advantages", "returns"]  # both stored, as the kernel below stores both


@triton.jit
def _gae_tm_seq(r_ptr, v_ptr, d_ptr, lv_ptr, adv_ptr, ret_ptr, N, T, gamma, lam,
                BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = rows < N
    A = tl.zeros([BLOCK_N], dtype=tl.float32)
    vn = tl.load(lv_ptr + rows, mask=m, other=0.0).to(tl.float32)  # the value after T - 1
    for i in range(0, T):
        off = (T - 1 - i).to(tl.int64) * N + rows
        r = tl.load(r_ptr + off, mask=m, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + off, mask=m, other=0.0).to(tl.float32)
        nd = 1.0 - tl.load(d_ptr + off, mask=m, other=0).to(tl.float32)
        A = r + gamma * nd * vn - v + gamma * lam * nd * A
        tl.store(adv_ptr + off, A, mask=m)
        tl.store(ret_ptr + off, A + v, mask=m)
        vn = v


def seq_call(kw_tm, gamma, lam, block_n, warps, stages):
    """kw_tm: [T, N] tensors (and last_value [N]); returns (advantages, returns) as [T, N]."""
    r = kw_tm["rewards"]
    T, N = r.shape
    adv, ret = torch.empty_like(r), torch.empty_like(r)
    _gae_tm_seq[(triton.cdiv(N, block_n),)](
        r, kw_tm["values"], kw_tm["terminateds"], kw_tm["last_value"], adv, ret, N, T, gamma, lam,
        BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    return adv, ret


def inputs(N, T, seed, device):
    kw = apply_no_trunc("compute_gae", testing.make_inputs("gae", N, T, seed=seed,
                                                           dtype=torch.float32))
    kw = {k: v.to(device) for k, v in kw.items()}
    tm = {k: (v.t().contiguous() if v.dim() == 2 else v) for k, v in kw.items()}  # [T, N]
    return kw, tm


def gpu_floors(probe: str):
    """(copy bandwidth in bytes a microsecond, L2 bytes, the results header line) of this GPU."""
    from triton.testing import do_bench
    a = torch.empty(2**29, device="cuda")
    b = torch.empty_like(a)
    bw = 2 * a.numel() * 4 / do_bench(lambda: b.copy_(a), warmup=25, rep=100) / 1e6
    del a, b
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return bw, l2, (f"# {probe}: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
                    f"triton {triton.__version__}; copy {bw:,.0f} GB/s; graph replays over "
                    "rotated sets")


def graph_us(fn):
    from triton.testing import do_bench_cudagraph
    return 1e3 * do_bench_cudagraph(fn, rep=20, return_mode="median")


class Report:
    """The probe's result lines: printed as they come, written to ``out`` (if any) by
    :meth:`close` after the elapsed time; ``header`` starts them on a GPU (:func:`gpu_floors`)."""

    def __init__(self, probe: str, device: str):
        self.lines, self.t_start = [], time.time()
        self.bw = self.l2 = None
        if device == "cuda":
            self.bw, self.l2, header = gpu_floors(probe)
            self(header)

    def __call__(self, s: str) -> None:
        print(s, flush=True)
        self.lines.append(s)

    def close(self, out) -> None:
        self(f"# {time.time() - self.t_start:.0f} s")
        if out:
            with open(out, "w") as f:
                f.write("\n".join(self.lines) + "\n")


def mismatch(outs, want):
    """The largest error of time-major ``(advantages, returns)`` against scangen's rows ``want``,
    or None where every element is within 1e-4."""
    errs = [float((got.t() - exp).abs().max()) for got, exp in zip(outs, want)
            if not torch.allclose(got.t(), exp, rtol=1e-4, atol=1e-4)]
    return max(errs) if errs else None


def baseline(N, T, bw, l2, gamma, lam, device):
    """The floor, the rotated input sets (3x the L2 or more) and scangen's own GAE time on
    them, rows and time-major: (floor_us, sets, rows_us, time-major us, the line to print)."""
    bytes_ = N * T * (4 + 4 + 1 + 4 + 4) + N * 4
    floor_us = bytes_ / bw / 1e3
    n_sets = max(1, min(16, -(-3 * l2 // bytes_)))
    sets = [inputs(N, T, k, device) for k in range(n_sets)]
    row_sets = itertools.cycle([s[0] for s in sets])
    tm_sets = itertools.cycle([s[1] for s in sets])
    rows_us = graph_us(lambda: scangen.compute_gae(**next(row_sets), gamma=gamma, lambda_=lam,
                                                   outputs=OUTS))
    tm_us = graph_us(lambda: scangen.compute_gae(**next(tm_sets), gamma=gamma, lambda_=lam,
                                                 time_dim=0, outputs=OUTS))
    line = (f"{N}x{T}: floor {floor_us:.1f} us; scangen rows {rows_us:.1f} us "
            f"({100 * floor_us / rows_us:.0f}%); scangen time-major {tm_us:.1f} us "
            f"({tm_us / rows_us:.2f}x rows)")
    return floor_us, sets, rows_us, tm_us, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x1024,4096x128,1024x1024,32768x16,16384x64,"
                                        "256x8192,64x65536")
    ap.add_argument("--block-n", default="32,64,128,256")
    ap.add_argument("--warps", default="1,2,4")
    ap.add_argument("--stages", default="1,2,3,4,6")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gamma, lam = 0.99, 0.95
    say = Report("tm_seq_probe", device)
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        kw, tm = inputs(N, T, 0, device)
        want = scangen.compute_gae(**kw, gamma=gamma, lambda_=lam, outputs=OUTS)
        bad = []
        for bn, w, s in itertools.product(*(list(map(int, x.split(","))) for x in
                                            (args.block_n, args.warps, args.stages))):
            if bn < 32 * w and device == "cuda":
                continue
            err = mismatch(seq_call(tm, gamma, lam, bn, w, s), want)
            if err is not None:
                bad.append((bn, w, s, err))
            if device != "cuda":
                break
        say(f"{shape}: check {'ok' if not bad else bad}")
        if device != "cuda" or args.check_only:
            continue
        floor_us, sets, rows_us, tmsg_us, line = baseline(N, T, say.bw, say.l2, gamma, lam,
                                                          device)
        tm_sets = itertools.cycle([s[1] for s in sets])
        say(line)
        res = []
        for bn, w, s in itertools.product(*(list(map(int, x.split(","))) for x in
                                            (args.block_n, args.warps, args.stages))):
            if bn < 32 * w:
                continue
            us = graph_us(lambda: seq_call(next(tm_sets), gamma, lam, bn, w, s))
            res.append((us, bn, w, s))
        res.sort()
        for us, bn, w, s in res[:6]:
            say(f"   seq bn={bn} w={w} s={s}: {us:.1f} us ({100 * floor_us / us:.0f}% floor, "
                f"{us / rows_us:.2f}x rows, {us / tmsg_us:.2f}x scangen time-major)")
        del sets
        torch.cuda.empty_cache()
    say.close(args.out)


if __name__ == "__main__":
    sys.exit(main())
