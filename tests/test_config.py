"""The dispatch rule of scangen/config.py, as docs/runtime.md states it, on a simulated H200
(132 SMs): the tile each documented case gets."""
from types import SimpleNamespace as NS
from unittest import mock

import pytest
import torch

from scangen import abi
from scangen.runtime import config, tiles, timemajor


def _choose(N, T, *, time_major=False, K=1, family=None, streams=3, lb_words=3,
            dtype=torch.float32, bootstrap=False, outputs=1):
    """The config of a call moving ``streams`` [N, T] tensors: ``outputs`` outputs, the rest inputs
    (one more input of shape [N], which does not count); ``lb_words``: the op's look-back words
    a row (3 a scan, 7 a joint pair); ``bootstrap``: the op has an optional float [N, T] input
    (timemajor.lanes_volatile)."""
    strides = {f"x{i}": (1, 0, N) if time_major else (T, 0, 1)
               for i in range(streams - outputs)}
    strides["last"] = (1, 0, 0)
    c = NS(R1=N, R2=1, T=T, K=K, device=torch.device("cuda", 0), strides=strides,
           tensors=dict.fromkeys(strides), outs={f"out{i}": None for i in range(outputs)},
           op=NS(kernels=NS(lb_words=lb_words),
                 inputs=(abi.InputInfo("boot", "float", "NT", 0.0 if bootstrap else None, ""),)),
           out_dtype=dtype)
    with mock.patch.object(tiles, "_sm_count", lambda index: 132), \
            mock.patch.dict(config.ENV, {"SCANGEN_FAMILY": family}):
        return config.choose_config(c)


@pytest.mark.parametrize("N,T,expected", [
    (16384, 1024, (1, 1024, "stream")),   # one row per program, 1024-step chunks
    (16384, 64, (8, 64, "stream")),       # short chunks: 2048-element tiles halved to 512
    (4096, 128, (4, 128, "stream")),      # ... while the grid has < 8 programs per SM
    (32768, 16, (32, 16, "stream")),
    (262144, 16, (128, 16, "stream")),    # 2048 programs of full tiles: no halving
    (16384, 4096, (1, 1024, "stream")),   # long rows, many of them: stream in chunks
    (64, 65536, (1, 2048, "lookback")),   # fewer rows than SMs: T split across programs
    (8, 262144, (1, 4096, "lookback")),   # 1024 programs of 2048 would be < 8 per SM
    (2, 1048576, (1, 4096, "lookback")),  # 512 programs of 4096: >= 2 per SM
    (1, 1048576, (1, 8192, "lookback")),  # 256 of 4096 would be < 2 per SM: 8192 on 8 warps
    (1, 16384, (1, 8192, "lookback")),    # at most half the padded row
    (1, 8192, (1, 4096, "lookback")),     # ... on 4 warps
    (4, 2048, (1, 1024, "lookback")),     # at least two chunks per row
    (256, 8192, (1, 1024, "persist")),    # < 2 rows per SM: one persistent program per row
    (200, 1024, (1, 1024, "stream")),     # few rows but one chunk each: nothing to prefetch
])
def test_rows_layout(N, T, expected):
    cfg = _choose(N, T, streams=5)  # GAE's five [N, T] inputs and outputs, say
    assert (cfg.block_n, cfg.block_t, cfg.family) == expected
    assert cfg.num_warps == (8 if cfg.block_t == 8192 else 4)


@pytest.mark.parametrize("N,T,expected", [
    (16384, 64, (8, 64, 1)),     # 512-element tiles of light calls: one warp, one stage
    (4096, 128, (4, 128, 1)),
    (32768, 16, (32, 16, 1)),
    (262144, 16, (128, 16, 4)),  # 2048-element tiles keep four warps
    (16384, 1024, (1, 1024, 4)), # long chunks too
])
def test_light_calls_take_one_warp_for_short_chunks(N, T, expected):
    cfg = _choose(N, T, streams=config.LIGHT_STREAMS)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == expected
    assert cfg.num_stages == (1 if cfg.num_warps == 1 else 3)
    assert _choose(N, T, streams=config.LIGHT_STREAMS + 1).num_warps == (
        8 if cfg.block_t == 8192 else 4)


@pytest.mark.parametrize("N,T,expected", [
    (32768, 16, (2, 16, 1)),     # K_WARP_TILE = 256 elements a warp: 2 rows x 16 steps x 8
    (16384, 64, (1, 64, 2)),     # one row of 64 x 8: two warps
    (4096, 128, (1, 128, 4)),    # one row of 128 x 8: four warps, as before
    (16384, 1024, (1, 128, 4)),
])
def test_trailing_axis_tiles_of_256_elements_a_warp(N, T, expected):
    cfg = _choose(N, T, K=8, streams=5)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == expected
    assert cfg.block_k == 8 and cfg.family == "stream"
    assert cfg.num_stages == (1 if cfg.num_warps < 4 else 3)


