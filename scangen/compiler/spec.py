"""Stage 1: the spec, as written by a user, in YAML or as Python objects.

Both forms produce the same frozen :class:`Spec`; nothing here interprets expressions (that is
:mod:`scangen.compiler.lower`). YAML is read with PyYAML's safe composer and walked node by node, so every
value keeps its line number, duplicate and unknown keys are refused, and aliases (which could
expand a small file into a huge one) are not followed.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..errors import LStr, SpecError, line_of

MAX_SPEC_BYTES = 256 * 1024
KINDS = ("float", "flag", "index")
SHAPES = {"[N, T]": "NT", "[N]": "N", "[N, T, K]": "NTK"}


@dataclass(frozen=True)
class Input:
    """A tensor argument. ``shape`` is ``"NT"`` (``[N, T]``), ``"N"`` or ``"NTK"`` (a trailing
    axis, reduced with ``sum`` or indexed with ``gather``). ``default`` makes it optional: an
    absent input reads as that constant everywhere."""

    name: str
    kind: str = "float"
    shape: str = "NT"
    default: float | None = None
    doc: str = ""


@dataclass(frozen=True)
class Param:
    """A scalar argument (a Python float, or a tensor broadcastable to ``[N, T]``).

    ``default`` is a number, the name of another param (``pg_rho_bar`` defaults to ``rho_bar``),
    or None for a required argument. ``choices`` maps accepted strings to numbers."""

    name: str
    default: float | str | None = None
    doc: str = ""
    choices: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Scan:
    """One affine recurrence: ``alpha``/``beta``, or an ``update`` in the carried state."""

    name: str
    alpha: str | None = None
    beta: str | None = None
    update: str | None = None
    init: str = "0"
    doc: str = ""


@dataclass(frozen=True)
class Output:
    """One output of the op: ``expr`` over the inputs, params, ``let`` names and the scans'
    states; ``doc`` describes it in the generated docstring."""

    name: str
    expr: str
    doc: str = ""


def _tuple(items, cls=None):
    if isinstance(items, Mapping):
        raise TypeError(f"expected a list of {cls.__name__ if cls else 'items'}, got a dict")
    return tuple(items)


@dataclass(frozen=True)
class Spec:
    """A whole algorithm. ``let`` is a sequence of ``(name, expression)`` pairs evaluated in order;
    ``signature`` orders the public function's arguments (``"*"`` starts keyword-only ones);
    ``returns`` names the outputs returned when the caller does not ask for specific ones."""

    name: str
    direction: str
    inputs: Sequence[Input]
    scans: Sequence[Scan]
    outputs: Sequence[Output]
    params: Sequence[Param] = ()
    let: Sequence[tuple[str, str]] = ()
    doc: str = ""
    function: str | None = None
    signature: Sequence[str] | None = None
    exclusive: Sequence[Sequence[str]] = ()
    returns: Sequence[str] | None = None
    source: str = "<python spec>"
    line: int | None = field(default=None, compare=False)

    def __post_init__(self):
        try:
            for name in ("inputs", "scans", "outputs", "params"):
                object.__setattr__(self, name, _tuple(getattr(self, name)))
            let = self.let.items() if isinstance(self.let, Mapping) else self.let
            object.__setattr__(self, "let", tuple((k, v) for k, v in let))
            object.__setattr__(self, "exclusive", tuple(tuple(g) for g in self.exclusive))
            for name in ("signature", "returns"):
                value = getattr(self, name)
                if value is not None:
                    if isinstance(value, (str, Mapping)):
                        raise TypeError(f"{name} must be a list of names")
                    object.__setattr__(self, name, tuple(value))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"malformed spec ({exc})", source=str(self.source),
                            line=self.line) from None


# ----------------------------------------------------------------------------- YAML

def _err(msg, source, node_or_line=None, expr=None):
    line = node_or_line if isinstance(node_or_line, int) or node_or_line is None \
        else node_or_line.start_mark.line + 1
    return SpecError(msg, source=source, line=line, expr=expr)


_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in
               ("str", "int", "float", "bool", "null", "map", "seq")}


def _to_python(node, source, seen):
    """Walk composed YAML nodes into dicts/lists/LStr/numbers, refusing duplicates, aliases and
    tags (a spec is plain data: no Python objects, no merge keys)."""
    if id(node) in seen:
        raise _err("YAML aliases and anchors are not supported", source, node)
    seen.add(id(node))
    if node.tag not in _PLAIN_TAGS:
        raise _err(f"YAML tags are not supported (got {node.tag})", source, node)
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = _to_python(key_node, source, seen)
            if not isinstance(key, str):
                raise _err(f"keys must be names, got {key!r}", source, key_node)
            if key in out:
                raise _err(f"duplicate key '{key}'", source, key_node)
            out[key] = _to_python(value_node, source, seen)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(n, source, seen) for n in node.value]
    try:
        value = yaml.constructor.SafeConstructor().construct_object(node)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        raise _err(f"bad YAML value {node.value!r} ({type(exc).__name__})", source, node) \
            from None
    if isinstance(value, str):
        return LStr(value, line)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise _err(f"unsupported YAML value of type {type(value).__name__}", source, node)


def _check_keys(mapping, allowed, what, source):
    for key in mapping:
        if key not in allowed:
            raise _err(f"{what}: unknown key '{key}' (expected one of: {', '.join(allowed)})",
                       source, line_of(key))


def _mapping(value, what, source, line):
    if not isinstance(value, dict):
        raise _err(f"{what} must be a mapping, got {_kind(value)}", source, line)
    return value


def _kind(value) -> str:
    """What a parsed YAML value is, in the words of the spec guide (not a Python class name)."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else type(value).__name__


