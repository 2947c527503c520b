"""Hand-written ``@numba.njit`` helpers that every generated numba module imports as ``_nk``.

This module imports numba at the top: only the generated ``*_numba.py`` modules import it, and
only :mod:`scangen.runtime.numba` imports those, when the numba backend runs.
"""
import math
import os
import tempfile
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import compiler as _compiler
from numba.extending import intrinsic, overload

def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _ensure_cache_dir(sources=None, user_dir=None) -> str | None:
    """numba caches a kernel beside its source (``__pycache__``) or, where that folder is not
    writable, in its per-user folder (``~/.cache/numba``), and raises at decoration ("cannot
    cache function ...: no locator available") where neither is: a read-only installation run by
    a user without a writable home (a container's nobody). Then the kernels are cached in a
    folder of the temp dir instead. ``NUMBA_CACHE_DIR``, where set, is numba's and left alone.
    Returns the folder set, if any."""
    if numba.config.CACHE_DIR:
        return None
    here = Path(__file__).resolve().parent
    sources = sources or (here, here.parent.parent / "generated", here.parent / "generated")
    if all(_writable(f / "__pycache__") for f in sources if f.is_dir()):
        return None
    from numba.misc.appdirs import AppDirs
    user_dir = user_dir or Path(AppDirs(appname="numba", appauthor=False).user_cache_dir)
    if _writable(user_dir):
        return None
    folder = Path(tempfile.gettempdir()) / f"scangen-numba-{getattr(os, 'getuid', lambda: 0)()}"
    numba.config.CACHE_DIR = str(folder)
    return str(folder)


_ensure_cache_dir()

# The one fast-math freedom the kernels take: fusing a * b + c into one FMA (a scan step's
# A = alpha + beta * A is one FMA on the critical path). It keeps NaN and inf semantics.
CONTRACT = {"contract"}
# How the helpers below are compiled; the generated kernels (KERNEL, templates/numba_module.py.j2)
# add NoAliasCompiler. error_model="numpy":
# x / 0 is inf or NaN, as in torch and Triton, not Python's ZeroDivisionError, whose check a
# division would also keep out of vectorised loops.
HELPER = dict(cache=True, nogil=True, fastmath=CONTRACT, error_model="numpy")


class NoAliasCompiler(_compiler.Compiler):
    """numba's nopython pipeline with every array argument marked ``noalias`` (numba's
    ``Flags.noalias``, which its parfors set for the gufuncs they prove alias-free): the
    pointers of different arguments, and of the kernel's own buffers, never overlap. True of
    every call scangen makes (scangen.runtime.numba): each output, and each scratch for an
    output not asked for, is an allocation of its own, and inputs that share memory are only
    read (tests/test_numba_backend.py checks every call). Without it LLVM checks, before every
    vectorised loop over a time-major step's rows, each stored array against each loaded one
    (about 30 comparisons a step, their flags spilled to the stack), and steps of few rows paid
    for it: time-major 8 x 2048 1.6x-7.7x, 64 x 16384 1.2x-2.0x slower (bench/CPU.md)."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return [_compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)]


KERNEL = dict(HELPER, pipeline_class=NoAliasCompiler)
# The helpers below are compiled as functions of their own, not inlined in numba's IR
# (inline="always"): IR inlining runs numba's untyped passes again at every call site, which
# made the first calls of five ops 1.7x slower to compile (17.1 against 9.8 s), while LLVM
# inlines these small functions anyway (GAE and V-trace rows at the same speed either way).
# Except :func:`row`, whose view returned from a call is reference-counted (an atomic increment
# and decrement a step in the time-major kernels: V-trace time-major 64 x 16384 2.1x slower),
# and :func:`at1`, the time-major kernels' load (1.2x faster inlined).
_jit = numba.njit(**HELPER)


@_jit
def minimum(a, b):
    # NaN-propagating, as torch.minimum (Python's min(nan, 1) is nan but min(1, nan) is 1)
    return a if (a < b or a != a) else b


@_jit
def maximum(a, b):
    return a if (a > b or a != a) else b


@_jit
def where(c, a, b):
    """``a if c else b`` with both already computed: a select, where a conditional expression
    is a branch around each side's arithmetic, which keeps a loop from vectorising (V-trace's
    time-major loop: 10.1 against 1.7 ms at 4096 x 128). Every side is safe to compute: the
    kernels' arithmetic raises nothing (error_model="numpy")."""
    return a if c else b