@pytest.mark.parametrize("N,T,K,expected", [
    (128, 1024, 8, (1, 1024, 16)),  # no more rows than SMs, a whole row of 1024 x 8: 16 warps
    (64, 512, 8, (1, 512, 8)),      # 512 x 8 elements: 8 warps
    (256, 1024, 8, (1, 256, 8)),    # more rows than SMs: 2048-element chunks on 8 warps
    (64, 1024, 16, (1, 128, 8)),    # a row of 1024 x 16 elements does not fit one program
])
def test_trailing_axis_few_rows(N, T, K, expected):
    cfg = _choose(N, T, K=K, streams=5)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == expected
    assert (cfg.block_k, cfg.family, cfg.num_stages) == (K, "stream", 1)


@pytest.mark.parametrize("N,T,streams,expected", [
    (4096, 128, 7, (1, 128, 1)),   # many tensors, 128-step chunks: one row on one warp
    (4096, 128, 6, (4, 128, 4)),   # fewer tensors: the 512-element tile on 4 warps
    (2048, 256, 7, (1, 256, 1)),   # 256-step chunks too
    (16384, 64, 7, (8, 64, 4)),    # shorter chunks keep the tile
    (32768, 16, 9, (32, 16, 4)),
])
def test_heavy_short_chunks(N, T, streams, expected):
    cfg = _choose(N, T, streams=streams)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == expected
    assert cfg.family == "stream" and cfg.num_stages == (1 if cfg.num_warps == 1 else 3)


@pytest.mark.parametrize("N,T,streams,family", [
    (16384, 2048, 6, "stream"),
    (16384, 2048, 7, "persist"),   # PERSIST_TENSORS: long chunks that move many tensors
    (1024, 4096, 9, "persist"),
    (16384, 1024, 7, "stream"),    # rows of one chunk stream (no chunk loop, nothing to prefetch)
    (1024, 1024, 9, "stream"),
    (16384, 512, 9, "stream"),
    (16384, 256, 9, "stream"),     # short chunks stay non-persistent
    (64, 65536, 9, "lookback"),
])
def test_persist_for_calls_that_move_many_tensors(N, T, streams, family):
    cfg = _choose(N, T, streams=streams)
    assert cfg.family == family
    if family == "persist":  # one row per program, chunks of PERSIST_TILE steps
        assert (cfg.block_n, cfg.block_t) == (1, config.PERSIST_TILE)


@pytest.mark.parametrize("N,T,streams,chunk", [
    (64, 65536, 9, 1024),    # many tensors (LOOKBACK_SHORT_TENSORS): shorter chunks on 4 warps
    (64, 65536, 7, 2048),
    (8, 262144, 8, 1024),    # ... also where the chunk was doubled for the programs' count
    (8, 262144, 7, 4096),
    (1, 1048576, 9, 8192),   # too few programs for 4096: the 8-warp tile whatever the tensors
])
def test_lookback_chunk_for_calls_that_move_many_tensors(N, T, streams, chunk):
    cfg = _choose(N, T, streams=streams)
    assert (cfg.family, cfg.block_t) == ("lookback", chunk)


@pytest.mark.parametrize("N,T,streams,window", [
    (64, 65536, 7, 32),      # 32 chunks of 2048 a row: a 32-wide window
    (64, 65536, 9, 128),     # 64 chunks of 1024 on 4 warps
    (8, 262144, 7, 128),     # 64 chunks of 4096 on 4 warps
    (8, 262144, 9, 128),     # 256 chunks of 1024 on 4 warps
    (1, 1048576, 7, 512),    # 128 chunks of 8192 on 8 warps: one wide window
])
def test_lookback_window(N, T, streams, window):
    """The look-back's window (runtime.launch_params.lookback_window) for the rule's look-back configs."""
    from scangen import runtime
    cfg = _choose(N, T, streams=streams)
    assert runtime.launch_params.lookback_window(NS(T=T), cfg) == window
    # a joint look-back (7 words a predecessor) keeps the 128-wide window on 8 warps
    joint = runtime.launch_params.lookback_window(NS(T=T), cfg, 7)
    assert joint == (runtime.launch_params.LB_WINDOW if window == runtime.launch_params.LB_WIDE_WINDOW else window)


@pytest.mark.parametrize("N,T", [(64, 65536), (8, 262144), (1, 1048576)])
def test_lookback_window_over_a_trailing_axis(N, T):
    """Look-backs that sum over a trailing axis (K > 1: Retrace's short chunks) read 32
    predecessors a round trip."""
    from scangen import runtime
    cfg = _choose(N, T, K=8, streams=10)
    assert cfg.family == "lookback" and cfg.block_k == 8
    assert runtime.launch_params.lookback_window(NS(T=T), cfg) == runtime.launch_params.LB_SMALL_WINDOW


