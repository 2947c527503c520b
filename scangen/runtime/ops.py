"""PyTorch integration: every generated op as a ``torch.library`` custom op with a fake
implementation and an autograd formula, so ops compose with autograd, ``torch.compile``
(``fullgraph=True``, no graph break) and CUDA graphs.

The entry point of every generated function is :func:`call`: plain eager calls without
gradients skip the dispatcher (straight to :mod:`.plans`); calls that need autograd, and calls
traced by ``torch.compile``, go through the custom op.
Params reach the op as tensors: a 0-dim tensor for a Python float, so a traced graph does not
bake a particular gamma in.

Gradients: when the spec's adjoint could be generated (:mod:`scangen.compiler.adjoint`; every
built-in but Retrace), the forward also stores its scan states and the backward runs the
generated adjoint op (the module ``<module>_grad`` beside the forward's, :func:`scangen.abi.companion`),
a fused kernel scanning the other way in time. Otherwise the backward recomputes the op
with the generated torch path under autograd and differentiates it (exact, O(T log T)).
"""
from __future__ import annotations

import numbers

import torch
import torch.autograd.forward_ad as _forward_ad

try:  # torch.func's C helpers (torch >= 2.1); without them no transform is seen
    from torch._C._functorch import is_functorch_wrapped_tensor as _is_wrapped
    from torch._C._functorch import peek_interpreter_stack as _peek_interpreter_stack
except ImportError:  # pragma: no cover - older torch
    def _is_wrapped(t):
        return False

    def _peek_interpreter_stack():
        return None

from .. import abi
from . import launch, plans, torchpath
from .arguments import Call, as_float, check_time_dim, choice_code, requested, what
from .backends import select_backend
from .fastpath import MISS

# Keyed by the generated module that defines the op (one OP per module): a string that
# torch.compile can trace, unlike id() of the OpInfo, which dynamo does not preserve.
_REGISTERED: dict[str, str] = {}
_LIBS: dict = {}
_ADJOINTS: dict = {}  # generated module -> its backward op (or None)


def _schema(op: abi.OpInfo) -> str:
    args = [f"Tensor? {i.name}" for i in op.inputs] + [f"Tensor {p.name}" for p in op.params]
    args += ["int time_dim", "str[] outputs", "str? backend"]
    return f"({', '.join(args)}) -> Tensor[]"


