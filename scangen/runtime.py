"""Runtime shared by every generated op: argument checks, canonical views, backend choice.

A generated module describes its op with an :class:`OpInfo` and provides two implementations:
``launch(call, config)`` (the Triton kernel) and ``torch_impl(call)`` (vectorised torch). Both
see the arguments through one :class:`Call`, which maps every tensor onto a canonical
``[R1, R2, T]`` index space by strides alone (no copies): ``R1`` merges the dimensions before
the time axis, ``R2`` those after it (trailing feature dimensions included), so ``[N, T]``,
time-major ``[T, N]``, ``[B, N, T]`` and ``[N, T, F]`` all reach the kernel unchanged.
"""
from __future__ import annotations

import ctypes
import functools
import math
import sys
from typing import Callable, NamedTuple

import torch

from . import numbapath
from .config import choose_config
from .env import ENV, reload_env  # noqa: F401 (re-exported: scangen.runtime.reload_env)

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FLAG = (torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64) + _FLOAT
_INDEX = (torch.int32, torch.int64)
_DTYPES = {"float": _FLOAT, "flag": _FLAG, "index": _INDEX}
# Tests set this so that every output starts as NaN: an unwritten element cannot pass.
POISON_OUTPUTS = False


class InputInfo(NamedTuple):
    name: str
    kind: str      # float | flag | index
    shape: str     # NT | N | NTK
    default: float | None
    doc: str


class ParamInfo(NamedTuple):
    name: str
    default: float | str | None
    doc: str
    choices: tuple


class OpInfo(NamedTuple):
    name: str
    function: str
    direction: str
    inputs: tuple
    params: tuple
    outputs: tuple
    returns: tuple
    exclusive: tuple
    launch: Callable
    torch_impl: Callable


def _interpreting() -> bool:
    return (ENV["TRITON_INTERPRET"] or "0") not in ("", "0")


BACKENDS = ("auto", "triton", "numba", "torch")


def select_backend(fn: str, backend: str | None, device: torch.device) -> str:
    """``auto``: Triton for CUDA tensors, numba for CPU tensors (torch where numba is not
    installed), the torch path on every other device."""
    choice = backend if backend is not None else (ENV["SCANGEN_BACKEND"] or "auto")
    if choice not in BACKENDS:
        source = "backend" if backend is not None else "SCANGEN_BACKEND"
        raise ValueError(f"{fn}(): {source} must be one of "
                         f"{', '.join(repr(b) for b in BACKENDS)}, got {choice!r}")
    if choice == "auto":
        if device.type == "cuda":
            return "triton"
        return "numba" if device.type == "cpu" and numbapath.available() else "torch"
    if choice == "triton" and device.type != "cuda" and not _interpreting():
        raise ValueError(f"{fn}(): backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 "
                         f"set before scangen is imported to run the kernels on the CPU")
    if choice == "numba":
        if device.type != "cpu":
            raise ValueError(f"{fn}(): backend='numba' needs CPU tensors, got {device.type} "
                             f"tensors")
        if not numbapath.available():
            raise ValueError(f"{fn}(): backend='numba' needs numba installed "
                             f"(pip install numba)")
    return choice


def _merge(dims: list[tuple[int, int]]) -> int | None:
    """One stride that walks ``dims`` (size, stride) in row-major order, or None."""
    dims = [(n, s) for n, s in dims if n != 1]
    if not dims:
        return 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return dims[-1][1]


def choice_code(fn: str, p: ParamInfo, v) -> float:
    """The number a choice param's string stands for (``boundary="ends_at"`` -> 0.0)."""
    table = dict(p.choices)
    if not isinstance(v, str) or v not in table:
        raise ValueError(f"{fn}(): {p.name} must be one of "
                         f"{', '.join(repr(k) for k in table)}, got {v!r}")
    return float(table[v])


