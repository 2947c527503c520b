"""A third, independent implementation of a scangen IR: a plain float64 loop over time.

It reads the IR's SymPy expressions (``scangen.compiler.pipeline.to_ir(spec)``) and evaluates them
numerically, one step at a time, with its own implementation of every construct of the spec
language, taken from the documented meaning in :mod:`scangen.compiler.expr` and :mod:`scangen.compiler.ir`:

* ``next(e, fill)`` is ``e`` at step ``t+1``, and ``fill`` at the last step ``t = T-1``;
  ``prev(e, fill)`` is ``e`` at ``t-1``, and ``fill`` at the first step ``t = 0``;
* ``where(c, a, b)`` is ``a`` where ``c != 0``, else ``b`` (element-wise select: a NaN or an
  infinity in the branch not taken does not leak through);
* comparisons (only inside ``where``) are 1 where they hold, else 0;
* ``sum(e)`` sums ``e`` over the trailing axis of the ``[N, T, K]`` inputs it reads;
* ``gather(x, i)`` is ``x[n, t, i[n, t]]``, and NaN where ``i`` is outside ``[0, K)``;
* ``present(x)`` is 1 when the optional input ``x`` was passed, else 0; an absent optional
  input reads as its default everywhere;
* ``is_first`` / ``is_last`` are 1 at ``t = 0`` / ``t = T-1``, else 0;
* a scan is ``S_t = alpha_t + beta_t * S_{t+1}`` (reverse) or ``S_{t-1}`` (forward), with
  ``S_T`` (reverse) or ``S_{-1}`` (forward) equal to ``init``; scans run in order, each
  fully before the next, so a later scan and the outputs see every step of earlier states.

Deliberately independent of the code generator: it imports nothing from ``scangen.compiler.plan``,
``scangen.compiler.render``, ``scangen.compiler.printers`` or ``scangen.runtime``; the expression classes come
from :mod:`scangen.compiler.expr`, where they are defined.
"""
from __future__ import annotations

import math

import numpy as np
import sympy

from scangen.compiler.expr import Gather, KSum, Next, Prev, Present, Where, Indicator

_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}


