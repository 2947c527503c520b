"""The timing library of scangen's benchmarks: ``scangen bench`` (:mod:`.suite`), the
developer benchmarks ``bench/bench.py`` and ``bench/cpu.py``, and the scripts in ``bench/dev/``.

- check-then-time: :func:`checked` runs a candidate once (its first call, timed on its own),
  checks the result, and the caller times only candidates that ran (or that also passed);
- interleaved medians: :func:`interleaved` times several callables round-robin, a block of
  calls per sample, the starting point rotated every round, and takes medians;
  :func:`device_interleaved` does the same on a CUDA device, one ``triton.testing.do_bench``
  median (CUDA events) per sample;
- one call, two ways (:class:`CallTimer`, ``bench/bench.py``'s): the ``do_bench`` median of
  one call (L2 flushed before each) and the host-timed loop of back-to-back calls, the empty
  launch timed beside it repeat by repeat.

The floors the times are judged against are in :mod:`.floors`, the checks in :mod:`.checks`,
machine metadata and CSV output in :mod:`.meta`. Host times are ``time.perf_counter`` wall
times; pass ``sync`` (for instance ``torch.cuda.synchronize``) where the work is asynchronous.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


# ---------------------------------------------------------------------------------------------
# check-then-time


@dataclass
class Candidate:
    """One implementation of one configuration: its callable, first call and check."""

    name: str
    fn: Callable[[], Any]
    first_call_s: float | None = None
    check: dict = field(default_factory=dict)
    error: str | None = None
    scale: float = 1.0  # time multiplier (a loop timed over a window of T, extrapolated)
    note: str = ""

    @property
    def ran(self) -> bool:
        return self.error is None

    @property
    def passed(self) -> bool:
        """Ran, and its check said ok: the candidates worth timing."""
        return self.ran and bool(self.check.get("ok"))


def checked(name, fn, check, sync=None, scale=1.0, note="") -> Candidate:
    """Run ``fn`` once (timed: the first call, compiles included) and pass its result to
    ``check`` (a callable returning a dict with an ``ok`` key). An exception in either is
    recorded; time only candidates that ran (:attr:`Candidate.ran`), or that also passed
    (:attr:`Candidate.passed`)."""
    cand = Candidate(name, fn, scale=scale, note=note)
    try:
        if sync:
            sync()
        t0 = time.perf_counter()
        out = fn()
        if sync:
            sync()
        cand.first_call_s = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001
        cand.error = f"call: {short_error(exc)}"
        return cand
    try:
        cand.check = check(out)
    except Exception as exc:  # noqa: BLE001
        cand.error = f"check: {short_error(exc)}"
    return cand


def short_error(exc, limit=200) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def first_line_error(exc, limit=160) -> str:
    """``Kind: first line`` of an exception (``OOM: ...`` for out-of-memory), as bench/bench.py
    records errors in bench.json."""
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in first.lower():
        kind, first = "OOM", first[:80]
    msg = f"{kind}: {first}"
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# interleaved medians


@dataclass
class Timing:
    median_s: float
    min_s: float
    max_s: float
    n_inner: int
    samples: list


@functools.lru_cache(maxsize=None)
def _libc_malloc():
    """(malloc, free) of glibc, or None (another C library, or none found)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc's: other allocators defer differently
    except (OSError, AttributeError):
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    return libc.malloc, libc.free


def settle_allocator() -> None:
    """Have glibc's malloc do now the work that the frees before it deferred. A per-step torch
    loop frees hundreds of thousands of small blocks; glibc merges them (``malloc_consolidate``)
    at the next request of a kilobyte or more, whoever makes it: 19-20 ms of CPU after the V-trace
    loop over 4096 steps, on this project's VM (bench/CPU.md), which the next callable timed
    would pay. :func:`block_time` calls this inside each timed block, so a block pays for its
    own frees. Nothing pending: a few microseconds. Not glibc: nothing."""
    fns = _libc_malloc()
    if fns is not None:
        malloc, free = fns
        free(malloc(4096))  # beyond the thread cache (1032 bytes): the consolidating path


def block_time(fn, n, sync=None) -> float:
    """Seconds per call of ``n`` back-to-back calls, the allocator's deferred work for them
    included (:func:`settle_allocator`)."""
    if sync:
        sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    settle_allocator()
    if sync:
        sync()
    return (time.perf_counter() - t0) / n