@intrinsic
def _f64_of_bits(typingctx, i):
    """The float64 whose bits are the int64 ``i`` (an LLVM bitcast, which vectorises)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


# exp(x) = 2**k * exp(r), k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts, Cody and
# Waite: k * _LN2_HI is exact), exp(r) by its Taylor series to r**13 (|r| <= ln(2) / 2: the
# tail is below 2e-16 of the result).
_LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42fee00000: 21 low zero bits
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
_LOG2E = 1.4426950408889634
_C = tuple(1.0 / math.factorial(n) for n in range(14))


@_jit
def exp(x):
    """``exp(x)`` in float64 within 1 ulp of libm's (the same inf, 0, subnormals and NaN), in
    arithmetic LLVM vectorises: libm's ``exp`` is a call a step, which kept V-trace's
    time-major loop scalar (the ratio exp(log_pi_target - log_pi_behavior) a step)."""
    y = x if x == x else 0.0
    y = min(max(y, -746.0), 710.0)  # beyond these exp is 0 or inf in float64
    kf = math.floor(y * _LOG2E + 0.5)
    r = (y - kf * _LN2_HI) - kf * _LN2_LO
    p = _C[13]
    p = p * r + _C[12]
    p = p * r + _C[11]
    p = p * r + _C[10]
    p = p * r + _C[9]
    p = p * r + _C[8]
    p = p * r + _C[7]
    p = p * r + _C[6]
    p = p * r + _C[5]
    p = p * r + _C[4]
    p = p * r + _C[3]
    p = p * r + _C[2]
    p = p * r + 1.0
    p = p * r + 1.0
    k = np.int64(kf)  # 2**k as two factors, each a normal double: k reaches -1077 and 1025
    k1 = k >> 1
    s = p * _f64_of_bits((k1 + 1023) << 52) * _f64_of_bits((k - k1 + 1023) << 52)
    return s if x == x else x


@intrinsic
def _f32_of_bits(typingctx, i):
    """The float32 whose bits are the int32 ``i``."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


# exp32: the same reduction in float32 (ln 2 = _LN2_HI32 + _LN2_LO32, _LN2_HI32 with 12 low zero
# bits), the Taylor series to r**7 (the tail below 6e-9 of the result, under float32's 6e-8).
_F32 = np.float32
_LN2_HI32 = _F32(0.693359375)
_LN2_LO32 = _F32(-2.12194440e-4)
_LOG2E32 = _F32(_LOG2E)
_C32 = tuple(_F32(c) for c in _C[:8])


@_jit
def exp32(x):
    """``exp(x)`` of a float32, in float32 arithmetic: within 1 ulp of the correctly rounded
    result, with libm's inf, 0, subnormals and NaN. Twice as many lanes a vector as
    :func:`exp` (V-trace's ratio in float32 calls)."""
    y = x if x == x else _F32(0.0)
    y = min(max(y, _F32(-104.0)), _F32(89.0))  # beyond these exp is 0 or inf in float32
    kf = _F32(math.floor(y * _LOG2E32 + _F32(0.5)))
    r = (y - kf * _LN2_HI32) - kf * _LN2_LO32
    p = _C32[7]
    p = p * r + _C32[6]
    p = p * r + _C32[5]
    p = p * r + _C32[4]
    p = p * r + _C32[3]
    p = p * r + _C32[2]
    p = p * r + _C32[1]
    p = p * r + _C32[0]
    k = np.int32(kf)  # 2**k as two factors, each a normal float32: k reaches -150 and 129
    k1 = k >> 1
    s = p * _f32_of_bits((k1 + 127) << 23) * _f32_of_bits((k - k1 + 127) << 23)
    return s if x == x else x


def exp_as(x, F):
    """``F(exp(x))`` in arithmetic that vectorises: :func:`exp32` where the kernel computes in
    float32 (``F`` is np.float32), :func:`exp` in float64 otherwise."""
    return F(math.exp(x))


