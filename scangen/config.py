"""Launch configuration: the dispatch rule that picks block sizes from the shape.

One program owns ``BLOCK_N`` rows and streams them through time in chunks of ``BLOCK_T`` steps,
carrying each row's scan state from chunk to chunk ("stream"). Short rows get wide row tiles
(many rows per program); long rows get long chunks and fewer rows per program, shrinking
``BLOCK_N`` until the grid has enough programs to fill the GPU. When even one row per program
leaves the GPU idle and rows are long, time is split across programs too ("lookback": one
program per (row, chunk), carries passed between programs by a decoupled look-back).
Time-major buffers (rows adjacent in memory) get wide row tiles and short chunks instead, so
each step's loads are coalesced across rows. The numbers behind the constants come from
bench/sweep.py (bench/NOTES.md); docs/runtime.md states the rule.
``SCANGEN_FAMILY=stream|lookback`` forces a family (for tests and measurements).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from .env import ENV

TILE = 2048          # elements (K included) of one [BLOCK_N, BLOCK_T, BLOCK_K] tile, short chunks
LONG_TILE = 1024     # ... once a chunk holds 512 elements or more: one row per program
MAX_BLOCK_T = 1024   # longer chunks add scan depth without adding parallelism
MAX_BLOCK_K = 16     # the trailing axis is streamed in slices of this width
MIN_ROWS_TIME_MAJOR = 16  # row-tile floor for time-major buffers (coalescing; not yet measured)
NUM_WARPS = 4        # measured best for every tile above (bench/NOTES.md, sweep of 2026-11-29)


class Config(NamedTuple):
    block_n: int
    block_t: int
    block_k: int
    num_warps: int
    family: str = "stream"   # "stream" | "lookback"
    num_stages: int = 3      # software-pipelining depth of the chunk loop (Triton's default)


# A function ``call -> Config`` that replaces the rule below (bench/sweep.py measures variants
# through it); None in normal use. Plans cache their config: clear runtime._PLANS after setting it.
OVERRIDE = None


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


LOOKBACK_BLOCK_T = 1024  # steps per program when T is split across programs


def _family(c, rows: int) -> str:
    forced = ENV["SCANGEN_FAMILY"]
    if forced:
        if forced not in ("stream", "lookback"):
            raise ValueError(f"SCANGEN_FAMILY must be 'stream' or 'lookback', got {forced!r}")
        return forced
    if c.device.type != "cuda":
        return "stream"
    # Too few rows to fill the GPU with one program per row, and rows long enough to split.
    if rows < 2 * _sm_count(c.device.index or 0) and c.T >= 2 * LOOKBACK_BLOCK_T:
        return "lookback"
    return "stream"


def _rows_contiguous(c) -> bool:
    """True when the first [N, T] input has adjacent rows and strided time (time-major)."""
    for s1, s2, st, *_ in c.strides.values():
        if st not in (0, 1) and (s2 == 1 and c.R2 > 1 or s1 == 1 and c.R1 > 1):
            return True
        if st == 1:
            return False
    return False


def choose_config(c) -> Config:
    if OVERRIDE is not None:
        return OVERRIDE(c)
    rows = c.R1 * c.R2
    block_k = min(_pow2(c.K), MAX_BLOCK_K)
    kk = block_k if c.K > 1 else 1
    if _family(c, rows) == "lookback":
        block_t = max(16, min(LOOKBACK_BLOCK_T // kk, _pow2(c.T)))
        return Config(1, block_t, block_k, NUM_WARPS, "lookback")
    want = 2 * _sm_count(c.device.index or 0) if c.device.type == "cuda" else 1
    if _rows_contiguous(c):
        # Time-major buffers ([T, N], rows adjacent in memory): wide row tiles so that each
        # step's loads are coalesced across rows (at least 16 rows: 64 bytes of fp32), halved
        # while the grid has fewer than 2 programs per SM; chunks fill the rest of the tile.
        block_n = max(1, min(_pow2(rows), TILE // 16 // kk))
        while block_n > MIN_ROWS_TIME_MAJOR and -(-rows // block_n) < want:
            block_n //= 2
        block_t = max(16, min(_pow2(c.T), MAX_BLOCK_T // kk, TILE // (block_n * kk)))
        return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
    block_t = max(16, min(_pow2(c.T), max(16, MAX_BLOCK_T // kk)))
    tile = TILE if block_t * kk < 512 else LONG_TILE
    block_n = max(1, min(tile // (block_t * kk), _pow2(rows)))
    while block_n > 1 and -(-rows // block_n) < want:
        block_n //= 2
    return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
