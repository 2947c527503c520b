"""PyTorch integration: every generated op as a ``torch.library`` custom op with a fake
implementation and an autograd formula, so ops compose with autograd, ``torch.compile``
(``fullgraph=True``, no graph break) and CUDA graphs.

Plain eager calls without gradients skip the dispatcher (see :func:`scangen.runtime.call`);
calls that need autograd, and calls traced by ``torch.compile``, go through the custom op.
Params reach the op as tensors: a 0-dim tensor for a Python float, so a traced graph does not
bake a particular gamma in.

Gradients: the backward recomputes the op with the generated torch implementation under
autograd and differentiates it (the adjoint of each scan is then a scan in the opposite
direction inside torch's graph). It is exact, covers every input, param and spec, but it is
not yet a fused kernel: it costs O(T log T) work and memory per row.
"""
from __future__ import annotations

import torch

from . import runtime

_REGISTERED: dict[int, str] = {}
_LIBS: dict = {}


def _schema(op: runtime.OpInfo) -> str:
    args = [f"Tensor? {i.name}" for i in op.inputs] + [f"Tensor {p.name}" for p in op.params]
    args += ["int time_dim", "str[] outputs", "str? backend"]
    return f"({', '.join(args)}) -> Tensor[]"


def qualname(op: runtime.OpInfo) -> str:
    """Register ``op`` once per process; returns ``scangen::<name>[_<n>]``."""
    if id(op) in _REGISTERED:
        return _REGISTERED[id(op)]
    taken = set(_REGISTERED.values())
    name, n = op.name, 1
    while f"scangen::{name}" in taken:
        n += 1
        name = f"{op.name}_{n}"
    qn = f"scangen::{name}"
    lib = _LIBS.setdefault("lib", torch.library.Library("scangen", "FRAGMENT"))
    lib.define(f"{name}{_schema(op)}")
    n_in, n_par = len(op.inputs), len(op.params)

    def unpack(args):
        values = {i.name: args[k] for k, i in enumerate(op.inputs)}
        values.update({p.name: args[n_in + k] for k, p in enumerate(op.params)})
        time_dim, outputs, backend = args[n_in + n_par:]
        return values, time_dim, tuple(outputs), backend

    def impl(*args):
        values, time_dim, outputs, backend = unpack(args)
        return list(runtime.call_direct(op, values, time_dim=time_dim, outputs=outputs,
                                        backend=backend))

    def fake(*args):
        values, time_dim, outputs, _ = unpack(args)
        c = runtime.Call(op, values, time_dim, outputs)
        c.allocate()
        return [c.outs[n] for n in c.requested]

    torch.library.impl(qn, "CompositeExplicitAutograd", lib=lib)(impl)
    torch.library.register_fake(qn, fake, lib=lib)

    def setup_context(ctx, inputs, output):
        ctx.args = inputs
        ctx.save_for_backward(*[a for a in inputs[:n_in + n_par] if a is not None])

    def backward(ctx, grads):
        args = list(ctx.args)
        values, time_dim, outputs, _ = unpack(args)
        leaves = {}
        for name, v in values.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                leaves[name] = v.detach().requires_grad_(True)
        with torch.enable_grad():
            outs = runtime.call_direct(op, {**values, **leaves}, time_dim=time_dim,
                                       outputs=outputs, backend="torch")
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
            names = list(leaves)
            got = torch.autograd.grad([o for o, _ in pairs], [leaves[n] for n in names],
                                      [g for _, g in pairs], allow_unused=True)
        by_name = dict(zip(names, got))
        return tuple(by_name.get(i.name) for i in op.inputs) + \
            tuple(by_name.get(p.name) for p in op.params) + (None, None, None)

    torch.library.register_autograd(qn, backward, setup_context=setup_context, lib=lib)
    _REGISTERED[id(op)] = qn
    return qn



def _param_tensor(op, name, v, like: torch.Tensor):
    if isinstance(v, torch.Tensor):
        return v
    info = next(p for p in op.params if p.name == name)
    if v is None:
        v = info.default
    if info.choices:
        table = dict(info.choices)
        if v not in table:
            raise ValueError(f"{op.function}(): {name} must be one of "
                             f"{', '.join(repr(k) for k in table)}, got {v!r}")
        v = table[v]
    # float64 keeps the Python float exact; kernels convert it to their accumulation dtype.
    return torch.scalar_tensor(v, dtype=torch.float64, device=like.device)


def dispatch(op: runtime.OpInfo, values: dict, *, time_dim, outputs, backend):
    """Call ``op`` through its registered custom op (autograd, torch.compile)."""
    qn = qualname(op)
    like = next(v for v in values.values() if isinstance(v, torch.Tensor))
    names = op.returns if outputs is None else ((outputs,) if isinstance(outputs, str)
                                                 else tuple(outputs))
    args = [values[i.name] for i in op.inputs]
    for p in op.params:
        v = values[p.name]
        if v is None and isinstance(p.default, str) and not p.choices:
            v = values[p.default]
        args.append(_param_tensor(op, p.name, v, like))
    namespace, name = qn.split("::")
    outs = getattr(getattr(torch.ops, namespace), name)(*args, time_dim, list(names), backend)
    single = outputs is None and len(op.returns) == 1 or isinstance(outputs, str)
    return outs[0] if single else tuple(outs)
