"""The floors benchmark times are judged against, measured in the same process as the calls.

- :class:`CopyFloor`: a copy of a buffer well beyond the last-level cache (``numpy.copyto`` and
  ``torch.Tensor.copy_``, one thread or several) whose callables join
  :func:`~.timing.interleaved`'s round-robin, so the bandwidth is measured beside the calls it
  judges; :class:`DeviceCopyFloor` is its CUDA counterpart (``scangen bench``);
- :func:`gpu_floors`: bench/bench.py's floors, measured once at the start: the device-to-device
  copy bandwidth and the empty-launch floor (an empty ``@triton.jit`` kernel launched through
  the same wrapper the ops are timed through), each by do_bench and by the host-timed loop;
- :func:`cache_bytes`: the last-level cache, which sizes the copies and the input rotation.
"""
from __future__ import annotations

import itertools
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .timing import first_line_error




class CopyFloor:
    """A copy of ``nbytes`` between two buffers (well beyond the last-level cache), as timed
    callables: ``numpy.copyto`` (split over ``threads`` Python threads when threads > 1: numpy
    releases the GIL in the copy) and ``torch.Tensor.copy_`` (torch's own threads: the caller
    pins ``torch.set_num_threads``). Bandwidth counts bytes read + written."""

    def __init__(self, nbytes=256 << 20, threads=1):
        self.nbytes, self.threads = nbytes, threads
        self.src = np.ones(nbytes // 4, dtype=np.float32)  # touched: no page faults while timed
        self.dst = np.zeros_like(self.src)
        self._tsrc, self._tdst = torch.from_numpy(self.src), torch.from_numpy(self.dst)
        bounds = [len(self.src) * k // threads for k in range(threads + 1)]
        self._chunks = [(self.dst[a:b], self.src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        self._pool = ThreadPoolExecutor(threads - 1) if threads > 1 else None

    def _numpy(self):
        if self._pool is None:
            np.copyto(self.dst, self.src)
            return
        futures = [self._pool.submit(np.copyto, d, s) for d, s in self._chunks[1:]]
        np.copyto(*self._chunks[0])
        for f in futures:
            f.result()

    def _torch(self):
        self._tdst.copy_(self._tsrc)

    def fns(self) -> dict:
        return {"copy_numpy": self._numpy, "copy_torch": self._torch}

    def bandwidth(self, timings: dict) -> tuple[float, dict]:
        """(best bytes/s over the copy kinds, {kind: bytes/s}) from :func:`interleaved`'s timings."""
        per = {k: 2 * self.nbytes / t.median_s for k, t in timings.items() if k in self.fns()}
        return max(per.values()), per

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
        self.src = self.dst = self._tsrc = self._tdst = self._chunks = None


class DeviceCopyFloor:
    """:class:`CopyFloor` on a CUDA device: ``dst.copy_(src)`` of ``nbytes`` (beyond the L2
    cache) as a callable that joins :func:`device_interleaved`'s round-robin."""

    def __init__(self, nbytes=1 << 30, device="cuda"):
        self.nbytes = nbytes
        self.src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        self.dst = torch.empty_like(self.src)

    def _copy(self):
        self.dst.copy_(self.src)

    def fns(self) -> dict:
        return {"copy_device": self._copy}

    def bandwidth(self, timings: dict) -> tuple[float, dict]:
        per = {k: 2 * self.nbytes / t.median_s for k, t in timings.items() if k in self.fns()}
        return max(per.values()), per

    def close(self):
        self.src = self.dst = None


def cache_bytes(device="cpu") -> int:
    """The last-level cache: on the CPU the sum of the distinct caches of the highest level that
    sysfs lists (0 where it lists none), on a CUDA device its L2."""
    if str(device).startswith("cuda"):
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    root, seen, total = "/sys/devices/system/cpu", set(), 0
    try:
        cpus = [d for d in os.listdir(root) if re.fullmatch(r"cpu[0-9]+", d)]
        for cpu in cpus:
            base = f"{root}/{cpu}/cache"
            levels = {}
            for idx in os.listdir(base):
                if idx.startswith("index"):
                    with open(f"{base}/{idx}/level") as f:
                        levels[int(f.read())] = idx
            idx = levels[max(levels)]
            with open(f"{base}/{idx}/shared_cpu_list") as f:
                key = f.read().strip()
            if key not in seen:
                seen.add(key)
                with open(f"{base}/{idx}/size") as f:
                    text = f.read().strip()
                total += int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[text[-1]] \
                    if text[-1] in "KMG" else int(text)
    except (OSError, ValueError, KeyError):
        return total
    return total


# ---------------------------------------------------------------------------------------------
# bench/bench.py's floors


def gpu_floors(timer, device, copy_gib):
    """``(floors, floor_fn)``: the copy bandwidth and the empty-launch floor on ``device``, timed
    by ``timer`` (a :class:`~.timing.CallTimer`); ``floor_fn`` is the empty launch, for
    :meth:`~.timing.CallTimer.paired_call_us` (None where it could not be made). Off CUDA the
    launch floor is a 1-element in-place torch op (bench/bench.py's CPU plumbing check)."""
    floors, floor_fn = {}, None
    # -- device-to-device copy bandwidth (bytes read + bytes written)
    try:
        n = int(copy_gib * 2 ** 30) // 4
        src = torch.ones(n, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        us = timer.device_us(lambda: dst.copy_(src), warmup=25, rep=200)
        floors["copy_bytes"] = 2 * n * 4
        floors["copy_us"] = us
        floors["copy_bw_GBps"] = 2 * n * 4 / (us * 1e-6) / 1e9
        floors["copy_method"] = (f"dst.copy_(src), {n * 4 / 2 ** 30:g} GiB fp32, read + write counted, "
                                 + ("triton.testing.do_bench median" if timer.cuda else "perf_counter median"))
    except Exception as exc:  # noqa: BLE001
        floors["copy_error"] = first_line_error(exc)
        floors["copy_bw_GBps"] = None
    # -- empty launch floor
    try:
        if timer.cuda:
            from . import empty_kernels as ek
            sets = [{"x": torch.empty(1, device=device), "n": 1} for _ in range(4)]
            it = itertools.cycle(sets)
            launch, noarg = ek.empty_launch, ek.empty_noarg_kernel
            fn = lambda: launch(**next(it))  # noqa: E731 - same wrapper shape as the ops' timing
            fn()
            timer.sync()
            floors["launch_us"] = timer.device_us(fn, warmup=25, rep=200)
            floor_fn = fn
            floors["launch_call_us"], floors["launch_call_n"] = timer.call_us(fn, target_ms=50, repeats=5,
                                                                              n_max=50000)
            floors["launch_method"] = ("empty @triton.jit kernel (a pointer and an int), grid (1,), launched from "
                                       "Python through the same rotating-kwargs wrapper as the ops; launch_us: "
                                       "do_bench median (device-timed), launch_call_us: host-timed loop of "
                                       "back-to-back calls + one synchronize, median of 5")
            # for reference: the bare no-argument kernel, no wrapper (bench/dev/probe_launch.py's "empty kernel")
            bare = lambda: noarg[(1,)]()  # noqa: E731
            bare()
            timer.sync()
            floors["launch_noarg_us"] = timer.device_us(bare, warmup=25, rep=100)
            floors["launch_noarg_call_us"], _ = timer.call_us(bare, target_ms=50, repeats=5, n_max=50000)
        else:
            x = torch.zeros(1)
            it = itertools.cycle([{"x": x}])
            fn = lambda: (lambda x: x.add_(0))(**next(it))  # noqa: E731
            floors["launch_us"] = timer.host_median(fn, n=200)
            floors["launch_call_us"], floors["launch_call_n"] = timer.call_us(fn)
            floor_fn = fn
            floors["launch_method"] = "CPU dry run: a 1-element in-place torch op (no Triton launch)"
    except Exception as exc:  # noqa: BLE001
        floors["launch_error"] = first_line_error(exc)
        floors.setdefault("launch_us", None)
        floors.setdefault("launch_call_us", None)
    return floors, floor_fn
