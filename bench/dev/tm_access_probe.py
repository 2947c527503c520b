"""What the time-major access pattern alone costs: copies with no scan, moving [T, N] data the
way the time-major kernels walk it, beside a copy of the same bytes in rows.

Question (bench/NOTES.md open question 20): the time-major kernels of plain ops at 16384x1024 run
at about 60% of the copy floor where the rows layout reaches 95%. Is that the access pattern
(each program walks time over a tile of R adjacent rows: one R * 4-byte segment a step, the
segments of one program a row of the buffer apart, so DRAM pages are shared only between
programs that happen to be at the same step), or the scan's work around it?

Variants (one fp32 input, one fp32 output, N x T elements each):
  rows          [N, T] buffers, a program a row, BT steps a block (the rows layout's pattern)
  walk R S w    [T, N], a program walks its R rows through time, S steps a block, w warps
                (the stream / persist families' pattern over time-major buffers)
  walk1 R S w   the same with the rows' alignment hidden (tl.multiple_of(rows, 1)), so each
                lane loads 4 bytes a step: the lane tiles' scalar loads
  walkscan R S w, walkscan1 R S w (--scan)   walk and walk1 with a prefix sum along time
                carried from block to block (the scan's work and the join of the warps that split
                a block's steps)
  grid R S o    [T, N], a program per S x R tile, no walk; o = rows: consecutive programs take
                adjacent row tiles at the same steps; o = steps: consecutive programs take a row
                tile's consecutive step blocks (the look-back family's chunk-major order is
                rows-first)

Run on the GPU: python3 bench/dev/tm_access_probe.py [--shapes 16384x1024,...]
Timing: triton.testing.do_bench (L2 flushed between calls), median; % = copy floor / time, the
floor measured in the same process (a torch copy of 2 GiB).
"""
import argparse
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def rows_copy(x, y, T, BT: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * T
    for t0 in range(0, T, BT):
        o = base + t0 + tl.arange(0, BT)
        m = t0 + tl.arange(0, BT) < T
        tl.store(y + o, tl.load(x + o, mask=m), mask=m)


@triton.jit
def walk_copy(x, y, N, T, R: tl.constexpr, S: tl.constexpr, SCALAR: tl.constexpr):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    if SCALAR:
        rows = tl.multiple_of(rows, 1)
    for t0 in range(0, T, S):
        ts = (t0 + tl.arange(0, S)).to(tl.int64)
        o = ts[:, None] * N + rows[None, :]
        tl.store(y + o, tl.load(x + o))


@triton.jit
def walk_scan(x, y, N, T, R: tl.constexpr, S: tl.constexpr, SCALAR: tl.constexpr):
    """walk_copy with a prefix sum along time carried from block to block (the scan's work and
    its join across the warps that split a block's steps, without an op's arithmetic)."""
    rows = tl.program_id(0) * R + tl.arange(0, R)
    if SCALAR:
        rows = tl.multiple_of(rows, 1)
    carry = tl.zeros([R], dtype=tl.float32)
    for t0 in range(0, T, S):
        ts = (t0 + tl.arange(0, S)).to(tl.int64)
        o = ts[:, None] * N + rows[None, :]
        v = tl.cumsum(tl.load(x + o), axis=0) + carry[None, :]
        carry = tl.sum(tl.where(tl.arange(0, S)[:, None] == S - 1, v, 0.0), axis=0)
        tl.store(y + o, v)


@triton.jit
def grid_copy(x, y, N, T, R: tl.constexpr, S: tl.constexpr, ROWS_FIRST: tl.constexpr):
    p = tl.program_id(0)
    n_r = N // R
    n_s = T // S
    if ROWS_FIRST:
        r = p % n_r
        s = p // n_r
    else:
        s = p % n_s
        r = p // n_s
    rows = r * R + tl.arange(0, R)
    ts = (s * S + tl.arange(0, S)).to(tl.int64)
    o = ts[:, None] * N + rows[None, :]
    tl.store(y + o, tl.load(x + o))


def copy_bandwidth(dev) -> float:
    """Bytes a second of a torch copy of 2 GiB (read + write)."""
    src = torch.empty(1 << 29, device=dev)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), rep=200, return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x1024,4096x128,1024x1024,64x65536")
    ap.add_argument("--rep", type=int, default=100)
    ap.add_argument("--scan", action="store_true", help="also the walks with a prefix sum (walkscan)")
    ap.add_argument("--only", default="", help="comma list of case-name prefixes to keep")
    args = ap.parse_args()
    dev = "cuda"
    bw = copy_bandwidth(dev)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy bandwidth {bw / 1e9:,.0f} GB/s (torch copy of 2 GiB)", flush=True)
    for shape in args.shapes.split(","):
        n, t = map(int, shape.split("x"))
        x = torch.randn(n * t, device=dev)
        y = torch.empty_like(x)
        floor_us = 2 * x.numel() * 4 / bw * 1e6
        cases = [("rows BT=1024 w4", lambda n=n, t=t, x=x, y=y: rows_copy[(n,)](
            x, y, t, BT=min(1024, t), num_warps=4))]
        for r, s, w in [(16, 16, 2), (32, 16, 1), (32, 32, 1), (32, 32, 2), (32, 64, 2), (32, 64, 4), (32, 128, 4), (64, 32, 2),
                        (128, 16, 4), (128, 32, 4), (256, 16, 4), (256, 16, 8), (512, 8, 8)]:
            if n % r or t % s:
                continue
            for scalar in (False, True):
                if scalar and r != 32:
                    continue
                name = f"walk{'1' if scalar else ''} R={r} S={s} w{w}"
                cases.append((name, lambda r=r, s=s, w=w, sc=scalar, n=n, t=t, x=x, y=y: walk_copy[(n // r,)](
                    x, y, n, t, R=r, S=s, SCALAR=sc, num_warps=w)))
        for r, s, w in [(32, 32, 1), (32, 32, 2), (32, 64, 2), (32, 64, 4), (32, 128, 4)]:
            if n % r or t % s or not args.scan:
                continue
            for scalar in (False, True):
                name = f"walkscan{'1' if scalar else ''} R={r} S={s} w{w}"
                cases.append((name, lambda r=r, s=s, w=w, sc=scalar, n=n, t=t, x=x, y=y: walk_scan[(n // r,)](
                    x, y, n, t, R=r, S=s, SCALAR=sc, num_warps=w)))
        for r, s, w in [(32, 32, 2), (32, 128, 4), (128, 32, 4), (256, 16, 4)]:
            if n % r or t % s:
                continue
            for first in (True, False):
                name = f"grid R={r} S={s} w{w} {'rows' if first else 'steps'}-first"
                cases.append((name, lambda r=r, s=s, w=w, f=first, n=n, t=t, x=x, y=y: grid_copy[(
                    (n // r) * (t // s),)](
                    x, y, n, t, R=r, S=s, ROWS_FIRST=f, num_warps=w)))
        keep = [p for p in args.only.split(",") if p]
        for name, fn in cases:
            if keep and not any(name.startswith(p) for p in keep):
                continue
            y.zero_()
            fn()
            want = x.view(t, n).cumsum(0).view(-1) if name.startswith("walkscan") else x
            ok = torch.allclose(y, want, rtol=1e-4, atol=1e-3 * t ** 0.5)
            us = triton.testing.do_bench(fn, rep=args.rep, return_mode="median") * 1e3
            print(f"{shape:>10s}  {name:32s} {us:8.2f} us  {100 * floor_us / us:5.1f}% of floor"
                  f"{'' if ok else '  WRONG'}", flush=True)
        del x, y


if __name__ == "__main__":
    sys.exit(main())
