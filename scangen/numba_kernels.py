"""Hand-written ``@numba.njit`` helpers that every generated numba module imports as ``_nk``.

This module imports numba at the top: only the generated ``*_numba.py`` modules import it, and
only :mod:`scangen.numbapath` imports those, when the numba backend runs.
"""
import math

import numba

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


@_jit
def gather(src, base, sk, K, index):
    """``src[base + index * sk]``, NaN for an index outside ``[0, K)`` (docs/spec-guide.md)."""
    if index < 0 or index >= K:
        return math.nan
    return float(src[base + index * sk])
