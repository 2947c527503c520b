"""Integer powers of any |n| up to MAX_INT_POWER, however they are written.

SymPy merges factors before the compiler sees them, so ``x * x * x * x * x``, ``x ** 3 * x ** 2``
and a ``let`` used in a product are all ``x**5``. The printers write such a power as
multiplications on every target (``1 / (...)`` for n < 0), which keeps the sign of a negative x
(``exp(5 * log(x))`` would be NaN there). The spec below is compiled with ``scangen.compile``
and checked on every backend against a float64 loop written here with ``torch.pow``, forward
and, through the generated adjoint kernels, backward; what stays unsupported is refused with the
spec's line.
"""
from __future__ import annotations

import importlib
from unittest import mock

import pytest
import sympy
import torch

from conftest import BACKENDS, call_on, to_backend
import scangen
from scangen.compiler.expr import MAX_INT_POWER
from scangen.compiler.pipeline import to_ir
from scangen.compiler.printers import NumbaPrinter, TorchPrinter, TritonPrinter, print_expr
from scangen.runtime import ops
from scangen.testing import assert_close

# Line numbers, for the messages below: 12 A's update, 16 c.
POWERS = """\
name: user_powers
direction: reverse
inputs:
  x: float
  y: float
params:
  decay: 0.9
let:
  x3: x ** 3
scans:
  A:
    update: x * x * x * x * x + 0.1 * y ** 7 + decay * y ** 8 / (1 + y ** 8) * A
outputs:
  a: A
  b: A * x ** -5
  c: x3 * x ** 2 + 0.001 * y ** -16
"""


def reference(x, y, decay):
    """POWERS in float64, step by step, with torch.pow (differentiable: the gradient's reference)."""
    steps, carry = [], torch.zeros_like(x[:, 0])
    for t in reversed(range(x.shape[1])):
        xt, yt = x[:, t], y[:, t]
        d = decay[:, 0] if torch.is_tensor(decay) else decay
        carry = xt.pow(5) + 0.1 * yt.pow(7) + d * yt.pow(8) / (1 + yt.pow(8)) * carry
        steps.append(carry)
    a = torch.stack(steps[::-1], dim=1)
    return a, a * x.pow(-5), x.pow(5) + 0.001 * y.pow(-16)


def positive(n, t, generator, dtype):
    """|v| in [0.6, 1.4]: x ** -16 stays below 4e3."""
    return (0.6 + 0.8 * torch.rand(n, t, generator=generator, dtype=torch.float64)).to(dtype)


def signed(n, t, generator, dtype):
    """:func:`positive` with either sign: negative bases."""
    magnitude = positive(n, t, generator, torch.float64)
    sign = torch.where(torch.rand(n, t, generator=generator) < 0.5, -1.0, 1.0)
    return (magnitude * sign).to(dtype)