def qualname(op: abi.OpInfo) -> str:
    """Register ``op`` once per process; returns ``scangen::<name>[_<n>]``."""
    key = op.module
    if key in _REGISTERED:
        return _REGISTERED[key]
    taken = set(_REGISTERED.values())
    name, n = op.name, 1
    while f"scangen::{name}" in taken:
        n += 1
        name = f"{op.name}_{n}"
    qn = f"scangen::{name}"
    lib = _LIBS.get("lib")
    if lib is None:
        lib = _LIBS["lib"] = torch.library.Library("scangen", "FRAGMENT")
    lib.define(f"{name}{_schema(op)}")
    n_in, n_par = len(op.inputs), len(op.params)

    def unpack(args):
        values = {i.name: args[k] for k, i in enumerate(op.inputs)}
        values.update({p.name: args[n_in + k] for k, p in enumerate(op.params)})
        time_dim, outputs, backend = args[n_in + n_par:]
        return values, time_dim, tuple(outputs), backend

    def impl(*args):
        values, time_dim, outputs, backend = unpack(args)
        return list(plans.call_direct(op, values, time_dim=time_dim, outputs=outputs,
                                        backend=backend))

    def fake(*args):
        values, time_dim, outputs, backend = unpack(args)
        c = Call(op, values, time_dim, outputs, public=False)
        select_backend(op.function, backend, c.device)  # as the call will: a wrong one fails
        c.allocate()
        return [c.outs[n] for n in c.requested]

    torch.library.impl(qn, "CompositeExplicitAutograd", lib=lib)(impl)
    torch.library.register_fake(qn, fake, lib=lib)

    def setup_context(ctx, inputs, output):
        # the tensor arguments through save_for_backward, so that autograd refuses a backward
        # after one of them was modified in place (as for torch's own ops), not a wrong gradient
        ctx.tensor_at = [k for k, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
        ctx.args = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        names = list(inputs[n_in + n_par + 1])
        ctx.state_names = [n for n in names if abi.is_state_output(n)]
        states = [o for n, o in zip(names, output) if abi.is_state_output(n)]
        ctx.save_for_backward(*(inputs[k] for k in ctx.tensor_at), *states)

    def backward(ctx, grads):
        saved = ctx.saved_tensors
        args = list(ctx.args)
        for k, t in zip(ctx.tensor_at, saved):
            args[k] = t
        states = saved[len(ctx.tensor_at):]
        values, time_dim, outputs, backend = unpack(args)
        # flags and indices are 0/1 and integer data: they get no gradient, on either path
        kinds = {i.name: i.kind for i in op.inputs}
        wanted = [n for k, n in enumerate(list(values))
                  if ctx.needs_input_grad[k] and kinds.get(n, "float") == "float"]
        grad_op = grad_op_of(op)
        if torch.is_grad_enabled() or _peek_interpreter_stack() is not None or any(
                g is not None and _batched(g) for g in grads):
            # create_graph=True (a Hessian, gradgradcheck, a gradient penalty): the gradient must
            # itself be differentiable, through the scan states too, which the adjoint kernel
            # reads as data; the torch path's graph gives every order exactly. Under a
            # torch.func transform, or given a batch of grads (vmap of a backward; autograd's
            # is_grads_batched, jacobian(vectorize=True)), the kernels cannot see the batch:
            # the torch path again
            got = _recompute_backward(op, values, outputs, grads, wanted, time_dim,
                                      create_graph=torch.is_grad_enabled())
        elif grad_op is not None and states:
            got = _fused_backward(op, grad_op, ctx.state_names, states, values, outputs, grads,
                                  wanted, time_dim, backend)
        else:
            got = _recompute_backward(op, values, outputs, grads, wanted, time_dim)
        return tuple(got.get(i.name) for i in op.inputs) + \
            tuple(got.get(p.name) for p in op.params) + (None, None, None)

    torch.library.register_autograd(qn, backward, setup_context=setup_context, lib=lib)
    _REGISTERED[key] = qn
    # the backward's module is loaded now, not on the first backward: torch.compile can neither
    # import a module nor register an op mid-trace
    _ADJOINTS[key] = getattr(abi.companion(op, abi.GRAD_SUFFIX), "OP", None)
    return qn


def _param_tensor(op, name, v, like: torch.Tensor, public: bool):
    """A param as the custom op takes it: a tensor (a choice's code for a choice param).
    ``public``: a user's value, which for a choice param is one of its strings."""
    info = next(p for p in op.params if p.name == name)
    if isinstance(v, torch.Tensor) and not (public and info.choices):
        return v
    if v is None:
        if info.default is None:
            raise TypeError(f"{op.function}() missing required argument '{name}'")
        v = info.default
    if info.choices:
        v = choice_code(op.function, info, v)
    elif isinstance(v, bool) or not isinstance(v, numbers.Real):  # as Call._param
        raise TypeError(f"{op.function}(): {name} must be a float or a tensor broadcastable to "
                        f"the inputs' [N, T], got {what(v)}")
    # float64 keeps the Python float exact; kernels convert it to their accumulation dtype.
    return torch.scalar_tensor(as_float(op.function, name, v), dtype=torch.float64,
                               device=like.device)


def grad_op_of(op: abi.OpInfo):
    """The generated backward op of ``op``, or None where its adjoint was not generated
    (found when ``op`` was registered: a plain dict lookup, which torch.compile can trace)."""
    return _ADJOINTS.get(op.module)


def _batched(t: torch.Tensor) -> bool:
    """A torch.func wrapper, or a batch of autograd's own vmap (``is_grads_batched``), whose
    dispatch key torch exposes no test for but its name ("Batched")."""
    return _is_wrapped(t) or "Batched" in str(torch._C._dispatch_keys(t))


def _recompute_backward(op, values, outputs, grads, wanted, time_dim, create_graph=False):
    """Differentiate the generated torch path (specs whose adjoint is not generated, and every
    backward asked to be differentiable: ``create_graph``)."""
    if create_graph:  # an alias per argument: linked to the caller's graph, and one tensor
        # passed as two arguments gets each argument's own gradient
        leaves = {n: values[n].view_as(values[n]) for n in wanted
                  if isinstance(values[n], torch.Tensor)}
    else:
        leaves = {n: values[n].detach().requires_grad_(True) for n in wanted
                  if isinstance(values[n], torch.Tensor)}
    with torch.enable_grad():
        outs = plans.call_direct(op, {**values, **leaves}, time_dim=time_dim,
                                   outputs=outputs, backend="torch")
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        # no output depends on a leaf (an empty call, say): its gradient is zero, as the fused
        # adjoints give, not None
        got = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()),
                                  [g for _, g in pairs], allow_unused=True,
                                  create_graph=create_graph) if pairs else [None] * len(leaves)
    return {n: torch.zeros_like(v) if g is None else g
            for (n, v), g in zip(leaves.items(), got)}


def _fused_backward(op, grad_op, state_names, states, values, outputs, grads, wanted, time_dim,
                    backend):
    """Run the generated adjoint kernel, then sum each per-step gradient to its input's shape."""
    b_values = dict(values)
    b_values.update(zip(state_names, states))
    user = [n for n in outputs if not abi.is_state_output(n)]
    b_values.update({abi.output_grad(o): None for o in op.outputs})
    b_values.update({abi.output_grad(n): g for n, g in zip(user, grads) if g is not None})
    names = [abi.input_grad(n) for n in wanted]
    if not names:
        return {}
    per_step = call_op(grad_op, b_values, time_dim=time_dim, names=names, backend=backend)
    c = Call(op, values, time_dim, user, public=False)
    roles = {i.name: i.shape for i in op.inputs}
    return {n: _sum_to(g, values[n], c, roles.get(n, "param")) for n, g in zip(wanted, per_step)}