@pytest.mark.parametrize("T", [16, 1024, 65536, 1 << 20])
def test_lookback_constants_are_fixed_for_the_other_families(T):
    """LB_WINDOW, LB_SPIN and LB_PID are constexprs of every kernel: the stream and persist
    families, which do not use them, get the same values at every T (no recompilation per T)."""
    from scangen import runtime
    for family in ("stream", "persist"):
        cfg = _choose(4096, T, family=family)
        c = NS(T=T)
        assert (runtime.launch_params.lookback_window(c, cfg), runtime.launch_params.lookback_spin(c, cfg),
                runtime.launch_params.lookback_pid(c, cfg)) == (runtime.launch_params.LB_WINDOW, False, False)


@pytest.mark.parametrize("N,T,K,spin", [
    (1, 1 << 22, 8, True),    # Retrace: 8192 chunks of 512 steps a row
    (1, 1048576, 8, False),   # 2048 chunks
    (8, 262144, 8, False),    # 512 chunks
    (1, 1048576, 1, False),   # 128 chunks of 8192 steps
    (64, 65536, 1, False),
])
def test_lookback_spin(N, T, K, spin):
    """The look-back's first wait on its nearest predecessor (runtime.launch_params.lookback_spin): only
    for rows of more than 4096 chunks."""
    from scangen import runtime
    cfg = _choose(N, T, K=K)
    assert cfg.family == "lookback"
    assert runtime.launch_params.lookback_spin(NS(T=T), cfg) is spin


@pytest.mark.parametrize("N,T,K,pid", [
    (64, 65536, 1, True),     # 2048 programs of 2048 steps: 15.5 per SM
    (8, 262144, 1, False),    # 512 programs of 4096 steps: 3.9 per SM
    (1, 1048576, 1, False),   # 128 programs of 8192 steps
    (8, 262144, 8, True),     # Retrace: 128-step chunks, 16384 programs
    (1, 1048576, 8, True),
])
def test_lookback_pid(N, T, K, pid):
    """The look-back takes chunks in the order of program ids (runtime.launch_params.lookback_pid) where the
    grid has 8 programs per SM or more, on a GPU only."""
    from scangen import runtime
    cfg = _choose(N, T, K=K)
    assert cfg.family == "lookback"
    with mock.patch.object(tiles, "_sm_count", lambda index: 132):
        on_gpu = NS(R1=N, R2=1, T=T, device=torch.device("cuda", 0))
        assert runtime.launch_params.lookback_pid(on_gpu, cfg) is pid
        assert runtime.launch_params.lookback_pid(NS(R1=N, R2=1, T=T, device=torch.device("cpu")), cfg) is False


def test_persist_for_few_rows_keeps_long_chunks():
    cfg = _choose(256, 8192, streams=9)
    assert (cfg.block_n, cfg.block_t, cfg.family) == (1, 1024, "persist")


def test_no_persist_with_a_trailing_axis_or_time_major():
    assert _choose(16384, 1024, K=8, streams=9).family == "stream"
    assert _choose(256, 8192, K=8).family == "lookback"   # Retrace's few rows, as before
    assert _choose(256, 8192, time_major=True).family == "lookback"
    assert _choose(16384, 1024, time_major=True, streams=9).family == "stream"


def test_trailing_axis_counts_in_the_tile():
    cfg = _choose(16384, 1024, K=8)
    assert (cfg.block_n, cfg.block_t, cfg.block_k) == (1, 128, 8)
    # the look-back with K > 1: 4096 elements a chunk on 8 warps where a row holds more than 32
    # chunks of 1024, else 1024 on 4
    lb = _choose(256, 8192, K=8)
    assert (lb.block_t, lb.num_warps, lb.family) == (512, 8, "lookback")
    assert _choose(128, 4096, K=8)[:4] == (1, 128, 8, 4)
    assert _choose(200, 2048, K=8)[:4] == (1, 128, 8, 4)
    assert _choose(1, 1048576, K=8)[:4] == (1, 512, 8, 8)
    assert _choose(8, 262144, K=2)[:4] == (1, 2048, 2, 8)  # 2048 steps of 2
    assert _choose(8, 262144, K=64)[:4] == (1, 256, 16, 8)  # K in slices of MAX_BLOCK_K


