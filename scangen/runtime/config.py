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
bench/dev/sweep.py and the probes beside it (bench/NOTES.md, "Decisions"); docs/runtime.md
states the rule. The launch parameters beyond the tile (the look-back's window, wait, order and
grid, the persist grid, the step order) are chosen per call in :mod:`.launch_params`.
``SCANGEN_FAMILY=stream|persist|lookback`` forces a family (for tests and measurements).
"""
from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple

import torch

from .env import ENV

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
TM_ROWS = 16         # time-major tiles (K = 1): rows per tile, halved down to TM_MIN_ROWS
TM_MIN_ROWS = 4      # ... while the grid has fewer programs than SMs
TM_MANY_PROGRAMS_PER_SM = 4  # from this many programs per SM: 16-step chunks on 2 warps
TM_TILE = 1024       # ... else tiles of this many elements
# ... calls moving at most TM_LANES_STREAMS [N, T] tensors there, and joint pairs of scans
# (masked GAE, whose 2x2 maps cost the most across lanes) from TM_LANES_JOINT_MIN_ROWS rows, take
# tiles of a row a lane instead (runtime.launch.lanes: TM_LANES_ROWS rows, the scan along time in
# each thread's registers), TM_LANES_STEPS steps on one warp: masked GAE 16384x1024 152.9 -> 94.8
# us, eligibility traces 82.6 -> 67.1 (results/h200-2026-12-03-m-tm-lanes.txt, -n-tm-lanes.txt).
# Where the loads are volatile (lanes_volatile: ops with bootstrap values) and T >= TM_LANES_STEPS:
# on TM_LANES_VOLATILE_WARPS warps, each over part of the chunk's steps (more loads in flight an
# SM; GAE 120.4 -> 96.3 us, TD(lambda) 107.2 -> 83.4, -p-tm-lanes-warps.txt), four where a
# thread's loads would exceed TM_LANES_LOADS on two (GAE, TD(lambda): 5 inputs x 16 steps; GAE
# 97.2 -> 87.2, 16384x64 8.4 -> 7.8, TD(lambda) 84.1 -> 82.2, 8.4 -> 7.5; discounted returns, 4
# x 16, lost on four: 77.4 -> 94.7; -s-layout-ab.txt). V-trace keeps its row tiles (32 x 16, two
# warps: 141.2 against 145.9 us, 16384x64 11.5 against 10.9), and so do volatile calls with
# T <= 16 (GAE 32768x16: 5.45 on one warp against 4.97). Plain calls (one scan, plain loads) with
# rows of TM_LANES_PERSIST_MIN_T steps or more persist on those tiles on two warps, the next
# tile's loads issued before the scan (eligibility traces 16384x1024 67.1 -> 53.7 us; GAE 96.3 ->
# 108.8, TD(lambda) 83.7 -> 100.2, discounted returns 75.9 -> 86.8 lose; -q-tm-lanes.txt).
# Fewer programs (a tile of 32 rows a SM less an eighth, T >= 64): TM_LANES_FEW_TILE elements
# (half for volatile and joint calls) on four warps, each over a quarter of the steps: eligibility
# traces 4096x128 5.3 -> 3.6 us, GAE 7.0 -> 6.1, masked GAE 7.7 -> 7.0 (-q-tm-lanes.txt).
TM_LANES_STREAMS = 6
TM_LANES_ROWS = 32
TM_LANES_STEPS = 32
TM_LANES_VOLATILE_WARPS = 2
TM_LANES_LOADS = 64  # ... volatile tiles: twice the warps while a thread's loads exceed this
TM_LANES_JOINT_MIN_ROWS = 4096
TM_LANES_PERSIST_MIN_T = 256
TM_LANES_FEW_TILE = 4096
MIN_ROWS_TIME_MAJOR = 16  # time-major with a trailing axis (K > 1): row-tile floor
TIME_MAJOR_PROGRAMS_PER_SM = 2  # ... row tiles halved while the grid has fewer (8: slower)
NUM_WARPS = 4        # measured best for every tile above (bench/NOTES.md, sweep of 2026-11-29)
# ... except: short-chunk tiles of MIN_TILE elements or fewer of calls moving LIGHT_STREAMS
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


class Config(NamedTuple):
    block_n: int
    block_t: int
    block_k: int
    num_warps: int
    family: str = "stream"   # "stream" | "persist" | "lookback"
    num_stages: int = 3      # software-pipelining depth of the chunk loop (Triton's default)


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


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device) -> int:
    """The multiprocessors of a CUDA ``device``."""
    return _sm_count(device.index or 0)


# The look-back family (T split across programs): chunks of 2048 steps on 4 warps, longer
# where that would leave too few programs per SM (4096; then 8192 on 8 warps, 32 steps a thread
# as 4096 on 4), shorter (1024) for calls that move LOOKBACK_MANY_TENSORS or more [N, T]
# tensors, whose registers at 2048 cost more than the extra programs; at most half the padded
# row, so that a row has two chunks or more. Specs that sum over a trailing axis (K > 1,
# Retrace) keep 1024 elements on 4 warps. The sweeps behind each number: bench/NOTES.md.
LOOKBACK_MIN_T = 2048    # rows at least this long may be split
LOOKBACK_BLOCK_T = 2048
LOOKBACK_WARPS = 4
LOOKBACK_PROGRAMS_PER_SM = 8
LOOKBACK_LONG_PROGRAMS_PER_SM = 2
LOOKBACK_K_TILE = 1024   # elements (K included) per program when K > 1
PERSIST_TILE = 512       # tile of persist calls chosen for the tensors they move (one row)
LOOKBACK_MANY_TENSORS = 8  # look-back calls moving this many [N, T] tensors: shorter chunks
FAMILIES = ("stream", "persist", "lookback")
# Time-major buffers ([T, N]) take the look-back over tiles of adjacent rows (loads
# coalesced across rows, a carry per row) where the stream grid would have fewer than
# TM_LOOKBACK_PROGRAMS_PER_SM tiles of TM_ROWS rows per SM and rows of TM_LOOKBACK_MIN_T steps
# or more: TM_LB_ROWS rows (TM_LB_JOINT_ROWS for a joint pair of scans, whose seven words a
# row cost registers) and TM_LB_TILE elements a tile (half for calls moving
# LOOKBACK_MANY_TENSORS [N, T] tensors or more); their window: launch_params.TM_LB_WINDOW.
# Swept on the H200 (results/h200-2026-12-01-i-tm-sweep.txt, graph replays over rotated
# inputs): longer chunks win (fewer look-back links a tile), 32 rows where registers allow.
TM_LOOKBACK_PROGRAMS_PER_SM = 4
TM_LOOKBACK_MIN_T = 512
TM_LB_ROWS = 32
TM_LB_JOINT_ROWS = 8
TM_LB_TILE = 4096
# ... with a trailing axis (K > 1, Retrace): TM_LB_K_ROWS rows, TM_LB_K_TILE elements (K included):
# 1024x1024 159 -> 66 us, 256x8192 220 -> 126 (results/h200-2026-12-01-i-tm-retrace.txt)
TM_LB_K_ROWS = 8
TM_LB_K_TILE = 2048
# ... and where that grid has fewer than TM_LB_MIN_PROGRAMS_PER_SM programs per SM (128x1024: 32
# programs of 32 x 128), rows are halved down to TM_LB_MIN_ROWS, then steps down to
# TM_LB_MIN_STEPS: every op at 128x1024 took 8 x 64 best, 1.4x-2.2x faster (GAE 9.0 -> 5.4 us,
# masked GAE 15.1 -> 6.9; results/h200-2026-12-03-j-tm-lb-small.txt); 1024x1024 (256 programs of
# 32 x 128) measured its tile best and keeps it.
TM_LB_MIN_PROGRAMS_PER_SM = 1
TM_LB_MIN_ROWS = 8
TM_LB_MIN_STEPS = 64
# Tiles of 32 rows take a row a lane on four warps (runtime.launch.lanes) where a thread's loads
# ([N, T] inputs x its steps) are at most TM_LB_LANES_LOADS: eligibility traces (2 x 32 loads)
# 1024x1024 11.5 -> 9.0 us, 64x65536 47.8 -> 41.8, V-trace (7 x 16) 23.6 -> 19.9, discounted
# returns (4 x 32) 13.1 -> 10.8; GAE (5 x 32) lost, 64x65536 57.8 -> 66.3 (-q, -r-layout-ab.txt).
TM_LB_LANES_LOADS = 128


def _forced_family() -> str | None:
    forced = ENV["SCANGEN_FAMILY"]
    if forced and forced not in FAMILIES:
        raise ValueError(f"SCANGEN_FAMILY must be one of {', '.join(FAMILIES)}, got {forced!r}")
    return forced or None


def _streams(c, outputs: bool = True) -> int:
    """The [N, T] tensors a call moves: inputs that vary in time, and outputs if ``outputs``."""
    return sum(1 for n in c.tensors if c.strides[n][2] != 0) + (len(c.outs) if outputs else 0)


def _gpu_family(c, rows: int, kk: int, cfg: Config, time_major: bool) -> str:
    """The family of a call on a GPU (``cfg``: the stream tile for its shape and layout).

    - Time-major buffers: "lookback" over tiles of rows where the stream grid is small
      (TM_LOOKBACK_PROGRAMS_PER_SM) and rows long (TM_LOOKBACK_MIN_T), else the tile's family.
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
        few = -(-rows // TM_ROWS) < TM_LOOKBACK_PROGRAMS_PER_SM * sms
        return "lookback" if few and c.T >= TM_LOOKBACK_MIN_T else cfg.family
    if rows < sms and long_rows:
        return "lookback"
    if (kk == 1 and cfg.block_t >= 512 and not time_major
            and c.T > cfg.block_t and (rows < 2 * sms or _streams(c) >= PERSIST_TENSORS)):
        return "persist"
    if rows < 2 * sms and long_rows:
        return "lookback"
    return "stream"


def rows_contiguous(c) -> bool:
    """True when the first [N, T] input has adjacent rows and strided time (time-major)."""
    for s1, s2, st, *_ in c.strides.values():
        if st not in (0, 1) and (s2 == 1 and c.R2 > 1 or s1 == 1 and c.R1 > 1):
            return True
        if st == 1:
            return False
    return False


def lanes_volatile(c) -> bool:
    """Whether tiles of a row a lane load volatile (``LANES == 2``, runtime.launch.lanes): ops
    with an optional float ``[N, T]`` input (a bootstrap value, read only where a trace is cut).
    Their kernels select between loaded values (``tl.where``), and with scalar loads ptxas sinks
    a load that one side alone uses under a predicate computed from other loads, so the thread
    waits for memory twice a chunk (TD(lambda) 16384x1024, 32 x 16 tiles: 506 us plain, 107
    volatile). Calls without such an input lose by volatile loads (eligibility traces 67 -> 148
    us, masked GAE 95 -> 110; results/h200-2026-12-03-n-tm-lanes.txt)."""
    return any(i.kind == "float" and i.shape == "NT" and i.optional for i in c.op.inputs)


def lookback_lanes(c, cfg: Config) -> bool:
    """Whether a look-back tile may take a row a lane (TM_LB_LANES_LOADS)."""
    loads = _streams(c, outputs=False) * -(-cfg.block_t // cfg.num_warps)
    return loads <= TM_LB_LANES_LOADS


def choose_config(c) -> Config:
    if _RULES:
        return _RULES[-1](c)
    rows = c.R1 * c.R2
    block_k = min(_pow2(c.K), MAX_BLOCK_K)
    kk = block_k if c.K > 1 else 1
    time_major = rows_contiguous(c)
    cfg = _shape_config(c, rows, block_k, kk, time_major)
    family = _forced_family()
    if family is None:
        family = (_gpu_family(c, rows, kk, cfg, time_major) if c.device.type == "cuda"
                  else "stream")
    if family == "lookback":
        return _lookback_config(c, rows, block_k, kk, time_major)
    if (family == "persist" and _streams(c) >= PERSIST_TENSORS and c.device.type == "cuda"
            and rows >= 2 * sm_count(c.device)):
        # persist for the tensors it moves (not for few rows): one row, PERSIST_TILE steps
        return cfg._replace(block_n=1, block_t=PERSIST_TILE, family=family)
    return cfg._replace(family=family)


def _lookback_config(c, rows: int, block_k: int, kk: int, time_major: bool = False) -> Config:
    """The look-back family's tile: one row, a long chunk (see LOOKBACK_BLOCK_T); time-major
    buffers: a tile of adjacent rows (see TM_LB_ROWS, TM_LB_K_ROWS)."""
    if time_major:  # tile: rows x steps of it (K included: steps x K)
        if kk > 1:
            tile_rows, tile = TM_LB_K_ROWS, TM_LB_K_TILE // kk
        else:
            tile_rows = TM_LB_JOINT_ROWS if c.op.kernels.lb_words > 3 else TM_LB_ROWS
            tile = TM_LB_TILE // (2 if _streams(c) >= LOOKBACK_MANY_TENSORS else 1)
        block_n = min(tile_rows, _pow2(rows))
        block_t = max(16, min(tile // block_n, _pow2(c.T) // 2))
        if kk == 1 and c.device.type == "cuda":
            want = TM_LB_MIN_PROGRAMS_PER_SM * sm_count(c.device)
            while -(-rows // block_n) * -(-c.T // block_t) < want:
                if block_n > TM_LB_MIN_ROWS:
                    block_n //= 2
                elif block_t > TM_LB_MIN_STEPS:
                    block_t //= 2
                else:
                    break
        return Config(block_n, block_t, block_k, NUM_WARPS, "lookback")
    if kk > 1:
        return Config(1, max(16, min(LOOKBACK_K_TILE // kk, _pow2(c.T))), block_k, NUM_WARPS,
                      "lookback")
    block_t = LOOKBACK_BLOCK_T
    sms = sm_count(c.device) if c.device.type == "cuda" else 0
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
    sms = sm_count(c.device) if c.device.type == "cuda" else 0
    want = 2 * sms or 1
    if time_major and kk == 1:
        # Time-major buffers ([T, N], rows adjacent in memory): tiles of 16 rows (loads coalesced
        # across rows), halved down to 4 while the grid has fewer programs than SMs; many
        # programs (TM_MANY_PROGRAMS_PER_SM per SM): 16-step chunks on 2 warps, else TM_TILE
        # elements on 4 warps. Calls of up to TM_LANES_STREAMS tensors, and joint pairs from
        # TM_LANES_JOINT_MIN_ROWS rows, take tiles of a row a lane instead (TM_LANES_*, above).
        block_n = min(TM_ROWS, _pow2(rows))
        while block_n > TM_MIN_ROWS and -(-rows // block_n) < sms:
            block_n //= 2
        many = -(-rows // block_n) >= TM_MANY_PROGRAMS_PER_SM * sms > 0
        joint, volatile = c.op.kernels.lb_words > 3, lanes_volatile(c)
        light = sms and _streams(c) <= TM_LANES_STREAMS
        tiles = -(-rows // TM_LANES_ROWS)
        if light and not many and c.T >= 64 and tiles >= sms - sms // 8 and TM_LANES_FEW_TILE:
            steps = TM_LANES_FEW_TILE // TM_LANES_ROWS // (2 if volatile or joint else 1)
            return Config(TM_LANES_ROWS, min(steps, _pow2(c.T)), block_k, 4, "stream")
        if (light and many and not joint and (not volatile or c.T >= TM_LANES_STEPS)
                or sms and joint and rows >= TM_LANES_JOINT_MIN_ROWS):
            steps = max(16, min(TM_LANES_STEPS, _pow2(c.T)))
            if not (volatile or joint) and c.T >= TM_LANES_PERSIST_MIN_T > 0:
                return Config(TM_LANES_ROWS, steps, block_k, 2, "persist")
            warps = TM_LANES_VOLATILE_WARPS if volatile and not joint else 1
            if warps > 1 and _streams(c, outputs=False) * steps > TM_LANES_LOADS * warps:
                warps *= 2
            return Config(TM_LANES_ROWS, steps, block_k, warps, "stream")
        if many:
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
        whole = _pow2(c.T) * kk
        if rows <= sms and whole <= K_WHOLE_ROW_TILE:
            return Config(1, _pow2(c.T), block_k, max(NUM_WARPS, whole // K_WHOLE_ROW_WARP),
                          "stream", num_stages=1)
        block_t = max(16, min(_pow2(c.T), K_FEW_ROWS_TILE // kk))
        return Config(1, block_t, block_k, 8, "stream", num_stages=1)
    if kk > 1:  # K_WARP_TILE elements a warp: more, smaller programs
        block_n = max(1, min(block_n, K_WARP_TILE // (block_t * kk)))
        warps = max(1, min(NUM_WARPS, block_n * block_t * kk // K_WARP_TILE))
        if warps < NUM_WARPS:
            return Config(block_n, block_t, block_k, warps, "stream", num_stages=1)
    elif block_n * block_t <= MIN_TILE and _streams(c) <= LIGHT_STREAMS:
        return Config(block_n, block_t, block_k, 1, "stream", num_stages=1)
    elif (block_t * kk < 512 and HEAVY_ROW_STEPS[0] <= block_t <= HEAVY_ROW_STEPS[1]
          and _streams(c) >= PERSIST_TENSORS and sms):
        return Config(1, block_t, block_k, 1, "stream", num_stages=1)
    return Config(block_n, block_t, block_k, NUM_WARPS, "stream")


def on_change(fn) -> None:
    """Call ``fn()`` whenever an :func:`override` starts or ends."""
    _ON_CHANGE.append(fn)
