"""Launch configuration: the dispatch rule that picks block sizes from the shape.

One program owns ``BLOCK_N`` rows and streams them through time in chunks of ``BLOCK_T`` steps,
carrying each row's scan state from chunk to chunk ("stream"). Short rows get wide row tiles
(many rows per program); long rows get long chunks and fewer rows per program, shrinking
``BLOCK_N`` until the grid has enough programs to fill the GPU. When even one row per program
leaves the GPU idle and rows are long, time is split across programs too ("lookback": one
program per (row, chunk), carries passed between programs by a decoupled look-back). Long
chunks of calls that move many tensors, and rows too few for two programs per SM, take the
persistent stream ("persist": a few programs per SM, each loading its next tile while it scans
the current one).
Time-major buffers (rows adjacent in memory) get wide row tiles and short chunks instead, so
each step's loads are coalesced across rows. The numbers behind the constants come from
bench/sweep.py (bench/NOTES.md); docs/runtime.md states the rule.
``SCANGEN_FAMILY=stream|persist|lookback`` forces a family (for tests and measurements).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from .env import ENV

TILE = 2048          # elements (K included) of one [BLOCK_N, BLOCK_T, BLOCK_K] tile, short chunks
MIN_TILE = 512       # ... halved down to this while the grid has fewer than SHORT_PROGRAMS_PER_SM
SHORT_PROGRAMS_PER_SM = 8
LONG_TILE = 1024     # ... once a chunk holds 512 elements or more: one row per program
# Long chunks moving this many [N, T] tensors (inputs + outputs) persist, one row of PERSIST_TILE
# steps a program: V-trace without truncations (7) at 16384x1024, 117.3 -> 106.0 us, and
# 1024x1024, 7.05 -> 7.31 (ninth round, results/h200-2026-11-30-i-vtrace-sweep.txt; it was 8
# from the fourth round, when persist calls kept the stream tile of 1024 steps: 137 us today).
PERSIST_TENSORS = 7
MAX_BLOCK_T = 1024   # longer chunks add scan depth without adding parallelism
MAX_BLOCK_K = 16     # the trailing axis is streamed in slices of this width
TM_ROWS = 16         # time-major tiles (K = 1): rows per tile, halved down to TM_MIN_ROWS
TM_MIN_ROWS = 4      # ... while the grid has fewer programs than SMs
TM_MANY_PROGRAMS_PER_SM = 4  # from this many programs per SM: 16-step chunks on 2 warps
TM_TILE = 1024       # ... else tiles of this many elements
MIN_ROWS_TIME_MAJOR = 16  # time-major with a trailing axis (K > 1): row-tile floor
TIME_MAJOR_PROGRAMS_PER_SM = 2  # ... row tiles halved while the grid has fewer (8: slower)
NUM_WARPS = 4        # measured best for every tile above (bench/NOTES.md, sweep of 2026-11-29)


class Config(NamedTuple):
    block_n: int
    block_t: int
    block_k: int
    num_warps: int
    family: str = "stream"   # "stream" | "persist" | "lookback"
    num_stages: int = 3      # software-pipelining depth of the chunk loop (Triton's default)


# A function ``call -> Config`` that replaces the rule below (bench/sweep.py measures variants
# through it); None in normal use. Plans cache their config: clear runtime._PLANS after setting it.
OVERRIDE = None


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# The look-back family (T split across programs), bench/NOTES.md fifth round: chunks of 2048
# steps on 4 warps; 4096 where 2048 would give fewer than LOOKBACK_PROGRAMS_PER_SM programs per
# SM (8x262144, 1x1048576); 8192 on 8 warps (32 steps a thread, as 4096 on 4) where 4096 would
# give fewer than LOOKBACK_LONG_PROGRAMS_PER_SM (1x1048576: 256 programs on 132 SMs; seventh
# round, h200-2026-11-30-g-lookback-sweep: GAE 11.4 -> 10.9 us, V-trace 15.0 -> 14.2, masked
# GAE 13.6 -> 11.7, discounted returns 10.7 -> 9.9); calls that move LOOKBACK_MANY_TENSORS or
# more [N, T] tensors take 1024 where 2048 gives enough programs (V-trace with truncations, 9
# tensors, 186 registers at 2048: 64x65536 60.2 -> 51.2 us in the same sweep; masked GAE, 7
# tensors, loses 45% at 1024); at most half the padded row, so that a row has two chunks or more.
# Specs that sum over a trailing axis (K > 1, Retrace) keep 1024 elements on 4 warps (measured
# in the fourth round; longer chunks not measured for them).
LOOKBACK_MIN_T = 2048    # rows at least this long may be split
LOOKBACK_BLOCK_T = 2048
LOOKBACK_WARPS = 4
LOOKBACK_PROGRAMS_PER_SM = 8
LOOKBACK_LONG_PROGRAMS_PER_SM = 2
LOOKBACK_K_TILE = 1024   # elements (K included) per program when K > 1
PERSIST_TILE = 512       # tile of persist calls chosen for the tensors they move (one row)
LOOKBACK_MANY_TENSORS = 8  # look-back calls moving this many [N, T] tensors: shorter chunks
FAMILIES = ("stream", "persist", "lookback")


def _forced_family() -> str | None:
    forced = ENV["SCANGEN_FAMILY"]
    if forced and forced not in FAMILIES:
        raise ValueError(f"SCANGEN_FAMILY must be one of {', '.join(FAMILIES)}, got {forced!r}")
    return forced or None


def _streams(c) -> int:
    """The [N, T] tensors a call moves: inputs that vary in time, and outputs."""
    return sum(1 for n in c.tensors if c.strides[n][2] != 0) + len(c.outs)


def _gpu_family(c, rows: int, kk: int, cfg: Config, time_major: bool) -> str:
    """The family of a call on a GPU (``cfg``: the stream tile for its shape and layout).

    - Fewer rows than SMs, and rows of two look-back chunks or more: "lookback".
    - "persist" where it overlaps loads with the scan better than more resident programs do:
      long chunks (512 elements or more) of a row-major call with no trailing axis to sum
      over (those loads are not prefetched), and either fewer rows than two per SM with more
      than one chunk each (each program streams one row) or PERSIST_TENSORS or more [N, T]
      tensors to move.
    - Otherwise fewer rows than two per SM, and long rows: "lookback"; the rest: "stream".
    H200 measurements behind it: bench/NOTES.md (fourth and ninth rounds)."""
    sms = _sm_count(c.device.index or 0)
    long_rows = c.T >= LOOKBACK_MIN_T
    if rows < sms and long_rows:
        return "lookback"
    if (kk == 1 and cfg.block_t >= 512 and not time_major
            and (rows < 2 * sms and c.T > cfg.block_t or _streams(c) >= PERSIST_TENSORS)):
        return "persist"
    if rows < 2 * sms and long_rows:
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
    time_major = _rows_contiguous(c)
    cfg = _shape_config(c, rows, block_k, kk, time_major)
    family = _forced_family()
    if family is None:
        family = (_gpu_family(c, rows, kk, cfg, time_major) if c.device.type == "cuda"
                  else "stream")
    if family == "lookback":
        return _lookback_config(c, rows, block_k, kk)
    if (family == "persist" and _streams(c) >= PERSIST_TENSORS and c.device.type == "cuda"
            and rows >= 2 * _sm_count(c.device.index or 0)):
        # persist for the tensors it moves (not for few rows): one row, PERSIST_TILE steps
        return cfg._replace(block_n=1, block_t=PERSIST_TILE, family=family)
    return cfg._replace(family=family)


def _lookback_config(c, rows: int, block_k: int, kk: int) -> Config:
    """The look-back family's tile: one row, a long chunk (see LOOKBACK_BLOCK_T)."""
    if kk > 1:
        return Config(1, max(16, min(LOOKBACK_K_TILE // kk, _pow2(c.T))), block_k, NUM_WARPS,
                      "lookback")
    block_t = LOOKBACK_BLOCK_T
    sms = _sm_count(c.device.index or 0) if c.device.type == "cuda" else 0
    warps = LOOKBACK_WARPS

    def programs(chunk):
        return rows * -(-c.T // chunk)

    if programs(block_t) < LOOKBACK_PROGRAMS_PER_SM * sms:
        block_t *= 2
        if programs(block_t) < LOOKBACK_LONG_PROGRAMS_PER_SM * sms:
            block_t, warps = block_t * 2, warps * 2
    elif sms and _streams(c) >= LOOKBACK_MANY_TENSORS:
        block_t //= 2
    if block_t > _pow2(c.T) // 2:
        block_t, warps = max(16, _pow2(c.T) // 2), LOOKBACK_WARPS
    return Config(1, block_t, block_k, warps, "lookback")


def _shape_config(c, rows: int, block_k: int, kk: int, time_major: bool) -> Config:
    """The tile of the stream families (stream and persist) for this shape and layout."""
    sms = _sm_count(c.device.index or 0) if c.device.type == "cuda" else 0
    want = 2 * sms or 1
    if time_major and kk == 1:
        # Time-major buffers ([T, N], rows adjacent in memory), fifth-round sweep: tiles of 16
        # rows (64 bytes of fp32 per step, loads coalesced across rows), halved down to 4 while
        # the grid has fewer programs than SMs. Many programs (TM_MANY_PROGRAMS_PER_SM per SM):
        # 16-step chunks on 2 warps; fewer: tiles of TM_TILE elements on 4 warps.
        block_n = min(TM_ROWS, _pow2(rows))
        while block_n > TM_MIN_ROWS and -(-rows // block_n) < sms:
            block_n //= 2
        if -(-rows // block_n) >= TM_MANY_PROGRAMS_PER_SM * sms > 0:
            return Config(block_n, 16, block_k, 2, "stream")
        block_t = max(16, min(_pow2(c.T), MAX_BLOCK_T, TM_TILE // block_n))
        return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
    if time_major:
        # ... with a trailing axis (not swept): wide row tiles (at least 16 rows), halved while
        # the grid has fewer than TIME_MAJOR_PROGRAMS_PER_SM programs per SM; chunks fill the
        # rest of the tile.
        block_n = max(1, min(_pow2(rows), TILE // 16 // kk))
        while (block_n > MIN_ROWS_TIME_MAJOR
               and -(-rows // block_n) < TIME_MAJOR_PROGRAMS_PER_SM * sms):
            block_n //= 2
        block_t = max(16, min(_pow2(c.T), MAX_BLOCK_T // kk, TILE // (block_n * kk)))
        return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
    block_t = max(16, min(_pow2(c.T), max(16, MAX_BLOCK_T // kk)))
    if block_t * kk < 512:
        # short chunks: tiles of TILE elements, halved down to MIN_TILE while the grid has
        # fewer than SHORT_PROGRAMS_PER_SM programs per SM (more programs hide more latency)
        block_n = max(1, min(TILE // (block_t * kk), _pow2(rows)))
        while (block_n > 1 and block_n * block_t * kk > MIN_TILE
               and -(-rows // block_n) < SHORT_PROGRAMS_PER_SM * sms):
            block_n //= 2
    else:
        block_n = max(1, min(LONG_TILE // (block_t * kk), _pow2(rows)))
    while block_n > 1 and -(-rows // block_n) < want:
        block_n //= 2
    return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
