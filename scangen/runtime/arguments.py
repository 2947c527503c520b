"""One call's arguments in canonical form: the checks every backend shares, and the views.

:class:`Call` maps every tensor onto a canonical ``[R1, R2, T]`` index space by strides alone
(no copies): ``R1`` merges the dimensions before the time axis, ``R2`` those after it (trailing
feature dimensions included), so ``[N, T]``, time-major ``[T, N]``, ``[B, N, T]`` and
``[N, T, F]`` all reach a kernel unchanged. The first call of a signature runs every check here;
later calls re-bind new tensors to the same plan (:meth:`Call.bind`) without repeating them.
"""
from __future__ import annotations

import math
import numbers
import operator

import torch

from ..abi import InputInfo, OpInfo, ParamInfo, is_state_output

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FLAG = (torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64) + _FLOAT
_INDEX = (torch.int32, torch.int64)
_DTYPES = {"float": _FLOAT, "flag": _FLAG, "index": _INDEX}
# Tests set this so that every output starts as NaN: an unwritten element cannot pass.
POISON_OUTPUTS = False



def _merge(dims: list[tuple[int, int]]) -> int | None:
    """One stride that walks ``dims`` (size, stride) in row-major order, or None."""
    dims = [(n, s) for n, s in dims if n != 1]
    if not dims:
        return 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return dims[-1][1]


def check_time_dim(fn: str, time_dim) -> int:
    """``time_dim`` as an int: an int or a NumPy integer (what ``operator.index`` takes)."""
    try:
        return operator.index(time_dim)
    except TypeError:
        raise TypeError(f"{fn}(): time_dim must be an int, got {type(time_dim).__name__} "
                        f"{time_dim!r}") from None


def requested(fn: str, op: OpInfo, outputs, public: bool = True) -> tuple:
    """The output names ``outputs`` asks for, checked. ``public``: a user's call, which may name
    the outputs a user sees only (not the scan states the forward stores for its backward,
    which the custom op asks for itself)."""
    if outputs is None:
        return op.returns
    try:
        names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    except TypeError:
        names = (outputs,)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{fn}(): outputs must be an output's name or a sequence of "
                        f"names, got {outputs!r}")
    for name in names:
        if name not in op.outputs or (public and is_state_output(name)):
            available = (o for o in op.outputs if not is_state_output(o))
            raise ValueError(f"{fn}(): outputs: unknown output {name!r} "
                             f"(available: {', '.join(available)})")
    if not names:
        raise ValueError(f"{fn}(): outputs must name at least one output")
    return names


def as_float(fn: str, name: str, v) -> float:
    """The number ``v`` (a real, not a bool: checked by the caller) as a float."""
    try:
        return float(v)
    except OverflowError:
        text = repr(v)
        raise ValueError(f"{fn}(): {name} is out of the range of a float, got "
                         f"{text if len(text) <= 24 else text[:20] + '...'}") from None


def what(v) -> str:
    """How an error names the type of a value that is not what was expected."""
    kind = type(v)
    text = (kind.__name__ if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}")
    if kind.__module__ == "numpy" and hasattr(v, "shape"):
        text += " (torch.from_numpy() wraps a NumPy array without a copy)"
    return text


def choice_code(fn: str, p: ParamInfo, v) -> float:
    """The number a choice param's string stands for (``boundary="ends_at"`` -> 0.0)."""
    table = dict(p.choices)
    if not isinstance(v, str) or v not in table:
        raise ValueError(f"{fn}(): {p.name} must be one of "
                         f"{', '.join(repr(k) for k in table)}, got {v!r}")
    return float(table[v])


def _shape_text(shape, k=None) -> str:
    """``[3, 5]``, or ``[3, 5, K]`` for an [N, T, K] input."""
    return "[" + ", ".join([*map(str, shape), *([k] if k else [])]) + "]"


