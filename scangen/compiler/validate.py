"""Stage 2: the rules a spec must follow: structural checks on a
:class:`~scangen.compiler.spec.Spec` (names, kinds, signature), and the placement rules of its
parsed expressions (:func:`check_placement`: where shifts, states, trailing-axis and index inputs
may appear), which :mod:`scangen.compiler.lower` applies to each expression it parses. Affinity
is proven where the updates are split, in lower.
"""
from __future__ import annotations

import builtins
import keyword
import math
import re

import sympy

from ..abi import RESERVED_PREFIXES
from ..errors import SpecError, line_of
from .expr import MAX_INT_POWER, Gather, KSum, Next, Prev, Present, half_integer
from .ir import POSITIONS, canonical
from .spec import KINDS, Input, Output, Param, Scan, Spec

_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")
# Names the generated code, Python or the expression language already uses: a user name must
# never shadow a local of a generated kernel or launcher.
RESERVED = frozenset({
    "is_first", "is_last", "tl", "triton", "torch", "math", "backend", "outputs", "time_dim",
    "self", "cls", "OP", "T", "K", "R1", "R2", "ACC", "BLOCK_N", "BLOCK_T", "BLOCK_K",
}) | frozenset(
    ["exp", "log", "sqrt", "abs", "sigmoid", "tanh", "min", "max", "clip", "where", "next", "prev",
     "sum", "gather", "present"]) | frozenset(dir(builtins))


def _fail(spec: Spec, msg: str, at=None) -> SpecError:
    line = line_of(at) if at is not None else None
    return SpecError(msg, source=spec.source, line=line if line is not None else spec.line)


def check_identifier(spec: Spec, name, what: str) -> None:
    if not isinstance(name, str) or not _IDENT.match(name) or "__" in name \
            or keyword.iskeyword(name) or name in RESERVED or name.startswith(RESERVED_PREFIXES):
        raise _fail(spec, f"{what} name {str(name)[:80]!r} is not allowed: use a letter followed "
                          f"by up to 63 letters, digits or single underscores, not a Python "
                          f"keyword or builtin, nor a reserved name", name)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_objects(spec: Spec) -> None:
    """What the YAML front end checks as it parses, for specs built from Python objects: the
    parts' types, shapes, defaults, choices and option groups."""
    for what, items, cls in (("inputs", spec.inputs, Input), ("params", spec.params, Param),
                             ("scans", spec.scans, Scan), ("outputs", spec.outputs, Output)):
        for item in items:
            if not isinstance(item, cls):
                raise _fail(spec, f"{what} must hold {cls.__name__}(...) objects, got "
                                  f"{item!r} ({type(item).__name__})")
    for inp in spec.inputs:
        if inp.shape not in ("NT", "N", "NTK"):
            raise _fail(spec, f"input '{inp.name}': shape must be 'NT', 'N' or 'NTK', got "
                              f"{inp.shape!r}", inp.name)
        if inp.default is not None and not _number(inp.default):
            raise _fail(spec, f"input '{inp.name}': default must be a finite number, got "
                              f"{inp.default!r}", inp.name)
    for par in spec.params:
        if par.default is not None and not isinstance(par.default, str) \
                and not _number(par.default):
            raise _fail(spec, f"param '{par.name}': default must be a finite number or a "
                              f"string, got {par.default!r}", par.name)
        if not (isinstance(par.choices, (tuple, list)) and all(
                isinstance(c, (tuple, list)) and len(c) == 2 and isinstance(c[0], str)
                and _number(c[1]) for c in par.choices)):
            raise _fail(spec, f"param '{par.name}': choices must be (string, number) pairs, "
                              f"e.g. (('a', 0), ('b', 1)), got {par.choices!r}", par.name)
    if not all(isinstance(g, (tuple, list)) and len(g) >= 2 and all(isinstance(n, str) for n in g)
               for g in spec.exclusive):
        raise _fail(spec, f"exclusive must be a list of groups of two or more names, e.g. "
                          f"[['y', 'z']], got {[list(g) for g in spec.exclusive]!r}")


