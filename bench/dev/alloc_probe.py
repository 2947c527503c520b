#!/usr/bin/env python3
"""Host time of a call's output allocation on CUDA: one torch.empty_like per output against one
allocation of all outputs split into views (bench/NOTES.md, open question 8).

    python3 bench/dev/alloc_probe.py
"""
import time

import torch

x = torch.randn(4096, 128, device="cuda")


def per_output(n):
    return tuple(torch.empty_like(x) for _ in range(n))


def one_buffer(n):
    return torch.empty((n, *x.shape), dtype=x.dtype, device=x.device).unbind(0)


def one_buffer_sliced(n):
    b = torch.empty((n, *x.shape), dtype=x.dtype, device=x.device)
    return tuple(b[k] for k in range(n))


def timeit(fn, n, reps=20000):
    for _ in range(1000):
        fn(n)
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(n)
        best.append((time.perf_counter() - t0) / reps * 1e6)
    return sorted(best)[2]


for n in (1, 2, 3):
    row = {f.__name__: timeit(f, n) for f in (per_output, one_buffer, one_buffer_sliced)}
    print(f"{n} outputs: " + ", ".join(f"{k} {v:.2f} us" for k, v in row.items()), flush=True)
