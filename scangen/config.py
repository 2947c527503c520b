"""Launch configuration: the dispatch rule that picks block sizes from the shape.

One program owns ``BLOCK_N`` rows and streams them through time in chunks of ``BLOCK_T`` steps,
carrying each row's scan state from chunk to chunk. Short rows get wide row tiles (many rows per
program); long rows get long chunks and fewer rows per program, shrinking ``BLOCK_N`` until the
grid has enough programs to fill the GPU.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

TILE = 2048          # elements of one [BLOCK_N, BLOCK_T] tile
MAX_BLOCK_T = 512    # longer chunks add scan depth without adding parallelism
MAX_BLOCK_K = 16     # the trailing axis is streamed in slices of this width


class Config(NamedTuple):
    block_n: int
    block_t: int
    block_k: int
    num_warps: int


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def choose_config(c) -> Config:
    rows = c.R1 * c.R2
    block_t = min(max(_pow2(c.T), 16), MAX_BLOCK_T)
    block_n = max(1, min(TILE // block_t, _pow2(rows)))
    if c.device.type == "cuda":
        want = 2 * _sm_count(c.device.index or 0)
        while block_n > 1 and -(-rows // block_n) < want:
            block_n //= 2
    block_k = min(_pow2(c.K), MAX_BLOCK_K)
    num_warps = 4 if block_n * block_t <= 1024 else 8
    return Config(block_n, block_t, block_k, num_warps)