@pytest.mark.parametrize("N,T,expected", [
    (16384, 1024, (16, 16, 2)),   # 1024 programs: 16-row x 16-step tiles on 2 warps
    (16384, 64, (16, 16, 2)),
    (4096, 128, (16, 64, 4)),     # 256 programs: 1024-element tiles on 4 warps
    (3, 40, (4, 64, 4)),
])
def test_time_major_row_tiles(N, T, expected):
    cfg = _choose(N, T, time_major=True, streams=9)  # nine tensors: no tiles of a row a lane
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == expected
    assert cfg.family == "stream"


@pytest.mark.parametrize("N,T,expected", [
    (16384, 128, (32, 32, 1, "stream")),  # many programs, light calls: a row a lane, 32 x 32
    (16384, 64, (32, 64, 2, "stream")),   # rows of at most 64 steps: the whole row, two warps
    (16384, 40, (32, 64, 2, "stream")),
    (16384, 32, (32, 32, 1, "stream")),
    (32768, 16, (32, 16, 1, "stream")),   # ... one chunk
    (16384, 1024, (32, 128, 4, "stream")),  # rows of 256 steps or more: 128-step chunks on four
    (16384, 256, (32, 128, 4, "stream")),   # warps, each a run of 32 (runtime.launch.lane_warps)
    (4096, 128, (16, 128, 4, "stream")),  # 128 tiles of 32 rows, about one a SM: 256 of 16 rows
])
def test_time_major_light_calls(N, T, expected):
    cfg = _choose(N, T, time_major=True, streams=config.LIGHT_STREAMS)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps, cfg.family) == expected
    heavier = _choose(N, T, time_major=True, streams=timemajor.TM_LANES_FEW_STREAMS + 1)
    assert (heavier.block_n, heavier.block_t) == ((16, 16) if N >= 16384 else (16, 64))


@pytest.mark.parametrize("N,T,kw,expected", [
    (4096, 128, {}, (16, 128, 4)),          # about a tile of 32 rows a SM: tiles of 16 rows, 4
    (4096, 256, {}, (16, 256, 4)),          # warps, 4096 elements
    (4096, 128, {"streams": 6, "bootstrap": True}, (16, 128, 4)),  # 5 inputs: half the tile
    (4096, 64, {"streams": 6, "bootstrap": True}, (16, 64, 4)),
    (4096, 128, {"streams": 5, "bootstrap": True}, (16, 128, 4)),  # 4 (discounted returns): whole
    (4096, 128, {"streams": 5, "lb_words": 7}, (16, 128, 4)),     # joint pair of 3 inputs alike
    (3700, 128, {}, (16, 128, 4)),          # 116 tiles of 32 rows: 132 SMs less an eighth
    (3600, 128, {}, (16, 64, 4)),           # 113 tiles: too few, the row tiles
    (4096, 32, {}, (16, 32, 4)),            # fewer than 64 steps: the row tiles
    (4096, 128, {"streams": 8}, (16, 128, 4)),  # eight tensors (V-trace) alike
    (4096, 128, {"streams": 9}, (16, 64, 4)),   # nine: the row tiles
])
def test_time_major_fewer_programs_take_four_warps_a_tile(N, T, kw, expected):
    cfg = _choose(N, T, time_major=True, **kw)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps, cfg.family) == (*expected, "stream")


@pytest.mark.parametrize("streams,bootstrap,expected", [
    (5, True, (32, 32, 4, "persist")),  # discounted returns: volatile, 4 inputs x 16 steps a
                                        # thread on two warps: persist on four
    (6, True, (32, 32, 4)),       # TD(lambda), GAE: 5 x 16 on two warps > 64, so four, streaming
    (6, False, (32, 128, 4)),     # plain loads: 128-step chunks on four warps
    (7, True, (16, 16, 2)),       # seven tensors: the 16 x 16 row tiles
])
def test_time_major_tiles_a_row_a_lane_up_to_six_tensors(streams, bootstrap, expected):
    cfg = _choose(16384, 1024, time_major=True, streams=streams, bootstrap=bootstrap)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps, cfg.family) == (*expected, "stream")[:4]
    assert _choose(16384, 128, time_major=True, streams=streams, bootstrap=bootstrap
                   ).family == "stream"  # rows of fewer than 256 steps stream


def test_time_major_volatile_tiles_need_two_chunks_of_steps():
    """Volatile tiles of a row a lane from T = 32 (GAE 32768x16 lost on them); plain ones at 16."""
    cfg = _choose(32768, 16, time_major=True, streams=6, bootstrap=True)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps) == (16, 16, 2)
    assert _choose(16384, 64, time_major=True, streams=6, bootstrap=True).block_t == 32
    assert _choose(32768, 16, time_major=True, streams=3).block_n == 32


