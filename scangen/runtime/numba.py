"""The CPU backend's host side: runs an op's generated numba kernels (``<module>_numba.py``).

numba is imported only here, and only when the numba backend runs, so scangen imports and runs
where numba is absent (``auto`` then takes the torch path on CPU tensors). The kernels take each
tensor as a NumPy view of its storage (no copy; half-precision tensors are widened to
float32 once, as numba has no bfloat16), viewed over the canonical ``[R1, R2, T]`` index space
of :class:`scangen.runtime.arguments.Call` in the order the kernel walks it
(scangen.compiler.render_numba).

Threads: the kernels release the GIL, and the rows (or tiles of time-major rows) of one call are
split over ``torch.get_num_threads()`` threads: the caller and a shared pool. Calls from several
Python threads at once share that pool, so they never start more threads than it holds; small
calls run on the caller's thread alone. A plan times its first calls on one thread and on all
of them and keeps the faster (:data:`THREAD_TRIALS`): the answer is the same either way, each
row's arithmetic being the same.
"""
from __future__ import annotations

import importlib.util
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .. import abi

_HALF = (torch.float16, torch.bfloat16)
# Time-major tiles: the rows a thread sweeps innermost per step, at most this many (8192
# float64 carries per scan stay in L2). A step then reads long runs of each array: tiles of
# 256 rows read 1024 x 1024 GAE 1.4x slower than one tile of 1024.
MAX_TILE_ROWS = 8192
# The steps of a row the row kernels take in one chunk (scangen.compiler.numba_groups):
# a group's buffers (2 x 4 rows x 16384 float32s, 512 KB) stay in L2, and longer chunks read
# memory in longer runs: GAE over 64 x 16384 rows in chunks of 2048, 4096, 8192 and 16384 steps
# took 1.26, 1.21, 1.21 and 1.05 ms (a row at a time in one pass: 1.38 ms; bench/CPU.md).
ROW_CHUNK = 16384
# Below this many steps in all, splitting a call over threads costs more than it saves.
MIN_PARALLEL_STEPS = 32768
# Above it, a plan times this many calls on one thread and as many on all the threads asked
# for (alternating, after its first call), then keeps the faster count for the rest of its
# calls. A kernel near the memory floor on one thread gains little from more (this 2-core VM
# copies 1.15x faster on two) and pays the pool's hand-over (65 us a call here): eligibility
# traces over a time-major 1024 x 1024 buffer ran 0.58x as fast on two threads as on one,
# V-trace rows 1.8x as fast. 0: always the threads asked for.
THREAD_TRIALS = 3


def available() -> bool:
    """Whether numba can be imported (checked once; ``auto`` falls back to torch without it)."""
    if "ok" not in _AVAILABLE:
        try:
            _AVAILABLE["ok"] = importlib.util.find_spec("numba") is not None
        except (ImportError, ValueError):  # ValueError: sys.modules["numba"] is None
            _AVAILABLE["ok"] = False
    return _AVAILABLE["ok"]


_AVAILABLE: dict = {}
_LOCK = threading.Lock()


def kernels_of(op):
    """The generated numba module of ``op`` (``<module>_numba``, beside its module)."""
    return abi.companion(op, abi.NUMBA_SUFFIX)


def _span(t: torch.Tensor) -> int:
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _view(t: torch.Tensor, shape: tuple, strides: tuple) -> np.ndarray:
    """``t``'s storage seen through ``shape`` and element ``strides`` (from its first element),
    as NumPy: no copy, but float16/bfloat16 widened to float32 (numba has no bfloat16)."""
    t = t.detach()
    if t.dtype in _HALF:  # widen the span the strides walk, keeping every element's offset
        t = t.as_strided((_span(t),), (1,), t.storage_offset()).float()
    elif t.dtype == torch.bool:  # the same bytes; numba's float() takes no bool
        t = t.view(torch.uint8)
    return t.as_strided(shape, strides, t.storage_offset()).numpy()


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    """NumPy's dtype for a torch dtype NumPy has."""
    return torch.empty(0, dtype=dtype).numpy().dtype


