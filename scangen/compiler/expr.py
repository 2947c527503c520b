"""Safe expression parsing: spec text -> SymPy, through a whitelist, never ``eval``.

Expressions are parsed with :func:`ast.parse` and every node is checked against a small grammar:
numbers, declared names, ``+ - * / **``, one comparison inside ``where``, and calls to the
functions in :data:`FUNCTIONS`. Attribute access, subscripts, keywords, lambdas and every other
construct are refused, so a spec can never run code of its own.
"""
from __future__ import annotations

import ast
from typing import Callable, Mapping

import sympy

from ..errors import SpecError

MAX_EXPR_CHARS = 4000
MAX_EXPR_NODES = 800
MAX_CONST_EXPONENT = 64
# The largest |n| of an integer power x**n of a non-constant x: the printers write it as
# multiplications (1 / (...) for n < 0), whose text holds x n times and whose float32 result
# overflows for |x| > 256 at n = 16 already
MAX_INT_POWER = 16


def half_integer(e) -> int | None:
    """``k`` where the exponent ``e`` is the number k / 2 with k odd (0.5, -1.5, 7/2), else None:
    such a power prints as x**((k - 1) / 2) * sqrt(x)."""
    if not getattr(e, "is_Number", False):
        return None
    twice = 2 * float(e)
    return int(twice) if twice == int(twice) and int(twice) % 2 else None


class Next(sympy.Function):
    """``next(e, fill)``: ``e`` at step ``t+1``; ``fill`` at the last step of the window."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 2


class Prev(sympy.Function):
    """``prev(e, fill)``: ``e`` at step ``t-1``; ``fill`` at the first step of the window."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 2


class KSum(sympy.Function):
    """``sum(e)``: the sum of ``e`` over the trailing axis of its ``[N, T, K]`` inputs."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 1


class Gather(sympy.Function):
    """``gather(x, i)``: ``x[n, t, i[n, t]]`` for an ``[N, T, K]`` input and an index input."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 2


class Present(sympy.Function):
    """``present(x)``: 1 when the optional input ``x`` was passed, else 0 (known at compile time)."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 1


class Where(sympy.Function):
    """``where(c, a, b)``: ``a`` where ``c != 0``, else ``b``. The condition is numeric (a flag
    or a comparison indicator), so the whole tree stays differentiable: d/dx where(c, a, b) is
    where(c, da/dx, db/dx)."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 3

    @classmethod
    def eval(cls, cond, a, b):
        if a == b:
            return a
        if cond.is_Number:
            return a if cond != 0 else b
        return None

    def fdiff(self, argindex=1):
        cond = self.args[0]
        if argindex == 2:
            return Where(cond, 1, 0)
        if argindex == 3:
            return Where(cond, 0, 1)
        return sympy.S.Zero


class Indicator(sympy.Function):
    """1 where the comparison holds, else 0; its derivative is 0 almost everywhere."""

    is_real = True  # every value in a spec is real; keeps SymPy from re()/im()
    nargs = 2
    op = ""

    def fdiff(self, argindex=1):
        return sympy.S.Zero

    @classmethod
    def eval(cls, a, b):
        """A comparison of two numbers is its value (``0.4 < 0.6`` is 1): left unevaluated it
        reached the printers as a 'number' that is not one."""
        if a.is_number and b.is_number:
            holds = _RELATIONS[cls.op](a, b)
            if holds in (sympy.true, sympy.false):
                return sympy.S.One if holds == sympy.true else sympy.S.Zero
        return None


_RELATIONS = {"<": sympy.StrictLessThan, "<=": sympy.LessThan, ">": sympy.StrictGreaterThan,
              ">=": sympy.GreaterThan, "==": sympy.Eq, "!=": sympy.Ne}


def _indicator(name, op):
    return type(name, (Indicator,), {"op": op, "__doc__": f"``a {op} b`` as 1 or 0."})


Lt, Le, Gt, Ge = (_indicator(n, o) for n, o in
                  (("Lt", "<"), ("Le", "<="), ("Gt", ">"), ("Ge", ">=")))
EqI, NeI = _indicator("EqI", "=="), _indicator("NeI", "!=")


def _minmax(fn):
    def build(*args):
        if len(args) < 2:
            raise TypeError("needs at least 2 arguments")
        return fn(*args)
    return build


def _sigmoid(x):
    """``1 / (1 + e)`` where ``x >= 0`` and ``e / (1 + e)`` below, with ``e = exp(-|x|)``: one
    exp, of a number <= 0, so no exp of a large positive number in the value or in its
    derivative. ``1 / (1 + exp(-x))`` alone is finite, but its derivative
    ``exp(-x) / (1 + exp(-x))**2`` is inf / inf = NaN below about -89 in float32 (-710 in
    float64), and a select's derivative is each side's times a 0/1 mask, which keeps a NaN.
    ``-|x|`` is written as a select, whose derivative at 0 is -1 (the ``x >= 0`` side), where
    ``Abs``'s is 0, which would make sigmoid'(0) 0 instead of 1/4."""
    pos = Ge(x, 0)
    e = sympy.exp(Where(pos, -x, x))
    return Where(pos, 1, e) / (1 + e)


