"""SymPy printers for the targets: Triton (inside ``@triton.jit`` kernels), torch and numba.

Each printer has an explicit function table and fails, naming the spec, on anything it does not
know, so an unsupported expression is a build-time error instead of broken generated code.
Symbols print through a ``symbols`` map, which lets one expression be printed for different
contexts (a ``[BN, BT]`` tile, a ``[BN, BT, BK]`` tile inside a ``sum``).

Numbers keep float64 calls exact on every target: a constant call (``exp(2)``) prints as its
double, and the Triton printer writes a number in the kernels' accumulation type ``ACC`` wherever
Triton would otherwise make it a float32 (a select of two numbers, ``sign``, ``Heaviside``; in
Triton 3.6 a number given to ``tl.minimum``/``tl.maximum`` or a comparison);
``tests/test_offline_compile.py`` reads the compiled IR of float64 kernels for rounded numbers.
"""
from __future__ import annotations

import math

import numpy as np
from sympy import Float
from sympy.printing.str import StrPrinter

from ..abi import RESERVED_PREFIXES
from ..errors import SpecError
from .expr import MAX_INT_POWER, Where, Indicator, half_integer


class _Printer(StrPrinter):
    lib = ""
    functions: dict[str, str] = {}

    def __init__(self, symbols: dict[str, str], spec_name: str):
        super().__init__({"order": "none"})
        self.symbols = symbols
        self.spec_name = spec_name

    def _print(self, expr, **kwargs):
        # A constant the spec left as a call (exp(2), sqrt(2), log(3)) is its value as the nearest
        # double: the targets' functions of a literal work in float32 (Triton's tl.exp(2.0))
        if getattr(expr, "is_number", False) and not expr.is_Number and expr.is_real:
            value = float(expr)
            if math.isfinite(value):
                return self._print(Float(value))
        return super()._print(expr, **kwargs)

    def fail(self, expr):
        return SpecError(f"cannot print {type(expr).__name__} for {self.target}",
                         source=self.spec_name, expr=str(expr))

    def _print_Symbol(self, expr):
        return self.symbols.get(expr.name, expr.name)

    def num(self, text: str) -> str:
        """A number literal as the target writes it (the numba kernels: in their type ``F``)."""
        return text

    def _print_Integer(self, expr):
        return self.num(f"{float(expr.p)!r}")

    def _print_Rational(self, expr):
        return self.num(f"{float(expr)!r}")

    def _print_Float(self, expr):
        return self.num(repr(float(expr)))

    def _print_NumberSymbol(self, expr):  # e, pi, ...: as the nearest double
        return self.num(repr(float(expr)))

    _print_Exp1 = _print_Pi = _print_EulerGamma = _print_GoldenRatio = _print_NumberSymbol

    def _print_Function(self, expr):
        if isinstance(expr, Indicator):
            a, b = (self._operand(x) for x in expr.args)
            return f"({a} {expr.op} {b})"
        name = type(expr).__name__
        if name not in self.functions:
            raise self.fail(expr)
        return f"{self.functions[name]}({', '.join(self._print(a) for a in expr.args)})"

    _print_exp = _print_log = _print_Abs = _print_Function

    def _print_Pow(self, expr):
        base, e = expr.args
        b = self.parenthesize(base, 100)
        one = self.num("1.0")
        # MAX_INT_POWER + 1: the adjoint's derivative of x**-MAX_INT_POWER
        if e.is_Integer and 1 <= abs(int(e)) <= MAX_INT_POWER + 1:
            prod = _product(b, abs(int(e)))
            return f"({prod})" if e > 0 else f"({one} / ({prod}))"
        if e.is_Number and float(e) == 0.5:
            return f"{self.sqrt}({self._print(base)})"
        if e.is_Number and float(e) == -0.5:
            return f"({one} / {self.sqrt}({self._print(base)}))"
        half = half_integer(e)
        # up to MAX_INT_POWER + 3/2: the adjoint's derivative of x**(-MAX_INT_POWER + 1/2)
        if half is not None and abs(half) <= 2 * MAX_INT_POWER + 3:
            root = f"{self.sqrt}({self._print(base)})"
            prod = f"{_product(b, (abs(half) - 1) // 2)} * {root}"
            return f"({prod})" if half > 0 else f"({one} / ({prod}))"
        raise SpecError(f"only integer and half-integer powers up to {MAX_INT_POWER + 1} and "
                        f"square roots are supported by {self.target}", source=self.spec_name,
                        expr=str(expr))

    def _operand(self, arg) -> str:
        """An argument of a comparison, ``min`` or ``max``."""
        return self._print(arg)

    def _minmax(self, expr, fn, extra=""):
        args = [self._operand(a) for a in expr.args]
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a}{extra})"
        return out

    def _condition(self, c) -> str:
        """A where's condition: a comparison as it is, any other value as ``(value != 0)``."""
        return self._print(c) if isinstance(c, Indicator) else f"({self._print(c)} != 0)"

    # appended to every select's arguments (the torch path's accumulation dtype)
    where_tail = ""

    def _print_Where(self, expr):
        c, a, b = expr.args
        args = self._condition(c), self._print(a), self._print(b)
        return f"{self.where}({', '.join(args)}{self.where_tail})"

    def _print_sign(self, expr):
        x, w, tail = self._print(expr.args[0]), self.where, self.where_tail
        one, minus, zero = self.num("1.0"), self.num("-1.0"), self.num("0.0")
        return f"{w}({x} > 0, {one}, {w}({x} < 0, {minus}, {zero}{tail}){tail})"

    def _print_Heaviside(self, expr):
        one, zero = self.num("1.0"), self.num("0.0")
        return f"{self.where}({self._print(expr.args[0])} > 0, {one}, {zero}{self.where_tail})"

    def emptyPrinter(self, expr):
        raise self.fail(expr)