def _number(value, what, source, line):
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(float(value)):
        raise _err(f"{what} must be a finite number, got {value!r}", source, line)
    return float(value)


def _names(value, what, source, line, nested=False):
    """A YAML list of names (``signature``, ``returns``), or of such lists (``exclusive``)."""
    if value is None:
        return None
    if not isinstance(value, list):
        got = "a string" if isinstance(value, str) else f"a {type(value).__name__}"
        example = "[[a, b]] (a list of groups)" if nested else "[a, b]"
        name = what if what.startswith("each group") else repr(what)
        raise _err(f"{name} must be a list such as {example}, got {got} {value!r}", source, line)
    for item in value:
        if nested:
            _names(item, f"each group of {what!r} (e.g. [[a, b]])", source, line)
        elif not isinstance(item, str):
            raise _err(f"'{what}' must list names, got {item!r}", source, line)
    return value


def _input(name, value, source):
    line = line_of(name)
    if isinstance(value, str):
        value = {"kind": value}
    value = _mapping(value, f"input '{name}'", source, line)
    _check_keys(value, ("kind", "shape", "default", "doc"), f"input '{name}'", source)
    shape = value.get("shape", ["N", "T"])
    shape_text = "[" + ", ".join(map(str, shape)) + "]" if isinstance(shape, list) else str(shape)
    if shape_text not in SHAPES:
        raise _err(f"input '{name}': shape must be one of {', '.join(SHAPES)}, got {shape_text}",
                   source, line)
    default = value.get("default")
    if default is not None:
        default = _number(default, f"input '{name}': default", source, line)
    return Input(name=name, kind=value.get("kind", "float"), shape=SHAPES[shape_text],
                 default=default, doc=str(value.get("doc", "")))


def _param(name, value, source):
    line = line_of(name)
    if not isinstance(value, dict):
        value = {"default": value}
    _check_keys(value, ("default", "doc", "choices"), f"param '{name}'", source)
    default = value.get("default")
    if default is not None and not isinstance(default, str):
        default = _number(default, f"param '{name}': default", source, line)
    choices = value.get("choices", {})
    choices = _mapping(choices, f"param '{name}': choices", source, line)
    return Param(name=name, default=default, doc=str(value.get("doc", "")),
                 choices=tuple((k, _number(v, f"param '{name}': choice '{k}'", source, line))
                               for k, v in choices.items()))


def _scan(name, value, source):
    value = _mapping(value, f"scan '{name}'", source, line_of(name))
    _check_keys(value, ("alpha", "beta", "update", "init", "doc"), f"scan '{name}'", source)
    get = lambda k: None if value.get(k) is None else _expr_text(value[k], line_of(name))
    return Scan(name=name, alpha=get("alpha"), beta=get("beta"), update=get("update"),
                init=get("init") or LStr("0", line_of(name)), doc=str(value.get("doc", "")))


def _expr_text(value, line):
    """Expressions may be written as bare YAML numbers (``init: 0``)."""
    return value if isinstance(value, str) else LStr(repr(value), line)


def _output(name, value, source):
    if not isinstance(value, dict):
        return Output(name=name, expr=_expr_text(value, line_of(name)))
    _check_keys(value, ("expr", "doc"), f"output '{name}'", source)
    if "expr" not in value:
        raise _err(f"output '{name}': missing key 'expr'", source, line_of(name))
    return Output(name=name, expr=_expr_text(value["expr"], line_of(name)),
                  doc=str(value.get("doc", "")))


