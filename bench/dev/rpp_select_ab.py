#!/usr/bin/env python3
"""verl REINFORCE++ returns spec: the mask-product form (before b67eaad) against the reward select, numba
on CPU tensors, one thread, interleaved (bench/results/cpu-2026-12-04-verl-rpp-select.txt).

    PYTHONPATH=. python3 bench/dev/rpp_select_ab.py
"""
import platform
import time

import numba
import torch

import scangen
from scangen.integrations import verl as sv
from scangen.benchmark.timing import interleaved
torch.set_num_threads(1); numba.set_num_threads(1)
new_spec = sv._RETURNS_SPEC
old_spec = new_spec.replace("""let:
  # a masked token's reward selected away (NaN or inf included), never multiplied by 0
  r: where(response_mask, token_level_rewards, 0)
""", "").replace("update: r + response_mask * gamma * C + (1 - response_mask) * C",
                 "update: response_mask * (token_level_rewards + gamma * C) + (1 - response_mask) * C")
assert old_spec != new_spec
old, new = scangen.compile(old_spec), scangen.compile(new_spec)
print(f"# REINFORCE++ returns spec, old (mask products) against new (reward selected): numba, one thread, {platform.machine()}, torch {torch.__version__}, numba {numba.__version__}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
g = torch.Generator().manual_seed(0)
for N, T in ((64, 4096), (256, 1024), (16, 32768)):
    r = torch.randn(N, T, generator=g)
    m = (torch.rand(N, T, generator=g) < 0.7)
    a, b = old(r, m, 0.97, backend="numba"), new(r, m, 0.97, backend="numba")
    t = interleaved({"old": lambda: old(r, m, 0.97, backend="numba"), "new": lambda: new(r, m, 0.97, backend="numba")}, rounds=7)
    o, n = (t[k].median_s * 1e6 for k in ("old", "new"))
    print(f"{N}x{T}  old {o:9.1f} us  new {n:9.1f} us  {n / o:5.3f}x  max diff {float((a - b).abs().max()):.1e}")
