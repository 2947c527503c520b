"""Errors raised for bad specs and bad calls.

Every spec problem is a :class:`SpecError` (a ``ValueError``) whose text names the spec file, the
line and the offending expression, so a user can jump straight to the mistake.
"""
from __future__ import annotations


class SpecError(ValueError):
    """A spec that cannot be compiled: ``<source>:<line>: <message>[: '<expr>']``."""

    def __init__(self, message: str, *, source: str = "<spec>", line: int | None = None,
                 expr: str | None = None):
        self.message = message
        self.source = source
        self.line = line
        self.expr = expr
        where = f"{source}:{line}" if line is not None else source
        text = f"{where}: {message}"
        if expr is not None:
            text += f": {expr!r}"
        super().__init__(text)


class LStr(str):
    """A string that remembers the spec line it came from (``line`` is None for Python specs)."""

    line: int | None = None

    def __new__(cls, value: str, line: int | None = None):
        obj = super().__new__(cls, value)
        obj.line = line
        return obj


def line_of(value) -> int | None:
    """The spec line a parsed value came from, when known."""
    return getattr(value, "line", None)