class Call:
    """One call's arguments in canonical form; shared by both backends."""

    def __init__(self, op: OpInfo, values: dict, time_dim: int, outputs):
        self.op = op
        fn = op.function
        self.fn = fn
        self._check_presence(values)
        self.tensors = {i.name: values[i.name] for i in op.inputs if values[i.name] is not None}
        infos = {i.name: i for i in op.inputs}
        for name, t in self.tensors.items():
            _check_tensor(fn, infos[name], t)
        first = next(iter(self.tensors.values()))
        self.device = first.device
        for name, t in self.tensors.items():
            if t.device != self.device:
                raise ValueError(f"{fn}(): '{name}' is on {t.device}, but "
                                 f"'{next(iter(self.tensors))}' is on {self.device}")
        self._shapes(infos, time_dim)
        floats = [t.dtype for n, t in self.tensors.items() if infos[n].kind == "float"]
        self.out_dtype = floats[0] if floats else torch.float32
        for d in floats[1:]:
            self.out_dtype = torch.promote_types(self.out_dtype, d)
        self.acc = torch.float64 if self.out_dtype == torch.float64 else torch.float32
        self.pstrides, self.ptargets = {}, {}
        raw = {p.name: self._param(p, values) for p in op.params}
        self.params = {n: self._scalar(v) for n, v in raw.items()}
        self.requested = self._requested(outputs)

    # -- argument checks ---------------------------------------------------------------
    def _check_presence(self, values):
        for inp in self.op.inputs:
            if values[inp.name] is None and inp.default is None:
                why = f": {inp.doc}" if inp.doc else ""
                raise TypeError(f"{self.fn}() missing required argument '{inp.name}'{why}")
        for group in self.op.exclusive:
            given = [n for n in group if values.get(n) is not None]
            if len(given) > 1:
                raise ValueError(f"{self.fn}(): pass at most one of {', '.join(group)} "
                                 f"(got {', '.join(given)})")

    def _requested(self, outputs):
        if outputs is None:
            return self.op.returns
        names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        for name in names:
            if name not in self.op.outputs:
                raise ValueError(f"{self.fn}(): outputs: unknown output {name!r} "
                                 f"(available: {', '.join(self.op.outputs)})")
        if not names:
            raise ValueError(f"{self.fn}(): outputs must name at least one output")
        return names

    def _param(self, p: ParamInfo, values):
        v = values[p.name]
        if v is None:
            if p.default is None:
                raise TypeError(f"{self.fn}() missing required argument '{p.name}'")
            v = values[p.default] if isinstance(p.default, str) and not p.choices else p.default
            if v is None:
                v = next(q.default for q in self.op.params if q.name == p.default)
        if p.choices and not isinstance(v, torch.Tensor):  # tensors: already the choice's code
            return choice_code(self.fn, p, v)
        if isinstance(v, torch.Tensor):
            return self._tensor_param(p.name, v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{self.fn}(): {p.name} must be a float or a tensor broadcastable "
                            f"to {list(self.base_shape)}, got {type(v).__name__}")
        return float(v)

    def _scalar(self, v):
        """Kernels take Python floats as fp32 arguments: in float64 a param travels as a 0-dim
        float64 tensor instead (read with stride 0), so it keeps its 53 bits."""
        if self.acc == torch.float64 and not isinstance(v, torch.Tensor):
            return torch.tensor(v, dtype=torch.float64, device=self.device)
        return v

    def _tensor_param(self, name, v):
        if not v.dtype.is_floating_point:
            raise TypeError(f"{self.fn}(): {name} must be a floating-point tensor, got {v.dtype}")
        if v.device != self.device:
            raise ValueError(f"{self.fn}(): '{name}' is on {v.device}, inputs are on {self.device}")
        target = self.base_shape if v.dim() <= len(self.base_shape) else self.full_shape
        try:
            e = v.expand(target)
        except RuntimeError:
            raise ValueError(f"{self.fn}(): {name} has shape {list(v.shape)}, which does not "
                             f"broadcast to {list(self.base_shape)}") from None
        self.ptargets[name] = target
        c, self.pstrides[name] = self._canon(e, "NT")
        if c is not e:
            self.copied.add(name)
        return c

    # -- shapes and strides --------------------------------------------------------------
    def _shapes(self, infos, time_dim):
        parts = {n: (t.shape[:-1] if infos[n].shape == "NTK" else t.shape)
                 for n, t in self.tensors.items() if infos[n].shape != "N"}
        primary = next(n for n in parts if infos[n].default is None)
        base_rank = min(len(s) for s in parts.values())
        if base_rank < 1:
            raise ValueError(f"{self.fn}(): '{primary}' needs a time dimension")
        if not -base_rank <= time_dim < base_rank:
            raise ValueError(f"{self.fn}(): time_dim={time_dim} is out of range for "
                             f"{base_rank}-dimensional inputs")
        self.td = time_dim % base_rank
        full = max(parts.values(), key=len)
        self.base_shape = tuple(full[:base_rank])
        self.full_shape = tuple(full)
        for n, s in parts.items():
            if tuple(s) != self.full_shape and tuple(s) != self.base_shape:
                what = "[N, T, K]" if infos[n].shape == "NTK" else ""
                raise ValueError(f"{self.fn}(): '{n}' has shape {list(self.tensors[n].shape)}, "
                                 f"expected {list(self.full_shape)}{' plus K' if what else ''}"
                                 + (f" or {list(self.base_shape)}"
                                    if self.full_shape != self.base_shape else ""))
        ks = {self.tensors[n].shape[-1] for n in parts if infos[n].shape == "NTK"}
        if len(ks) > 1:
            raise ValueError(f"{self.fn}(): the trailing axes of the [N, T, K] inputs differ: "
                             f"{sorted(ks)}")
        self.K = ks.pop() if ks else 1
        rows = [n for i, n in enumerate(self.full_shape) if i != self.td]
        self.row_shape = tuple(rows)
        self.T = self.full_shape[self.td]
        self.R1 = math.prod(self.full_shape[:self.td])
        self.R2 = math.prod(self.full_shape[self.td + 1:])
        for n, t in self.tensors.items():
            if infos[n].shape == "N":
                ok = (tuple(self.row_shape), tuple(rows[:base_rank - 1]))
                if tuple(t.shape) not in ok:
                    raise ValueError(f"{self.fn}(): '{n}' has shape {list(t.shape)}, expected "
                                     f"{list(ok[0])}" + (f" or {list(ok[1])}"
                                                         if ok[0] != ok[1] else ""))
        self.strides, self.copied = {}, set()
        for n, t in self.tensors.items():
            self.tensors[n], self.strides[n] = self._canon(t, infos[n].shape)
            if self.tensors[n] is not t:
                self.copied.add(n)

    def _canon(self, t, role):
        """``(t, (s1, s2, st[, sk]))``; ``t`` is copied only when its strides cannot merge."""
        dims = list(zip(t.shape, t.stride()))
        k = [dims.pop()[1]] if role == "NTK" else []
        if role == "N":
            dims.insert(self.td, (1, 0))
        dims += [(n, 0) for n in self.full_shape[len(dims):]]
        s1 = _merge(dims[:self.td])
        s2 = _merge(dims[self.td + 1:])
        if s1 is None or s2 is None:
            return self._canon(t.contiguous(), role)
        return t, (s1, s2, dims[self.td][1] if role != "N" else 0, *k)

    # -- accessors used by generated code ------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self.tensors

    def is_tensor(self, name: str) -> bool:
        return isinstance(self.params[name], torch.Tensor)

    def allocate(self):
        """Empty outputs for the requested names, in the layout of the primary input."""
        if not hasattr(self, "proto"):  # the first input with the full shape, if any
            self.proto = next((n for n, t in self.tensors.items()
                               if tuple(t.shape) == self.full_shape), None)
        proto = self.tensors[self.proto] if self.proto is not None else None
        self.outs = {}
        for name in self.requested:
            if proto is not None:  # keeps proto's strides when they are dense (time-major too)
                out = torch.empty_like(proto, dtype=self.out_dtype)
            else:
                out = torch.empty(self.full_shape, dtype=self.out_dtype, device=self.device)
            if POISON_OUTPUTS:
                out.fill_(float("nan"))
            self.outs[name] = out
        if not hasattr(self, "out_strides"):  # the same for every call of one plan
            self.out_strides = {n: self._canon_out(o) for n, o in self.outs.items()}

    def _canon_out(self, out):
        dims = list(zip(out.shape, out.stride()))
        return (_merge(dims[:self.td]), _merge(dims[self.td + 1:]), dims[self.td][1])

    def template(self, values: dict) -> "Call":
        """A copy without this call's tensors, to re-bind arguments of the same signature.

        What bind() repeats per call is worked out here, once, from this first call's
        ``values``: the input names (copied ones are made contiguous again) and, per param,
        where its value comes from. The signature fixes which arguments are None, floats or
        tensors, so the same sources hold for every call of the plan."""
        t = self._clone()
        t.tensors, t.params, t.outs = {}, {}, {}
        t.bind_names = tuple(self.strides)
        t.bind_plain = not (self.copied & set(self.strides))
        specs = []
        for p in self.op.params:
            # a param left out may default to another param's value (V-trace's pg_rho_bar
            # takes rho_bar's): then it follows that param, call by call
            alias = p.default if isinstance(p.default, str) and not p.choices else None
            source = p.name if values[p.name] is not None or alias is None else alias
            if p.name in self.ptargets:
                specs.append((p.name, 2, source))  # a tensor, expanded to its target
            elif values[source] is None or p.choices:
                specs.append((p.name, 0, self.params[p.name]))  # fixed by the signature
            else:
                specs.append((p.name, 1, source))  # a float of this call
        t.bind_params = tuple(specs)
        return t

    def _clone(self) -> "Call":
        """A shallow copy (the plan's dicts of strides, compiled kernels, ... are shared)."""
        c = object.__new__(Call)
        c.__dict__ = self.__dict__.copy()  # a third of the cost of update() into an empty dict
        return c

    def bind(self, values: dict) -> "Call":
        """This plan applied to new arguments with the same shapes, strides, dtypes, devices
        and param types (see :func:`_signature`): no checks or stride work is repeated."""
        c = self._clone()
        if self.bind_plain:
            c.tensors = {n: values[n] for n in self.bind_names}
        else:
            c.tensors = {n: values[n].contiguous() if n in self.copied else values[n]
                         for n in self.bind_names}
        c.params = params = {}
        f64 = self.acc == torch.float64
        for name, kind, arg in self.bind_params:
            if kind == 0:  # fixed by the signature (converted once)
                params[name] = arg
            elif kind == 1:  # a float of this call, given or taken from another param
                params[name] = self._scalar(float(values[arg])) if f64 else float(values[arg])
            else:  # a tensor, expanded to its target
                v = values[arg].expand(self.ptargets[name])
                params[name] = v.contiguous() if name in self.copied else v
        c.allocate()
        return c

    def result(self):
        outs = tuple(self.outs[n] for n in self.requested)
        return outs[0] if len(outs) == 1 and self.single else outs