# name -> (number of arguments or None for "2 or more", builder)
FUNCTIONS: dict[str, tuple[int | None, Callable]] = {
    "exp": (1, sympy.exp),
    "log": (1, sympy.log),
    "sqrt": (1, sympy.sqrt),
    "abs": (1, sympy.Abs),
    "sigmoid": (1, _sigmoid),
    # 2 sigmoid(2x) - 1 stays finite for large |x|, unlike (e^x - e^-x) / (e^x + e^-x).
    "tanh": (1, lambda x: 2 * _sigmoid(2 * x) - 1),
    "min": (None, _minmax(sympy.Min)),
    "max": (None, _minmax(sympy.Max)),
    "clip": (3, lambda x, lo, hi: sympy.Min(sympy.Max(x, lo), hi)),
    "where": (3, Where),
    "next": (2, Next),
    "prev": (2, Prev),
    "sum": (1, KSum),
    "gather": (2, Gather),
    "present": (1, Present),
}

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a ** b,
}
_COMPARE = {ast.Lt: Lt, ast.LtE: Le, ast.Gt: Gt, ast.GtE: Ge, ast.Eq: EqI, ast.NotEq: NeI}


def parse_expr(text, names: Mapping[str, sympy.Expr], *, source: str, line: int | None,
               what: str) -> sympy.Expr:
    """Parse ``text`` into SymPy, resolving identifiers through ``names`` only.

    ``what`` says where the expression sits in the spec (``"scan 'A' alpha"``) for error messages.
    """
    text = str(text)

    def fail(msg: str) -> SpecError:
        return SpecError(f"{what}: {msg}", source=source, line=line, expr=text)

    if len(text) > MAX_EXPR_CHARS:
        raise fail(f"expression is longer than {MAX_EXPR_CHARS} characters")
    if not text.isascii():
        # Python folds look-alike letters (NFKC), so a non-ASCII name could alias another.
        raise fail("expressions must be ASCII")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        reason = getattr(exc, "msg", None) or type(exc).__name__
        raise fail(f"not a valid expression ({reason})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPR_NODES:
        raise fail(f"expression has more than {MAX_EXPR_NODES} syntax nodes")

    def conv(node, cond_ok=False):
        if isinstance(node, ast.Expression):
            return conv(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise fail(f"unsupported constant {node.value!r}")
            if isinstance(node.value, int):
                return _finite(sympy.Integer(node.value))
            return _finite(sympy.Float(node.value))
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise fail(f"undeclared name '{node.id}'")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = conv(node.left), conv(node.right)
            if isinstance(node.op, ast.Pow) and right.is_Number and \
                    (abs(right) > MAX_CONST_EXPONENT or not right.is_real):
                raise fail(f"the exponent {right} is too large (at most {MAX_CONST_EXPONENT})")
            return _finite(_BINOPS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = conv(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Compare):
            if not cond_ok:
                raise fail("a comparison may only be the first argument of where()")
            if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
                raise fail("only a single comparison (<, <=, >, >=, ==, !=) is supported")
            return _COMPARE[type(node.ops[0])](conv(node.left), conv(node.comparators[0]))
        if isinstance(node, ast.Call):
            return call(node)
        raise fail(f"unsupported syntax ({type(node).__name__})")

    def call(node):
        if not isinstance(node.func, ast.Name):
            raise fail(f"unsupported syntax (a call of {type(node.func).__name__}): only the "
                       f"functions {', '.join(sorted(FUNCTIONS))} can be called")
        if node.func.id not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise fail(f"unknown function '{node.func.id}' (allowed: {allowed})")
        if node.keywords:
            raise fail(f"{node.func.id}() takes no keyword arguments")
        arity, build = FUNCTIONS[node.func.id]
        nargs = len(node.args)
        if (arity is None and nargs < 2) or (arity is not None and nargs != arity):
            expected = "at least 2" if arity is None else str(arity)
            noun = "argument" if expected == "1" else "arguments"
            raise fail(f"{node.func.id}() takes {expected} {noun}, got {nargs}")
        args = [conv(a, cond_ok=(node.func.id == "where" and i == 0))
                for i, a in enumerate(node.args)]
        return _finite(build(*args))

    def _finite(value):
        """Constants must be finite reals that fit a float (no 1/0, log(0), sqrt(-1), 1e400)."""
        for atom in value.atoms(sympy.Number, sympy.NumberSymbol, sympy.core.numbers.ImaginaryUnit):
            if atom.is_real is False or not atom.is_finite or \
                    (atom.is_Number and abs(float(atom)) > 1e300):
                raise fail(f"the constant {atom} is not a finite real number")
        if value.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan, sympy.I):
            raise fail("the expression evaluates to a constant that is not a finite real number")
        return value

    try:
        return conv(tree)
    except RecursionError:
        raise fail("expression is nested too deeply") from None