class TritonPrinter(_Printer):
    target = "Triton"
    functions = {"exp": "tl.exp", "log": "tl.log", "Abs": "tl.abs", "sqrt": "tl.sqrt"}
    sqrt = "tl.sqrt"
    where = "tl.where"

    # NaN-propagating, as torch.minimum: a NaN operand (an out-of-range gather, a NaN input)
    # must not be clipped into a finite value
    _NAN = ", propagate_nan=tl.PropagateNan.ALL"

    # Triton types a select of two Python floats as float32, and a constant combined with a
    # float32 tensor stays float32: where(c, 0.1, -0.9), 0.3 * sign(x) and where(c, where(d, 1,
    # 0.5), 0.3) would be rounded before a float64 kernel's arithmetic sees them. A select of two
    # numbers is therefore written in the kernels' accumulation type ACC: 1/0 as the condition
    # converted, other numbers as 0-d ACC tensors.
    def _print_Where(self, expr):
        c, a, b = expr.args
        if not (a.is_Number and b.is_Number):
            return super()._print_Where(expr)
        cond = self._condition(c)
        # a condition on present() flags alone is a constexpr bool, which has no .to()
        tensor = not all(s.name.startswith(RESERVED_PREFIXES[0]) for s in c.free_symbols)
        if (a, b) == (1, 0) and tensor:
            return f"{cond}.to(ACC)"
        if (a, b) == (0, 1) and tensor:
            return f"(~{cond}).to(ACC)"
        return f"tl.where({cond}, {self._acc(a)}, {self._acc(b)})"

    def _acc(self, number) -> str:
        return f"tl.full([], {self._print(number)}, ACC)"

    def _print_sign(self, expr):  # 0 for 0 and NaN, as the select it replaces
        x = self._print(expr.args[0])
        return f"(({x} > 0).to(ACC) - ({x} < 0).to(ACC))"

    def _print_Heaviside(self, expr):
        return f"({self._print(expr.args[0])} > 0).to(ACC)"

    def _print_Min(self, expr):
        return self._minmax(expr, "tl.minimum", self._NAN)

    def _print_Max(self, expr):
        return self._minmax(expr, "tl.maximum", self._NAN)

    def _operand(self, arg) -> str:
        # Triton 3.6 makes a number given to tl.minimum/tl.maximum, or compared with a tensor, a
        # float32 before it meets the other side (3.9 does not): max(x, 0.1) and x > 0.1 in
        # float64 took 0.1 rounded. A number float32 holds exactly is written as it is.
        if arg.is_Number and float(np.float32(float(arg))) != float(arg):
            return self._acc(arg)
        return self._print(arg)