def _check_tensor(fn: str, info: InputInfo, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}(): '{info.name}' must be a torch.Tensor, got {type(t).__name__}")
    allowed = _DTYPES[info.kind]
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{fn}(): '{info.name}' ({info.kind}) must have dtype {names}; "
                        f"got {str(t.dtype).replace('torch.', '')}")


class _PlanCache(dict):
    """Plans by signature (:func:`_signature`). Clearing it (tests do, after changing the
    dispatch rule) also forgets each op's most recent guarded fast path (``_RECENT``)."""

    def clear(self):
        _RECENT.clear()
        super().clear()


_PLANS: dict = _PlanCache()
_MAX_PLANS = 4096
# id(op) -> (op, guarded): the guarded fast path (see _fast_path) of the plan an op's last call
# used, tried before the signature is built; a plan without one leaves (op, None).
_RECENT: dict = {}
_MISS = object()  # what a guarded fast path returns for arguments it does not cover


def _signature(op: OpInfo, values: dict, time_dim, outputs, backend):
    """``(key, any_requires_grad)``. The key holds everything the checks and the launch plan
    depend on; param values are left out (a new gamma reuses the plan), except strings and
    other non-floats, which select behaviour. Pointer alignment is in it because the compiled
    kernel the plan keeps was specialised on it."""
    sig = [id(op), time_dim, outputs if not isinstance(outputs, list) else tuple(outputs),
           backend, ENV["SCANGEN_BACKEND"], ENV["SCANGEN_FAMILY"]]
    append, tensor = sig.append, torch.Tensor
    grad = False
    for v in values.values():
        if v is None:
            append(None)
        elif isinstance(v, tensor):  # get_device(): an int, cheaper than building .device
            append((v.shape, v.stride(), v.dtype, v.get_device(), v.data_ptr() % 16 == 0))
            grad = grad or v.requires_grad
        elif type(v) is float:
            append(float)
        else:
            append((type(v), v))
    return tuple(sig), grad