def calibrate(fn, target_s, sync=None, max_n=100_000) -> int:
    """Calls per sample so that one sample lasts about ``target_s`` (at least one call). The
    fastest of up to three single calls (while they total under five ``target_s``) sets it: a
    first call that does one-off work (scangen's second call of a signature builds its fast
    path) took the CPU's GAE 4096x128 to one call a sample, each a cold call after the floor's
    copy, 4.3 ms against 2.3 in the blocks of eight calls it takes now."""
    t = spent = block_time(fn, 1, sync)
    for _ in range(2):
        if spent >= 5 * target_s:
            break
        one = block_time(fn, 1, sync)
        spent, t = spent + one, min(t, one)
    n = max(1, min(max_n, int(target_s / max(t, 1e-9))))
    if n > 1:  # a single call of a few microseconds is noisy: refine on a short block
        t = block_time(fn, min(n, 16), sync)
        n = max(1, min(max_n, int(target_s / max(t, 1e-9))))
    return n


def interleaved(fns: dict, rounds=7, target_s=0.02, sync=None, slow_s=2.0, min_rounds=3,
                settings: dict | None = None) -> dict:
    """Time every callable of ``fns`` round-robin: in each round every callable gives one
    sample (a block of calls lasting ~``target_s``), the order rotated by one each round, the
    garbage collector off. A callable whose single call takes longer than ``slow_s`` gets
    ``min_rounds`` samples (it sits out the later rounds). ``settings`` maps a name to an
    (enter, leave) pair of callables run around each of its blocks, outside the timed part
    (for instance pinning a thread count). Returns {name: Timing}."""
    names = list(fns)
    settings = settings or {}

    def block(k, n):
        enter, leave = settings.get(k, (None, None))
        if enter:
            enter()
        try:
            return calibrate(fns[k], target_s, sync) if n is None else block_time(fns[k], n, sync)
        finally:
            if leave:
                leave()

    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        n_inner = {k: block(k, None) for k in names}
        samples = {k: [] for k in names}
        for r in range(rounds):
            shift = r % len(names) if names else 0
            for k in names[shift:] + names[:shift]:
                if len(samples[k]) >= min_rounds and statistics.median(samples[k]) > slow_s:
                    continue
                samples[k].append(block(k, n_inner[k]))
    finally:
        if was_enabled:
            gc.enable()
    return {k: Timing(statistics.median(s), min(s), max(s), n_inner[k], s) for k, s in samples.items()}


def device_interleaved(fns: dict, rounds=5, warmup_ms=10.0, rep_ms=40.0, slow_s=0.05, min_rounds=3) -> dict:
    """:func:`interleaved` for CUDA callables: in each round every callable gives one sample,
    the ``triton.testing.do_bench`` median of its calls (CUDA events; do_bench clears the L2
    cache before each call), the order rotated by one each round. A callable whose single
    call takes longer than ``slow_s`` (a per-step loop) is timed by the host instead, one
    synchronised call per sample, for ``min_rounds`` samples. Returns {name: Timing}."""
    from triton.testing import do_bench

    sync = torch.cuda.synchronize
    names = list(fns)
    slow = {k: block_time(fns[k], 1, sync) > slow_s for k in names}  # also the warm-up call
    samples = {k: [] for k in names}
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for k in names[shift:] + names[:shift]:
            if slow[k]:
                if len(samples[k]) < min_rounds:
                    samples[k].append(block_time(fns[k], 1, sync))
                continue
            samples[k].append(do_bench(fns[k], warmup=warmup_ms, rep=rep_ms, return_mode="median") / 1e3)
    return {k: Timing(statistics.median(s), min(s), max(s), 1, s) for k, s in samples.items()}


