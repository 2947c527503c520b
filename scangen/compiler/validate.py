"""Stage 2: structural checks on a :class:`~scangen.compiler.spec.Spec` (names, kinds, signature).

The math (affinity, shifts, which names an expression may use) is checked in
:mod:`scangen.compiler.lower`, where the expressions are parsed; everything that can be decided from the
spec's shape alone is decided here.
"""
from __future__ import annotations

import builtins
import keyword
import re

from ..errors import SpecError, line_of
from .spec import KINDS, Spec

_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")
# Names the generated code, Python or the expression language already uses: a user name must
# never shadow a local of a generated kernel or launcher.
RESERVED = frozenset({
    "is_first", "is_last", "tl", "triton", "torch", "math", "backend", "outputs", "time_dim",
    "self", "cls", "OP", "T", "K", "R1", "R2", "ACC", "BLOCK_N", "BLOCK_T", "BLOCK_K",
}) | frozenset(
    ["exp", "log", "sqrt", "abs", "sigmoid", "tanh", "min", "max", "clip", "where", "next", "prev",
     "sum", "gather", "present"]) | frozenset(dir(builtins))
RESERVED_PREFIXES = ("HAS_", "STORE_")


def _fail(spec: Spec, msg: str, at=None) -> SpecError:
    line = line_of(at) if at is not None else None
    return SpecError(msg, source=spec.source, line=line if line is not None else spec.line)


def check_identifier(spec: Spec, name, what: str) -> None:
    if not isinstance(name, str) or not _IDENT.match(name) or "__" in name \
            or keyword.iskeyword(name) or name in RESERVED or name.startswith(RESERVED_PREFIXES):
        raise _fail(spec, f"{what} name {str(name)[:80]!r} is not allowed: use a letter followed "
                          f"by up to 63 letters, digits or single underscores, not a Python "
                          f"keyword or builtin, nor a reserved name", name)


def validate(spec: Spec) -> Spec:
    """Check names, kinds, shapes, the signature and option groups; return ``spec`` unchanged."""
    check_identifier(spec, spec.name, "spec")
    if spec.function is not None:
        check_identifier(spec, spec.function, "function")
    if spec.direction not in ("reverse", "forward"):
        raise _fail(spec, f"direction must be 'reverse' or 'forward', got {spec.direction!r}",
                    spec.direction)
    if not spec.inputs or not spec.scans or not spec.outputs:
        raise _fail(spec, "a spec needs at least one input, one scan and one output")
    seen: dict[str, str] = {}
    groups = (("input", [i.name for i in spec.inputs]), ("param", [p.name for p in spec.params]),
              ("let", [k for k, _ in spec.let]), ("scan", [s.name for s in spec.scans]),
              ("output", [o.name for o in spec.outputs]))
    for what, names in groups:
        for name in names:
            check_identifier(spec, name, what)
            if name in seen and not (what == "output" and seen[name] == "scan"):
                raise _fail(spec, f"{what} '{name}' is already declared as a {seen[name]}", name)
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
        raise _fail(spec, f"signature must list every input and param exactly once "
                          f"(missing: {missing}, unknown: {extra})")
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