@pytest.mark.parametrize("N,T,expected", [
    (16384, 1024, (32, 32, 2, "persist")),  # joint pairs of scans: a row a lane from 4096 rows,
    (16384, 128, (32, 32, 1)),              # persisting on two warps where rows are long
    (32768, 16, (32, 16, 1)),
    (4096, 128, (16, 128, 4)),    # about a 32-row tile a SM: 16 rows, 2048 elements (5 inputs)
    (2048, 128, (8, 128, 4)),     # fewer rows: the row tiles of the other calls
])
def test_time_major_joint_pairs_take_a_row_a_lane(N, T, expected):
    cfg = _choose(N, T, time_major=True, streams=6, lb_words=7)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps, cfg.family) == (*expected, "stream")[:4]


@pytest.mark.parametrize("N,T,kw,expected", [
    (1024, 1024, {}, (32, 128, 1)),       # 64 tiles of 16 rows < 4 per SM: 32 x 128 tiles
    (8000, 1024, {}, (32, 128, 1)),       # 500 tiles of 16 rows: still few
    (64, 65536, {"lb_words": 7}, (8, 512, 1)),   # a joint pair of scans: 8 rows
    (1024, 1024, {"streams": 8}, (32, 64, 1)),   # 8 tensors moved: 2048-element tiles
    (1024, 1024, {"K": 8}, (8, 32, 8)),          # a trailing axis: 8 x 32 x 8
    (1024, 512, {}, (32, 64, 1)),     # 128 programs of 32 x 128 < 132 SMs: a lane tile of 64
                                      # steps, keeping its rows
    (2048, 256 * 1024, {"lb_words": 7}, (8, 512, 1)),
    # rows of at most 8192 steps: joint pairs take the 32-row tiles (a row a lane) too; from
    # 4096 steps, calls whose loads would exceed 128 a thread halve their steps (GAE: 5 x 16)
    (1024, 1024, {"lb_words": 7}, (32, 128, 1)),
    (256, 8192, {"lb_words": 7}, (32, 128, 1)),
    (2048, 512, {"lb_words": 7}, (32, 128, 1)),
    (1024, 2048, {"streams": 6, "bootstrap": True}, (32, 128, 1)),  # shorter rows: as before
    # ... but calls of one scan moving fewer than 8 tensors with rows of 4096 steps or more and
    # 32 rows or more take 32 x 256 row tiles (timemajor.TM_LB_LONG_TILE)
    (256, 8192, {"streams": 6, "bootstrap": True}, (32, 256, 1)),
    (512, 4096, {"streams": 6, "bootstrap": True}, (32, 256, 1)),
    (64, 65536, {"streams": 6, "bootstrap": True}, (32, 256, 1)),
    (64, 65536, {}, (16, 512, 1)),      # plain calls too, as lane tiles of 16 rows where loads fit
    (256, 8192, {}, (16, 512, 1)),
    (64, 65536, {"streams": 8, "bootstrap": True}, (32, 64, 1)),    # V-trace's 8: as before
    (16, 65536, {"streams": 6, "bootstrap": True}, (16, 256, 1)),   # fewer rows: as before
    # grids of fewer programs than SMs: lane tiles of 64 steps keeping 32 rows where a thread's
    # loads fit and that leaves a quarter of a program an SM (fewer than 8 tensors); other tiles
    # halve their rows down to 8, then their steps down to 64
    (128, 1024, {}, (32, 64, 1)),                # 32 programs of 32 x 128 -> 64 of 32 x 64
    (128, 1024, {"streams": 6, "bootstrap": True}, (32, 64, 1)),
    (128, 1024, {"lb_words": 7}, (32, 64, 1)),
    (128, 1024, {"streams": 9, "bootstrap": True}, (8, 64, 1)),  # V-trace's 9 tensors
    (64, 512, {"lb_words": 7}, (8, 64, 1)),      # 8 programs of 32 x 128 -> 64 of 8 x 64
])
def test_time_major_look_back_over_row_tiles(N, T, kw, expected):
    cfg = _choose(N, T, time_major=True, **kw)
    assert cfg.family == "lookback"
    assert (cfg.block_n, cfg.block_t, cfg.block_k) == expected


@pytest.mark.parametrize("algo_streams,tile,lanes", [
    (3, (16, 512, 8), 1), (5, (16, 512, 8), 1), (6, (32, 256, 4), 0)])
