"""Stage 3: lower a validated :class:`~scangen.compiler.spec.Spec` to the :class:`~scangen.compiler.ir.IR`.

Parses every expression, inlines ``let`` names, proves each ``update`` affine in its state and
splits it into ``alpha``/``beta`` structurally (like SymPy's ``linear_coeffs``: any product of
two state terms left after SymPy's automatic simplification is refused), and checks where each
kind of name may appear.
"""
from __future__ import annotations

import sympy

from ..errors import SpecError, line_of
from .expr import Gather, KSum, Next, Prev, Present, Where, parse_expr
from .ir import IR, POSITIONS, canonical, IRInput, IROutput, IRParam, IRScan
from .spec import Spec
from .validate import default_signature


class _Ctx:
    """Which names an expression may use, and what to say when it breaks a rule."""

    def __init__(self, spec: Spec, text, what: str, states_ok: set[str],
                 state_rule: str = "only the states of earlier scans may"):
        self.spec, self.text, self.what, self.states_ok = spec, text, what, states_ok
        self.state_rule = state_rule

    def fail(self, msg: str) -> SpecError:
        return SpecError(f"{self.what}: {msg}", source=self.spec.source,
                         line=line_of(self.text), expr=str(self.text))


def _check(expr, ctx: _Ctx, kinds: dict[str, tuple[str, str, bool]], states: list[str],
           reverse: bool, shift=None, in_sum=False):
    """Walk ``expr`` enforcing the placement rules of shifts, trailing-axis inputs and states."""
    if isinstance(expr, sympy.Symbol):
        name = expr.name
        if name in states:
            if name not in ctx.states_ok:
                raise ctx.fail(f"the state '{name}' cannot appear here ({ctx.state_rule})")
            if in_sum:
                raise ctx.fail(f"the state '{name}' cannot appear inside sum()")
            if shift is not None and (shift is Prev) == reverse:
                bad = "prev" if reverse else "next"
                raise ctx.fail(f"{bad}({name}) is not available in a {ctx.spec.direction} scan: "
                               f"the state there is computed after step t")
        elif name in kinds:
            kind, shape, _ = kinds[name]
            if shape == "NTK" and not in_sum:
                raise ctx.fail(f"'{name}' has a trailing axis [N, T, K]: use it inside sum() or "
                               f"as the first argument of gather()")
            if kind == "index":
                raise ctx.fail(f"index input '{name}' may only be the second argument of gather()")
        return
    if isinstance(expr, (Next, Prev)):
        if shift is not None:
            raise ctx.fail("next()/prev() cannot be nested")
        fill = expr.args[1]
        for sym in fill.free_symbols:
            if sym.name in states or kinds.get(sym.name, ("", "N"))[1] != "N":
                raise ctx.fail(f"the fill of {type(expr).__name__.lower()}() must be a constant, "
                               f"a param or an [N] input, got '{sym.name}'")
        return _check(expr.args[0], ctx, kinds, states, reverse, type(expr), in_sum)
    if isinstance(expr, KSum):
        if in_sum:
            raise ctx.fail("sum() cannot be nested")
        arg = expr.args[0]
        if not any(kinds.get(s.name, ("", ""))[1] == "NTK" for s in arg.free_symbols):
            raise ctx.fail("sum() needs an input of shape [N, T, K] to sum over")
        if arg.has(Gather, Next, Prev):
            raise ctx.fail("sum() cannot contain gather(), next() or prev()")
        return _check(arg, ctx, kinds, states, reverse, shift, True)
    if isinstance(expr, Gather):
        src, idx = expr.args
        if not (isinstance(src, sympy.Symbol) and kinds.get(src.name, ("", ""))[1] == "NTK"):
            raise ctx.fail("the first argument of gather() must be an input of shape [N, T, K]")
        if not (isinstance(idx, sympy.Symbol) and kinds.get(idx.name, ("",))[0] == "index"):
            raise ctx.fail("the second argument of gather() must be an index input")
        if in_sum:
            raise ctx.fail("gather() cannot appear inside sum()")
        return
    if isinstance(expr, sympy.Pow):
        e = expr.exp
        ok = (e.is_Integer and 1 <= abs(int(e)) <= 4) or \
            (e.is_Number and abs(float(e)) == 0.5)
        if not ok:
            raise ctx.fail(f"unsupported power {canonical(expr)}: exponents must be integers "
                           f"from -4 to 4 or +-1/2 (use exp(e * log(x)) for others)")
    if isinstance(expr, Present):
        arg = expr.args[0]
        if not (isinstance(arg, sympy.Symbol) and kinds.get(arg.name, ("", "", False))[2]):
            raise ctx.fail("present() takes the name of an optional input")
        return
    for arg in expr.args:
        if isinstance(arg, sympy.Basic):
            _check(arg, ctx, kinds, states, reverse, shift, in_sum)


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


def _split_update(expr, state: sympy.Symbol, ctx: _Ctx):
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
        _check(expr, _Ctx(spec, text, what, states_ok, rule), kinds, states, reverse)
        return expr

    all_states = set(states)
    for name, text in spec.let:
        names[name] = parse(text, f"let '{name}'", all_states)

    scans = []
    for k, scan in enumerate(spec.scans):
        what = f"scan '{scan.name}'"
        earlier = set(states[:k])
        ctx = _Ctx(spec, scan.update or scan.alpha or scan.init, what, earlier)
        if scan.update is not None:
            if scan.alpha is not None or scan.beta is not None:
                raise ctx.fail("give either update or alpha and beta, not both")
            alpha, beta = _split_update(parse(scan.update, f"{what} update",
                                              earlier | {scan.name}),
                                        names[scan.name],
                                        _Ctx(spec, scan.update, f"{what} update", earlier))
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