def call(op: OpInfo, values: dict, *, time_dim: int = -1, outputs=None, backend=None):
    """Run an op: through its torch.library custom op when autograd or torch.compile needs it,
    else straight to the implementation (no dispatcher overhead)."""
    if torch.compiler.is_compiling():
        return _dispatch(op, values, time_dim, outputs, backend)
    recent = _RECENT.get(id(op))
    if recent is not None and recent[1] is not None and recent[0] is op and not _hooked():
        out = recent[1](values, time_dim, outputs, backend)
        if out is not _MISS:
            return out
    try:
        key, grad = _signature(op, values, time_dim, outputs, backend)
    except TypeError:  # an unhashable argument: no plan, the checks will explain
        key, grad = None, any(isinstance(v, torch.Tensor) and v.requires_grad
                              for v in values.values())
    if grad and torch.is_grad_enabled():
        return _dispatch(op, values, time_dim, outputs, backend)
    return _call(op, values, key, time_dim, outputs, backend)


def _dispatch(op, values, time_dim, outputs, backend):
    from .ops import dispatch
    return dispatch(op, values, time_dim=time_dim, outputs=outputs, backend=backend)


def call_direct(op: OpInfo, values: dict, *, time_dim: int = -1, outputs=None, backend=None):
    """Check the arguments, allocate outputs and run the chosen implementation.

    The first call with a given signature runs every check and works out strides, dtypes and
    the launch configuration; later calls with the same signature reuse that plan."""
    try:
        key = _signature(op, values, time_dim, outputs, backend)[0]
    except TypeError:
        key = None
    return _call(op, values, key, time_dim, outputs, backend)


def _call(op, values, key, time_dim, outputs, backend):
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        fast = plan.kernels.get("fast")
        if fast is not None and not _hooked():
            _RECENT[id(op)] = (op, plan.kernels.get("guarded"))
            return fast(values)
        c = plan.bind(values)
    else:
        c = Call(op, values, time_dim, outputs)
        c.single = outputs is None and len(op.returns) == 1 or isinstance(outputs, str)
        c.allocate()
        c.empty = c.R1 * c.R2 == 0 or c.T == 0
        c.kernels = {}  # shared with the plan: compiled kernels for the direct launch
        if not c.empty:
            c.backend = select_backend(op.function, backend, c.device)
            c.config = choose_config(c) if c.backend == "triton" else None
        if key is not None and len(_PLANS) < _MAX_PLANS:
            _PLANS[key] = c.template(values)
    if c.empty:
        return c.result()
    if c.backend == "triton":
        op.launch(c, c.config)
        if plan is not None and "fast" not in c.kernels and "seen" in c.kernels:
            if c.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                c.kernels.pop("seen", None)  # decided outside capture (no work captured)
            else:
                c.kernels["fast"], c.kernels["guarded"] = _fast_path(
                    c, values, (time_dim, outputs, backend))
    elif c.backend == "numba":
        numbapath.launch(c, op)
    else:
        op.torch_impl(c)
    return c.result()


def launch(c: Call, kernel, grid, args: tuple, meta: dict, cfg) -> None:
    """Launch a generated kernel. The first launch of a plan goes through Triton's launcher,
    which binds and specialises the arguments; later launches of the same plan (same shapes,
    strides, dtypes and alignment) call the compiled kernel's launcher directly, skipping the
    per-argument binding and the per-launch closure, which dominate the cost of a small call.
    A Triton launch hook (a profiler) sends every launch through Triton's own path."""
    global _KNOBS
    entry = c.kernels.get(kernel)
    if entry is not None and not _hooked():
        run, function, packed, stream_of, device, _ = entry
        g = (*grid, 1, 1)
        run(g[0], g[1], g[2], stream_of(device), function, packed, None, None, None, *args,
            *meta.values())
        if "fast" not in c.kernels:  # what _fast_path checks its own arguments against
            c.kernels.setdefault("seen", []).append((kernel, g, args, meta))
        return
    if "direct" in c.kernels:  # a hook took this path: real tensors in the unused pointer slots
        dummy = next(iter(c.outs.values()))
        args = tuple(dummy if a is None else a for a in args)
    # FMA fusion pinned on: the combines are written as a * b + c, the speeds in bench/ were
    # measured with it, and Triton 3.10 turns it off by default (3.9 warns that it will).
    compiled = kernel[grid](*args, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                            enable_fp_fusion=True)
    if not _interpreting() and hasattr(compiled, "packed_metadata") and hasattr(compiled, "run"):
        from triton.runtime.driver import driver
        try:
            from triton import knobs
            _KNOBS = knobs.runtime
        except ImportError:  # no launch hooks in this Triton
            pass
        c.kernels[kernel] = (compiled.run, compiled.function, compiled.packed_metadata,
                             driver.active.get_current_stream, c.device.index or 0, compiled)
        c.kernels["direct"] = True  # later calls of this plan pass None in unused pointer slots


