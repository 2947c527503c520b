"""The backward pass of an op, derived from its IR with SymPy and compiled like any spec.

The adjoint of an affine scan is an affine scan in the opposite direction. For a reverse scan
``A_t = alpha_t + beta_t A_{t+1}`` with loss L, ``g_t = dL/dA_t`` obeys
``g_t = c_t + beta_{t-1} g_{t-1}`` (forward in time), where ``c_t`` gathers what ``A_t`` feeds
directly: the outputs at t (and at t-1 through ``next(A)``) and the alpha/beta of later scans in a
chain. Then ``dL/dalpha_t = g_t`` and ``dL/dbeta_t = g_t A_{t+1}``, and the gradient of every input
is the chain rule through alpha, beta and the outputs, each derivative taken by SymPy. A term that
reads an input at a neighbouring step sends its gradient to that step (a shift of the term).

:func:`adjoint_ir` builds that backward computation as an IR (inputs: the forward inputs, the
forward states ``st__<A>`` and the output gradients ``gy__<y>``; outputs: ``d__<x>`` per input and
param), which the ordinary pipeline turns into a fused kernel and a torch path. Specs whose
gradient this cannot express (``sum``/``gather`` over a trailing axis, or an input read on the
far side of the carry) return None and fall back to differentiating the torch path.
"""
from __future__ import annotations

import dataclasses

import sympy

from .expr import Gather, Ge, KSum, Le, Present, Where
from .ir import IR, IRInput, IROutput, IRScan
from ..abi import (RESERVED_PREFIXES, SHIFT_OF, input_grad, offset_of, output_grad,
                   state_grad, state_output)
from .plan import lower_shifts

class Unsupported(Exception):
    pass


def with_states(ir: IR) -> IR:
    """The forward IR plus one output per scan state (``st__A = A``), stored only on request."""
    extra = tuple(IROutput(state_output(s.name), sympy.Symbol(s.name, real=True),
                           "the scan state, saved for the backward pass") for s in ir.scans)
    return dataclasses.replace(ir, outputs=ir.outputs + extra)


class _Shifter:
    def __init__(self, per_step: set[str]):
        self.per_step = per_step

    def __call__(self, expr, delta: int):
        """``expr`` evaluated ``delta`` steps away; positions outside the window read 0."""
        if delta == 0:
            return expr
        mapping = {}
        for sym in expr.free_symbols:
            base, off = offset_of(sym.name)
            if base in self.per_step:
                if abs(off + delta) > 2:
                    raise Unsupported("shift beyond two steps")
                mapping[sym] = sympy.Symbol(f"{base}__{SHIFT_OF[off + delta]}".rstrip("_"),
                                            real=True) if off + delta else sympy.Symbol(base,
                                                                                       real=True)
        shifted = expr.xreplace(mapping)
        edge = "is_first" if delta < 0 else "is_last"
        if abs(delta) == 2:  # t-2 (t+2) exists only from t >= 2 (t <= T-3)
            near = sympy.Symbol(f"{edge}__{'prev' if delta < 0 else 'next'}", real=True)
            return Where(sympy.Symbol(edge, real=True) + near, 0, shifted)
        return Where(sympy.Symbol(edge, real=True), 0, shifted)


def _select_minmax(expr):
    """min/max as selections, ``where(a >= b, a, b)``: their derivative then sends the whole
    gradient to one argument at a tie (SymPy's Heaviside(0) would send it to none)."""
    def visit(e):
        if not e.args:
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, (sympy.Max, sympy.Min)):
            keep = Ge if isinstance(e, sympy.Max) else Le
            out = args[0]
            for a in args[1:]:
                out = Where(keep(out, a), out, a)
            return out
        return e.func(*args)
    return visit(expr)


def adjoint_ir(ir: IR) -> IR | None:
    try:
        return _adjoint(ir)
    except Unsupported:
        return None