def validate(spec: Spec) -> Spec:
    """Check names, kinds, shapes, the signature and option groups; return ``spec`` unchanged."""
    _check_objects(spec)
    check_identifier(spec, spec.name, "spec")
    if spec.function is not None:
        check_identifier(spec, spec.function, "function")
    if spec.direction not in ("reverse", "forward"):
        raise _fail(spec, f"direction must be 'reverse' or 'forward', got {spec.direction!r}",
                    spec.direction)
    absent = [what for what, have in (("inputs", spec.inputs), ("scans", spec.scans),
                                      ("outputs", spec.outputs)) if not have]
    if absent:
        raise _fail(spec, f"a spec needs at least one input, one scan and one output "
                          f"(none in: {', '.join(absent)})")
    seen: dict[str, str] = {}
    groups = (("input", [i.name for i in spec.inputs]), ("param", [p.name for p in spec.params]),
              ("let", [k for k, _ in spec.let]), ("scan", [s.name for s in spec.scans]),
              ("output", [o.name for o in spec.outputs]))
    for what, names in groups:
        for name in names:
            check_identifier(spec, name, what)
            if name in seen and not (what == "output" and seen[name] == "scan"):
                article = "an" if seen[name][0] in "aeiou" else "a"
                raise _fail(spec, f"{what} '{name}' is already declared as {article} {seen[name]}",
                            name)
            seen.setdefault(name, what)
    _check_inputs(spec)
    _check_params(spec)
    _check_signature(spec)
    return spec


def _check_inputs(spec: Spec) -> None:
    for inp in spec.inputs:
        if inp.kind not in KINDS:
            raise _fail(spec, f"input '{inp.name}': kind must be one of {', '.join(KINDS)}, "
                              f"got {inp.kind!r}", inp.name)
        if inp.kind == "index" and inp.shape != "NT":
            raise _fail(spec, f"input '{inp.name}': index inputs must have shape [N, T]", inp.name)
        if inp.default is not None and (inp.kind == "index" or inp.shape == "NTK"):
            what = "an index input" if inp.kind == "index" else "an input of shape [N, T, K]"
            raise _fail(spec, f"input '{inp.name}': {what} cannot be optional (default "
                              f"{inp.default!r}): sum() and gather() read it whole; declare it "
                              f"without a default and pass it", inp.name)
    if not any(i.default is None and i.shape in ("NT", "NTK") for i in spec.inputs):
        raise _fail(spec, "a spec needs at least one required input of shape [N, T] or "
                          "[N, T, K]: it fixes N and T")
    optional = {i.name for i in spec.inputs if i.default is not None}
    optional |= {p.name for p in spec.params if p.default is not None}
    for group in spec.exclusive:
        for name in group:
            if name not in optional:
                raise _fail(spec, f"exclusive: '{name}' is not an optional input or param", name)


def _check_params(spec: Spec) -> None:
    names = {p.name: p for p in spec.params}
    for p in spec.params:
        if isinstance(p.default, str) and not p.choices:
            other = names.get(p.default)
            if other is None or not isinstance(other.default, (float, int)):
                raise _fail(spec, f"param '{p.name}': default {p.default!r} must be a number or "
                                  f"the name of a param with a numeric default", p.name)
        if p.choices and p.default is not None and p.default not in dict(p.choices):
            raise _fail(spec, f"param '{p.name}': default {p.default!r} is not one of its choices "
                              f"({', '.join(dict(p.choices))})", p.name)


def default_signature(spec: Spec) -> tuple[str, ...]:
    """Required inputs, required params, then optional inputs and params, in spec order."""
    required = [i.name for i in spec.inputs if i.default is None]
    required += [p.name for p in spec.params if p.default is None and not p.choices]
    rest = [i.name for i in spec.inputs if i.default is not None]
    rest += [p.name for p in spec.params if p.default is not None or p.choices]
    return tuple(required + rest)