def captured(thunks, calls=20):
    """``calls`` calls captured in one CUDA graph, ``thunks`` (one call each, over rotated input
    sets) taken in turn so that the last call is ``thunks[0]``'s, after two eager calls on a side
    stream (compiles, plans, workspaces): ``(graph, the last call's result)``. The result's
    tensors are written by the graph's replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for th in thunks[:2]:
            th()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            last = thunks[(calls - 1 - i) % len(thunks)]()
    return graph, last


def wall_and_cpu(fn) -> tuple[float, float]:
    """``(wall seconds, the calling thread's CPU seconds)`` of one call of ``fn``. With one
    thread the CPU time is what the call costs even while other processes share the cores
    (bench/dev/sb3_cpu.py, torchrl_cpu.py); the wall time also counts waiting for a core."""
    c0, w0 = time.thread_time(), time.perf_counter()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def cycling(thunks) -> Callable[[], Any]:
    """One callable that runs the next of ``thunks`` on every call (input sets rotated so that
    back-to-back calls do not find their data in cache)."""
    if len(thunks) == 1:
        return thunks[0]
    it = itertools.cycle(thunks)
    return lambda: next(it)()


# ---------------------------------------------------------------------------------------------
# one call, two ways (bench/bench.py)


@dataclass
class CallTimer:
    """bench/bench.py's timers of one call on ``cuda`` (else on the CPU, by perf_counter).

    - :meth:`device_us`: ``triton.testing.do_bench`` median in us: CUDA-event time of one call,
      L2 flushed before each call (by do_bench's 256 MB memset, which also hides host overhead
      shorter than that memset);
    - :meth:`call_us`: host-timed back-to-back loop: wall time of n calls + one synchronize,
      / n; median of repeats. This is the full call as an application sees it: max(host
      overhead, device time) per call;
    - :meth:`paired_call_us`: the same for a call and the empty launch, alternating repeat by
      repeat.
    """

    cuda: bool
    warmup_ms: float = 10.0   # do_bench warmup per measurement
    rep_ms: float = 50.0      # do_bench rep per measurement
    call_ms: float = 15.0     # host-timed loop: target ms per repeat
    call_repeats: int = 3     # host-timed loop: repeats (median)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def host_median(self, fn, n=5):
        fn()
        self.sync()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6

    def device_us(self, fn, warmup=None, rep=None):
        """do_bench median of one call, us (host_median off CUDA)."""
        if not self.cuda:
            return self.host_median(fn)
        from triton.testing import do_bench
        ms = do_bench(fn, warmup=warmup if warmup is not None else self.warmup_ms,
                      rep=rep if rep is not None else self.rep_ms, return_mode="median")
        return ms * 1e3

    def graph_us(self, fn, rep=None):
        """``triton.testing.do_bench_cudagraph`` median, us: the calls captured in a CUDA graph
        (device time without the host; no L2 flush between replays)."""
        from triton.testing import do_bench_cudagraph
        return 1e3 * do_bench_cudagraph(fn, rep=rep if rep is not None else self.rep_ms,
                                        return_mode="median")

    def call_us(self, fn, target_ms=None, repeats=None, n_max=20000, n_fixed=None):
        """``(us per call, n)``: the host-timed loop of ``n`` back-to-back calls (n sized to
        about ``target_ms`` a repeat, or ``n_fixed``), median of ``repeats``."""
        target_ms = self.call_ms if target_ms is None else target_ms
        repeats = self.call_repeats if repeats is None else repeats
        if n_fixed is not None:
            n = n_fixed
        else:
            fn()
            self.sync()
            t0 = time.perf_counter()
            for _ in range(3):
                fn()
            self.sync()
            est = max((time.perf_counter() - t0) / 3, 1e-7)
            n = int(min(n_max, max(3, target_ms * 1e-3 / est)))
        times = []
        for _ in range(repeats):
            self.sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            self.sync()
            times.append((time.perf_counter() - t0) / n)
        return statistics.median(times) * 1e6, n

    def paired_call_us(self, fn, floor_fn):
        """call_us for ``fn`` and for the empty launch ``floor_fn``, alternating repeat by
        repeat: ``(fn_us, n, floor_us)``. The host's speed drifts by 2x within one process on
        the H200 host (bench/NOTES.md, ninth round); a floor measured beside each call sees
        the same host."""
        repeats = self.call_repeats
        n = self.call_us(fn, repeats=1)[1]  # each warms up and sizes its loop
        nf = self.call_us(floor_fn, repeats=1)[1]
        times, floors = [], []
        for _ in range(repeats):
            floors.append(self.call_us(floor_fn, repeats=1, n_fixed=nf)[0])
            times.append(self.call_us(fn, repeats=1, n_fixed=n)[0])
        return statistics.median(times), n, statistics.median(floors)

    def timed_once(self, fn):
        """``(fn(), seconds)``, synchronised before and after."""
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        return out, time.perf_counter() - t0