def test_time_major_long_tiles_take_lanes_on_eight_warps_where_loads_fit(algo_streams, tile, lanes):
    """The long tiles (8192 elements) take a row a lane as 16 x 512 tiles on
    timemajor.TM_LB_LONG_LANE_WARPS (8) warps, two lanes a row, where a thread's loads fit (3
    tensors: 2 inputs x 32 steps a thread; 5: 4 x 32 = TM_LB_LANES_LOADS), else 32 x 256 rows on
    4 warps (6 tensors: 5 x 32 > TM_LB_LANES_LOADS, GAE and TD(lambda)); with the knob at 0
    every long tile is rows on 4 warps, as before."""
    from scangen.runtime import launch, timemajor
    cfg = _choose(64, 65536, time_major=True, streams=algo_streams)
    assert (cfg.block_n, cfg.block_t, cfg.num_warps, cfg.family) == (*tile, "lookback")
    c = NS(R1=64, R2=1, T=65536, K=1, device=torch.device("cuda", 0),
           strides={f"x{i}": (1, 0, 64) for i in range(algo_streams - 1)},
           tensors=dict.fromkeys(f"x{i}" for i in range(algo_streams - 1)),
           outs={"out0": None},
           op=NS(kernels=NS(lb_words=3), inputs=()))
    with mock.patch.object(tiles, "_sm_count", lambda index: 132):
        assert launch.lanes(c, cfg) == lanes
    with mock.patch.object(timemajor, "TM_LB_LONG_LANE_WARPS", 0):
        off = _choose(64, 65536, time_major=True, streams=algo_streams)
    assert (off.block_n, off.block_t, off.num_warps) == (32, 256, 4)


def test_time_major_long_tiles_halved_below_a_lane_tile_keep_four_warps():
    """32 rows of 4096 steps: the long lane tile's grid (16 x 512: 16 programs) is halved down to
    8-row tiles, which cannot take a row a lane: they run on NUM_WARPS, not on the lane tile's 8."""
    cfg = _choose(32, 4096, time_major=True, streams=3)
    assert cfg.family == "lookback" and cfg.block_n < 32 and cfg.num_warps == 4


@pytest.mark.parametrize("N,T,kw,window,pid", [
    (64, 65536, {}, 32, True),       # 16 x 512 lane tiles, 128 chunks a row
    (256, 8192, {"streams": 6, "bootstrap": True}, 32, True),   # 32 chunks a row
    (512, 4096, {"streams": 6, "bootstrap": True}, 16, False),  # 16 chunks: as before
    (1024, 1024, {}, 16, False),     # 32 x 128 tiles: as before
    (64, 65536, {"lb_words": 7}, 16, False),   # a joint pair's 8 x 512 tiles
])
def test_time_major_long_tiles_window_and_order(N, T, kw, window, pid):
    """The look-back over long row tiles (32 x 256) of rows of 32 chunks or more reads 32
    predecessors a round trip and takes chunks in the order of program ids
    (runtime.launch_params.long_row_tiles); other row tiles read 16 and take tickets."""
    from scangen import runtime
    cfg = _choose(N, T, time_major=True, **kw)
    with mock.patch.object(tiles, "_sm_count", lambda index: 132):
        c = NS(R1=N, R2=1, T=T, device=torch.device("cuda", 0))
        assert runtime.launch_params.lookback_window(c, cfg) == window
        assert runtime.launch_params.lookback_pid(c, cfg) is pid
        assert runtime.launch_params.lookback_pid(NS(R1=N, R2=1, T=T, device=torch.device("cpu")), cfg) is False


@pytest.mark.parametrize("N,T,kw", [
    (8448, 1024, {}),     # 528 tiles of 16 rows: 4 per SM, the stream tiles
    (1024, 256, {}),      # rows shorter than TM_LOOKBACK_MIN_T
    (16384, 1024, {"K": 8}),
])
def test_time_major_no_look_back_where_tiles_are_many_or_rows_short(N, T, kw):
    assert _choose(N, T, time_major=True, **kw).family in ("stream", "persist")


def test_time_major_with_a_trailing_axis_keeps_wide_row_tiles():
    cfg = _choose(16384, 1024, time_major=True, K=8)
    assert cfg.block_n >= 16 and cfg.block_n * cfg.block_t * cfg.block_k <= config.TILE


def test_forced_family():
    assert _choose(16384, 1024, family="lookback").family == "lookback"
    assert _choose(16384, 64, family="persist").family == "persist"
    assert _choose(64, 65536, family="stream").family == "stream"
    with pytest.raises(ValueError, match="SCANGEN_FAMILY must be"):
        _choose(16384, 1024, family="bogus")


@pytest.mark.parametrize("N", [1, 5])
def test_forced_look_back_of_one_step_rows_streams(N):
    """Rows of one step have no chunk to look back over (and Triton 3.6 cannot compile the
    look-back kernels specialised to R1 = R2 = T = 1): the stream family's tile."""
    cfg = _choose(N, 1, family="lookback")
    assert cfg == _choose(N, 1, family="stream")
    assert cfg.family == "stream"
    assert _choose(N, 2, family="lookback").family == "lookback"


