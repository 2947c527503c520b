"""Hand-written ``@numba.njit`` helpers that every generated numba module imports as ``_nk``.

This module imports numba at the top: only the generated ``*_numba.py`` modules import it, and
only :mod:`scangen.runtime.numba` imports those, when the numba backend runs.
"""
import math

import numba
import numpy as np
from numba import types
from numba.extending import overload

# The one fast-math freedom the kernels take: fusing a * b + c into one FMA (a scan step's
# A = alpha + beta * A is one FMA on the critical path). It keeps NaN and inf semantics.
CONTRACT = {"contract"}
_jit = numba.njit(cache=True, nogil=True, inline="always", fastmath=CONTRACT)


@_jit
def minimum(a, b):
    # NaN-propagating, as torch.minimum (Python's min(nan, 1) is nan but min(1, nan) is 1)
    return a if (a < b or a != a) else b


@_jit
def maximum(a, b):
    return a if (a > b or a != a) else b


@_jit
def where(c, a, b):
    return a if c else b


def at(x, i, j, k):
    """``x[i, j, k]`` for an array, ``x`` itself for a number (a float param, an absent
    input's default): one kernel source, compiled for each mix, with the numbers' loads gone."""
    return x[i, j, k]


def atk(x, i, j, k, m):
    """As :func:`at`, for the ``[.., K]`` views of ``[N, T, K]`` inputs."""
    return x[i, j, k, m]


# Indices are unsigned inside: every index the kernels form is in range, and numba adds no
# wrap-around of negative indices for unsigned ones, which lets LLVM vectorise unit strides.
@overload(at, inline="always")
def _at(x, i, j, k):
    if isinstance(x, types.Array):
        return lambda x, i, j, k: x[np.uintp(i), np.uintp(j), np.uintp(k)]
    return lambda x, i, j, k: x


@overload(atk, inline="always")
def _atk(x, i, j, k, m):
    if isinstance(x, types.Array):
        return lambda x, i, j, k, m: x[np.uintp(i), np.uintp(j), np.uintp(k), np.uintp(m)]
    return lambda x, i, j, k, m: x


def put(x, i, j, k, v):
    """``x[i, j, k] = v``, through unsigned indices as :func:`at`: with a signed index numba
    wraps negative ones around, and the loop over time-major rows then vectorises into masked
    gathers and scatters (1024 x 1024 discounted returns: 2.3 against 0.5 ms)."""
    x[i, j, k] = v


@overload(put)  # not inline="always": numba's IR inlining lost some of a step's stores
def _put(x, i, j, k, v):
    def impl(x, i, j, k, v):
        x[np.uintp(i), np.uintp(j), np.uintp(k)] = v
    return impl


def row(x, i, j, lo, n):
    """``x[i, j, lo:lo + n]`` for an array, ``x`` itself for a number: one time step's row
    view in the time-major kernels, which index it with :func:`at1` and :func:`put1`."""
    return x[i, j, lo:lo + n]


@overload(row, inline="always")
def _row(x, i, j, lo, n):
    if isinstance(x, types.Array):
        return lambda x, i, j, lo, n: x[np.uintp(i), np.uintp(j), lo:lo + n]
    return lambda x, i, j, lo, n: x


def at1(x, j):
    """``x[j]`` of a row view, ``x`` itself for a number."""
    return x[j]


@overload(at1, inline="always")
def _at1(x, j):
    if isinstance(x, types.Array):
        return lambda x, j: x[np.uintp(j)]
    return lambda x, j: x


def put1(x, j, v):
    """``x[j] = v`` of a row view (not inlined in numba's IR, as :func:`put`)."""
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