def _sum_to(grad, like, c, role: str):
    """Sum a full-shape per-step gradient down to the shape of the tensor it belongs to."""
    if not isinstance(like, torch.Tensor):
        return None
    trailing = len(c.full_shape) - len(c.base_shape)  # feature dims inputs may broadcast over
    if role == "N":
        grad = grad.sum(c.td)  # every step's gradient lands on the row's single value
        if like.dim() < grad.dim():
            grad = grad.sum(tuple(range(grad.dim() - trailing, grad.dim())))
    elif like.dim() <= len(c.base_shape) and trailing:
        grad = grad.sum(tuple(range(len(c.base_shape), grad.dim())))
    return grad.sum_to_size(like.shape).to(like.dtype)


def call_op(op: abi.OpInfo, values: dict, *, time_dim, names, backend, public=False):
    """Call ``op``'s registered custom op for the output ``names``; returns a list.
    ``public``: a user's call (:func:`dispatch`), whose time_dim and params are checked here
    (the op's schema takes an int and tensors), with :class:`Call`'s errors."""
    qn = qualname(op)
    like = _first_tensor(values)
    if public and type(time_dim) is not int:  # the op's schema takes an int
        time_dim = check_time_dim(op.function, time_dim)
    if like is None:  # no tensor at all: Call raises the error of the argument at fault
        Call(op, values, time_dim, names, public=False)
    args = [values[i.name] for i in op.inputs]
    for p in op.params:
        v = values[p.name]
        if v is None and isinstance(p.default, str) and not p.choices:
            v = values[p.default]
        args.append(_param_tensor(op, p.name, v, like, public))
    namespace, name = qn.split("::")
    return getattr(getattr(torch.ops, namespace), name)(*args, time_dim, list(names), backend)


def dispatch(op: abi.OpInfo, values: dict, *, time_dim, outputs, backend):
    """Call ``op`` through its registered custom op (autograd, torch.compile). When gradients
    will be needed and the op has a generated backward, the forward also stores its states."""
    names = requested(op.function, op, outputs)  # checked here: the op's schema takes str[]
    extra = ()
    if torch.is_grad_enabled() and grad_op_of(op) is not None and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in values.values()):
        extra = tuple(o for o in op.outputs if abi.is_state_output(o))
    outs = call_op(op, values, time_dim=time_dim, names=names + extra, backend=backend,
                   public=True)
    outs = outs[:len(names)]
    single = outputs is None and len(op.returns) == 1 or isinstance(outputs, str)
    return outs[0] if single else tuple(outs)


def _transformed(op, values, time_dim, outputs, backend):
    """Forward-mode AD (``torch.autograd.forward_ad``) and ``torch.func`` transforms (``grad``,
    ``vjp``, ``jacrev``, ``jacfwd``, ``vmap``, ...): the generated kernels read their inputs'
    memory, which carries neither a tangent nor a transform's batch, so these calls run the
    generated torch path, differentiable and batchable like any torch code. Checked as any
    call (a bad ``backend=`` is still an error), then computed there."""
    like = _first_tensor(values)
    select_backend(op.function, backend, like.device if like is not None else torch.device("cpu"))
    with torchpath.functional_stores():
        return plans.run(op, values, None, time_dim, outputs, "torch")


def _first_tensor(values: dict):
    """The first tensor among ``values``, or None (a loop: torch 2.4's dynamo cannot trace
    ``next(it, None)``)."""
    for v in values.values():
        if isinstance(v, torch.Tensor):
            return v
    return None


def call(op: abi.OpInfo, values: dict, *, time_dim: int = -1, outputs=None, backend=None):
    """Run an op (every generated function's body): through its torch.library custom op when
    autograd or torch.compile needs it, else straight to its plan (no dispatcher overhead)."""
    if torch.compiler.is_compiling():
        return dispatch(op, values, time_dim=time_dim, outputs=outputs, backend=backend)
    if _peek_interpreter_stack() is not None or (_forward_ad._current_level >= 0 and any(
            isinstance(v, torch.Tensor) and _forward_ad.unpack_dual(v).tangent is not None
            for v in values.values())):
        return _transformed(op, values, time_dim, outputs, backend)
    recent = plans.RECENT.get(id(op))
    if recent is not None and recent[1] is not None and recent[0] is op and not launch.hooked():
        out = recent[1](values, time_dim, outputs, backend)
        if out is not MISS:
            return out
    try:
        key, grad = plans.signature(op, values, time_dim, outputs, backend)
    except (TypeError, RuntimeError):  # unhashable, or a tensor without storage (sparse):
        # no plan, the checks will explain
        key, grad = None, any(isinstance(v, torch.Tensor) and v.requires_grad
                              for v in values.values())
    if grad and torch.is_grad_enabled():
        return dispatch(op, values, time_dim=time_dim, outputs=outputs, backend=backend)
    return plans.run(op, values, key, time_dim, outputs, backend)
