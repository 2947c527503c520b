"""Compile examples/ema_reset.yaml at run time, call it, and check it against a plain loop.

    python examples/ema_reset.py                  # numba on the CPU (torch without numba), Triton on CUDA
    TRITON_INTERPRET=1 python examples/ema_reset.py --backend triton   # kernels on the CPU

The loop below is the specification written out step by step in float64; the compiled op must
match it to float32 rounding.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

import scangen

SPEC = Path(__file__).resolve().parent / "ema_reset.yaml"


def compile_ema(cache_dir=None):
    """The compiled op: ``ema_reset(x, starts, decay=0.9, seed=None, *, time_dim, outputs, backend)``."""
    return scangen.compile(SPEC, cache_dir=cache_dir)


def ema_loop(x, starts, decay=0.9, seed=None):
    """The same recurrence as a float64 Python loop over time (x: [N, T, *F], starts: [N, T])."""
    x = x.double()
    N, T = x.shape[:2]
    feat = (1,) * (x.dim() - 2)  # broadcasts a per-row value over trailing feature dims
    m = torch.zeros((N,) + x.shape[2:], dtype=torch.float64)
    if seed is not None:
        m = m + seed.double().reshape((N,) + feat)
    out = torch.empty_like(x)
    for t in range(T):
        restart = starts[:, t].double()
        if t == 0 and seed is None:
            restart = torch.ones_like(restart)  # no seed: the window's first step starts fresh
        restart = restart.reshape((N,) + feat)
        m = restart * x[:, t] + (1 - restart) * (decay * m + (1 - decay) * x[:, t])
        out[:, t] = m
    return out


def main(backend=None, N=4, T=50, device=None) -> float:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    ema = compile_ema()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, T, generator=g)
    starts = torch.rand(N, T, generator=g) < 0.1
    seed = torch.randn(N, generator=g)

    worst = 0.0
    for args in ((x, starts), (x, starts, 0.8, seed)):
        got = ema(*(a.to(device) if torch.is_tensor(a) else a for a in args), backend=backend)
        err = (got.cpu().double() - ema_loop(*args)).abs().max().item()
        worst = max(worst, err)
    print(f"ema_reset N={N} T={T} on {device} (backend={backend or 'auto'}): "
          f"max abs error vs float64 loop {worst:.2e}")
    return worst


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=None, choices=("auto", "numba", "torch", "triton"))
    args = p.parse_args()
    err = main(backend=args.backend)
    raise SystemExit(0 if err < 1e-5 else 1)
