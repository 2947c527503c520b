"""A plan's fast paths: generated functions from a call's arguments to the compiled launcher.

A plan's direct launches (:func:`scangen.runtime.launch.launch`) still spend most of a small
call's host time re-binding the arguments into a :class:`~scangen.runtime.arguments.Call`,
building the pointer tuple and allocating through the generic helpers. Everything but the
tensors, the float params and the outputs is fixed by the plan's signature, so the fast path
(:func:`build`) reads the arguments in the kernel's order (:func:`scangen.abi.kernel_args`),
allocates the outputs and calls the launcher with the plan's integers and constants.
:func:`build_numba` does the same for plans of the numba target (CPU tensors).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import abi
from . import arguments
from .env import ENV
from .workspace import lookback_workspace

MISS = object()  # what a guarded fast path returns for arguments it does not cover


def build(c, values: dict, launches: list, how: tuple = (-1, None, None)):
    """``(fast, guarded)``: two generated functions from the call's arguments straight to the
    compiled kernel's launcher, or ``(None, None)`` where the plan does not qualify
    (``guarded`` alone may be None). ``launches``: the plan's direct launches so far.

    ``fast(values)``, taken once the signature matched, is built after the plan's first direct
    launch and used only if, on that call's own arguments, it reproduces that launch's argument
    tuple exactly. Look-back calls get their workspace as the general path does
    (:func:`~scangen.runtime.workspace.lookback_workspace`); tensor params are expanded to their
    target per call, as :meth:`~scangen.runtime.arguments.Call.bind` does (so calls through the custom op, autograd and
    torch.compile, whose params are 0-dim tensors, take the fast path too). Plans that re-bind
    anything more stay on the general path: inputs or params that must be copied, float64
    (float params travel as new tensors).

    ``guarded(values, time_dim, outputs, backend)`` (``how``: this call's last three) is tried
    first on an op's next call (:func:`scangen.runtime.ops.call`), before any signature is
    built: it checks the same things the signature holds, more cheaply (see :func:`_guarded`),
    and returns ``MISS`` where they differ. It passes the tensors' addresses to the launcher as
    integers, read once for the alignment check, so the launcher asks neither the tensors nor
    the driver about them again."""
    if len(launches) != 1:  # the fast path makes one launch per call
        return None, None
    kernel, grid, seen, meta = launches[0]
    entry = c.lp.compiled.get(kernel)
    if entry is None or c.copied or c.acc == torch.float64:
        return None, None
    op = c.op
    env = {}
    lookback = c.config.family == "lookback"
    if lookback:  # the workspace, as the general path gets it
        if c.lp.lb_words is None:
            return None, None
        plan = c.clone()  # the plan's constants only: no tensors of this call kept alive
        plan.tensors, plan.params, plan.outs = {}, {}, {}
        env.update(_workspace=lookback_workspace, _plan=plan, _cfg=c.config,
                   _words=c.lp.lb_words)
    bind = {name: (kind, arg) for name, kind, arg in c.bind_params}
    outs = {n: f"_o{k}" for k, n in enumerate(c.requested)}
    slots = []  # the per-call arguments, in the kernel's order (scangen.abi.kernel_args)
    for a in abi.op_kernel_args(op, workspace=lookback, lean=c.lp.lean):
        if a.kind not in ("ptr", "value"):
            continue
        if a.role == "input":  # present inputs are passed as given (no copies: checked above)
            slots.append(f"v[{a.of!r}]" if a.of in c.tensors else "None")
        elif a.role == "output":
            slots.append(outs.get(a.of, "None"))
        elif a.role == "workspace":
            slots.append("_workspace(_plan, _cfg, _words)")
        else:  # a param's value, then its pointer (as launch.param_ptrs)
            kind, arg = bind[a.of]
            if kind == 2:  # a tensor, expanded to its target (a view: no copies, checked above)
                env[f"_t_{a.of}"] = c.ptargets[a.of]
                slots.append("0.0" if a.kind == "value" else f"v[{arg!r}].expand(_t_{a.of})")
            elif a.kind == "ptr":  # a float param has no pointer
                slots.append("None")
            elif kind == 1:  # a float of this call
                slots.append(f"float(v[{arg!r}])")
            else:  # fixed by the signature
                env[f"_p_{a.of}"] = arg
                slots.append(f"_p_{a.of}")
    tail = (*seen[len(slots):], *meta.values())
    if len(seen) < len(slots) or any(isinstance(x, torch.Tensor) for x in tail):
        return None, None
    run, function, packed, stream_of, device = entry
    env.update(_run=run, _function=function, _packed=packed, _stream=stream_of, _device=device,
               _g0=grid[0], _g1=grid[1], _g2=grid[2], _tail=tail)
    names, body = _body(c, outs, env, [
        "    _run(_g0, _g1, _g2, _stream(_device), _function, _packed, None, None,",
        "         None, {slots}, *_tail)"])
    fast = _compile_fast(body, slots, env, f"<scangen fast path: {op.name}>")
    # the same arguments as the launch just made, for this call's values and outputs?
    mine = _arguments(slots, env, values, outs, c)
    same = all(a is b or (type(a) is float and a == b) or same_view(a, b)
               for a, b in zip(mine, seen))
    if not same:
        return None, None
    return fast, _guarded(c, values, how, slots, names, body, env)


def build_numba(c, values: dict, how: tuple = (-1, None, None)):
    """``(fast, guarded)`` for a plan of the numba target, as :func:`build` for Triton's: a
    generated function from the call's arguments straight to the numba kernel (its outputs
    allocated, each tensor passed as the plan's NumPy view of it, :func:`scangen.runtime.numba
    ._array`) and run on the threads the plan takes (:func:`scangen.runtime.numba.execute`), or
    ``(None, None)`` where the plan does not qualify: copied inputs, tensor params,
    half-precision outputs (written through float32 buffers). Built on the plan's second call and
    kept only if, on that call's own arguments, it passes the kernel the same arrays and numbers
    as the general path just did (:meth:`scangen.runtime.numba._Plan.arrays`). A small call spends most
    of its time on the host: the signature, binding the call and building its views (4 x 128
    GAE, bench/CPU.md)."""
    from . import numba as nb
    plan = c.lp.numba
    if plan is None or c.copied or plan.half_outs:
        return None, None
    bind = {name: (kind, arg) for name, kind, arg in c.bind_params}
    outs = {n: f"_o{k}" for k, n in enumerate(c.requested)}
    env = {"_execute": nb.execute, "_plan": plan, "_nd": np.ndarray, "_array": nb._array}
    slots, checked = [], []  # checked: the guarded path's, whose tensors match the plan's
    of = {"tensor": c.tensors, "out": c.outs}
    for k, ((kind, what, shape, strides), direct) in enumerate(zip(plan.sources, plan.direct)):
        viewed = None  # a contiguous tensor's view for the guarded path
        if kind in ("tensor", "out"):
            env[f"_d{k}"], env[f"_s{k}"], env[f"_t{k}"] = direct, shape, strides
            src = f"v[{what!r}]" if kind == "tensor" else outs[what]
            slot = f"_array({src}, _d{k}, _s{k}, _t{k})"
            if direct is not None and of[kind][what].is_contiguous():
                # the guard holds strides and requires_grad: _array's own view, its checks done
                env[f"_dt{k}"], env[f"_bs{k}"] = direct
                viewed = f"_nd(_s{k}, _dt{k}, {src}.numpy(), 0, _bs{k})"
        elif kind == "const":
            env[f"_c{k}"] = what
            slot = f"_c{k}"
        elif kind == "float" and bind[what][0] == 1:  # a float of this call
            slot = f"float(v[{bind[what][1]!r}])"
        elif kind == "float":  # fixed by the signature
            env[f"_c{k}"] = float(bind[what][1])
            slot = f"_c{k}"
        else:  # a tensor param: expanded to its target per call, on the general path
            return None, None
        slots.append(slot)
        checked.append(viewed or slot)
    names, body = _body(c, outs, env, ["    _execute(_plan, [{slots}])"])
    fast = _compile_fast(body, slots, env, f"<scangen numba fast path: {c.op.name}>")
    # the same arrays and numbers as the general path, for this call's values and outputs?
    general = getattr(c, "kernel_arrays", ())  # what numba.run passed the kernel just now
    for form in (slots, checked):
        mine = _arguments(form, env, values, outs, c)
        if len(mine) != len(general) or not all(map(_same_argument, mine, general)):
            return None, None
    return fast, _guarded(c, values, how, checked, names, body, env)


def _body(c, outs: dict, env: dict, call: list) -> tuple[list, list]:
    """``(names, lines)``: a fast path's body, its outputs allocated as
    :meth:`~scangen.runtime.arguments.Call.allocate` does (poisoned where the tests ask), then
    ``call`` (the kernel's, ``{slots}`` in place of its arguments), then the return; and the
    outputs' names. Adds what the lines read to ``env``."""
    env.update(_args=arguments, _nan=float("nan"), _dtype=c.out_dtype,
               _empty_like=torch.empty_like, _empty=torch.empty, _shape=c.full_shape,
               _dev=c.device)
    alloc = (f"_empty_like(v[{c.proto!r}], dtype=_dtype)" if c.proto is not None
             else "_empty(_shape, dtype=_dtype, device=_dev)")
    names = [outs[n] for n in c.requested]
    ret = names[0] if c.single else f"({', '.join(names)},)"
    return names, [*[f"    {o} = {alloc}" for o in names],
                   "    if _args.POISON_OUTPUTS:",
                   *[f"        {o}.fill_(_nan)" for o in names],
                   *call,
                   f"    return {ret}"]


def _compile_fast(body: list, slots: list, env: dict, name: str):
    """``fast(v)`` from ``body`` with ``slots`` as the kernel's arguments."""
    src = "\n".join(["def fast(v):", *body]).replace("{slots}", ", ".join(slots))
    exec(compile(src, name, "exec"), env)
    return env["fast"]


def _arguments(slots: list, env: dict, values: dict, outs: dict, c) -> tuple:
    """``slots`` evaluated on this call's ``values`` and its outputs ``c.outs``: what the fast
    path would pass the kernel, to compare with what the general path passed."""
    return eval(compile(f"({', '.join(slots)},)", "<scangen fast path check>", "eval"),
                {**env, "v": values, **{outs[n]: o for n, o in c.outs.items()}})


def _same_argument(a, b) -> bool:
    """Two kernel arguments that are the same: one object, equal floats, or NumPy arrays over
    the same memory with the same shape, strides and dtype."""
    if a is b or (type(a) is float and type(b) is float and a == b):
        return True
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
            and a.__array_interface__["data"] == b.__array_interface__["data"]
            and (a.shape, a.strides, a.dtype) == (b.shape, b.strides, b.dtype))


def _guarded(c, values: dict, how: tuple, slots: list, outs: list, body: list, env: dict):
    """The guarded fast path of :func:`build` or :func:`build_numba`, or None where torch has no
    C check of tensor metadata, or the plan's tensors are not all 16-byte aligned, or one of
    them requires a gradient."""
    tensors = [n for n, v in values.items() if isinstance(v, torch.Tensor)]
    if (_TensorGuards is None or not tensors
            or any(values[n].data_ptr() % 16 or values[n].requires_grad for n in tensors)):
        return None
    try:  # sizes, strides, dtype, device, dispatch keys, requires_grad and type of each
        check = _TensorGuards(*(values[n] for n in tensors),
                              dynamic_dims_sizes=[list(values[n].shape) for n in tensors],
                              dynamic_dims_strides=[list(values[n].stride()) for n in tensors])
        if not check.check(*(values[n] for n in tensors)):
            return None
    except (TypeError, RuntimeError):  # another torch's signature: the signature path only
        return None
    env = {**env, "_check": check.check, "MISS": MISS, "_ENV": ENV}
    x = {n: f"_x{k}" for k, n in enumerate(tensors)}
    # everything _signature puts in the key, in the same terms
    conds = ["type(td) is not _tdt or td != _td", "outputs != _outputs", "backend != _backend",
             f"_ENV['SCANGEN_BACKEND'] != {ENV['SCANGEN_BACKEND']!r}",
             f"_ENV['SCANGEN_FAMILY'] != {ENV['SCANGEN_FAMILY']!r}"]
    env["_td"], env["_outputs"], env["_backend"] = how  # the call's time_dim, outputs, backend
    env["_tdt"] = type(how[0])  # 1.0 == 1, but only an int is a time_dim
    for k, (n, v) in enumerate(values.items()):
        if v is None:
            conds.append(f"v[{n!r}] is not None")
        elif type(v) is float:
            conds.append(f"type(v[{n!r}]) is not float")
        elif not isinstance(v, torch.Tensor):
            env[f"_v{k}"], env[f"_y{k}"] = type(v), v
            conds.append(f"type(v[{n!r}]) is not _v{k} or v[{n!r}] != _y{k}")
    ptrs = [f"_a{k}" for k in range(len(tensors))]
    lines = ["def guarded(v, td, outputs, backend):",
             f"    if {' or '.join(conds)}:",
             "        return MISS",
             *[f"    {x[n]} = v[{n!r}]" for n in tensors],
             f"    if not _check({', '.join(x.values())}):",
             "        return MISS",
             *[f"    {a} = {x[n]}.data_ptr()" for a, n in zip(ptrs, tensors)],
             f"    if ({' | '.join(ptrs)}) & 15:",
             "        return MISS"]
    # the inputs' addresses as integers; the outputs' too, read from the fresh tensors
    addr = {f"v[{n!r}]": a for n, a in zip(tensors, ptrs)}
    slots = [addr.get(s, f"{s}.data_ptr()" if s in outs else s) for s in slots]
    for ln in body:
        for n in tensors:  # the tensors already read (the outputs' prototype)
            ln = ln.replace(f"v[{n!r}]", x[n])
        lines.append(ln.replace("{slots}", ", ".join(slots)))
    src = "\n".join(lines)
    exec(compile(src, f"<scangen guarded fast path: {c.op.name}>", "exec"), env)
    return env["guarded"]


# torch's C check of tensor metadata (TorchDynamo's former tensor guard); an attribute, not an
# importable module, before torch 2.5
_TensorGuards = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None),
                        "TensorGuards", None)


def same_view(a, b) -> bool:
    """Two tensors that address the same elements the same way (a param's expand(), made
    again)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and (a.data_ptr(), a.shape, a.stride(), a.dtype, a.device)
            == (b.data_ptr(), b.shape, b.stride(), b.dtype, b.device))
