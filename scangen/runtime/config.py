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
each step's loads are coalesced across rows (:mod:`.timemajor`). The numbers behind the constants come from
bench/dev/sweep.py and the probes beside it (bench/NOTES.md, "Decisions"); docs/runtime.md
states the rule. The launch parameters beyond the tile (the look-back's window, wait, order and
grid, the persist grid, the step order) are chosen per call in :mod:`.launch_params`.
``SCANGEN_FAMILY=stream|persist|lookback`` forces a family (for tests and measurements).
"""
from __future__ import annotations

import contextlib

from . import timemajor
from .env import ENV
from .tiles import NUM_WARPS, Config, pow2, sm_count, streams

TILE = 2048          # elements (K included) of one [BLOCK_N, BLOCK_T, BLOCK_K] tile, short chunks
MIN_TILE = 512       # ... halved down to this while the grid has fewer than SHORT_PROGRAMS_PER_SM
SHORT_PROGRAMS_PER_SM = 8
LONG_TILE = 1024     # ... once a chunk holds 512 elements or more: one row per program
# Long chunks moving this many [N, T] tensors (inputs + outputs) persist, one row of PERSIST_TILE
# steps a program: with that many loads a step, prefetching the next tile beats more resident
# programs (V-trace without truncations, 7 tensors, gained 10% at 16384x1024 before one-chunk rows
# compiled without the chunk loop; rows of one chunk now stream: bench/NOTES.md).
PERSIST_TENSORS = 7
MAX_BLOCK_T = 1024   # longer chunks add scan depth without adding parallelism
MAX_BLOCK_K = 16     # the trailing axis is streamed in slices of this width
# NUM_WARPS (runtime.tiles) warps for every tile above (bench/NOTES.md, sweep of 2026-11-29),
# except: short-chunk tiles of MIN_TILE elements or fewer of calls moving LIGHT_STREAMS
# [N, T] tensors or fewer (two inputs, one output: eligibility traces, episodic sums) run on one
# warp, one pipeline stage (10-24% faster at 4096x128, 32768x16, 16384x64); and rows-layout
# calls with a trailing axis (K > 1, Retrace) take tiles of K_WARP_TILE elements a warp, one
# row a program where a row's chunk is that long (32768x16: 25.8 -> 17.8 us;
# bench/results/h200-2026-12-01-k-small-shapes.txt).
LIGHT_STREAMS = 3
K_WARP_TILE = 256
K_FEW_ROWS_TILE = 2048  # elements (K included) a chunk, rows-layout K > 1 calls with few rows
K_WHOLE_ROW_TILE = 8192  # ... or a whole row, where it fits and rows are no more than SMs,
K_WHOLE_ROW_WARP = 512   # ... a warp per this many elements
# Short chunks of HEAVY_ROW_STEPS steps in calls moving PERSIST_TENSORS or more [N, T] tensors
# (V-trace) run one row a program on one warp, one stage: V-trace 4096x128 6.7 -> 5.6 us, 2048x256
# 7.2 -> 5.9, as graph replays (h200-2026-12-02-a-configs.md); its 64- and 16-step chunks lose so.
HEAVY_ROW_STEPS = (128, 256)
# Joint pairs of scans (masked GAE: seven look-back words a row, a 2x2 map a step) in 2-byte
# dtypes: long one-chunk rows take JOINT_NARROW_ROWS rows a program, one stage (the scan, not the
# bytes, bounds them there: bf16 16384x1024 45.1 -> 42.9 us, h200-2026-12-03-j-masked-bf16.txt;
# in fp32 two rows lose, 70.3 against 68.8 us, and so do the single scans in bf16).
JOINT_NARROW_ROWS = 2


_RULES: list = []      # rules in force, innermost last (see override)
_ON_CHANGE: list = []  # called when they change: the plan cache, whose plans keep their config


@contextlib.contextmanager
def override(rule):
    """Within the block, ``rule(call) -> Config`` picks every launch configuration instead of
    the dispatch rule (tests and bench/dev/sweep.py measure variants through it). Plans keep
    their config, so plans made inside the block are dropped when it ends, and plans made
    before it are not used in it."""
    for fn in _ON_CHANGE:
        fn()
    _RULES.append(rule)
    try:
        yield rule
    finally:
        _RULES.remove(rule)
        for fn in _ON_CHANGE:
            fn()


@contextlib.contextmanager
def fresh_plans():
    """Within the block, calls make new plans under the dispatch rule (plans made before it are
    not used, plans made in it are dropped when it ends): for A/B runs that flip a switch read
    when a plan is built (``runtime.launch.LEAN``, ``ONE_CHUNK_ON``)."""
    for fn in _ON_CHANGE:
        fn()
    try:
        yield
    finally:
        for fn in _ON_CHANGE:
            fn()


# The look-back family (T split across programs): chunks of 2048 steps on 4 warps, longer
# where that would leave too few programs per SM (4096; then 8192 on 8 warps, 32 steps a thread
# as 4096 on 4); calls that move LOOKBACK_SHORT_TENSORS or more [N, T] tensors (V-trace with
# truncations and bootstrap values) take LOOKBACK_SHORT_BLOCK_T steps on 4 warps instead, whose
# registers at 2048-4096 cost more than the extra programs, unless the tile is the 8-warp one
# of few programs (rule against none, one process, H200, bench/results/h200-2026-12-04-bl-
# lookback-short-rule-vtrace-f15.txt: 128x16384 26.4 -> 23.0 us, 32x65536 27.1 -> 25.4,
# 8x262144 28.0 -> 27.7, 4x524288 29.1 -> 30.2, and 64x65536, where it applied before too,
# 42.6 -> 43.9 with V-trace's spec of 2026-12-04; kept for the net gain). Calls of 7 tensors
# keep the longer chunks (V-trace without truncations lost 6-17% on 1024 steps at four of five
# shapes, GAE with both outputs gained 4-14%: -bi-lookback-short-rule.txt, -bl-; no property of
# the call tells them apart). At most half the padded row, so that a row has two chunks or more.
LOOKBACK_MIN_T = 2048    # rows at least this long may be split
LOOKBACK_BLOCK_T = 2048
LOOKBACK_WARPS = 4
LOOKBACK_PROGRAMS_PER_SM = 8
LOOKBACK_LONG_PROGRAMS_PER_SM = 2
LOOKBACK_SHORT_TENSORS = 8
LOOKBACK_SHORT_BLOCK_T = 1024
# Look-backs over a trailing axis (K > 1): LOOKBACK_K_TILE elements (K included) a chunk on
# NUM_WARPS warps; where a row holds more than LOOKBACK_K_LONG_CHUNKS of those, LOOKBACK_K_LONG_TILE
# on a warp per K_WHOLE_ROW_WARP elements, so each row's chain of look-backs has fewer links.
# Retrace (K = 8), 512-step chunks on 8 warps against 128 on 4, one process (H200,
# bench/results/h200-2026-12-04-bb-retrace-lookback-rule.txt): 8x262144 125 -> 90 us, 1x1048576
# 101 -> 73, 2x131072 28 -> 19, 64x65536 159 -> 140, 32x16384 30 -> 26, 256x8192 76 -> 72; rows
# of 32 chunks or fewer lose (128x4096 24.4 -> 25.2, 200x2048 20.4 -> 21.5). Those timings include
# runtime.launch's register-cliff cap (80 -> 64 registers), without which the long tiles run
# 1.01x-1.12x slower (-be-retrace-reg-cliff-off.txt).
LOOKBACK_K_TILE = 1024
LOOKBACK_K_LONG_TILE = 4096
LOOKBACK_K_LONG_CHUNKS = 32
PERSIST_TILE = 512       # tile of persist calls chosen for the tensors they move (one row)
FAMILIES = ("stream", "persist", "lookback")
def _forced_family() -> str | None:
    forced = ENV["SCANGEN_FAMILY"]
    if forced and forced not in FAMILIES:
        raise ValueError(f"SCANGEN_FAMILY must be one of {', '.join(FAMILIES)}, got {forced!r}")
    return forced or None


def _gpu_family(c, rows: int, kk: int, cfg: Config, time_major: bool) -> str:
    """The family of a call on a GPU (``cfg``: the stream tile for its shape and layout).

    - Time-major buffers: :func:`.timemajor.family`.
    - Fewer rows than SMs, and rows of two look-back chunks or more: "lookback".
    - "persist" where it overlaps loads with the scan better than more resident programs do:
      long chunks (512 elements or more) of a row-major call with no trailing axis to sum
      over (those loads are not prefetched), rows longer than one chunk (a one-chunk row has no
      next tile to prefetch, and its stream kernel compiles without the chunk loop: V-trace
      16384x1024 97.8 us against 104.5 persisting, bf16 58.1 against 83.0), and either fewer
      rows than two per SM (each program streams one row) or PERSIST_TENSORS or more [N, T]
      tensors to move.
    - Otherwise fewer rows than two per SM, and long rows: "lookback"; the rest: "stream".
    H200 measurements behind it: bench/NOTES.md (fourth and ninth rounds)."""
    sms = sm_count(c.device)
    long_rows = c.T >= LOOKBACK_MIN_T
    if time_major:
        return timemajor.family(c, rows, cfg)
    if rows < sms and long_rows:
        return "lookback"
    if (kk == 1 and cfg.block_t >= 512 and not time_major
            and c.T > cfg.block_t and (rows < 2 * sms or streams(c) >= PERSIST_TENSORS)):
        return "persist"
    if rows < 2 * sms and long_rows:
        return "lookback"
    return "stream"


def choose_config(c) -> Config:
    if _RULES:
        return _RULES[-1](c)
    rows = c.R1 * c.R2
    block_k = min(pow2(c.K), MAX_BLOCK_K)
    kk = block_k if c.K > 1 else 1
    time_major = timemajor.rows_contiguous(c)
    cfg = _shape_config(c, rows, block_k, kk, time_major)
    family = _forced_family()
    if family is None:
        family = (_gpu_family(c, rows, kk, cfg, time_major) if c.device.type == "cuda"
                  else "stream")
    if family == "lookback" and c.T == 1:
        # rows of one step have no chunk to look back over, and Triton 3.6 fails compiling the
        # look-back kernels specialised to R1 = R2 = T = 1 (an assertion in its TritonGPUCoalesce
        # pass; 3.9 compiles them): a forced look-back takes the stream family's tile there
        family = "stream"
    if family == "lookback":
        return _lookback_config(c, rows, block_k, kk, time_major)
    if (family == "persist" and streams(c) >= PERSIST_TENSORS and c.device.type == "cuda"
            and rows >= 2 * sm_count(c.device)):
        # persist for the tensors it moves (not for few rows): one row, PERSIST_TILE steps
        return cfg._replace(block_n=1, block_t=PERSIST_TILE, family=family)
    return cfg._replace(family=family)


def _lookback_config(c, rows: int, block_k: int, kk: int, time_major: bool = False) -> Config:
    """The look-back family's tile: one row, a long chunk (see LOOKBACK_BLOCK_T); time-major
    buffers: a tile of adjacent rows (:func:`.timemajor.lookback_tile`)."""
    if time_major:
        return timemajor.lookback_tile(c, rows, block_k, kk)
    if kk > 1:
        tile, warps = LOOKBACK_K_TILE, NUM_WARPS
        if pow2(c.T) * kk > LOOKBACK_K_LONG_CHUNKS * tile:
            tile = LOOKBACK_K_LONG_TILE
            warps = max(NUM_WARPS, tile // K_WHOLE_ROW_WARP)
        return Config(1, max(16, min(tile // kk, pow2(c.T))), block_k, warps, "lookback")
    block_t = LOOKBACK_BLOCK_T
    sms = sm_count(c.device) if c.device.type == "cuda" else 0
    warps = LOOKBACK_WARPS

    def programs(chunk):
        return rows * -(-c.T // chunk)

    if programs(block_t) < LOOKBACK_PROGRAMS_PER_SM * sms:
        block_t *= 2
        if programs(block_t) < LOOKBACK_LONG_PROGRAMS_PER_SM * sms:
            block_t, warps = block_t * 2, warps * 2
    if sms and warps == LOOKBACK_WARPS and streams(c) >= LOOKBACK_SHORT_TENSORS:
        block_t = LOOKBACK_SHORT_BLOCK_T
    if block_t > pow2(c.T) // 2:
        block_t, warps = max(16, pow2(c.T) // 2), LOOKBACK_WARPS
    return Config(1, block_t, block_k, warps, "lookback")


def _shape_config(c, rows: int, block_k: int, kk: int, time_major: bool) -> Config:
    """The tile of the stream families (stream and persist) for this shape and layout."""
    sms = sm_count(c.device) if c.device.type == "cuda" else 0
    want = 2 * sms or 1
    if time_major:
        return timemajor.stream_tile(c, rows, block_k, kk, sms)
    block_t = max(16, min(pow2(c.T), max(16, MAX_BLOCK_T // kk)))
    if block_t * kk < 512:
        # short chunks: tiles of TILE elements, halved down to MIN_TILE while the grid has
        # fewer than SHORT_PROGRAMS_PER_SM programs per SM (more programs hide more latency)
        block_n = max(1, min(TILE // (block_t * kk), pow2(rows)))
        while (block_n > 1 and block_n * block_t * kk > MIN_TILE
               and -(-rows // block_n) < SHORT_PROGRAMS_PER_SM * sms):
            block_n //= 2
    else:
        block_n = max(1, min(LONG_TILE // (block_t * kk), pow2(rows)))
        if (block_n == 1 and kk == 1 and c.op.kernels.lb_words > 3 and c.out_dtype.itemsize == 2
                and c.T <= block_t and sms and -(-rows // JOINT_NARROW_ROWS) >= want):
            return Config(JOINT_NARROW_ROWS, block_t, block_k, NUM_WARPS, "stream", num_stages=1)
    while block_n > 1 and -(-rows // block_n) < want:
        block_n //= 2
    if kk > 1 and block_n == 1 and rows < want and c.T > block_t:
        # a trailing axis and fewer rows than programs wanted: where there are no more rows than
        # SMs and a whole row fits K_WHOLE_ROW_TILE elements, one program takes the whole row,
        # a warp per K_WHOLE_ROW_WARP elements (Retrace 128x1024: 11.3 -> 8.0 us, 64x512 on 8
        # warps: 6.2 -> 4.95, graph replays; h200-2026-12-02-a-configs.md); else each program
        # walks its row in K_FEW_ROWS_TILE-element chunks on 8 warps (256x1024 stays faster
        # so), one pipeline stage (h200-2026-12-01-g-sweep)
        whole = pow2(c.T) * kk
        if rows <= sms and whole <= K_WHOLE_ROW_TILE:
            return Config(1, pow2(c.T), block_k, max(NUM_WARPS, whole // K_WHOLE_ROW_WARP),
                          "stream", num_stages=1)
        block_t = max(16, min(pow2(c.T), K_FEW_ROWS_TILE // kk))
        return Config(1, block_t, block_k, 8, "stream", num_stages=1)
    if kk > 1:  # K_WARP_TILE elements a warp: more, smaller programs
        block_n = max(1, min(block_n, K_WARP_TILE // (block_t * kk)))
        warps = max(1, min(NUM_WARPS, block_n * block_t * kk // K_WARP_TILE))
        if warps < NUM_WARPS:
            return Config(block_n, block_t, block_k, warps, "stream", num_stages=1)
    elif block_n * block_t <= MIN_TILE and streams(c) <= LIGHT_STREAMS:
        return Config(block_n, block_t, block_k, 1, "stream", num_stages=1)
    elif (block_t * kk < 512 and HEAVY_ROW_STEPS[0] <= block_t <= HEAVY_ROW_STEPS[1]
          and streams(c) >= PERSIST_TENSORS and sms):
        return Config(1, block_t, block_k, 1, "stream", num_stages=1)
    return Config(block_n, block_t, block_k, NUM_WARPS, "stream")


def on_change(fn) -> None:
    """Call ``fn()`` whenever an :func:`override` starts or ends."""
    _ON_CHANGE.append(fn)