def _check_signature(spec: Spec) -> None:
    args = [i.name for i in spec.inputs] + [p.name for p in spec.params]
    signature = spec.signature if spec.signature is not None else default_signature(spec)
    if list(signature).count("*") > 1:
        raise _fail(spec, "signature: '*' may appear once")
    sig = [a for a in signature if a != "*"]
    if sorted(sig) != sorted(args):
        missing = sorted(set(args) - set(sig))
        extra = sorted(set(sig) - set(args))
        twice = sorted({a for a in sig if sig.count(a) > 1})
        found = [f"{k}: {v}" for k, v in (("missing", missing), ("unknown", extra),
                                          ("listed twice", twice)) if v]
        raise _fail(spec, f"signature must list every input and param exactly once "
                          f"({'; '.join(found)})")
    required = {i.name for i in spec.inputs if i.default is None}
    required |= {p.name for p in spec.params if p.default is None and not p.choices}
    optional_seen = None
    for arg in signature:
        if arg == "*":
            break
        if arg in required and optional_seen:
            raise _fail(spec, f"signature: required argument '{arg}' follows optional argument "
                              f"'{optional_seen}' (put it after '*')", arg)
        if arg not in required:
            optional_seen = arg
    if spec.returns is not None:
        outs = {o.name for o in spec.outputs}
        for name in spec.returns:
            if name not in outs:
                raise _fail(spec, f"returns: '{name}' is not an output", name)


# ------------------------------------------------------------- placement rules (parsed)

class Placement:
    """Which names an expression may use, and what to say when it breaks a rule."""

    def __init__(self, spec: Spec, text, what: str, states_ok: set[str],
                 state_rule: str = "only the states of earlier scans may"):
        self.spec, self.text, self.what, self.states_ok = spec, text, what, states_ok
        self.state_rule = state_rule

    def fail(self, msg: str) -> SpecError:
        return SpecError(f"{self.what}: {msg}", source=self.spec.source,
                         line=line_of(self.text), expr=str(self.text))


def check_placement(expr, ctx: "Placement", kinds: dict[str, tuple[str, str, bool]], states: list[str],
           reverse: bool, shift=None, in_sum=False):
    """Walk the parsed ``expr`` enforcing the placement rules of shifts, trailing-axis inputs,
    index inputs, states and powers; ``ctx`` says which states it may read."""
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
            if (sym.name in states or sym.name in POSITIONS
                    or kinds.get(sym.name, ("", "N"))[1] != "N"):
                raise ctx.fail(f"the fill of {type(expr).__name__.lower()}() must be an "
                               f"expression of numbers, params and [N] inputs, got "
                               f"'{sym.name}'")
        return check_placement(expr.args[0], ctx, kinds, states, reverse, type(expr), in_sum)
    if isinstance(expr, KSum):
        if in_sum:
            raise ctx.fail("sum() cannot be nested")
        arg = expr.args[0]
        if not any(kinds.get(s.name, ("", ""))[1] == "NTK" for s in arg.free_symbols):
            raise ctx.fail("sum() needs an input of shape [N, T, K] to sum over")
        if arg.has(Gather, Next, Prev):
            raise ctx.fail("sum() cannot contain gather(), next() or prev()")
        return check_placement(arg, ctx, kinds, states, reverse, shift, True)
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
        half = half_integer(e)
        ok = (e.is_Integer and 1 <= abs(int(e)) <= MAX_INT_POWER) or \
            (half is not None and abs(half) < 2 * MAX_INT_POWER)
        if not ok:
            raise ctx.fail(f"unsupported power {canonical(expr)}: an exponent must be an integer "
                           f"or a half-integer from -{MAX_INT_POWER} to {MAX_INT_POWER} (for "
                           f"another power of a positive x, write exp(e * log(x)))")
    if isinstance(expr, Present):
        arg = expr.args[0]
        if not (isinstance(arg, sympy.Symbol) and kinds.get(arg.name, ("", "", False))[2]):
            raise ctx.fail("present() takes the name of an optional input")
        return
    for arg in expr.args:
        if isinstance(arg, sympy.Basic):
            check_placement(arg, ctx, kinds, states, reverse, shift, in_sum)