def _adjoint(ir: IR) -> IR:
    reverse = ir.reverse
    sigma = -1 if reverse else 1          # where the adjoint looks for the carry
    carry = -sigma                        # offset of the forward state's carry (A_{t+1} if reverse)
    floats = [i for i in ir.inputs if i.kind == "float" and i.shape != "NTK"]
    if any(i.shape == "NTK" for i in ir.inputs):
        raise Unsupported("trailing-axis inputs")
    states = [s.name for s in ir.scans]
    per_step = {i.name for i in ir.inputs if i.shape != "N"} | {p.name for p in ir.params}
    per_step |= {"is_first", "is_last"} | {state_output(s) for s in states}
    per_step |= {output_grad(o.name) for o in ir.outputs} | {state_grad(s) for s in states}
    shift = _Shifter(per_step)
    S = lambda n: sympy.Symbol(n, real=True)  # noqa: E731

    def lower(expr):
        e = _select_minmax(lower_shifts(expr, {i.name for i in ir.inputs if i.shape != "N"}
                          | {p.name for p in ir.params} | {"is_first", "is_last"} | set(states)))
        if e.has(Gather, KSum):
            raise Unsupported("sum/gather")
        # forward states become inputs of the backward op (HAS_x stays a plain symbol, which no
        # shift touches, until present(x) is restored at the end)
        rename = {}
        for sym in e.free_symbols:
            base, off = offset_of(sym.name)
            if base in states:
                rename[sym] = S(state_output(base) + (f"__{SHIFT_OF[off]}" if off else ""))
        return e.xreplace(rename)

    def present(e):
        return e.xreplace({sym: Present(S(sym.name[4:])) for sym in e.free_symbols
                           if sym.name.startswith(RESERVED_PREFIXES[0])})

    # (coefficient, expression) pairs: every place a forward quantity enters the loss
    g = {s: S(state_grad(s)) for s in states}
    terms = []
    for s in ir.scans:
        # the forward state on the carry side; past the window's edge it is the carry, init
        far = S("is_last" if reverse else "is_first")
        st_carry = Where(far, lower(s.init), S(state_output(s.name) + f"__{SHIFT_OF[carry]}"))
        terms.append((g[s.name], lower(s.alpha), s.name))
        terms.append((g[s.name] * st_carry, lower(s.beta), s.name))
    grads_in = [IRInput(output_grad(o.name), "float", "NT", 0.0, f"dL/d{o.name}")
                for o in ir.outputs]
    for o in ir.outputs:
        terms.append((S(output_grad(o.name)), lower(o.expr), None))

    def gradient(target: str, selected):
        """Sum of coef * dE/d(target read at offset o), each sent back to the target's step."""
        total = sympy.S.Zero
        for coef, expr, _ in selected:
            for sym in expr.free_symbols:
                base, off = offset_of(sym.name)
                if base == target:
                    d = sympy.diff(expr, sym)
                    if d != 0:
                        total += shift(coef * d, -off)
        return total

    # adjoint scans, last forward scan first: g_k's direct terms use later scans' g (earlier here)
    b_scans = []
    for k in reversed(range(len(states))):
        name = states[k]
        # what reads A_k: the outputs and the alpha/beta of later scans in the chain
        readers = [t for t in terms if t[2] is None or states.index(t[2]) > k]
        direct = gradient(state_output(name), readers)
        beta = shift(lower(ir.scans[k].beta), sigma)
        b_scans.append(IRScan(state_grad(name), present(direct), present(beta), sympy.S.Zero,
                              f"dL/d{name}"))
    for scan in b_scans:  # a state read on the wrong side of the carry cannot be expressed
        for e in (scan.alpha, scan.beta):
            for sym in e.free_symbols:
                base, off = offset_of(sym.name)
                if base.startswith(state_grad("")) and off not in (0, sigma):
                    raise Unsupported("adjoint state on the wrong side")

    outputs = []
    for x in [i.name for i in floats] + [p.name for p in ir.params]:
        d = gradient(x, terms)
        # the carry into the window: dL/dinit_k = beta_k * g_k at the window's far end
        for k, s in enumerate(ir.scans):
            dinit = sympy.diff(lower(s.init), S(x))
            if dinit != 0:
                edge = S("is_last" if reverse else "is_first")
                d += Where(edge, g[s.name] * lower(s.beta) * dinit, 0)
        for sym in d.free_symbols:
            base, off = offset_of(sym.name)
            if base.startswith(state_grad("")) and off not in (0, sigma):
                raise Unsupported("gradient reads the adjoint on the wrong side")
        outputs.append(IROutput(input_grad(x), present(d), f"dL/d{x} per step"))

    st_inputs = [IRInput(state_output(s), "float", "NT", None, f"forward state {s}")
                 for s in states]
    return IR(name=f"{ir.name}_grad", function=f"{ir.function}_grad",
              doc=f"Backward pass of {ir.function} (generated from its spec).",
              direction="forward" if reverse else "reverse",
              inputs=ir.inputs + tuple(st_inputs) + tuple(grads_in), params=ir.params,
              scans=tuple(b_scans), outputs=tuple(outputs),
              signature=("*",) + tuple(i.name for i in ir.inputs)
              + tuple(i.name for i in st_inputs)
              + tuple(i.name for i in grads_in) + tuple(p.name for p in ir.params),
              exclusive=(), returns=tuple(o.name for o in outputs))


__all__ = ["adjoint_ir", "with_states", "state_output", "offset_of"]