# triton.knobs.runtime once a kernel was compiled: its launch hooks (a HookChain, or None in
# older Triton) are honoured by taking Triton's own launch path while any is registered.
_KNOBS = None


def _hooked() -> bool:
    """Whether a Triton launch hook (a profiler) is registered: launches then go through
    Triton's own path, which calls it."""
    hook = _KNOBS.launch_enter_hook if _KNOBS is not None else None
    return hook is not None and getattr(hook, "calls", True)


def _fast_path(c: Call, values: dict, how: tuple = (-1, None, None)):
    """A plan's fast paths: ``(fast, guarded)``, two generated functions from the call's
    arguments straight to the compiled kernel's launcher, or ``(None, None)`` where the plan
    does not qualify (``guarded`` alone may be None).

    A plan's direct launches (see :func:`launch`) still spend most of a small call's host time
    re-binding the arguments into a :class:`Call`, building the pointer tuple and allocating
    through the generic helpers. Everything but the tensors, the float params and the outputs
    is fixed by the plan's signature, so ``fast(values)``, taken once the signature matched,
    reads ``values`` in the kernel's argument order (inputs, then each param's value and
    pointer, then outputs: the order scangen.render gives every kernel), allocates the outputs
    and calls the launcher with the plan's integers and constants. It is built after the plan's
    first direct launch and used only if, on that call's own arguments, it reproduces that
    launch's argument tuple exactly. Look-back calls get their workspace as the general path
    does (:func:`lookback_workspace`: one per stream, or one per capture and stream);
    tensor params are expanded to their target per call, as :meth:`Call.bind` does (so calls
    through the custom op, autograd and torch.compile, whose params are 0-dim tensors, take the
    fast path too). Plans that re-bind anything more stay on the general path: inputs or params
    that must be copied, float64 (float params travel as new tensors).

    ``guarded(values, time_dim, outputs, backend)`` (``how``: this call's last three) is tried
    first on an op's next call (:func:`call`), before any signature is built: it checks the
    same things the signature holds, more cheaply (see :func:`_guarded`), and returns ``_MISS``
    where they differ.
    It passes the tensors' addresses to the launcher as integers, read once for the alignment
    check, so the launcher asks neither the tensors nor the driver about them again."""
    launches = c.kernels.pop("seen", None)  # None: another thread took it first
    if launches is None or len(launches) != 1:  # the fast path makes one launch per call
        return None, None
    kernel, grid, seen, meta = launches[0]
    entry = c.kernels.get(kernel)
    if entry is None or c.copied or c.acc == torch.float64:
        return None, None
    op = c.op
    slots, env = [], {"_rt": sys.modules[__name__], "_nan": float("nan")}
    for i in op.inputs:  # present inputs are passed as given (no copies: checked above)
        slots.append(f"v[{i.name!r}]" if i.name in c.tensors else "None")
    bind = {name: (kind, arg) for name, kind, arg in c.bind_params}
    for k, p in enumerate(op.params):  # (value, pointer) each, as runtime.param_ptrs
        kind, arg = bind[p.name]
        if kind == 2:  # a tensor, expanded to its target (a view: no copies, checked above)
            env[f"_t{k}"] = c.ptargets[p.name]
            slots += ["0.0", f"v[{arg!r}].expand(_t{k})"]
        elif kind == 1:  # a float of this call
            slots += [f"float(v[{arg!r}])", "None"]
        else:  # fixed by the signature
            env[f"_p{k}"] = arg
            slots += [f"_p{k}", "None"]
    outs = {n: f"_o{k}" for k, n in enumerate(c.requested)}
    slots += [outs.get(o, "None") for o in op.outputs]
    if c.config.family == "lookback":  # the workspace follows the outputs
        words = c.kernels.get("lb_words")
        if words is None:
            return None, None
        plan = c._clone()  # the plan's constants only: no tensors of this call kept alive
        plan.tensors, plan.params, plan.outs = {}, {}, {}
        env.update(_workspace=lookback_workspace, _plan=plan, _cfg=c.config, _words=words)
        slots.append("_workspace(_plan, _cfg, _words)")
    tail = (*seen[len(slots):], *meta.values())
    if len(seen) < len(slots) or any(isinstance(x, torch.Tensor) for x in tail):
        return None, None
    run, function, packed, stream_of, device, _ = entry
    env.update(_run=run, _function=function, _packed=packed, _stream=stream_of, _device=device,
               _g0=grid[0], _g1=grid[1], _g2=grid[2], _tail=tail, _dtype=c.out_dtype,
               _empty_like=torch.empty_like, _empty=torch.empty, _shape=c.full_shape,
               _dev=c.device)
    alloc = (f"_empty_like(v[{c.proto!r}], dtype=_dtype)" if c.proto is not None
             else "_empty(_shape, dtype=_dtype, device=_dev)")
    names = [outs[n] for n in c.requested]
    ret = names[0] if c.single else f"({', '.join(names)},)"
    body = [
        *[f"    {o} = {alloc}" for o in names],
        "    if _rt.POISON_OUTPUTS:",
        *[f"        {o}.fill_(_nan)" for o in names],
        "    _run(_g0, _g1, _g2, _stream(_device), _function, _packed, None, None,",
        "         None, {slots}, *_tail)",
        f"    return {ret}",
    ]
    src = "\n".join(["def fast(v):", *body]).replace("{slots}", ", ".join(slots))
    exec(compile(src, f"<scangen fast path: {op.name}>", "exec"), env)
    fast = env["fast"]
    # the same arguments as the launch just made, for this call's values and outputs?
    mine = eval(compile(f"({', '.join(slots)},)", "<scangen fast path check>", "eval"),
                {**env, "v": values, **{outs[n]: o for n, o in c.outs.items()}})
    same = all(a is b or (type(a) is float and a == b) or _same_view(a, b)
               for a, b in zip(mine, seen))
    if not same:
        return None, None
    return fast, _guarded(c, values, how, slots, names, body, env)


