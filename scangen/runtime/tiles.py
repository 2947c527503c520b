"""The tile of a Triton launch (:class:`Config`) and what the dispatch rules share to choose it:
the device's multiprocessors and the ``[N, T]`` tensors a call moves. The rules themselves:
:mod:`.config` (the family, and the tiles of rows ``[N, T]``) and :mod:`.timemajor` (the tiles
of time-major buffers ``[T, N]``)."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

NUM_WARPS = 4        # measured best for most tiles (bench/NOTES.md, sweep of 2026-11-29)
# Look-back calls moving this many [N, T] tensors (inputs + outputs) take shorter chunks: their
# registers at the longer chunk cost more than the extra programs (both layouts).
LOOKBACK_MANY_TENSORS = 8


class Config(NamedTuple):
    block_n: int
    block_t: int
    block_k: int
    num_warps: int
    family: str = "stream"   # "stream" | "persist" | "lookback"
    num_stages: int = 3      # software-pipelining depth of the chunk loop (Triton's default)


def pow2(n: int) -> int:
    """The least power of two at or above ``n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device) -> int:
    """The multiprocessors of a CUDA ``device``."""
    return _sm_count(device.index or 0)


def streams(c, outputs: bool = True) -> int:
    """The [N, T] tensors a call moves: inputs that vary in time, and outputs if ``outputs``."""
    return sum(1 for n in c.tensors if c.strides[n][2] != 0) + (len(c.outs) if outputs else 0)


def lanes_on_steps(block_n: int) -> int:
    """A warp's lanes over the steps of a tile of a row a lane (``LANES``) with ``block_n`` rows:
    Triton puts the lanes on the rows first, so 32 / rows below 32 rows, else 1."""
    return max(1, 32 // block_n)