@pytest.mark.parametrize("N,T,dtype,lb_words,expected", [
    (16384, 1024, torch.bfloat16, 7, (2, 1024, 1)),  # a joint pair in bf16: two rows, one stage
    (16384, 1024, torch.float16, 7, (2, 1024, 1)),
    (1024, 1024, torch.bfloat16, 7, (2, 1024, 1)),   # 512 programs: still 2 per SM
    (400, 1024, torch.bfloat16, 7, (1, 1024, 3)),    # 200 programs of two rows: too few
    (16384, 2048, torch.bfloat16, 7, (1, 1024, 3)),  # rows of two chunks: not one chunk
    (16384, 1024, torch.float32, 7, (1, 1024, 3)),   # fp32: one row
    (16384, 1024, torch.bfloat16, 3, (1, 1024, 3)),  # a single scan: one row
])
def test_joint_pairs_in_two_byte_dtypes(N, T, dtype, lb_words, expected):
    cfg = _choose(N, T, streams=5, lb_words=lb_words, dtype=dtype)
    assert (cfg.block_n, cfg.block_t, cfg.num_stages) == expected
    assert cfg.family == "stream" and cfg.num_warps == 4


LB = config.Config(32, 128, 1, 4, "lookback")


@pytest.mark.parametrize("cfg,time_major,bootstrap,streams,expected", [
    (config.Config(32, 32, 1, 1), True, False, 3, 1),       # a row a lane, plain loads
    (config.Config(32, 32, 1, 2), True, True, 6, 2),        # two warps over the steps, volatile
    (config.Config(32, 64, 1, 4), True, True, 6, 2),        # four warps, 8 rows a warp
    (config.Config(32, 32, 1, 2, "persist"), True, False, 3, 1),
    (LB, True, False, 3, 1),                                 # the look-back's 32 x 128 tiles
    (LB, True, True, 5, 2),                                  # ... 4 inputs x 32 steps a thread
    (LB, True, True, 6, 0),                                  # ... 5 x 32 (GAE): tiles of rows
    (LB._replace(block_t=64), True, True, 6, 2),             # ... 5 x 16
    (LB, True, False, 5, 1),                                 # ... 4 x 32 (masked GAE: 3)
    (config.Config(64, 32, 1, 8), True, False, 3, 1),
    (config.Config(16, 16, 1, 2), True, False, 3, 0),       # the row tiles
    (config.Config(16, 32, 1, 4), True, False, 3, 0),       # 16 rows, fewer than 64 steps
    (config.Config(16, 64, 1, 4), True, False, 3, 1),       # 16 rows: two lanes a row
    (config.Config(16, 128, 1, 4), True, True, 6, 2),       # ... volatile alike
    (config.Config(16, 64, 1, 8), True, False, 3, 1),       # 2 rows a warp (the long tiles')
    (config.Config(16, 64, 1, 16), True, False, 3, 0),      # fewer than 2 rows a warp
    (config.Config(8, 128, 1, 2), True, False, 3, 0),       # fewer than 16 rows
    (config.Config(32, 64, 1, 8), True, False, 3, 1),       # 4 rows a warp
    (config.Config(32, 64, 1, 16), True, False, 3, 1),      # 2 rows a warp
    (config.Config(8, 32, 8, 4), True, False, 3, 0),        # a trailing axis (Retrace)
    (config.Config(32, 32, 1, 1), False, False, 3, 0),      # rows layout
])
def test_which_tiles_take_a_row_a_lane(cfg, time_major, bootstrap, streams, expected):
    """runtime.launch.lanes: the LANES constexpr of a launch (0, 1, or 2 with volatile loads)."""
    from scangen.runtime import launch
    N, T = 4096, 256
    strides = {f"x{i}": (1, 0, N) if time_major else (T, 0, 1) for i in range(streams - 1)}
    c = NS(R1=N, R2=1, T=T, strides=strides, tensors=dict.fromkeys(strides), outs={"out": None},
           op=NS(inputs=(abi.InputInfo("boot", "float", "NT", 0.0 if bootstrap else None, ""),)))
    assert launch.lanes(c, cfg) == expected