def _direct(t: torch.Tensor, strides: tuple) -> tuple | None:
    """What :func:`_array` needs to view ``t`` without torch: its NumPy dtype (bool as uint8)
    and the view's strides in bytes; None for the dtypes :func:`_view` widens."""
    if t.dtype in _HALF:
        return None
    dtype = np.dtype(np.uint8) if t.dtype == torch.bool else _np_dtype(t.dtype)
    return dtype, tuple(s * dtype.itemsize for s in strides)


def _array(t: torch.Tensor, direct: tuple | None, shape: tuple, strides: tuple) -> np.ndarray:
    """:func:`_view` of ``t``, built by NumPy over ``t.numpy()``'s buffer where ``t`` is
    contiguous (one run of memory from its first element; NumPy checks that the view stays
    inside it): 0.9 us a tensor on this project's VM against 2.2 for torch's ``as_strided`` then
    ``numpy()``, which made a 4 x 128 call 1.45x-1.55x slower (bench/CPU.md)."""
    if direct is not None and t.is_contiguous() and not t.requires_grad:
        return np.ndarray(shape, direct[0], t.numpy(), 0, direct[1])
    return _view(t, shape, strides)


def _layout(c, rows: tuple, st: tuple, role: str, time_major: bool) -> tuple[tuple, tuple]:
    """(shape, strides) of one tensor's view: [R1, R2, T] (rows) or [R1, T, R2] (time-major),
    with K last for [N, T, K] inputs and a time axis of 1 for [N] inputs. ``rows``: the plan's
    (R1, R2) and whether the call's R1 axis moved to R2 (:class:`_Plan`)."""
    R1, R2, moved = rows
    if moved:  # (s1, s2, st): the R2 axis is 1 long, the R1 axis takes its place
        st = (0, st[0], *st[2:])
    T = 1 if role == "N" else c.T
    shape, strides = [R1, R2, T], list(st[:3])
    if time_major:
        shape, strides = [shape[0], shape[2], shape[1]], [strides[0], strides[2], strides[1]]
    if role == "NTK":
        shape, strides = shape + [c.K], strides + [st[3]]
    return tuple(shape), tuple(strides)


