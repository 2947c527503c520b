"""Helpers of the generated torch implementations (``_torch_impl`` in every generated module).

Each works on the canonical ``[R1, R2, T]`` views of a :class:`scangen.runtime.arguments.Call`, on any
device, and is differentiable, so the torch path doubles as the autograd reference.
"""
from __future__ import annotations

import contextlib
import math
import threading

import torch

from .arguments import Call

def load(c: Call, name: str, default: float):
    """Canonical ``[R1, R2, T]`` (``[R1, R2, 1]`` for [N] inputs, ``[..., K]`` for [N, T, K])
    view of an input in the accumulation dtype, or its default when absent."""
    if name not in c.tensors:
        return default
    t, st = c.tensors[name], c.strides[name]
    if len(st) == 4:
        view = t.as_strided((c.R1, c.R2, c.T, c.K), st)
    else:
        view = t.as_strided((c.R1, c.R2, c.T if st[2] else 1), st)
    return view.to(c.acc)


def param(c: Call, name: str):
    """A param in the accumulation dtype: a float rounded to it (as the kernels take it, so that
    ``p >= where(f, p, x * p)`` compares equal values), a tensor as its ``[R1, R2, T]`` view."""
    v = c.params[name]
    if not isinstance(v, torch.Tensor):
        return v if c.acc == torch.float64 else torch.tensor(v, dtype=c.acc).item()
    strides = c.pstrides.get(name, (0, 0, 0))
    if not any(strides):  # one value: a 0-dim tensor broadcasts without as_strided, whose
        # backward (a scatter into one element) inductor's CPU codegen fails to compile
        return v[(0,) * v.dim()].to(c.acc)
    return v.as_strided((c.R1, c.R2, c.T), strides).to(c.acc)


_STEPS = {"next": 1, "prev": -1, "next2": 2, "prev2": -2}


def position(c: Call, which: str):
    base, _, shift = which.partition("__")
    t = torch.arange(c.T, device=c.device).view(1, 1, c.T) + _STEPS.get(shift, 0)
    edge = 0 if base == "is_first" else c.T - 1
    return (t == edge).to(c.acc)


def shift(x, which: str, dim: int = 2):
    """``x`` read ``which`` (next, prev, next2, prev2) steps away; the edges repeat the last value
    (they are always masked by a fill, and a finite value keeps gradients finite)."""
    if not isinstance(x, torch.Tensor) or x.dim() <= dim or x.shape[dim] == 1:
        return x
    n = x.shape[dim]
    idx = (torch.arange(n, device=x.device) + _STEPS[which]).clamp_(0, n - 1)
    return x.index_select(dim, idx)


def kx(x):
    """Broadcast a per-step value against a ``[..., K]`` tile."""
    return x.unsqueeze(-1) if isinstance(x, torch.Tensor) else x


def gather(src, index):
    k = src.shape[-1]
    ok = (index >= 0) & (index < k)
    g = torch.gather(src, -1, index.clamp(0, k - 1).long().unsqueeze(-1)).squeeze(-1)
    return torch.where(ok, g, torch.full_like(g, float("nan")))


def scan(c: Call, alpha, beta, init, reverse: bool):
    """``A_t = alpha_t + beta_t * A_{t±1}`` over the last axis by recursive doubling:
    log2(T) vectorised steps, each composing every element with the one 2^k steps away."""
    shape = (c.R1, c.R2, c.T)
    a = torch.broadcast_to(torch.as_tensor(alpha, dtype=c.acc, device=c.device), shape)
    b = torch.broadcast_to(torch.as_tensor(beta, dtype=c.acc, device=c.device), shape)
    if reverse:
        a, b = a.flip(-1), b.flip(-1)
    k = 1
    while k < c.T:
        a = torch.cat([a[..., :k], a[..., k:] + b[..., k:] * a[..., :-k]], dim=-1)
        b = torch.cat([b[..., :k], b[..., k:] * b[..., :-k]], dim=-1)
        k *= 2
    out = a + b * torch.as_tensor(init, dtype=c.acc, device=c.device)
    return out.flip(-1) if reverse else out


_STORES = threading.local()


@contextlib.contextmanager
def functional_stores():
    """Within: outputs are made from their values (a new contiguous tensor each) instead of
    copied into the call's empty ones, so that a ``torch.func`` transform sees only
    out-of-place ops (``vmap`` over a param alone: the empty outputs are not batched, their
    values are)."""
    before = getattr(_STORES, "functional", False)
    _STORES.functional = True
    try:
        yield
    finally:
        _STORES.functional = before


def store(c: Call, name: str, value) -> None:
    if name not in c.outs:
        return
    out, st = c.outs[name], c.out_strides[name]
    if getattr(_STORES, "functional", False):
        # the canonical [R1, R2, T] is [R1, T, R2] of a contiguous output, permuted
        v = torch.broadcast_to(torch.as_tensor(value, dtype=c.acc, device=c.device),
                               (c.R1, c.R2, c.T))
        c.outs[name] = v.permute(0, 2, 1).reshape(out.shape).to(out.dtype)
        return
    view = out.as_strided((c.R1, c.R2, c.T), st)
    if isinstance(value, torch.Tensor):
        view.copy_(torch.broadcast_to(value, view.shape))
    else:  # a Python number: fill keeps all its bits (as_tensor would round it to float32)
        view.fill_(value)


def _operand(x, like, dtype):
    # A Python number becomes a 0-dim tensor of ``dtype``, which does not promote the dtype of a
    # dimensioned tensor beside it.
    if isinstance(x, torch.Tensor):
        return x
    return torch.tensor(x, dtype=dtype, device=like.device)


def where(cond, a, b, dtype=torch.float64):
    """``torch.where``, its numbers made ``dtype``: the generated code passes the call's
    accumulation dtype (a module an earlier scangen built passes none: float64, exact)."""
    if isinstance(cond, bool):
        return a if cond else b
    return torch.where(cond, _operand(a, cond, dtype), _operand(b, cond, dtype))


def _both(fn, scalar_fn):
    def f(a, b):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return fn(a, b)
        if isinstance(a, torch.Tensor):
            return fn(a, torch.as_tensor(b, dtype=a.dtype, device=a.device))
        if isinstance(b, torch.Tensor):
            return fn(torch.as_tensor(a, dtype=b.dtype, device=b.device), b)
        return scalar_fn(a, b)
    return f


minimum = _both(torch.minimum, min)
maximum = _both(torch.maximum, max)


def exp(x):
    return torch.exp(x) if isinstance(x, torch.Tensor) else math.exp(x)


def log(x):
    return torch.log(x) if isinstance(x, torch.Tensor) else math.log(x)


def sqrt(x):
    return torch.sqrt(x) if isinstance(x, torch.Tensor) else math.sqrt(x)


def run(c: Call) -> None:
    """The torch target: the generated module's vectorised torch implementation."""
    c.op.torch_impl(c)