@pytest.mark.parametrize("cfg,lanes,shift_g,expected", [
    (config.Config(32, 32, 1, 1), 1, 1, 1),    # one warp: its steps in registers already
    (config.Config(32, 32, 1, 2), 1, 1, 2),    # 32 rows on 2 warps: each a run of 16 steps
    (config.Config(32, 128, 1, 4), 2, 1, 4),   # ... on 4 warps, volatile loads alike
    (config.Config(64, 32, 1, 2), 1, 1, 1),    # 64 rows on 2 warps: the warps take the rows
    (config.Config(64, 32, 1, 8), 1, 1, 4),    # ... 2 warps on the rows, 4 on the steps
    (config.Config(16, 32, 1, 4), 1, 1, 8),    # 16 rows: 2 lanes a row and 4 warps on the steps
    (config.Config(16, 16, 1, 2), 1, 1, 4),    # ... on 2 warps
    (config.Config(8, 16, 1, 4), 1, 1, 16),    # 8 rows: 4 lanes a row, runs of one step
    (config.Config(32, 32, 1, 2), 0, 1, 1),    # no lanes: the columns keep their order
    (config.Config(32, 32, 1, 2), 1, 4, 1),    # register shift groups: steps in column order
])
def test_which_lane_tiles_split_their_steps_in_runs(cfg, lanes, shift_g, expected):
    """runtime.launch.lane_warps: the LANE_WARPS constexpr (warps over a lane tile's steps, each
    taking a run of consecutive steps) from the tile, its LANES and its SHIFT_G."""
    from scangen.runtime import launch
    assert launch.lane_warps(cfg, lanes, shift_g) == expected


def test_maxnreg_reaches_tritons_launcher(monkeypatch):
    """runtime.launch.MAXNREG (A/B runs: registers a thread at most) is passed to Triton's
    launcher as ``maxnreg``; 0, the default, passes nothing."""
    from scangen.runtime import launch
    seen = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.append(kw)

    c = NS(lp=NS(compiled={}, direct=False))
    cfg = config.Config(32, 32, 1, 4)
    monkeypatch.setattr(launch, "interpreting", lambda: False)
    launch.launch(c, Kernel(), (1,), (), {}, cfg)
    monkeypatch.setattr(launch, "MAXNREG", 168)
    launch.launch(c, Kernel(), (1,), (), {}, cfg)
    assert "maxnreg" not in seen[0] and seen[1]["maxnreg"] == 168
    assert seen[1]["num_warps"] == 4


@pytest.mark.parametrize("regs,threads,programs,cap", [
    (134, 128, 512, 128),    # GAE 8x262144's look-back: 3 programs an SM, capped to fit 4
    (134, 128, 396, 0),      # ... a grid that fits the 132 SMs at 3 an SM gains nothing
    (164, 128, 512, 128),    # TD(lambda) 8x262144's: 36 over, 19.75 -> 16.20 us capped
    (172, 128, 512, 168),    # 176 allocated: 2 programs an SM; 3 at 168
    (215, 128, 512, 0),      # masked GAE's: 47 over 168, more than the slack (1.1x-1.2x slower)
    (255, 128, 512, 0),      # V-trace's: 2 an SM, 87 over 168 (spills: 2.4x slower)
    (128, 128, 512, 0),      # already at 4 an SM: the next cliff is 104, too far
    (130, 256, 1024, 128),   # 8 warps: 1 program an SM, capped to fit 2
    (64, 128, 2048, 0),      # 8 programs an SM fit already (capped at 56: 4.5% slower)
    (40, 128, 4096, 0),      # Retrace's 12 an SM (capped at 32: up to 7.7% slower)
])
def test_register_cliff_cap(regs, threads, programs, cap):
    """runtime.launch.cliff_cap: one more program an SM where a few registers stand in the way
    and the grid does not fit at once (bench/NOTES.md open question 18)."""
    from scangen.runtime import launch
    assert launch.cliff_cap(regs, threads, programs, 132) == cap
    if cap:  # the cap lets exactly one more program share the SM
        fit = launch._programs_an_sm(regs, threads)
        assert launch._programs_an_sm(cap, threads) == fit + 1


def test_cliff_cap_reads_the_compiled_kernels_registers(monkeypatch):
    """runtime.launch._cliff_extra: the registers of the kernel as Triton compiled it (its
    warmup, with the launch's options), the grid's programs and the device's SMs give the cap;
    a Triton that cannot say leaves ptxas to decide."""
    from scangen.runtime import launch

    class Compiled:  # what _cliff_extra reads of Triton's CompiledKernel
        n_regs = 134

    class Kernel:
        __name__ = "_op_lookback_lean"

        def warmup(self, *args, grid, **options):
            assert grid == (512, 1, 1) and options["num_warps"] == 4
            return Compiled()

    class Broken(Kernel):
        def warmup(self, *args, grid, **options):
            raise TypeError("no warmup here")

    monkeypatch.setattr(tiles, "_sm_count", lambda index: 132)
    c = NS(device=torch.device("cuda", 0))
    options = dict(num_warps=4, num_stages=3, enable_fp_fusion=True)
    assert launch._cliff_extra(c, Kernel(), (512, 1, 1), (), {}, options) == {"maxnreg": 128}
    assert launch.CLIFF_CAPS["_op_lookback_lean"] == (134, 128)
    assert launch._cliff_extra(c, Broken(), (512, 1, 1), (), {}, options) == {}