def _np(x, dtype=np.float64):
    """A torch tensor, numpy array or number as a float64 numpy value."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=dtype)


class _Env:
    """Values of every symbol, as ``[N]`` arrays at one step (``[N, K]`` inside ``sum``)."""

    def __init__(self, ir, inputs: dict, params: dict):
        self.ir = ir
        self.present = {i.name: inputs.get(i.name) is not None for i in ir.inputs}
        self.shape = {i.name: i.shape for i in ir.inputs}
        self.kind = {i.name: i.kind for i in ir.inputs}
        required = [n for n in self.present if self.present[n] and self.shape[n] != "N"]
        if not required:
            raise ValueError("need at least one [N, T] or [N, T, K] input")
        first = _np(inputs[required[0]])
        self.N, self.T = first.shape[0], first.shape[1]
        self.K = 1
        self.values = {}
        for i in ir.inputs:
            v = inputs.get(i.name)
            if v is None:
                if i.default is None:
                    raise TypeError(f"missing required input {i.name!r}")
                continue
            arr = _np(v, np.int64 if i.kind == "index" else np.float64)
            if i.shape == "NTK":
                self.K = arr.shape[2]
            self.values[i.name] = arr
        self.params = {}
        for p in ir.params:
            self.params[p.name] = self._param(p, params)
        self.states: dict[str, np.ndarray] = {}

    def _param(self, p, params):
        v = params.get(p.name)
        if v is None:
            if p.default is None:
                raise TypeError(f"missing required param {p.name!r}")
            v = p.default
            if isinstance(v, str) and not p.choices:  # the name of another param
                other = params.get(v)
                v = other if other is not None else next(q.default for q in self.ir.params
                                                          if q.name == v)
        if p.choices:
            return float(dict(p.choices)[v])
        if isinstance(v, (int, float)):
            return float(v)
        return np.broadcast_to(_np(v), (self.N, self.T))  # a tensor param

    # -- symbols -------------------------------------------------------------------------
    def symbol(self, name: str, t: int, k: int | None):
        N = self.N
        if name == "is_first":
            return np.full(N, 1.0 if t == 0 else 0.0)
        if name == "is_last":
            return np.full(N, 1.0 if t == self.T - 1 else 0.0)
        if name in self.states:
            return self.states[name][:, t]
        if name in self.params:
            v = self.params[name]
            return np.full(N, v) if isinstance(v, float) else v[:, t].copy()
        if name in self.shape:
            shape = self.shape[name]
            if not self.present[name]:
                default = next(i.default for i in self.ir.inputs if i.name == name)
                return np.full(N, float(default))
            v = self.values[name]
            if shape == "N":
                return v.astype(np.float64)
            if shape == "NT":
                return v[:, t].astype(np.float64)
            if k is None:
                raise ValueError(f"[N, T, K] input {name!r} read outside sum()/gather()")
            return v[:, t, k]
        raise KeyError(f"unknown symbol {name!r}")

    # -- expressions ----------------------------------------------------------------------
    def ev(self, e, t: int, k: int | None = None) -> np.ndarray:
        """``e`` at step ``t`` (and trailing index ``k`` inside a sum), as an ``[N]`` array."""
        N = self.N
        if isinstance(e, sympy.Symbol):
            return self.symbol(e.name, t, k)
        if e is sympy.S.Exp1:
            return np.full(N, math.e)
        if e.is_Number:
            if e in (sympy.S.ComplexInfinity, sympy.S.NaN):
                return np.full(N, np.nan)
            return np.full(N, float(e))
        if isinstance(e, Next):
            if t == self.T - 1:
                return self.ev(e.args[1], t, k)
            return self.ev(e.args[0], t + 1, k)
        if isinstance(e, Prev):
            if t == 0:
                return self.ev(e.args[1], t, k)
            return self.ev(e.args[0], t - 1, k)
        if isinstance(e, Present):
            return np.full(N, 1.0 if self.present[e.args[0].name] else 0.0)
        if isinstance(e, KSum):
            return sum((self.ev(e.args[0], t, kk) for kk in range(self.K)), np.zeros(N))
        if isinstance(e, Gather):
            src, idx = e.args[0].name, e.args[1].name
            i = self.values[idx][:, t]
            ok = (i >= 0) & (i < self.K)
            vals = self.values[src][np.arange(N), t, np.clip(i, 0, self.K - 1)]
            return np.where(ok, vals, np.nan)
        if isinstance(e, Where):
            c = self.ev(e.args[0], t, k)
            return np.where(c != 0, self.ev(e.args[1], t, k), self.ev(e.args[2], t, k))
        if isinstance(e, Indicator):
            a, b = (self.ev(x, t, k) for x in e.args)
            return _CMP[e.op](a, b).astype(np.float64)
        args = [self.ev(a, t, k) for a in e.args]
        if isinstance(e, sympy.Add):
            return sum(args[1:], args[0])
        if isinstance(e, sympy.Mul):
            out = args[0]
            for a in args[1:]:
                out = out * a
            return out
        if isinstance(e, sympy.Pow):
            base, ex = args
            if e.args[1] == sympy.Rational(1, 2):
                return np.sqrt(base)
            return np.power(base, ex)
        if isinstance(e, sympy.exp):
            return np.exp(args[0])
        if isinstance(e, sympy.log):
            return np.log(args[0])
        if isinstance(e, sympy.Abs):
            return np.abs(args[0])
        if isinstance(e, sympy.re):  # every value is real (SymPy may not know it)
            return args[0]
        if isinstance(e, sympy.im):
            return np.zeros(N)
        if isinstance(e, sympy.Min):
            return np.minimum.reduce(args)
        if isinstance(e, sympy.Max):
            return np.maximum.reduce(args)
        raise NotImplementedError(f"ir_eval: no rule for {type(e).__name__}: {e}")


def evaluate(ir, inputs: dict, params: dict | None = None, updates: dict | None = None,
             outputs=None) -> dict[str, np.ndarray]:
    """Every state and output of ``ir`` as float64 ``[N, T]`` arrays.

    ``inputs`` maps input names to ``[N, T]`` / ``[N]`` / ``[N, T, K]`` arrays or tensors
    (absent or None: the default of an optional input); ``params`` maps param names to numbers,
    choice strings or ``[N, T]``-broadcastable tensors. ``updates`` optionally maps a scan name
    to its *unsplit* update expression (SymPy, in the state symbol): that scan is then stepped
    with ``S_t = update(S = S_carry)`` instead of the IR's ``alpha + beta * S``, which checks the
    affine split itself. The result holds each scan's state under its name and each output.
    """
    params = dict(params or {})
    env = _Env(ir, dict(inputs), params)
    N, T = env.N, env.T
    order = range(T - 1, -1, -1) if ir.direction == "reverse" else range(T)
    with np.errstate(all="ignore"):
        for scan in ir.scans:
            # The carry into the window: init, which only reads numbers and [N] inputs.
            carry = env.ev(scan.init, order[0]) + np.zeros(N)
            own = np.full((N, T), np.nan)
            update = (updates or {}).get(scan.name)
            for t in order:
                if update is not None:
                    # Bind the state symbol to the carry for this one step.
                    env.states[scan.name] = np.full((N, T), np.nan)
                    env.states[scan.name][:, t] = carry
                    value = env.ev(update, t)
                    del env.states[scan.name]
                else:
                    value = env.ev(scan.alpha, t) + env.ev(scan.beta, t) * carry
                own[:, t] = value
                carry = own[:, t].copy()
            env.states[scan.name] = own  # from here on visible to later scans and outputs
        result = {name: arr.copy() for name, arr in env.states.items()}
        wanted = outputs if outputs is not None else [o.name for o in ir.outputs]
        for o in ir.outputs:
            if o.name not in wanted:
                continue
            result[o.name] = np.stack([env.ev(o.expr, t) + np.zeros(N) for t in range(T)],
                                      axis=1)
    return result