def _guarded(c: Call, values: dict, how: tuple, slots: list, outs: list, body: list, env: dict):
    """The guarded fast path of :func:`_fast_path`, or None where torch has no C check of
    tensor metadata, or the plan's tensors are not all 16-byte aligned, or one of them
    requires a gradient."""
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
    env = {**env, "_check": check.check, "_MISS": _MISS, "_ENV": ENV}
    x = {n: f"_x{k}" for k, n in enumerate(tensors)}
    # everything _signature puts in the key, in the same terms
    conds = ["td != _td", "outputs != _outputs", "backend != _backend",
             f"_ENV['SCANGEN_BACKEND'] != {ENV['SCANGEN_BACKEND']!r}",
             f"_ENV['SCANGEN_FAMILY'] != {ENV['SCANGEN_FAMILY']!r}"]
    env["_td"], env["_outputs"], env["_backend"] = how  # the call's time_dim, outputs, backend
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
             "        return _MISS",
             *[f"    {x[n]} = v[{n!r}]" for n in tensors],
             f"    if not _check({', '.join(x.values())}):",
             "        return _MISS",
             *[f"    {a} = {x[n]}.data_ptr()" for a, n in zip(ptrs, tensors)],
             f"    if ({' | '.join(ptrs)}) & 15:",
             "        return _MISS"]
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


try:  # torch's C check of tensor metadata (TorchDynamo's former tensor guard)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:
    _TensorGuards = None


def _same_view(a, b) -> bool:
    """Two tensors that address the same elements the same way (a param's expand(), made
    again)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and (a.data_ptr(), a.shape, a.stride(), a.dtype, a.device)
            == (b.data_ptr(), b.shape, b.stride(), b.dtype, b.device))


def shift_group(c: Call, cfg) -> int:
    """Steps per group of the register shift (template option ``input_shift="split"``): the
    steps each thread holds of a ``[BLOCK_N, BLOCK_T]`` tile in Triton's coalesced layout, so
    that taking ``x[t +- 1]`` from the aligned tile stays within each thread's registers. That
    layout gives each thread one 16-byte vector of the narrowest ``[N, T]`` tensor, capped by
    the tile's elements per thread; strided time (time-major buffers) gives one step."""
    nt = [(c.tensors[n], c.strides[n]) for n in c.tensors if c.strides[n][2] != 0]
    nt += [(o, c.out_strides[n]) for n, o in c.outs.items()]
    if any(st[2] != 1 for _, st in nt):
        return 1
    # Triton vectorises only what it can prove 16-byte aligned: pointers and row strides that
    # its launcher specialised as multiples of 16 (else every load is scalar: one step a thread)
    if any(t.data_ptr() % 16 or st[0] % 16 or st[1] % 16 for t, st in nt):
        return 1
    return layout_steps(min(t.element_size() for t, _ in nt), cfg.block_n, cfg.block_t,
                        cfg.num_warps)


