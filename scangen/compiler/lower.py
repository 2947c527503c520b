"""Stage 3: lower a validated :class:`~scangen.compiler.spec.Spec` to the :class:`~scangen.compiler.ir.IR`.

Parses every expression, inlines ``let`` names, proves each ``update`` affine in its state and
splits it into ``alpha``/``beta`` structurally (like SymPy's ``linear_coeffs``: any product of
two state terms left after SymPy's automatic simplification is refused), and checks where each
kind of name may appear.
"""
from __future__ import annotations

import sympy

from ..errors import SpecError, line_of
from .expr import Next, Prev, Where, parse_expr
from .ir import IR, POSITIONS, canonical, IRInput, IROutput, IRParam, IRScan
from .spec import Spec
from .validate import Placement, check_placement, default_signature


class Nonlinear(Exception):
    pass


def affine(expr, state: sympy.Symbol):
    """``(alpha, beta)`` with ``expr == alpha + beta * state``, or :class:`Nonlinear`.

    Structural, like ``linear_coeffs``, and also through ``where``: a ``where`` whose branches are
    affine in the state is affine (its condition must not use the state)."""
    if state not in expr.free_symbols:
        return expr, sympy.S.Zero
    if expr == state:
        return sympy.S.Zero, sympy.S.One
    if isinstance(expr, sympy.Add):
        parts = [affine(a, state) for a in expr.args]
        return sympy.Add(*(p[0] for p in parts)), sympy.Add(*(p[1] for p in parts))
    if isinstance(expr, sympy.Mul):
        with_state = [a for a in expr.args if state in a.free_symbols]
        if len(with_state) > 1:
            raise Nonlinear(sympy.Mul(*with_state))
        rest = sympy.Mul(*(a for a in expr.args if state not in a.free_symbols))
        alpha, beta = affine(with_state[0], state)
        return rest * alpha, rest * beta
    if isinstance(expr, Where) and state not in expr.args[0].free_symbols:
        (a1, b1), (a2, b2) = (affine(e, state) for e in expr.args[1:])
        cond = expr.args[0]
        return Where(cond, a1, a2), Where(cond, b1, b2)
    raise Nonlinear(expr)


def _split_update(expr, state: sympy.Symbol, ctx: Placement):
    for shifted in expr.atoms(Next, Prev):
        if state in shifted.free_symbols:
            raise ctx.fail(f"write the carried state as plain '{state.name}' in an update, "
                           f"not inside next()/prev()")
    try:
        return affine(expr, state)
    except Nonlinear as exc:
        raise ctx.fail(f"not affine in the state '{state.name}' "
                       f"(nonlinear term: {canonical(exc.args[0])})") from None


def lower(spec: Spec) -> IR:
    """Build the IR from a spec that :func:`scangen.compiler.validate.validate` accepted."""
    reverse = spec.direction == "reverse"
    kinds = {i.name: (i.kind, i.shape, i.default is not None) for i in spec.inputs}
    states = [s.name for s in spec.scans]
    # Real symbols: SymPy then keeps abs(exp(x)) as exp(x) instead of exp(re(x)).
    names: dict[str, sympy.Expr] = {n: sympy.Symbol(n, real=True) for n in kinds}
    names.update({p.name: sympy.Symbol(p.name, real=True) for p in spec.params})
    names.update({n: sympy.Symbol(n, real=True) for n in POSITIONS + tuple(states)})

    def parse(text, what, states_ok, rule="only the states of earlier scans may"):
        expr = parse_expr(text, names, source=spec.source, line=line_of(text), what=what)
        check_placement(expr, Placement(spec, text, what, states_ok, rule), kinds, states, reverse)
        return expr

    all_states = set(states)
    for name, text in spec.let:
        names[name] = parse(text, f"let '{name}'", all_states)

    scans = []
    for k, scan in enumerate(spec.scans):
        what = f"scan '{scan.name}'"
        earlier = set(states[:k])
        ctx = Placement(spec, scan.update or scan.alpha or scan.init, what, earlier)
        if scan.update is not None:
            if scan.alpha is not None or scan.beta is not None:
                raise ctx.fail("give either update or alpha and beta, not both")
            alpha, beta = _split_update(parse(scan.update, f"{what} update",
                                              earlier | {scan.name}),
                                        names[scan.name],
                                        Placement(spec, scan.update, f"{what} update", earlier))
        elif scan.alpha is not None and scan.beta is not None:
            alpha = parse(scan.alpha, f"{what} alpha", earlier)
            beta = parse(scan.beta, f"{what} beta", earlier)
        else:
            raise ctx.fail("needs either update, or both alpha and beta")
        init = parse(scan.init, f"{what} init", set(), "the carry into the window is fixed "
                     "before any step runs")
        for sym in init.free_symbols:
            if kinds.get(sym.name, ("", ""))[1] != "N":
                raise SpecError(f"{what} init: may only use numbers and [N] inputs, got "
                                f"'{sym.name}'", source=spec.source, line=line_of(scan.init),
                                expr=str(scan.init))
        scans.append(IRScan(scan.name, alpha, beta, init, scan.doc))

    outputs = tuple(IROutput(o.name, parse(o.expr, f"output '{o.name}'", all_states), o.doc)
                    for o in spec.outputs)
    signature = spec.signature or default_signature(spec)
    return IR(
        name=str(spec.name), function=str(spec.function or spec.name), doc=str(spec.doc),
        direction=str(spec.direction),
        inputs=tuple(IRInput(str(i.name), str(i.kind), i.shape, i.default, str(i.doc))
                     for i in spec.inputs),
        params=tuple(IRParam(str(p.name), p.default if not isinstance(p.default, str)
                             else str(p.default), str(p.doc),
                             tuple((str(k), float(v)) for k, v in p.choices))
                     for p in spec.params),
        scans=tuple(scans), outputs=outputs, signature=tuple(str(a) for a in signature),
        exclusive=tuple(tuple(str(n) for n in g) for g in spec.exclusive),
        returns=tuple(str(r) for r in (spec.returns or [o.name for o in spec.outputs])))