@overload(exp_as)
def _exp_as(x, F):
    if isinstance(F, types.NumberClass) and F.instance_type == types.float32:
        return lambda x, F: exp32(F(x))
    return lambda x, F: F(exp(x))


def at(x, i, j, k):
    """``x[i, j, k]`` for an array, ``x`` itself for a number (a float param, an absent
    input's default): one kernel source, compiled for each mix, with the numbers' loads gone."""
    return x[i, j, k]


def atk(x, i, j, k, m):
    """As :func:`at`, for the ``[.., K]`` views of ``[N, T, K]`` inputs."""
    return x[i, j, k, m]


# Indices are unsigned inside: every index the kernels form is in range, and numba adds no
# wrap-around of negative indices for unsigned ones, which lets LLVM vectorise unit strides.
# A bool array's element is read as a 0 or 1 byte (numba's float() takes no bool): numba's load
# of a bool compares its byte with 0, so a byte other than 0 or 1 (a bool tensor viewed from
# other bytes) reads 1, as torch and Triton read it, not its own value.
def _is_bool(x) -> bool:
    """Whether numba type ``x`` is an array of bools."""
    return isinstance(x, types.Array) and isinstance(x.dtype, types.Boolean)


@overload(at)
def _at(x, i, j, k):
    if _is_bool(x):
        return lambda x, i, j, k: np.uint8(x[np.uintp(i), np.uintp(j), np.uintp(k)])
    if isinstance(x, types.Array):
        return lambda x, i, j, k: x[np.uintp(i), np.uintp(j), np.uintp(k)]
    return lambda x, i, j, k: x


@overload(atk)
def _atk(x, i, j, k, m):
    if _is_bool(x):
        return lambda x, i, j, k, m: np.uint8(x[np.uintp(i), np.uintp(j), np.uintp(k), np.uintp(m)])
    if isinstance(x, types.Array):
        return lambda x, i, j, k, m: x[np.uintp(i), np.uintp(j), np.uintp(k), np.uintp(m)]
    return lambda x, i, j, k, m: x


def put(x, i, j, k, v):
    """``x[i, j, k] = v``, through unsigned indices as :func:`at`: with a signed index numba
    wraps negative ones around, and the loop over time-major rows then vectorises into masked
    gathers and scatters (1024 x 1024 discounted returns: 2.3 against 0.5 ms)."""
    x[i, j, k] = v


@overload(put)
def _put(x, i, j, k, v):
    def impl(x, i, j, k, v):
        x[np.uintp(i), np.uintp(j), np.uintp(k)] = v
    return impl


def row(x, i, j, lo, n):
    """``x[i, j, lo:lo + n]`` for an array, ``x`` itself for a number: one time step's row
    view in the time-major kernels, which index it with :func:`at1` and :func:`put1`."""
    return x[i, j, lo:lo + n]


@overload(row, inline="always")  # an array out of a call is refcounted: inlined, it is not
def _row(x, i, j, lo, n):
    if isinstance(x, types.Array):
        return lambda x, i, j, lo, n: x[np.uintp(i), np.uintp(j), lo:lo + n]
    return lambda x, i, j, lo, n: x


def at1(x, j):
    """``x[j]`` of a row view, ``x`` itself for a number."""
    return x[j]


@overload(at1, inline="always")  # inlined: time-major loops 1.2x faster (TD(lambda) 64 x 16384)
def _at1(x, j):
    if _is_bool(x):
        return lambda x, j: np.uint8(x[np.uintp(j)])
    if isinstance(x, types.Array):
        return lambda x, j: x[np.uintp(j)]
    return lambda x, j: x


def put1(x, j, v):
    """``x[j] = v`` of a row view."""
    x[j] = v


@overload(put1)
def _put1(x, j, v):
    def impl(x, j, v):
        x[np.uintp(j)] = v
    return impl


@_jit
def gather(src, i, j, k, K, index):
    """``src[i, j, k, index]``, NaN for an index outside ``[0, K)`` (docs/spec-guide.md)."""
    if index < 0 or index >= K:
        return math.nan
    return float(atk(src, i, j, k, index))