class _Plan:
    """What every call of one launch plan shares: the kernel, its flags ``S``, where each
    argument comes from and its view, and how the work is split."""

    def __init__(self, c, module):
        infos = {i.name: i for i in c.op.inputs}
        first = next(n for n in c.strides if infos[n].shape != "N")
        s1, s2, st = c.strides[first][:3]
        # [N, T] stored time-major ([T, N] storage seen as [N, T], time_dim=-1): R2 is 1 and the
        # rows are adjacent along R1; the kernels see them as R2 of one R1 index, so that the
        # time-major kernel runs instead of the row kernel over strided rows (10x slower)
        moved = c.R2 == 1 and c.R1 > 1 and s1 < st
        R1, R2 = (1, c.R1) if moved else (c.R1, c.R2)
        rows = (R1, R2, moved)
        tm = R2 > 1 and (s1 if moved else s2) < st  # time-major: rows adjacent in memory
        dummy = np.empty((0,) * 3, np.float32 if c.out_dtype in _HALF else _np_dtype(c.out_dtype))
        self.sources = []  # (kind, name or value, shape, strides)
        for name, role in zip(module.ARRAYS, module.ROLES):
            if role == "input" and name in c.strides:
                self.sources.append(("tensor", name, *_layout(c, rows, c.strides[name],
                                                              infos[name].shape, tm)))
            elif role == "input":  # absent: its default, a number the kernel is compiled for
                self.sources.append(("const", float(infos[name].default), None, None))
            elif role == "param" and name in c.pstrides:
                self.sources.append(("param", name, *_layout(c, rows, c.pstrides[name], "NT",
                                                             tm)))
            elif role == "param":  # a float (float64 calls hold it as a 0-dim tensor)
                self.sources.append(("float", name, None, None))
            elif name in c.out_strides:
                self.sources.append(("out", name, *_layout(c, rows, c.out_strides[name], "NT",
                                                             tm)))
            elif tm:  # not asked for: stored, as every output, into a contiguous scratch
                # [R1, 1, R2] at time index 0 (no two threads write one element)
                self.sources.append(("const", np.empty((R1, 1, R2), dummy.dtype),
                                     None, None))
            else:  # not asked for: never stored
                self.sources.append(("const", dummy, None, None))
        # each tensor's dtype and byte strides, for NumPy's views of contiguous ones (_array)
        of = {"tensor": c.tensors, "param": c.params, "out": c.outs}
        self.direct = [_direct(of[kind][what], strides) if kind in of else None
                       for kind, what, _, strides in self.sources]
        words = []
        for flag in module.FLAGS:
            kind, _, name = flag.partition("_")
            words.append(int(name in (c.tensors if kind == "HAS" else c.outs)))
        S = np.array(words, dtype=np.int64)
        self.time_major, self.R1, self.R2 = tm, R1, R2
        # the kernels' arithmetic, as the dtype of an empty array (the kernels' _Fz)
        self.Fz = np.empty(0, np.float64 if c.acc == torch.float64 else np.float32)
        self.kernel = module._tmajor if tm else module._rows
        _light_cache_loads(self.kernel)
        self.S, self.sizes = S, (R2, c.T, c.K)
        self.half_outs = c.out_dtype in _HALF
        self.steps = c.R1 * c.R2 * c.T
        self.splits = {}
        self.calls = 0
        self.best = {}  # threads asked for -> threads used, once timed (THREAD_TRIALS)
        self.trials = {}  # threads asked for -> {threads: [seconds a call]}

    def threads_for(self, want: int) -> tuple[int, list | None]:
        """(threads to use for this call, the list its time goes into, or None)."""
        if want <= 1 or self.steps < MIN_PARALLEL_STEPS:
            return 1, None
        if THREAD_TRIALS <= 0:
            return want, None
        best = self.best.get(want)
        if best is not None:
            return best, None
        self.calls += 1
        if self.calls == 1:  # the first call loads the kernel: not timed
            return want, None
        times = self.trials.setdefault(want, {1: [], want: []})
        if min(len(v) for v in times.values()) >= THREAD_TRIALS:
            one, many = (statistics.median(times[n]) for n in (1, want))
            self.best[want] = 1 if one < many else want
            return self.best[want], None
        n = 1 if len(times[1]) <= len(times[want]) else want
        return n, times[n]

    def split(self, threads: int) -> tuple[int, int, tuple]:
        """(threads to use, work items, the kernel's leading arguments) for ``threads``
        threads: rows (and the steps of a row kernel's chunk), or time-major tiles of rows sized
        so that each thread gets one."""
        key = (threads, ROW_CHUNK)  # ROW_CHUNK: a module setting (tests make it small)
        if key not in self.splits:
            if self.time_major:
                per_r1 = -(-threads // self.R1)  # tiles per R1 index
                tile = min(MAX_TILE_ROWS, -(-self.R2 // per_r1))
                items, head = self.R1 * -(-self.R2 // tile), (*self.sizes, tile, self.S, self.Fz)
            else:
                items, head = self.R1 * self.R2, (*self.sizes, ROW_CHUNK, self.S, self.Fz)
            self.splits[key] = (min(threads, items), items, head)
        return self.splits[key]

    def arrays(self, c):
        """The kernel's arrays and numbers for the bound call ``c`` (views of its tensors:
        :func:`_array`), and the float32 buffers of half-precision outputs."""
        out, widened = [], []
        for (kind, what, shape, strides), direct in zip(self.sources, self.direct):
            if kind == "tensor":
                out.append(_array(c.tensors[what], direct, shape, strides))
            elif kind == "param":
                out.append(_array(c.params[what], direct, shape, strides))
            elif kind == "const":
                out.append(what)
            elif kind == "float":
                out.append(float(c.params[what]))
            elif self.half_outs:  # written in float32, then rounded into the output once
                o = c.outs[what]
                wide = torch.empty(_span(o), dtype=torch.float32)
                widened.append((o, wide))
                out.append(wide.as_strided(shape, strides).numpy())
            else:
                out.append(_array(c.outs[what], direct, shape, strides))
        return out, widened


def run(c) -> None:
    """Run the op's numba kernel over the bound call ``c`` (CPU tensors)."""
    plan = c.lp.numba
    if plan is None:
        plan = c.lp.numba = _Plan(c, kernels_of(c.op))
    arrays, widened = plan.arrays(c)
    c.kernel_arrays = arrays  # what the fast path's check compares with (fastpath.build_numba)
    execute(plan, arrays)
    for o, wide in widened:
        o.detach().as_strided((wide.numel(),), (1,), o.storage_offset()).copy_(wide)


def execute(plan: _Plan, arrays: list) -> None:
    """Run ``plan``'s kernel over ``arrays`` (:meth:`_Plan.arrays`) on the threads it takes for
    this call (:meth:`_Plan.threads_for`, :meth:`_Plan.split`)."""
    threads, timed = plan.threads_for(torch.get_num_threads())
    start = time.perf_counter()
    threads, items, head = plan.split(threads)
    if threads <= 1:
        plan.kernel(0, items, *head, *arrays)
    else:
        bounds = [items * k // threads for k in range(threads + 1)]
        pool = _pool()
        futures = [pool.submit(plan.kernel, lo, hi, *head, *arrays)
                   for lo, hi in zip(bounds[1:-1], bounds[2:])]
        plan.kernel(bounds[0], bounds[1], *head, *arrays)
        for f in futures:
            f.result()
    if timed is not None:
        timed.append(time.perf_counter() - start)


def _light_cache_loads(kernel) -> None:
    """Have ``kernel`` load its cached machine code without numba's full context refresh.

    numba's cache loader first refreshes the target context: it imports every lowering module
    numba has (its numpy, linalg, random, typed containers, ...), 0.35 s of a fresh process's
    first call on this project's 2-core VM, for code that is already compiled. Loading needs only
    the runtime the code calls into (NRT), so this loader initialises that and loads; on a
    cache miss, or any error, numba's own loader runs (it refreshes, then compiles as usual, and
    so does any later compilation in the process). Where numba's cache object lacks the
    methods used here (another numba version), nothing changes.
    """
    cache = getattr(kernel, "_cache", None)
    base = type(cache)
    if getattr(base, "_scangen_light", False) or not all(
            hasattr(base, m) for m in ("load_overload", "_load_overload")):
        return
    light = _LIGHT_CACHES.get(base)
    if light is None:
        light = _LIGHT_CACHES[base] = type(f"Light{base.__name__}", (base,),
                                           {"load_overload": _load_overload_light,
                                            "_scangen_light": True})
    cache.__class__ = light


def _load_overload_light(self, sig, target_context):
    from numba.core.runtime import nrt

    try:
        nrt.rtsys.initialize(target_context)
        compiled = self._load_overload(sig, target_context)
    except Exception:  # noqa: BLE001 -- numba's own loader below decides
        compiled = None
    if compiled is None:
        return super(type(self), self).load_overload(sig, target_context)
    return compiled


_LIGHT_CACHES: dict = {}
_POOL: dict = {}


def _pool() -> ThreadPoolExecutor:
    """The shared pool of this process. A forked child (a DataLoader worker, a subprocess
    env) inherits the parent's pool without its threads, so it makes its own."""
    pid = os.getpid()
    if _POOL.get("pid") != pid:
        with _LOCK:
            if _POOL.get("pid") != pid:
                _POOL["pool"] = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) - 1),
                                                   thread_name_prefix="scangen-numba")
                _POOL["pid"] = pid
    return _POOL["pool"]
