"""Inputs of scangen's benchmarks: the call without truncations, rows drawn once and rolled
along time to fill large shapes, input sets rotated between calls, and the bytes a call moves.

``scangen.testing.make_inputs`` draws on the CPU in float64, which is slow at millions of
elements; :func:`draw_rows` draws a few rows and :func:`rolled_inputs` fills ``N`` rows with
copies of them, each rolled along time by its own shift (every tensor of a row by the same
shift), so rows differ and flags keep their density. Performance does not depend on the values.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from .. import testing


def apply_no_trunc(algo, kw):
    """The no-truncation call: no truncateds tensor; GAE / V-trace bootstrap the window end through
    last_value [N]; TD(lambda) needs no bootstrap (next_values); discounted returns keep
    bootstrap_values (their only way to bootstrap T-1)."""
    kw.pop("truncateds", None)
    if algo in ("compute_gae", "compute_vtrace"):
        kw["last_value"] = kw.pop("bootstrap_values")[:, -1].clone()
    elif algo == "compute_lambda_returns":
        kw.pop("bootstrap_values", None)
    return kw


def gen_rows_for(N, T, gen_rows, gen_elems):
    """Rows to draw for an [N, T] call: at most ``gen_rows``, and at most ``gen_elems // T``."""
    return max(1, min(N, gen_rows, gen_elems // T if T <= gen_elems else 1))


def draw_rows(algo, N, T, variant, *, gen_rows, gen_elems, seed=0, actions=8):
    """make_inputs' float64 CPU rows for an [N, T] call (:func:`gen_rows_for` of them): 5%
    terminations, 5% truncations, or the call without truncations where ``variant`` is "no"."""
    g = gen_rows_for(N, T, gen_rows, gen_elems)
    trunc_rate = 0.0 if variant == "no" else 0.05
    kw = testing.make_inputs(algo, g, T, seed=seed, dtype=torch.float64, device="cpu",
                             trunc_rate=trunc_rate, term_rate=0.05, A=actions)
    if variant == "no":
        apply_no_trunc(algo, kw)
    return kw


def rolled_inputs(master, N, T, dtype, device, layout="rows"):
    """Cast the drawn rows to `dtype` on the device and fill N rows with time-rolled copies of them
    (each copy rolled by its own shift, the same for every tensor of a row); ``layout``
    "time-major" stores them as [T, N] memory (the same logical values)."""
    out = {}
    for k, v in master.items():
        if not torch.is_tensor(v):
            out[k] = v
            continue
        x = v.to(device)
        if x.is_floating_point():
            x = x.to(dtype)
        g = x.shape[0]
        if g != N:
            copies = -(-N // g)
            parts = [x]
            for j in range(1, copies):
                shift = (j * 7919 + 31 * j * j) % T if T > 1 else 0
                parts.append(torch.roll(x, shifts=shift, dims=1) if x.dim() >= 2 else x)
            x = torch.cat(parts, 0)[:N]
        x = x.contiguous()
        out[k] = testing.as_time_major(x) if layout == "time-major" else x
    return out


def clone_set(kw):
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()}


def cycler(fn, sets, **extra):
    """One callable: ``fn`` on the next of ``sets`` (keyword dicts) at every call."""
    it = itertools.cycle(sets)
    if extra:
        return lambda: fn(**next(it), **extra)
    return lambda: fn(**next(it))


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def time_slice(kw, a, b):
    """The arguments restricted to steps a..b-1 (axis 1 of every tensor of two or more dims)."""
    return {k: (v[:, a:b] if torch.is_tensor(v) and v.dim() >= 2 else v) for k, v in kw.items()}


def slice_kw(kw, rows, tsl, device="cpu"):
    """The first ``rows`` rows of every tensor, steps ``tsl`` (a slice) of those of two or more
    dims, on ``device``."""
    out = {}
    for k, v in kw.items():
        if torch.is_tensor(v):
            v = v[:rows]
            if v.dim() >= 2:
                v = v[:, tsl]
            v = v.to(device)
        out[k] = v
    return out


def tensor_bytes(objs) -> int:
    """Bytes of every distinct tensor / array among ``objs`` (nested lists, tuples, dicts)."""
    seen, total = set(), 0
    stack = [objs]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif torch.is_tensor(o) or isinstance(o, np.ndarray):
            t = torch.as_tensor(o)
            key = (t.data_ptr(), t.numel(), t.dtype)
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


