"""The timing library of scangen's benchmarks: ``scangen bench`` and the developer sweeps in
``bench/`` (``bench/timing.py`` re-exports it).

- check-then-time: :func:`checked` runs a candidate once (its first call, timed on its own),
  checks the result, and the caller times only candidates that ran (or that also passed);
- interleaved medians: :func:`interleaved` times several callables round-robin, a block of
  calls per sample, the starting point rotated every round, and takes medians;
  :func:`device_interleaved` does the same on a CUDA device, one ``triton.testing.do_bench``
  median (CUDA events) per sample;
- floors: :class:`CopyFloor` is a copy of a buffer well beyond the last-level cache
  (``numpy.copyto`` and ``torch.Tensor.copy_``, one thread or several) whose callables join
  the round-robin, so the bandwidth is measured beside the calls it judges;
  :func:`device_copy_bandwidth` is the device-to-device copy of a CUDA device;
- bookkeeping: machine / version / commit metadata, CSV output, and a child process that
  reports its own timings as JSON.

Nothing here imports scangen's compiler. Host times are ``time.perf_counter`` wall times; pass
``sync`` (for instance ``torch.cuda.synchronize``) where the work is asynchronous.
"""
from __future__ import annotations

import csv
import datetime
import gc
import importlib.metadata
import itertools
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
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


def error_ratio(actual, expected, atol, rtol) -> float:
    """max |actual - expected| / (atol * scale + rtol * |expected|) over the elements, with
    scale = max(1, max |expected|) over finite entries (<= 1 passes); inf where the shapes or
    the positions of NaN / inf differ."""
    a = torch.as_tensor(actual).detach().to("cpu", torch.float64)
    e = torch.as_tensor(expected).detach().to("cpu", torch.float64)
    if a.shape != e.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    fin_e = torch.isfinite(e)
    scale = max(1.0, e[fin_e].abs().max().item()) if bool(fin_e.any()) else 1.0
    bad = torch.isnan(a) != torch.isnan(e)
    bad |= (torch.isinf(a) | torch.isinf(e)) & (a != e) & ~torch.isnan(a) & ~torch.isnan(e)
    if bool(bad.any()):
        return math.inf
    finite = torch.isfinite(a) & fin_e
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    return float((err / (atol * scale + rtol * e.abs())).max())


# ---------------------------------------------------------------------------------------------
# interleaved medians


@dataclass
class Timing:
    median_s: float
    min_s: float
    max_s: float
    n_inner: int
    samples: list


def block_time(fn, n, sync=None) -> float:
    """Seconds per call of ``n`` back-to-back calls."""
    if sync:
        sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if sync:
        sync()
    return (time.perf_counter() - t0) / n


def calibrate(fn, target_s, sync=None, max_n=100_000) -> int:
    """Calls per sample so that one sample lasts about ``target_s`` (at least one call)."""
    t = block_time(fn, 1, sync)
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


def cycling(thunks) -> Callable[[], Any]:
    """One callable that runs the next of ``thunks`` on every call (input sets rotated so that
    back-to-back calls do not find their data in cache)."""
    if len(thunks) == 1:
        return thunks[0]
    it = itertools.cycle(thunks)
    return lambda: next(it)()


# ---------------------------------------------------------------------------------------------
# floors


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


def tensor_bytes(objs) -> int:
    """Bytes of every distinct tensor / array among ``objs`` (nested lists, tuples, dicts)."""
    seen, total = set(), 0
    stack = [objs]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif torch.is_tensor(o) or isinstance(o, np.ndarray):
            t = torch.as_tensor(o)
            key = (t.data_ptr(), t.numel(), t.dtype)
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


# ---------------------------------------------------------------------------------------------
# machine, versions, output


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", socket.gethostname().split(".")[0]).strip("-")[:24] or "host"


def git_commit(root, paths=("scangen", "generated", "templates", "specs")) -> str | None:
    """Short HEAD commit of ``root``, with ``+dirty`` when ``paths`` have uncommitted changes
    (``SCANGEN_REV`` overrides: a copied tree's .git may be stale)."""
    if os.environ.get("SCANGEN_REV"):
        return os.environ["SCANGEN_REV"]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev + "+dirty" if dirty else rev) or None
    except Exception:  # noqa: BLE001
        return None


def versions(packages) -> dict:
    out = {"python": platform.python_version()}
    for p in packages:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = None
    return out


def gpu_model(device="cuda") -> str | None:
    try:
        return torch.cuda.get_device_name(device) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


def machine_meta(root, packages=("torch", "numpy", "numba", "torchrl", "scangen"), device=None) -> dict:
    """Date, host, CPU (and the GPU of a CUDA ``device``), cores, commit of ``root``, versions."""
    gpu = {"gpu": gpu_model(device)} if device is not None and str(device).startswith("cuda") else {}
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "cpu": cpu_model(), **gpu, "cores": os.cpu_count(),
            "commit": git_commit(root), **versions(packages), "argv": " ".join(sys.argv)}


def write_csv(path, rows, columns, meta=None) -> None:
    """``rows`` (dicts) as CSV under a ``# key: value`` header comment (pandas: comment="#")."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        for k, v in (meta or {}).items():
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: fmt_cell(r.get(k)) for k in columns})
    os.replace(tmp, path)


def fmt_cell(v):
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else v


def run_child(code, cwd=None, env=None, timeout=300) -> dict:
    """Run ``python -c code`` in a fresh interpreter; its last stdout line is a JSON object of
    its own timings. Adds ``wall_s`` (the whole child, interpreter start included)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, **(env or {})},
                       capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1], "wall_s": wall}
    return {**json.loads(lines[-1]), "wall_s": wall}