@pytest.fixture(scope="module")
def powers(tmp_path_factory):
    return scangen.compile(POWERS, cache_dir=tmp_path_factory.mktemp("powers_cache"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_powers_match_the_float64_loop(powers, backend, dtype):
    g = torch.Generator().manual_seed(3)
    x, y = signed(3, 37, g, dtype), signed(3, 37, g, dtype)
    assert (x < 0).any() and (y < 0).any()
    got = call_on(powers, backend, x, y, decay=0.9)
    expected = reference(x.double(), y.double(), 0.9)
    for name, out, exp in zip("abc", got, expected):
        assert out.dtype == dtype
        assert_close(out, exp, name=f"{name} ({backend}, {dtype})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_powers_backward_matches_autograd_of_the_loop(powers, backend):
    """The generated adjoint (x**5 -> 5 x**4, x**-5 -> -5 x**-6, y**-16 -> -16 y**-17) against
    torch.autograd through :func:`reference`, in float64."""
    g = torch.Generator().manual_seed(4)
    values = {"x": signed(3, 19, g, torch.float64), "y": signed(3, 19, g, torch.float64),
              "decay": torch.full((3, 1), 0.9, dtype=torch.float64)}
    check_backward(powers, reference, values, backend, outputs=3)


def check_backward(fn, reference, values, backend, outputs):
    """``fn``'s generated adjoint kernels (no fallback to autograd through the torch path) against
    torch.autograd through the float64 ``reference``, for a weighted sum of the ``outputs``."""
    op = importlib.import_module(fn.__module__).OP
    assert ops.grad_op_of(op) is not None, f"the adjoint of {op.name} was not generated"
    n, t = values["x"].shape
    weights = [torch.linspace(-1, 1, n * t, dtype=torch.float64).view(n, t) * (k + 1)
               for k in range(outputs)]

    def grads(f, leaves):
        total = sum((o * w.to(o.device)).sum() for o, w in zip(f(**leaves), weights))
        return torch.autograd.grad(total, list(leaves.values()))

    leaves = {k: v.clone().requires_grad_(True) for k, v in to_backend(backend, values).items()}
    with mock.patch.object(ops, "_recompute_backward", side_effect=AssertionError("fallback")):
        got = grads(lambda **v: fn(**v, backend=backend), leaves)
    expected = grads(reference, {k: v.clone().requires_grad_(True) for k, v in values.items()})
    for name, out, exp in zip(values, got, expected):
        assert_close(out.cpu(), exp, name=f"d/d{name} ({backend})")


@pytest.mark.parametrize("n", [2, 3, 4, -1, -2, -4])
def test_powers_up_to_4_print_as_before(n):
    """The built-ins' generated code depends on these exact strings (scangen build --check)."""
    x = sympy.Symbol("x", real=True)
    prod = " * ".join(["x"] * abs(n))
    assert print_expr(TritonPrinter, x ** n, {}, "t") == (f"({prod})" if n > 0 else
                                                          f"(1.0 / ({prod}))")
    assert print_expr(NumbaPrinter, x ** n, {}, "t") == (f"({prod})" if n > 0 else
                                                         f"(_F(1.0) / ({prod}))")


@pytest.mark.parametrize("n,text", [
    (5, "((x * x) * (x * x) * x)"),
    (-5, "(1.0 / ((x * x) * (x * x) * x))"),
    (8, "(((x * x) * (x * x)) * ((x * x) * (x * x)))"),
    (MAX_INT_POWER + 1, "((((x * x) * (x * x)) * ((x * x) * (x * x))) * "
                        "(((x * x) * (x * x)) * ((x * x) * (x * x))) * x)"),
])
def test_larger_powers_print_by_squaring(n, text):
    x = sympy.Symbol("x", real=True)
    assert print_expr(TorchPrinter, x ** n, {}, "t") == text
    value = eval(text.replace("x", "(-1.25)"))  # noqa: S307 - our own printed arithmetic
    assert value == pytest.approx((-1.25) ** n, rel=1e-15)


def test_printers_refuse_what_they_cannot_write():
    x = sympy.Symbol("x", real=True)
    for e in (x ** (MAX_INT_POWER + 2), x ** sympy.Rational(1, 3), x ** sympy.Float(2.25),
              x ** sympy.Rational(2 * MAX_INT_POWER + 5, 2), x ** sympy.Symbol("p")):
        with pytest.raises(scangen.SpecError, match=f"only integer and half-integer powers up "
                           f"to {MAX_INT_POWER + 1} and square roots are supported by Triton"):
            print_expr(TritonPrinter, e, {}, "t")


ALLOWED = ("an exponent must be an integer or a half-integer from -16 to 16 (for another power "
           "of a positive x, write exp(e * log(x)))")


@pytest.mark.parametrize("old,new,line,power", [
    ("x * x * x * x * x", "x ** 17", 12, "x**17"),
    ("x * x * x * x * x", "x ** -17", 12, "x**(-17)"),
    ("x * x * x * x * x", "x ** 2.25", 12, "x**2.25"),
    ("x * x * x * x * x", "x ** 16.5", 12, "x**16.5"),
    ("x * x * x * x * x", "x ** decay", 12, "x**decay"),
    ("x * x * x * x * x", "2 ** x", 12, "2**x"),
    ("x3 * x ** 2", "x3 ** 6", 16, "x**18"),                  # a let inlined, then merged
    ("0.001 * y ** -16", "0.001 * y ** -16 / y", 16, "y**(-17)"),
], ids=["17", "-17", "2.25", "16.5", "symbolic", "base-2", "let-merged", "division-merged"])
def test_unsupported_powers_name_the_line(old, new, line, power):
    assert old in POWERS
    text = POWERS.replace(old, new)
    with pytest.raises(scangen.SpecError) as info:
        to_ir(text)
    where = "scan 'A' update" if line == 12 else "output 'c'"
    expr = text.splitlines()[line - 1].split(": ", 1)[1]
    assert str(info.value) == f"<string>:{line}: {where}: unsupported power {power}: {ALLOWED}: " \
                              f"{expr!r}"


# Half-integer powers print as x**((k - 1) / 2) * sqrt(x): x * sqrt(x) (which SymPy merges into
# x**(3/2)), y ** -1.5, sqrt(y) ** 5 and x ** 2.5; their derivatives (x**(1/2), y**(-5/2), ...)
# are half-integer powers too, so the adjoint kernels are generated.
HALF = """\
name: user_half_powers
direction: forward
inputs:
  x: float
  y: float
params:
  decay: 0.3
scans:
  A:
    update: x * sqrt(x) + decay * y ** -1.5 * A
outputs:
  a: A
  b: sqrt(y) ** 5 + A * x ** 2.5
"""


def half_reference(x, y, decay):
    steps, carry = [], torch.zeros_like(x[:, 0])
    for t in range(x.shape[1]):
        carry = x[:, t].pow(1.5) + decay * y[:, t].pow(-1.5) * carry
        steps.append(carry)
    a = torch.stack(steps, dim=1)
    return a, y.pow(2.5) + a * x.pow(2.5)


@pytest.fixture(scope="module")
def half_powers(tmp_path_factory):
    return scangen.compile(HALF, cache_dir=tmp_path_factory.mktemp("half_powers_cache"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_half_integer_powers_match_the_float64_loop(half_powers, backend, dtype):
    g = torch.Generator().manual_seed(5)
    x, y = positive(3, 29, g, dtype), positive(3, 29, g, dtype)
    got = call_on(half_powers, backend, x, y)
    for name, out, exp in zip("ab", got, half_reference(x.double(), y.double(), 0.3)):
        assert out.dtype == dtype
        assert_close(out, exp, name=f"{name} ({backend}, {dtype})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_integer_powers_backward_matches_autograd_of_the_loop(half_powers, backend):
    g = torch.Generator().manual_seed(6)
    values = {"x": positive(3, 17, g, torch.float64), "y": positive(3, 17, g, torch.float64),
              "decay": torch.full((3, 1), 0.3, dtype=torch.float64)}
    check_backward(half_powers, lambda x, y, decay: half_reference(x, y, decay[:, 0]), values,
                   backend, outputs=2)


@pytest.mark.parametrize("k,text", [
    (3, "(x * tl.sqrt(x))"), (-3, "(1.0 / (x * tl.sqrt(x)))"), (5, "(x * x * tl.sqrt(x))"),
    (11, "((x * x) * (x * x) * x * tl.sqrt(x))")])
def test_half_integer_powers_print_with_one_square_root(k, text):
    x = sympy.Symbol("x", real=True)
    assert print_expr(TritonPrinter, x ** sympy.Rational(k, 2), {}, "t") == text