def layout_steps(itemsize: int, block_n: int, block_t: int, num_warps: int) -> int:
    """Consecutive steps a thread holds of a ``[block_n, block_t]`` tile in Triton's coalesced
    layout when the narrowest tensor has ``itemsize`` bytes: one 16-byte vector of it, capped by
    the tile's elements per thread and by the chunk."""
    return max(1, min(16 // itemsize, block_n * block_t // (32 * num_warps), block_t))


def even(c: Call, cfg) -> bool:
    """Whether every ``[BLOCK_N, BLOCK_T]`` tile of the call is full (rows a multiple of
    ``BLOCK_N``, T of ``BLOCK_T``): the kernels then drop their bounds masks. Never for the
    persist family, whose programs load an item past their last one (masked off by rows)."""
    return (cfg.family != "persist" and (c.R1 * c.R2) % cfg.block_n == 0
            and c.T % cfg.block_t == 0)


def k_dense(c: Call, cfg) -> bool:
    """Whether the sums over the trailing axis may address ``[N, T, K]`` inputs as dense blocks
    of ``BLOCK_K == K`` contiguous elements per step: offsets ``t * BLOCK_K + k``, whose
    alignment Triton can prove, give vector loads (``t * K_stride + k`` with a runtime stride
    gives scalar ones)."""
    ntk = [c.strides[n] for n in c.tensors if len(c.strides[n]) == 4]
    return bool(ntk) and c.K == cfg.block_k and all(st == c.K and sk == 1
                                                     for _, _, st, sk in ntk)


PERSISTENT_PER_SM = 4  # programs per SM of the persist family's kernels


def persistent_programs(c: Call) -> int:
    """Programs of a persist-family kernel (scangen.config): a few per SM on a
    GPU; three on the CPU, so that the interpreter runs programs that stride over tiles."""
    if c.device.type != "cuda":
        return 3
    from .config import _sm_count
    return PERSISTENT_PER_SM * _sm_count(c.device.index or 0)


def lookback_workspace(c: Call, cfg, n_words: int):
    """The look-back family's workspace: an int64 call counter (tickets), then two halves of
    ``n_words`` arrays of aggregate / inclusive-state words (three per scan, seven per joint
    pair), one word per (row, chunk), made all-one bits once (the counter reads -1, every word
    "not written yet"). Each call works in one half and resets the other for the next call (see
    the kernel), so a plan keeps its workspace across calls, one per CUDA stream (calls on two
    streams may run at once), and a call costs no fill. Under CUDA-graph capture see
    :func:`_captured_workspace`."""
    stream = 0
    if c.device.type == "cuda":
        stream = _raw_stream(c.device.index or 0)
        if torch.cuda.is_current_stream_capturing():
            return _captured_workspace(c, cfg, n_words, stream)
    kept = c.kernels.setdefault("workspaces", {})
    ws = kept.get(stream)
    if ws is None:
        if len(kept) >= MAX_WORKSPACE_STREAMS:  # many short-lived streams: forget the oldest
            del kept[next(iter(kept))]
        ws = kept[stream] = _new_workspace(c, cfg, n_words)
        c.kernels["lb_words"] = n_words  # for the plan's fast path (new streams)
    if "spare_ready" not in c.kernels and c.device.type == "cuda":
        _spare(c, cfg, n_words)
    return ws


def _spare(c: Call, cfg, n_words: int) -> None:
    """An eager call's part in keeping a spare workspace for the plan's next capture: make one
    (filled on this stream, an event recorded after the fill) where there is none, else mark it
    ready once its event has completed, outside any capture, so that a graph never replays
    before the spare's fill is done, whatever stream it replays on."""
    k = c.kernels
    spare = k.get("spare")
    if spare is None:
        if _HELD[0] + 4 * _workspace_int32s(c, cfg, n_words) <= MAX_HELD_BYTES:
            ws = _new_workspace(c, cfg, n_words)
            k["spare"] = (ws, torch.cuda.current_stream(c.device).record_event())
    elif spare[1].query():
        k["spare_ready"] = True


def _captured_workspace(c: Call, cfg, n_words: int, stream: int):
    """The workspace of a call under CUDA-graph capture. The calls of one plan on one stream of
    one capture (stream order: as eager calls on one stream) share one workspace, which the
    graph's replays advance as calls do. It is the plan's spare if an earlier eager call made
    one whose fill has completed (nothing to fill in the graph; the spare is then kept for the
    life of the process, since the graph writes it on every replay, and never handed to
    another capture, since two graphs may replay at once), else a fresh one filled inside the
    graph (once a replay, not once a call). Without the capture's id (the driver's
    ``cuStreamGetCaptureInfo``), every call makes a fresh one filled in the graph."""
    capture = _capture_id(stream)
    if capture is None:
        return _new_workspace(c, cfg, n_words)
    k = c.kernels
    held = k.get("captured")
    if held is None or held[0] != capture:  # this capture's first call of the plan
        held = k["captured"] = (capture, {})
    ws = held[1].get(stream)
    if ws is None:
        if k.pop("spare_ready", False):
            ws = k.pop("spare")[0]
            _HELD[0] += ws.numel() * ws.element_size()
            _HELD.append(ws)
        else:
            ws = _new_workspace(c, cfg, n_words)
        held[1][stream] = ws
    return ws


# Spares handed to captures, kept for the life of the process (after the byte count): a graph
# keeps writing the one it was captured with. Plans stop making spares beyond this many bytes.
_HELD: list = [0]
MAX_HELD_BYTES = 64 << 20


def _capture_id(stream: int):
    """The id of the capture in progress on ``stream`` (a raw CUDA stream handle), or None where
    the driver does not say."""
    fn = _capture_info()
    if fn is None:
        return None
    status, ident = ctypes.c_int(0), ctypes.c_uint64(0)
    try:
        err = fn(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident))
    except (OSError, ctypes.ArgumentError):
        return None
    return ident.value if err == 0 and status.value == 1 else None  # 1: capture active


@functools.lru_cache(maxsize=None)
def _capture_info():
    """The driver's cuStreamGetCaptureInfo (stream, status*, id*), or None."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(lib)
        except OSError:
            continue
        for name, extra in (("cuStreamGetCaptureInfo_v2", 3), ("cuStreamGetCaptureInfo", 0)):
            fn = getattr(cuda, name, None)
            if fn is None:
                continue
            fn.restype = ctypes.c_int
            if extra:  # its (graph, dependencies, count) out-parameters are optional: NULL
                return lambda s, st, i, fn=fn: fn(s, st, i, None, None, None)
            return fn
    return None


MAX_WORKSPACE_STREAMS = 8
# The current stream's handle: torch's raw accessor (what Triton's launcher uses), a third of the
# cost of torch.cuda.current_stream(device).cuda_stream.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                      lambda index: torch.cuda.current_stream(index).cuda_stream)


# The look-back's window (predecessors read per round trip), H200 sweep of the eighth round
# (bench/NOTES.md, results/h200-2026-11-30-h-window-probe.txt): 32 where a row has 32 chunks or
# fewer (64x65536 in 2048-step chunks: less to read and reduce than 128), 512 on 8 warps (1x1048576
# in 8192-step chunks: 128 predecessors in one window, two words a thread), else 128. The wide
# window is for look-backs of one scan (3 words a predecessor): a joint look-back reads 7, and
# masked GAE 1x1048576 measured 12.7 us with 512 against 10.9 with 128 (ninth round,
# results/h200-2026-11-30-i-lookback-probe.txt). Look-backs over a trailing axis (K > 1,
# Retrace: chunks of 1024 / K steps, thousands a row) read 32: in two probes of the same round,
# 64x65536 210 -> 190 us, 1x1048576 111 -> 103, and 8x262144 141 -> 148 (slower).
LB_SMALL_WINDOW = 32
LB_WINDOW = 128
LB_WIDE_WINDOW = 512
LB_WIDE_WORDS = 3  # words a predecessor, at most, for the wide window


def lookback_window(c: Call, cfg, words: int = 3) -> int:
    """Predecessors the look-back reads per round trip (the kernels' LB_WINDOW); ``words``: the
    words it reads per predecessor (3 per scan, 7 per joint pair). A constexpr of every kernel:
    fixed for the other families, which do not use it, so that a new T does not make Triton
    compile them again."""
    if cfg.family != "lookback":
        return LB_WINDOW
    if _row_chunks(c, cfg) <= LB_SMALL_WINDOW or cfg.block_k > 1:
        return LB_SMALL_WINDOW
    return LB_WIDE_WINDOW if cfg.num_warps >= 8 and words <= LB_WIDE_WORDS else LB_WINDOW


# Rows of more chunks than this wait on the nearest predecessor's aggregate, one word at a time,
# before reading whole windows (the kernels' LB_SPIN). Same A/B sweep: Retrace 1x1048576, 8192
# chunks a row, 110 us with the wait against 120 without; Retrace 8x262144, 2048 chunks, 158.5
# against 140.7; every other few-row call (32-128 chunks) faster without it.
LB_SPIN_CHUNKS = 4096


def lookback_spin(c: Call, cfg) -> bool:
    """Whether the look-back first waits on its nearest predecessor alone (LB_SPIN; False for
    the other families, as in lookback_window)."""
    return cfg.family == "lookback" and _row_chunks(c, cfg) > LB_SPIN_CHUNKS


# Look-back grids of at least this many programs per SM take each program's chunk from its id
# (the kernels' LB_PID), not from a ticket of the atomic counter, whose round trip every load of
# the program waited on. H200, us, ticket -> id (results/h200-2026-11-30-j-ab-probe.txt and
# -j-probe.txt): 2048 programs (64x65536 in 2048-step chunks, 15.5 per SM) GAE 32.4 -> 26.8,
# V-trace 58.7 -> 43.6; Retrace 64x65536 and 8x262144 (thousands of 128-step chunks) 189.6 ->
# 164.0 and 148.1 -> 125.4. With every program resident at once the ids lose: GAE 8x262144
# (3.9 per SM) 12.6 -> 16.1, discounted returns 1x1048576 (one per SM) 8.8 -> 9.9.
LB_PID_PROGRAMS_PER_SM = 8


def lookback_pid(c: Call, cfg) -> bool:
    """Whether look-back programs take their chunks in the order of their ids (LB_PID) rather
    than from tickets; False for the other families and off the GPU (as in lookback_window)."""
    if cfg.family != "lookback" or c.device.type != "cuda":
        return False
    from .config import _sm_count
    return lookback_tickets(c, cfg) >= LB_PID_PROGRAMS_PER_SM * _sm_count(c.device.index or 0)


def lookback_tickets(c: Call, cfg) -> int:
    """The look-back kernel's grid: one program per ticket (row, chunk)."""
    return c.R1 * c.R2 * _row_chunks(c, cfg)


def _row_chunks(c: Call, cfg) -> int:
    """Chunks of BLOCK_T steps in a row."""
    return -(-c.T // cfg.block_t)


def _new_workspace(c: Call, cfg, n_words: int):
    # One int32 buffer, carved into the counter and the arrays inside the kernel: the host makes
    # one tensor (each tensor view costs microseconds of Python).
    return torch.full((_workspace_int32s(c, cfg, n_words),), -1, dtype=torch.int32,
                      device=c.device)


def _workspace_int32s(c: Call, cfg, n_words: int) -> int:
    """The workspace's size in int32 words: the int64 counter, then two halves of ``n_words``
    arrays of one word (of the accumulation dtype) per ticket."""
    size = c.acc.itemsize // 4  # int32 words per word of the accumulation dtype
    return 2 + 2 * n_words * size * lookback_tickets(c, cfg)


def param_ptrs(c: Call, dummy) -> tuple:
    """The per-call kernel arguments of every param, in order: (scalar value, pointer) each; a
    tensor param passes 0.0 and itself, a float passes itself and ``dummy``."""
    out = ()
    for v in c.params.values():
        out += (0.0, v) if isinstance(v, torch.Tensor) else (v, dummy)
    return out