class TorchPrinter(_Printer):
    target = "torch"
    functions = {"exp": "_tp.exp", "log": "_tp.log", "Abs": "abs", "sqrt": "_tp.sqrt"}
    sqrt = "_tp.sqrt"
    where = "_tp.where"

    # Every select is told the call's accumulation dtype, which its numbers take, as in the kernels
    # (Triton's ACC selects, numba's _F numbers). A Python number made float64 instead would widen
    # the float32 arithmetic and comparisons after it: p >= where(f, p, x * p) compared 0.2 with
    # its float32 rounding and took the other side.
    where_tail = ", _call.acc"

    def _print_Min(self, expr):
        return self._minmax(expr, "_tp.minimum")

    def _print_Max(self, expr):
        return self._minmax(expr, "_tp.maximum")


class NumbaPrinter(_Printer):
    """Scalar code inside ``@numba.njit`` kernels (``scangen.runtime.numba_kernels`` as ``_nk``).
    The kernels compute in their argument ``F``, the call's accumulation type (np.float32, or
    np.float64 for float64 calls), so every number is written ``F(...)``: a bare literal is a
    float64 and would widen the arithmetic around it."""

    target = "numba"
    functions = {"exp": "_np.exp", "log": "_np.log", "Abs": "abs", "sqrt": "_np.sqrt"}
    sqrt = "_np.sqrt"
    where = "_nk.where"

    def num(self, text: str) -> str:
        return f"_F({text})"

    def _print_Where(self, expr):
        # A branch, so that a scalar loop computes only the side it takes, except the head of a
        # ladder where(c1, x, where(c2, y, z)) whose sides are already computed (names, numbers):
        # a select (_nk.where), which a step's random flags cannot mispredict, around the inner
        # branch. V-trace's one-row loop with where(terminateds, 0, where(cut, boot, next(values,
        # 0))) as two branches ran 1.2x-1.35x slower than f974f43's one, so 1.06x-1.09x; every
        # where of computed sides as a select cost GAE 1.6x, and a select whose true side is the
        # inner where TD(lambda) 1.04x (bench/CPU.md, results/cpu-2026-12-04-module-ab-round25-*).
        c, a, b = expr.args
        if _computed(a) and isinstance(b, Where) and _computed(b):
            return super()._print_Where(expr)
        cond = self._print(c) if isinstance(c, Indicator) else f"{self._print(c)} != 0"
        return f"({self._print(a)} if {cond} else {self._print(b)})"

    def _print_Min(self, expr):  # NaN-propagating, as torch.minimum
        return self._minmax(expr, "_nk.minimum")

    def _print_Max(self, expr):
        return self._minmax(expr, "_nk.maximum")


class NumbaVectorPrinter(NumbaPrinter):
    """As :class:`NumbaPrinter`, for loops meant to vectorise (the time-major kernels' loop over
    rows, the row kernels' block of hoisted exps): a ``Where`` is a select of both sides
    (``_nk.where``, as ``tl.where``) and ``exp`` is ``_nk.exp_as``, arithmetic instead of a libm
    call. Either a branch or a call keeps LLVM from
    vectorising the loop (V-trace 4096 x 128: 10.1 against 1.7 ms); in a scalar loop both cost
    more than they save (V-trace rows 5.0 against 13.2 ms), so the row kernels keep those."""

    functions = {**NumbaPrinter.functions, "exp": "_nk.exp"}

    _print_Where = _Printer._print_Where

    def _print_exp(self, expr):  # float32 arithmetic in float32 kernels, else float64
        return f"_nk.exp_as({self._print(expr.args[0])}, _F)"


def _product(b: str, n: int) -> str:
    """``b`` multiplied ``n`` times: ``b * b * b`` up to 4, above by squaring, ``x**5`` as
    ``(x * x) * (x * x) * x``, which Triton's and LLVM's common subexpression elimination compute
    in 3 multiplications instead of 4 (the torch path, run eagerly, computes every copy)."""
    if n <= 4:
        return " * ".join([b] * n)
    return _squares(b, n)


def _squares(b: str, n: int) -> str:
    if n == 1:
        return b
    half = _squares(b, n // 2)
    half = half if n // 2 == 1 else f"({half})"
    return f"{half} * {half}" + (f" * {b}" if n % 2 else "")


def _computed(e) -> bool:
    """Nothing left to compute: a name, a number, or a select of such (NumbaPrinter)."""
    return e.is_Atom or (isinstance(e, Where) and all(_computed(x) for x in e.args[1:]))


def print_expr(printer_cls, expr, symbols, spec_name) -> str:
    return printer_cls(symbols, spec_name).doprint(expr)


__all__ = ["TritonPrinter", "TorchPrinter", "NumbaPrinter", "NumbaVectorPrinter", "print_expr",
           "Where"]