class Call:
    """One call's arguments in canonical form; shared by every backend."""

    def __init__(self, op: OpInfo, values: dict, time_dim: int, outputs, public: bool = True):
        """``public``: a user's call. The custom op's own calls (``public=False``) also pass
        a choice param as its code (a tensor) and may ask for the scan states."""
        self.op = op
        fn = op.function
        self.fn = fn
        self.public = public
        time_dim = check_time_dim(fn, time_dim)
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
        self.requested = requested(fn, op, outputs, public)

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

    def _param(self, p: ParamInfo, values):
        v = values[p.name]
        if v is None:
            if p.default is None:
                raise TypeError(f"{self.fn}() missing required argument '{p.name}'")
            v = values[p.default] if isinstance(p.default, str) and not p.choices else p.default
            if v is None:
                v = next(q.default for q in self.op.params if q.name == p.default)
        if p.choices and (self.public or not isinstance(v, torch.Tensor)):
            return choice_code(self.fn, p, v)  # the custom op passes the choice's code, a tensor
        if isinstance(v, torch.Tensor):
            return self._tensor_param(p.name, v)
        # any real number but a bool (NumPy's float32 and integers too: a gamma read from a
        # NumPy config is one)
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{self.fn}(): {p.name} must be a float or a tensor broadcastable "
                            f"to {list(self.base_shape)}, got {what(v)}")
        return as_float(self.fn, p.name, v)

    def _scalar(self, v):
        """Kernels take Python floats as fp32 arguments: in float64 a param travels as a 0-dim
        float64 tensor instead (read with stride 0), so it keeps its 53 bits."""
        if self.acc == torch.float64 and not isinstance(v, torch.Tensor):
            return torch.tensor(v, dtype=torch.float64, device=self.device)
        return v

    def _tensor_param(self, name, v):
        if v.layout != torch.strided:
            raise TypeError(f"{self.fn}(): {name} must be a dense (strided) tensor, got "
                            f"{v.layout}")
        if not v.dtype.is_floating_point:
            raise TypeError(f"{self.fn}(): {name} must be a floating-point tensor, got {v.dtype}")
        if v.device != self.device:
            raise ValueError(f"{self.fn}(): '{name}' is on {v.device}, inputs are on {self.device}")
        target = self.base_shape if v.dim() <= len(self.base_shape) else self.full_shape
        try:
            e = v.expand(target)
        except RuntimeError:
            raise ValueError(f"{self.fn}(): {name} has shape {list(v.shape)}, which does not "
                             f"broadcast to {list(target)}") from None
        self.ptargets[name] = target
        c, self.pstrides[name] = self._canon(e, "NT")
        if c is not e:
            self.copied[name] = "NT"
        return c

    # -- shapes and strides --------------------------------------------------------------
    def _shapes(self, infos, time_dim):
        parts = {n: (t.shape[:-1] if infos[n].shape == "NTK" else t.shape)
                 for n, t in self.tensors.items() if infos[n].shape != "N"}
        # the [N, T] inputs set the base rank, the lowest of theirs ([N, T, K] inputs only
        # where there are none); low: the first input of that rank
        plain = [n for n in parts if infos[n].shape == "NT"] or list(parts)
        low = min(plain, key=lambda n: len(parts[n]))
        base_rank = len(parts[low])
        if base_rank < 1:
            raise ValueError(f"{self.fn}(): '{low}' needs a time dimension")
        for n, s in parts.items():  # an [N, T, K] input without its K
            if len(s) < base_rank:
                raise ValueError(f"{self.fn}(): '{n}' has shape {list(self.tensors[n].shape)}, "
                                 f"expected {_shape_text(parts[low], 'K')}")
        if not -base_rank <= time_dim < base_rank:
            raise ValueError(f"{self.fn}(): time_dim={time_dim} is out of range for "
                             f"{base_rank}-dimensional inputs")
        self.td = time_dim % base_rank
        high = max(parts, key=lambda n: len(parts[n]))
        if tuple(parts[high][:base_rank]) != tuple(parts[low]):
            # neither the same shape nor that shape followed by feature dims: name both
            a, b = sorted((low, high), key=list(parts).index)
            raise ValueError(f"{self.fn}(): the shapes of '{a}' {list(self.tensors[a].shape)} "
                             f"and '{b}' {list(self.tensors[b].shape)} do not match (the "
                             f"[N, T] inputs share one shape; float and flag inputs may add "
                             f"trailing feature dims)")
        full = parts[high]
        self.base_shape = tuple(full[:base_rank])
        self.full_shape = tuple(full)
        for n, s in parts.items():
            if tuple(s) != self.full_shape and tuple(s) != self.base_shape:
                k = "K" if infos[n].shape == "NTK" else None
                raise ValueError(f"{self.fn}(): '{n}' has shape {list(self.tensors[n].shape)}, "
                                 f"expected {_shape_text(self.full_shape, k)}"
                                 + (f" or {_shape_text(self.base_shape, k)}"
                                    if self.full_shape != self.base_shape else ""))
        ks = {n: self.tensors[n].shape[-1] for n in parts if infos[n].shape == "NTK"}
        first = next(iter(ks.values()), None)
        if any(k != first for k in ks.values()):  # compared, not hashed: K may be a SymInt
            raise ValueError(f"{self.fn}(): the [N, T, K] inputs differ in K, their last dim: "
                             + ", ".join(f"'{n}' has {k}" for n, k in ks.items()))
        self.K = first if ks else 1
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
        self.strides, self.copied = {}, {}  # copied: name -> role, for bind() to copy again
        for n, t in self.tensors.items():
            self.tensors[n], self.strides[n] = self._canon(t, infos[n].shape)
            if self.tensors[n] is not t:
                self.copied[n] = infos[n].shape

    def _strides(self, t, role):
        """``(s1, s2, st[, sk])``: one stride for the rows before the time dim, one for those
        after it, the time dim's and K's; None where ``t``'s strides cannot merge so."""
        dims = list(zip(t.shape, t.stride()))
        k = [dims.pop()[1]] if role == "NTK" else []
        if role == "N":
            dims.insert(self.td, (1, 0))
        dims += [(n, 0) for n in self.full_shape[len(dims):]]  # feature dims it broadcasts over
        s1 = _merge(dims[:self.td])
        s2 = _merge(dims[self.td + 1:])
        if s1 is None or s2 is None:
            return None
        return (s1, s2, dims[self.td][1] if role != "N" else 0, *k)

    def _canon(self, t, role):
        """``(t, strides)`` (:meth:`_strides`); ``t`` is copied only when its strides cannot
        merge (:meth:`_dense`)."""
        st = self._strides(t, role)
        if st is None:
            t = self._dense(t, role)
            st = self._strides(t, role)
        return t, st

    def _dense(self, t, role):
        """A copy of ``t`` whose strides merge: contiguous, or, where the feature dims it
        broadcasts over lie between row dims (a [T, N] flag beside [T, N, F] inputs, time
        first), expanded over them as well."""
        c = t.contiguous()
        if self._strides(c, role) is not None:
            return c
        full = list(self.full_shape)
        if role == "N":
            del full[self.td]
        k = [t.shape[-1]] if role == "NTK" else []
        lead = t.shape[:-1] if k else t.shape
        padded = t.reshape(*lead, *[1] * (len(full) - len(lead)), *k)
        return padded.expand(*full, *k).contiguous()

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
        t = self.clone()
        t.tensors, t.params, t.outs = {}, {}, {}
        t.bind_names = tuple(self.strides)
        t.bind_plain = not (set(self.copied) & set(self.strides))
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

    def clone(self) -> "Call":
        """A shallow copy: the plan's strides, launch plan and the like are shared."""
        c = object.__new__(Call)
        c.__dict__ = self.__dict__.copy()  # a third of the cost of update() into an empty dict
        return c

    def bind(self, values: dict) -> "Call":
        """This plan applied to new arguments with the same shapes, strides, dtypes, devices
        and param types (see :func:`_signature`): no checks or stride work is repeated."""
        c = self.clone()
        if self.bind_plain:
            c.tensors = {n: values[n] for n in self.bind_names}
        else:
            c.tensors = {n: self._dense(values[n], self.copied[n]) if n in self.copied
                         else values[n] for n in self.bind_names}
        c.params = params = {}
        f64 = self.acc == torch.float64
        for name, kind, arg in self.bind_params:
            if kind == 0:  # fixed by the signature (converted once)
                params[name] = arg
            elif kind == 1:  # a float of this call, given or taken from another param
                params[name] = self._scalar(float(values[arg])) if f64 else float(values[arg])
            else:  # a tensor, expanded to its target
                v = values[arg].expand(self.ptargets[name])
                params[name] = self._dense(v, "NT") if name in self.copied else v
        c.allocate()
        return c

    def result(self):
        outs = tuple(self.outs[n] for n in self.requested)
        return outs[0] if len(outs) == 1 and self.single else outs


def _check_tensor(fn: str, info: InputInfo, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}(): '{info.name}' must be a torch.Tensor, got {what(t)}")
    if t.layout != torch.strided or t.is_nested:
        raise TypeError(f"{fn}(): '{info.name}' must be a dense (strided) tensor, got "
                        f"{'a nested tensor' if t.is_nested else t.layout}")
    allowed = _DTYPES[info.kind]
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{fn}(): '{info.name}' ({info.kind}) must have dtype {names}; "
                        f"got {str(t.dtype).replace('torch.', '')}")