MAX_FLOW_DEPTH = 32


def _flow_depth(text: str) -> int:
    """The deepest nesting of [ ] and { } (an upper bound: brackets in strings count too)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


_TOP_KEYS = ("name", "function", "doc", "direction", "signature", "inputs", "exclusive",
             "params", "let", "scans", "outputs", "returns")


def load_spec_text(text: str, source: str = "<string>") -> Spec:
    """Parse YAML spec text into a :class:`Spec` (no validation of the math yet)."""
    return _spec_of(_read_yaml(text, source), source)


def _read_yaml(text: str, source: str):
    """The YAML document as dicts, lists, LStr and numbers (not yet known to be a mapping)."""
    if len(text.encode("utf-8", "replace")) > MAX_SPEC_BYTES:
        raise _err(f"spec is larger than {MAX_SPEC_BYTES} bytes", source)
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        # PyYAML's scanner is quadratic in flow nesting; no spec needs more than a few levels.
        raise _err("malformed YAML (nested too deeply)", source)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _err(f"malformed YAML ({problem})", source,
                   mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise _err("malformed YAML (nested too deeply)", source) from None
    if node is None:
        raise _err("the spec is empty", source)
    return _to_python(node, source, set())


def _spec_of(document, source: str) -> Spec:
    top = _mapping(document, "the spec", source, 1)
    _check_keys(top, _TOP_KEYS, "the spec", source)
    for key in ("name", "direction", "inputs", "scans", "outputs"):
        if key not in top:
            raise _err(f"missing required key '{key}'", source, 1)
    sections = {}
    for key, build in (("inputs", _input), ("params", _param), ("scans", _scan),
                       ("outputs", _output)):
        section = _mapping(top.get(key, {}), f"'{key}'", source, None)
        sections[key] = [build(k, v, source) for k, v in section.items()]
    let = _mapping(top.get("let", {}), "'let'", source, None)
    return Spec(
        name=top["name"], direction=top["direction"], doc=str(top.get("doc", "")),
        function=top.get("function"),
        signature=_names(top.get("signature"), "signature", source, None),
        exclusive=_names(top.get("exclusive", []), "exclusive", source, None, nested=True),
        returns=_names(top.get("returns"), "returns", source, None),
        let=[(k, _expr_text(v, line_of(k))) for k, v in let.items()],
        source=source, line=1, **sections)


WHAT_A_SPEC_IS = "a spec is a path to a .yaml or .yml file, or YAML text of a mapping"


def load_spec_file(path) -> Spec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError("spec file is not UTF-8 text", source=str(path)) from None
    except FileNotFoundError:
        raise SpecError(f"no such spec file ({WHAT_A_SPEC_IS})", source=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read the spec file ({exc.strerror or exc})",
                        source=str(path)) from None
    return load_spec_text(text, source=str(path))


def as_spec(spec_or_path: Any) -> Spec:
    """Accept a :class:`Spec`, a path to a YAML file, or YAML text."""
    if isinstance(spec_or_path, Spec):
        return spec_or_path
    if isinstance(spec_or_path, Path) or (isinstance(spec_or_path, str)
                                          and "\n" not in spec_or_path
                                          and (spec_or_path.endswith((".yaml", ".yml"))
                                               or _is_file(spec_or_path))):
        return load_spec_file(spec_or_path)  # one line naming a file: a path, as `scangen check`'s
    if isinstance(spec_or_path, str):
        document = _read_yaml(spec_or_path, "<string>")
        if not isinstance(document, dict) and "\n" not in spec_or_path:
            raise _not_a_spec_file(spec_or_path, document)  # one line: meant as a path
        return _spec_of(document, "<string>")
    raise TypeError(f"spec: expected a scangen.Spec, a path to a .yaml file or YAML text, "
                    f"got {type(spec_or_path).__name__}")


def _is_file(text: str) -> bool:
    """Whether ``text`` names a file that exists; False for text no file can be named by (too
    long, a NUL byte)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def _not_a_spec_file(text: str, document) -> SpecError:
    """One line of text that is no mapping and no file (``scangen.compile("my_ema")``): a path,
    mistyped."""
    return SpecError(f"no such spec file, and as YAML text it is {_kind(document)}, not a "
                     f"mapping ({WHAT_A_SPEC_IS})", source=text)


def replace(spec: Spec, **changes) -> Spec:
    return dataclasses.replace(spec, **changes)
