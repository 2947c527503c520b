"""Launch parameters of a call beyond its tile (:mod:`.config` picks the tile and the family):
the look-back's window, first wait, chunk order and grid, the persist family's grid, and the step
order of kernels that take ``GROUPED``. Each is a constexpr or the grid of every launch
(:mod:`.launch`); the H200 measurements behind the constants are in bench/NOTES.md."""
from __future__ import annotations

from .tiles import sm_count
from .timemajor import TM_LB_LONG_TILE

# The row-tile look-back's window (time-major buffers, runtime.timemajor's TM_LB_* tiles): its
# predecessors x the tile's rows a round trip (results/h200-2026-12-01-i-tm-sweep.txt).
TM_LB_WINDOW = 16
# Long row tiles (timemajor.TM_LB_LONG_TILE elements, 32 x 256) over rows of at least
# TM_LB_LONG_MIN_CHUNKS chunks read TM_LB_LONG_WINDOW predecessors a round trip and take their
# chunks in the order of their ids (LB_PID) at any grid size (0: off). Probe (graph replays,
# results/h200-2026-12-04-ac-probe.txt): GAE 256x8192 20.0 -> 18.7 us, 64x65536 48.2 -> 46.6,
# eligibility traces 16.1 -> 15.1 and 35.0 -> 34.6; either alone gained less or nothing, a
# window of 64 lost everywhere, and 512x4096 (16 chunks a row) gained nothing.
TM_LB_LONG_WINDOW = 32
TM_LB_LONG_MIN_CHUNKS = 32

PERSISTENT_PER_SM = 4  # programs per SM of the persist family's kernels


def persistent_programs(c) -> int:
    """Programs of a persist-family kernel: a few per SM on a GPU; three on the CPU, so that
    the interpreter runs programs that stride over tiles."""
    if c.device.type != "cuda":
        return 3
    return PERSISTENT_PER_SM * sm_count(c.device)


# The look-back's window (predecessors read per round trip): small where a row has few chunks
# (less to read and reduce), wide on 8 warps for look-backs of one scan (3 words a predecessor,
# two words a thread), else 128; look-backs over a trailing axis (K > 1: thousands of short
# chunks a row) read the small window. bench/NOTES.md has the sweeps behind each number.
LB_SMALL_WINDOW = 32
LB_WINDOW = 128
LB_WIDE_WINDOW = 512
LB_WIDE_WORDS = 3  # words a predecessor, at most, for the wide window


def lookback_window(c, cfg, words: int = 3) -> int:
    """Predecessors the look-back reads per round trip (the kernels' LB_WINDOW); ``words``: the
    words it reads per predecessor (3 per scan, 7 per joint pair). A constexpr of every kernel:
    fixed for the other families, which do not use it, so that a new T does not make Triton
    compile them again."""
    if cfg.family != "lookback":
        return LB_WINDOW
    if cfg.block_n > 1:  # a tile of rows reads WINDOW x BLOCK_N words a round trip
        return TM_LB_LONG_WINDOW if long_row_tiles(c, cfg) else TM_LB_WINDOW
    if row_chunks(c, cfg) <= LB_SMALL_WINDOW or cfg.block_k > 1:
        return LB_SMALL_WINDOW
    return LB_WIDE_WINDOW if cfg.num_warps >= 8 and words <= LB_WIDE_WORDS else LB_WINDOW


# Rows of more chunks than this wait on the nearest predecessor's aggregate, one word at a time,
# before reading whole windows (the kernels' LB_SPIN): the many waiting programs of such rows
# otherwise keep reading whole windows; rows of fewer chunks run faster without the wait.
LB_SPIN_CHUNKS = 4096


def lookback_spin(c, cfg) -> bool:
    """Whether the look-back first waits on its nearest predecessor alone (LB_SPIN; False for
    the other families, as in lookback_window)."""
    return cfg.family == "lookback" and row_chunks(c, cfg) > LB_SPIN_CHUNKS


# Look-back grids of at least this many programs per SM take each program's chunk from its id
# (the kernels' LB_PID), not from a ticket of the atomic counter, whose round trip every load of
# the program waits on. With every program resident at once (fewer per SM), tickets win: they
# hand out chunks in the order programs actually start.
LB_PID_PROGRAMS_PER_SM = 8


def lookback_pid(c, cfg) -> bool:
    """Whether look-back programs take their chunks in the order of their ids (LB_PID) rather
    than from tickets; False for the other families and off the GPU (as in lookback_window)."""
    if cfg.family != "lookback" or c.device.type != "cuda":
        return False
    return (long_row_tiles(c, cfg)
            or lookback_tickets(c, cfg) >= LB_PID_PROGRAMS_PER_SM * sm_count(c.device))


def long_row_tiles(c, cfg) -> bool:
    """Whether a look-back over tiles of rows takes the long tiles' window and chunk order
    (TM_LB_LONG_WINDOW, TM_LB_LONG_MIN_CHUNKS)."""
    return (cfg.block_n > 1 and TM_LB_LONG_MIN_CHUNKS > 0
            and cfg.block_n * cfg.block_t >= TM_LB_LONG_TILE
            and row_chunks(c, cfg) >= TM_LB_LONG_MIN_CHUNKS)


# Kernels that take GROUPED (reverse specs with [N, T, K] inputs, one step a thread: Retrace)
# run every chunk with its steps reversed in the columns and scan it forward, instead of a
# reverse scan over the steps in order, whose lane reversal costs shuffles. Faster or the same
# at every shape measured (bench/dev/order_ab.py, results/h200-2026-12-01-h-order-ab.txt, graph
# replays): 32768x16 25.4 -> 21.7 us, 16384x64 44.2 -> 36.6, 128x1024 11.2 -> 10.6, 1.00x-1.03x
# from 4096x128 to 16384x1024. False: the natural order everywhere (for A/B runs).
GROUPED_ORDER = True


def grouped_order(c, cfg) -> bool:
    """Whether a kernel that takes GROUPED runs its chunks in reversed step order."""
    return GROUPED_ORDER


def lookback_tickets(c, cfg) -> int:
    """The look-back kernel's grid: one program per ticket (row tile, chunk)."""
    return -(-(c.R1 * c.R2) // cfg.block_n) * row_chunks(c, cfg)


def row_chunks(c, cfg) -> int:
    """Chunks of BLOCK_T steps in a row."""
    return -(-c.T // cfg.block_t)
