"""The dispatch rule of scangen/config.py, as docs/runtime.md states it, on a simulated H200
(132 SMs): the tile each documented case gets."""
from types import SimpleNamespace as NS
from unittest import mock

import pytest
import torch

from scangen import config


def _choose(N, T, *, time_major=False, K=1, family=None):
    strides = {"x": (1, 0, N) if time_major else (T, 0, 1)}
    c = NS(R1=N, R2=1, T=T, K=K, device=torch.device("cuda", 0), strides=strides)
    with mock.patch.object(config, "_sm_count", lambda index: 132), \
            mock.patch.dict(config.ENV, {"SCANGEN_FAMILY": family}):
        return config.choose_config(c)


@pytest.mark.parametrize("N,T,expected", [
    (16384, 1024, (1, 1024, "stream")),   # one row per program, 1024-step chunks
    (16384, 64, (32, 64, "stream")),      # 2048-element tiles for short chunks
    (4096, 128, (8, 128, "stream")),      # halved from 16 to keep 2 programs per SM
    (32768, 16, (64, 16, "stream")),
    (16384, 4096, (1, 1024, "stream")),   # long rows, many of them: stream in chunks
    (64, 65536, (1, 1024, "lookback")),   # too few rows: T split across programs
    (1, 1048576, (1, 1024, "lookback")),
    (200, 1024, (1, 1024, "stream")),     # few rows but short: nothing to split
])
def test_rows_layout(N, T, expected):
    cfg = _choose(N, T)
    assert (cfg.block_n, cfg.block_t, cfg.family) == expected
    assert cfg.num_warps == 4


def test_trailing_axis_counts_in_the_tile():
    cfg = _choose(16384, 1024, K=8)
    assert (cfg.block_n, cfg.block_t, cfg.block_k) == (1, 128, 8)
    assert _choose(1, 1048576, K=8).block_t == 128


@pytest.mark.parametrize("N,T", [(4096, 128), (16384, 1024), (128, 1024), (3, 40)])
def test_time_major_gets_wide_row_tiles(N, T):
    cfg = _choose(N, T, time_major=True)
    assert cfg.block_n >= min(16, 1 << (N - 1).bit_length())
    assert cfg.block_n * cfg.block_t <= config.TILE
    assert cfg.family == "stream"


def test_forced_family():
    assert _choose(16384, 1024, family="lookback").family == "lookback"
    with pytest.raises(ValueError, match="SCANGEN_FAMILY must be"):
        _choose(16384, 1024, family="bogus")
