"""Hand-written ``@numba.njit`` helpers that every generated numba module imports as ``_nk``.

This module imports numba at the top: only the generated ``*_numba.py`` modules import it, and
only :mod:`scangen.numbapath` imports those, when the numba backend runs.
"""
import math

import numba
from numba import types
from numba.extending import overload

_jit = numba.njit(cache=True, nogil=True, inline="always")


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


def at(x, i):
    """``x[i]`` for an array, ``x`` itself for a number (a float param, an absent input's
    default): one kernel source, compiled for each mix, with the numbers' loads gone."""
    return x[i]


@overload(at, inline="always")
def _at(x, i):
    if isinstance(x, types.Array):
        return lambda x, i: x[i]
    return lambda x, i: x


@_jit
def gather(src, base, sk, K, index):
    """``src[base + index * sk]``, NaN for an index outside ``[0, K)`` (docs/spec-guide.md)."""
    if index < 0 or index >= K:
        return math.nan
    return float(at(src, base + index * sk))
