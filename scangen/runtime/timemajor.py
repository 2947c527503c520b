"""The tiles of time-major buffers (``[T, N]``: rows adjacent in memory), for the dispatch rule of
:mod:`.config`.

Each step's loads are coalesced across a tile's rows, so time-major tiles are wide in rows and
short in time: tiles of 16 rows (64 bytes of fp32 a step), or tiles of **a row a lane** (32 rows,
``runtime.launch.lanes``: the scan along time in each thread's registers) for calls of few
tensors; few long rows take the look-back over tiles of rows. The numbers behind each constant
come from graph replays on an H200 (bench/NOTES.md, "Decisions"; the results files named beside
them); docs/runtime.md states the rule.
"""
from __future__ import annotations

from .tiles import (LOOKBACK_MANY_TENSORS, NUM_WARPS, Config, lanes_on_steps, pow2, sm_count,
                    streams)

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
# Since the warps of a lane tile scan runs of steps (runtime.launch.lane_warps, twenty-seventh
# round: a fraction of the registers), the tiles were swept again (sweep.py --tm-lanes, graph
# replays, h200-2026-12-04-bs-sweeps.txt): plain calls of rows of TM_LANES_PERSIST_MIN_T steps
# or more stream TM_LANES_PLAIN_STEPS-step chunks on four warps instead of persisting (16384x1024:
# eligibility traces 53.3 -> 41.7 us, episodic sums 53.2 -> 44.1); joint pairs persist on two
# warps there (masked GAE 94.4 -> 82.2), and volatile calls whose loads fit two warps persist on
# four (discounted returns 73.1 -> 69.7; GAE, TD(lambda) keep their stream tiles); the
# few-program tiles are halved only from TM_LANES_FEW_HALVE_STREAMS [N, T] inputs (4096x128:
# masked GAE 4.5 -> 4.0, discounted returns 3.9 -> 3.7; GAE 4.4 against 5.3 on 128 steps).
TM_LANES_PLAIN_STEPS = 128
TM_LANES_FEW_HALVE_STREAMS = 5
TM_LANES_STREAMS = 6
TM_LANES_ROWS = 32
TM_LANES_STEPS = 32
TM_LANES_VOLATILE_WARPS = 2
TM_LANES_LOADS = 64  # ... volatile tiles: twice the warps while a thread's loads exceed this
TM_LANES_JOINT_MIN_ROWS = 4096
TM_LANES_PERSIST_MIN_T = 256
TM_LANES_FEW_TILE = 4096
# Since lane tiles of 16 rows take two lanes a row (runtime.launch.LANES_MIN_ROWS), the
# few-program tiles have 16 rows (thirty-third round, H100, layout_ab.py --baseline,
# h100-2026-12-05-h-layout-ab-lanes16.md): twice the programs, about two an SM at 4096x128,
# where GAE took 6.99 -> 5.99 us, TD(lambda) 6.94 -> 5.82, discounted returns 6.09 -> 5.25, masked
# GAE 6.20 -> 5.72, episodic sums 4.70 -> 4.54 (eligibility traces 4.26 -> 4.24); and calls of up
# to TM_LANES_FEW_STREAMS tensors take them (V-trace, 8: 16 x 64 row tiles before).
TM_LANES_FEW_ROWS = 16
TM_LANES_FEW_STREAMS = 8
# Plain calls whose rows fit TM_LANES_PLAIN_ROW steps (more than TM_LANES_STEPS) take the whole
# row as one chunk on two warps: eligibility traces 16384x64 5.86 -> 5.03 us, episodic sums 6.05
# -> 5.35 (results/h200-2026-12-03-t-layout-ab.txt).
TM_LANES_PLAIN_ROW = 64
MIN_ROWS_TIME_MAJOR = 16  # time-major with a trailing axis (K > 1): row-tile floor
TIME_MAJOR_PROGRAMS_PER_SM = 2  # ... row tiles halved while the grid has fewer (8: slower)
TM_K_TILE = 2048     # ... elements (K included) a tile
# The look-back over tiles of adjacent rows (a carry per row) where the stream grid would have
# fewer than TM_LOOKBACK_PROGRAMS_PER_SM tiles of TM_ROWS rows per SM and rows of
# TM_LOOKBACK_MIN_T steps or more: TM_LB_ROWS rows (TM_LB_JOINT_ROWS for a joint pair of scans,
# whose seven words a row cost registers) and TM_LB_TILE elements a tile (half for calls moving
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
# Rows of at most TM_LB_LANES_MAX_T steps (few chunks a row: the look-back's chain is short):
# joint pairs (masked GAE, 3 x 32 loads a thread) take the 32-row lane tile too (1024x1024 21.7
# -> 15.4 us, 256x8192 42.3 -> 36.1, 2048x512 24.0 -> 15.4; 64x65536 lost, 81.9 -> 85.0 in a
# sweep); and from TM_LB_LANES_HALVE_MIN_T steps, calls whose loads exceed TM_LB_LANES_LOADS
# halve their steps until they fit (GAE and TD(lambda), 5 x 16 on 32 x 64: 512x4096 31.8 -> 25.4
# and 31.0 -> 23.9, 256x8192 33.8 -> 28.1 and 32.1 -> 26.8; results/h200-2026-12-03-t-layout-ab.txt;
# shorter rows lost, 1024x1024 14.4 -> 15.6, and so did 64x65536). Since a lane tile's warps scan
# runs of steps (runtime.launch.lane_warps), small grids of calls of fewer than
# LOOKBACK_MANY_TENSORS tensors take 32-row lane tiles of TM_LB_MIN_STEPS steps where a thread's
# loads fit and that leaves a quarter of a program an SM, instead of halving rows (128x1024, 64
# programs of 32 x 64 against 256 of 8 x 64, layout_ab.py, h200-2026-12-04-bs/-bt-layout-ab.md:
# GAE 6.49 -> 6.20 us, TD(lambda) 6.45 -> 6.13, discounted returns 6.16 -> 5.82, eligibility
# traces 5.82 -> 5.41, masked GAE 7.81 -> 7.37, episodic sums 5.75 -> 5.85; V-trace, 8 tensors,
# lost, 7.02 -> 7.79; fewer programs were not measured). Halving GAE's and TD(lambda)'s steps at
# 1024x1024 too split them (TD(lambda) 14.5 -> 13.6 us, GAE 14.5 -> 16.7): not taken.
TM_LB_LANES_MAX_T = 8192
TM_LB_LANES_HALVE_MIN_T = 4096
# Calls of one scan moving fewer than LOOKBACK_MANY_TENSORS tensors, with rows of
# TM_LB_LONG_MIN_T steps or more and at least TM_LB_ROWS of them, take row tiles of
# TM_LB_LONG_TILE elements instead (32 x 256: half the look-back links of 32 x 128), never a row
# a lane (0: off). Same-process A/B (results/h200-2026-12-04-y-tm-lb-volatile.md, -aa-*): GAE
# 64x65536 57.7 -> 49.9 us, 256x8192 28.2 -> 24.7, 512x4096 25.6 -> 22.9; TD(lambda) 55.9 ->
# 48.3, 26.7 -> 23.6, 24.1 -> 22.0; discounted returns 47.6 -> 44.7, 22.8 -> 22.1, 21.1 -> 20.5;
# eligibility traces 41.9 -> 38.9 and 18.6 -> 18.0, episodic sums 43.5 -> 39.3 and 19.1 -> 18.0
# (-aa-tm-lb-long.md; 512x4096 16.5 -> 16.6 and 17.0 -> 16.6; on 32 x 256 lane tiles they lost,
# 41.2 -> 43.8, -x-tm-lb-long.txt). Lost where
# rows are shorter (1024x1024 and 2048x512, 10-30%) or fewer (8x262144 on 8 x 1024 tiles: GAE
# 31.2 -> 92.0), and for V-trace everywhere (8 tensors: 86.3 -> 258 us at 64x65536).
TM_LB_LONG_TILE = 8192
TM_LB_LONG_MIN_T = 4096  # (the same length as TM_LB_LANES_HALVE_MIN_T, set apart for A/B runs)
# Those long tiles take a row a lane on TM_LB_LONG_LANE_WARPS warps (a run of 32 steps a warp)
# where a thread's loads then fit TM_LB_LANES_LOADS and the tile keeps its 32 rows (eligibility
# traces, episodic sums, discounted returns; not GAE or TD(lambda), 5 x 32 loads), else row tiles
# on NUM_WARPS (0: always). Same-process A/B after the warp runs (bench/dev/rule_ab.py,
# results/h200-2026-12-05-b-tm-long-lanes.txt): eligibility traces 64x65536 37.4 -> 33.7 us,
# 256x8192 17.2 -> 16.0, 512x4096 16.6 -> 15.5; episodic sums 37.9 -> 34.6, 17.1 -> 16.6, 16.6 ->
# 15.8; discounted returns 44.5 -> 41.4, 21.2 -> 21.2, 20.9 -> 20.5.
TM_LB_LONG_LANE_WARPS = 8
# ... in tiles of TM_LB_LONG_LANE_ROWS rows (16: two lanes a row, runtime.launch.LANES_MIN_ROWS;
# the same elements, so 16 x 512: half the look-back links a row tile and twice the row tiles;
# thirty-third round, H100, sweep.py graph replays, h100-2026-12-05-j-tm-long-16rows-sweeps.txt):
# eligibility traces 64x65536 34.6 -> 31.2 us, 256x8192 15.7 -> 15.4; discounted returns 45.2 ->
# 42.2, 21.6 -> 20.8 (episodic sums, the same loads as eligibility traces, not measured; GAE,
# whose loads do not fit, lost on 16-row lane tiles of either length: 52.6 -> 56.2 at best)
TM_LB_LONG_LANE_ROWS = 16


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
    # a thread's steps: the warps split them, and in tiles of fewer than 32 rows a warp's spare
    # lanes too (runtime.launch.lane_warps)
    on_steps = cfg.num_warps * lanes_on_steps(cfg.block_n)
    loads = streams(c, outputs=False) * -(-cfg.block_t // on_steps)
    return loads <= TM_LB_LANES_LOADS and not (
        TM_LB_LONG_TILE and cfg.block_n * cfg.block_t >= TM_LB_LONG_TILE
        and not TM_LB_LONG_LANE_WARPS)


def family(c, rows: int, cfg: Config) -> str:
    """The family of a time-major call on a GPU: "lookback" over tiles of rows where the stream
    grid is small (TM_LOOKBACK_PROGRAMS_PER_SM) and rows long (TM_LOOKBACK_MIN_T), else the
    family of its stream tile ``cfg``."""
    few = -(-rows // TM_ROWS) < TM_LOOKBACK_PROGRAMS_PER_SM * sm_count(c.device)
    return "lookback" if few and c.T >= TM_LOOKBACK_MIN_T else cfg.family


def stream_tile(c, rows: int, block_k: int, kk: int, sms: int) -> Config:
    """The tile of the stream families (stream and persist) for time-major buffers (``sms``: the
    device's multiprocessors, 0 off CUDA)."""
    if kk > 1:
        # a trailing axis (not swept): wide row tiles (at least 16 rows), halved while the grid
        # has fewer than TIME_MAJOR_PROGRAMS_PER_SM programs per SM; chunks fill the rest
        block_n = max(1, min(pow2(rows), TM_K_TILE // 16 // kk))
        while (block_n > MIN_ROWS_TIME_MAJOR
               and -(-rows // block_n) < TIME_MAJOR_PROGRAMS_PER_SM * sms):
            block_n //= 2
        block_t = max(16, min(pow2(c.T), TM_K_TILE // (block_n * kk)))
        return Config(block_n, block_t, block_k, NUM_WARPS, "stream")
    # tiles of 16 rows (loads coalesced across rows), halved down to 4 while the grid has fewer
    # programs than SMs; many programs (TM_MANY_PROGRAMS_PER_SM per SM): 16-step chunks on 2
    # warps, else TM_TILE elements on 4 warps. Calls of up to TM_LANES_STREAMS tensors, and joint
    # pairs from TM_LANES_JOINT_MIN_ROWS rows, take tiles of a row a lane instead (TM_LANES_*).
    block_n = min(TM_ROWS, pow2(rows))
    while block_n > TM_MIN_ROWS and -(-rows // block_n) < sms:
        block_n //= 2
    many = -(-rows // block_n) >= TM_MANY_PROGRAMS_PER_SM * sms > 0
    joint, volatile = c.op.kernels.lb_words > 3, lanes_volatile(c)
    light = sms and streams(c) <= TM_LANES_STREAMS
    tiles = -(-rows // TM_LANES_ROWS)
    few = sms and streams(c) <= TM_LANES_FEW_STREAMS and not many
    if few and c.T >= 64 and tiles >= sms - sms // 8 and TM_LANES_FEW_TILE:
        halve = streams(c, outputs=False) >= TM_LANES_FEW_HALVE_STREAMS
        steps = TM_LANES_FEW_TILE // TM_LANES_FEW_ROWS // (2 if halve else 1)
        return Config(TM_LANES_FEW_ROWS, min(steps, pow2(c.T)), block_k, 4, "stream")
    if (light and many and not joint and (not volatile or c.T >= TM_LANES_STEPS)
            or sms and joint and rows >= TM_LANES_JOINT_MIN_ROWS):
        steps = max(16, min(TM_LANES_STEPS, pow2(c.T)))
        long_rows = c.T >= TM_LANES_PERSIST_MIN_T > 0
        if long_rows and not (volatile or joint):
            return Config(TM_LANES_ROWS, min(TM_LANES_PLAIN_STEPS, pow2(c.T)), block_k, 4, "stream")
        if long_rows and joint:
            return Config(TM_LANES_ROWS, steps, block_k, 2, "persist")
        if not (volatile or joint) and TM_LANES_STEPS < c.T <= TM_LANES_PLAIN_ROW:
            return Config(TM_LANES_ROWS, pow2(c.T), block_k, 2, "stream")
        warps = TM_LANES_VOLATILE_WARPS if volatile and not joint else 1
        if warps > 1 and streams(c, outputs=False) * steps > TM_LANES_LOADS * warps:
            warps *= 2
        elif warps > 1 and long_rows:
            return Config(TM_LANES_ROWS, steps, block_k, 2 * warps, "persist")
        return Config(TM_LANES_ROWS, steps, block_k, warps, "stream")
    if many:
        return Config(block_n, 16, block_k, 2, "stream")
    block_t = max(16, min(pow2(c.T), TM_TILE // block_n))
    return Config(block_n, block_t, block_k, NUM_WARPS, "stream")


def lookback_tile(c, rows: int, block_k: int, kk: int) -> Config:
    """The look-back's tile for time-major buffers: adjacent rows x steps (TM_LB_ROWS,
    TM_LB_K_ROWS, TM_LB_LANES_MAX_T)."""
    joint = c.op.kernels.lb_words > 3
    long_rows = (kk == 1 and not joint and TM_LB_LONG_TILE
                 and streams(c) < LOOKBACK_MANY_TENSORS and c.T >= TM_LB_LONG_MIN_T
                 and rows >= TM_LB_ROWS)
    lanes = kk == 1 and c.T <= TM_LB_LANES_MAX_T and not long_rows
    if kk > 1:  # steps x K elements a row
        tile_rows, tile = TM_LB_K_ROWS, TM_LB_K_TILE // kk
    elif long_rows:
        tile_rows, tile = TM_LB_ROWS, TM_LB_LONG_TILE
    else:
        tile_rows = TM_LB_ROWS if lanes or not joint else TM_LB_JOINT_ROWS
        tile = TM_LB_TILE // (2 if streams(c) >= LOOKBACK_MANY_TENSORS else 1)
    block_n = min(tile_rows, pow2(rows))
    block_t = max(16, min(tile // block_n, pow2(c.T) // 2))
    cfg = lane_tile = Config(block_n, block_t, block_k, NUM_WARPS, "lookback")
    if long_rows and TM_LB_LONG_LANE_WARPS:
        lane = cfg._replace(block_n=TM_LB_LONG_LANE_ROWS, num_warps=TM_LB_LONG_LANE_WARPS,
                            block_t=min(TM_LB_LONG_TILE // TM_LB_LONG_LANE_ROWS, pow2(c.T) // 2))
        if block_n == TM_LB_ROWS and lookback_lanes(c, lane):
            cfg = lane_tile = lane
    if lanes and not joint and block_n == TM_LB_ROWS and c.T >= TM_LB_LANES_HALVE_MIN_T:
        while not lookback_lanes(c, cfg) and cfg.block_t > TM_LB_MIN_STEPS:
            cfg = cfg._replace(block_t=cfg.block_t // 2)
    if kk == 1 and c.device.type == "cuda":
        want = TM_LB_MIN_PROGRAMS_PER_SM * sm_count(c.device)
        small = cfg._replace(block_t=min(cfg.block_t, TM_LB_MIN_STEPS))
        if (lanes and cfg.block_n == TM_LB_ROWS and streams(c) < LOOKBACK_MANY_TENSORS
                and -(-rows // cfg.block_n) * -(-c.T // cfg.block_t) < want
                and 4 * -(-rows // TM_LB_ROWS) * -(-c.T // small.block_t) >= want
                and lookback_lanes(c, small)):
            return small  # a small grid of lane tiles: 32 rows, TM_LB_MIN_STEPS steps
        while -(-rows // cfg.block_n) * -(-c.T // cfg.block_t) < want:
            if cfg.block_n > TM_LB_MIN_ROWS:
                cfg = cfg._replace(block_n=cfg.block_n // 2)
            elif cfg.block_t > TM_LB_MIN_STEPS:
                cfg = cfg._replace(block_t=cfg.block_t // 2)
            else:
                break
    if cfg.num_warps != NUM_WARPS and cfg.block_n < lane_tile.block_n:
        cfg = cfg._replace(num_warps=NUM_WARPS)  # halved below a lane tile: rows on NUM_WARPS
    return cfg
