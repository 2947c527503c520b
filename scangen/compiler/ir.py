"""Stage 3's output: the IR, frozen dataclasses holding SymPy expressions, and its canonical text.

In the IR every ``let`` is inlined and every scan is in ``alpha``/``beta`` form, so two specs
that mean the same recurrence compare equal. :meth:`IR.text` prints the canonical form, a YAML
spec that :func:`scangen.compiler.spec.load_spec_text` parses back to the same IR.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy
from sympy.printing.str import StrPrinter

from .expr import Gather, KSum, Next, Prev, Present, Indicator

POSITIONS = ("is_first", "is_last")


@dataclass(frozen=True)
class IRInput:
    name: str
    kind: str
    shape: str
    default: float | None
    doc: str

    @property
    def optional(self) -> bool:
        return self.default is not None


@dataclass(frozen=True)
class IRParam:
    name: str
    default: float | str | None
    doc: str
    choices: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class IRScan:
    name: str
    alpha: sympy.Expr
    beta: sympy.Expr
    init: sympy.Expr
    doc: str


@dataclass(frozen=True)
class IROutput:
    name: str
    expr: sympy.Expr
    doc: str


@dataclass(frozen=True)
class IR:
    name: str
    function: str
    doc: str
    direction: str
    inputs: tuple[IRInput, ...]
    params: tuple[IRParam, ...]
    scans: tuple[IRScan, ...]
    outputs: tuple[IROutput, ...]
    signature: tuple[str, ...]
    exclusive: tuple[tuple[str, ...], ...]
    returns: tuple[str, ...]

    @property
    def reverse(self) -> bool:
        return self.direction == "reverse"

    def input(self, name: str) -> IRInput:
        return next(i for i in self.inputs if i.name == name)

    def text(self) -> str:
        return canonical_text(self)


class CanonicalPrinter(StrPrinter):
    """Prints IR expressions in the spec language, so the text parses back to the same tree."""

    def _print_Where(self, expr):
        return self._fn("where", expr)

    def _print_Function(self, expr):
        if isinstance(expr, Indicator):
            return f"{self._print(expr.args[0])} {expr.op} {self._print(expr.args[1])}"
        return super()._print_Function(expr)

    def _fn(self, name, expr):
        return f"{name}({', '.join(self._print(a) for a in expr.args)})"

    def _print_Min(self, expr):
        return self._fn("min", expr)

    def _print_Max(self, expr):
        return self._fn("max", expr)

    def _print_Abs(self, expr):
        return self._fn("abs", expr)

    def _print_Next(self, expr):
        return self._fn("next", expr)

    def _print_Prev(self, expr):
        return self._fn("prev", expr)

    def _print_KSum(self, expr):
        return self._fn("sum", expr)

    def _print_Gather(self, expr):
        return self._fn("gather", expr)

    def _print_Present(self, expr):
        return self._fn("present", expr)


def canonical(expr: sympy.Expr) -> str:
    return CanonicalPrinter({"order": "lex"}).doprint(expr)


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    import json
    return json.dumps(text, ensure_ascii=True)


def canonical_text(ir: IR) -> str:
    lines = [f"name: {ir.name}", f"function: {ir.function}", f"doc: {_q(ir.doc)}",
             f"direction: {ir.direction}", f"signature: [{', '.join(_q(a) if a == '*' else a for a in ir.signature)}]", "inputs:"]
    shapes = {"NT": "[N, T]", "N": "[N]", "NTK": "[N, T, K]"}
    for i in ir.inputs:
        default = "null" if i.default is None else repr(i.default)
        lines.append(f"  {i.name}: {{kind: {i.kind}, shape: {shapes[i.shape]}, "
                     f"default: {default}, doc: {_q(i.doc)}}}")
    lines.append("exclusive: [" + ", ".join(f"[{', '.join(g)}]" for g in ir.exclusive) + "]")
    lines.append("params:" + ("" if ir.params else " {}"))
    for p in ir.params:
        default = "null" if p.default is None else (
            _q(p.default) if isinstance(p.default, str) else repr(p.default))
        choices = "{" + ", ".join(f"{k}: {v!r}" for k, v in p.choices) + "}"
        lines.append(f"  {p.name}: {{default: {default}, doc: {_q(p.doc)}, choices: {choices}}}")
    lines.append("scans:")
    for s in ir.scans:
        lines += [f"  {s.name}:", f"    doc: {_q(s.doc)}", f"    alpha: {_q(canonical(s.alpha))}",
                  f"    beta: {_q(canonical(s.beta))}", f"    init: {_q(canonical(s.init))}"]
    lines.append("outputs:")
    for o in ir.outputs:
        lines.append(f"  {o.name}: {{expr: {_q(canonical(o.expr))}, doc: {_q(o.doc)}}}")
    lines.append(f"returns: [{', '.join(ir.returns)}]")
    return "\n".join(lines) + "\n"


__all__ = ["IR", "IRInput", "IRParam", "IRScan", "IROutput", "canonical", "canonical_text",
           "POSITIONS", "Next", "Prev", "KSum", "Gather", "Present"]
