#!/usr/bin/env python3
"""GPU benchmark of scangen's built-in ops against the floors and two baselines, in one process.

    PYTHONPATH=. python3 bench/bench.py --out DIR [--quick] [--algos gae,vtrace] [--shapes 4096x128,...]
                                         [--dtypes fp32,bf16] [--variants trunc,notrunc]
    PYTHONPATH=. python3 bench/bench.py --dry-run --out /tmp/bench-dry     # CPU plumbing check

First the floors (device-to-device copy bandwidth, empty-launch floor), then the work in priority
stages, so that a run cut short by --time-budget keeps what matters most:
  1. scangen, fp32, with truncations   (every algorithm x shape; plus the per-step loop baseline)
  2. scangen, bf16, with truncations
  3. torch.compile baseline, fp32, with truncations (scangen re-timed beside it)
  4. scangen without truncations (fp32, bf16)
  5. the remaining torch.compile baselines
A scangen task: inputs, one call checked against the float64 reference and a float64 oracle, then
timed (do_bench and a host-timed loop); the loop baseline checked and timed (or estimated from 32
steps). A compile task: torch.compile, check, time. Every failure is recorded and the run goes on.
DIR/bench.json and DIR/bench.md are rewritten after every task. See bench/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

T_START = time.perf_counter()  # the time budget counts from here (imports included)
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):  # bench/ for baselines, the checkout for scangen
    if _p not in sys.path:
        sys.path.insert(0, _p)

YAML_STUBBED = False
try:  # scangen/__init__ imports scangen.spec, which imports yaml; the built-in ops never parse YAML
    import yaml  # noqa: F401
except ImportError:
    _stub = types.ModuleType("yaml")
    _stub.__doc__ = "stub installed by bench/bench.py: pyyaml is not installed; the built-in ops do not need it"
    sys.modules["yaml"] = _stub
    YAML_STUBBED = True

import torch  # noqa: E402

import scangen  # noqa: E402
from scangen import testing as sg_testing  # noqa: E402
from scangen.reference import REFERENCES  # noqa: E402

import baselines  # noqa: E402

try:
    import triton
    import triton.language as tl  # noqa: F401
    import triton.testing as triton_testing
except Exception:  # noqa: BLE001 - the CPU dry run works without Triton
    triton = None
    triton_testing = None

ALGORITHMS = tuple(sg_testing.ALGORITHMS)
HAS_TRUNC = ("compute_gae", "compute_vtrace", "compute_retrace", "compute_lambda_returns",
             "compute_discounted_returns")
FORWARD = ("compute_eligibility_traces", "compute_episodic_prefix_sum")
DEFAULT_SHAPES = ((4096, 128), (128, 1024), (32768, 16), (16384, 64), (1024, 1024), (16384, 1024),
                  (256, 8192), (64, 65536), (8, 262144), (1, 1048576))
DRY_SHAPES = ((4, 16), (3, 37), (2, 300), (1, 1100))
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
DTYPE_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
# PERF.md's shape classes
PRODUCTION = {(4096, 128), (128, 1024), (32768, 16), (16384, 64)}
FEW_ROWS_LONG_T = {(64, 65536), (8, 262144), (1, 1048576)}
LARGE_ELEMS = 16 * 2 ** 20


def log(msg):
    print(msg, flush=True)


def short_err(exc, limit=160):
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in first.lower():
        kind, first = "OOM", first[:80]
    msg = f"{kind}: {first}"
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# arguments

def parse_shapes(text):
    shapes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        n, t = part.split("x")
        shapes.append((int(n), int(t)))
    return tuple(shapes)


def parse_algos(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name = part if part.startswith("compute_") else "compute_" + part
        if name not in ALGORITHMS:
            raise SystemExit(f"unknown algorithm {part!r}; expected one of {', '.join(ALGORITHMS)}")
        out.append(name)
    return tuple(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (bench.json, bench.md)")
    p.add_argument("--quick", action="store_true",
                   help="fp32 only, no no-truncation variants, loop baseline only at the two smallest shapes")
    p.add_argument("--algos", default=None, help="comma list (gae or compute_gae, ...); default all eight")
    p.add_argument("--shapes", default=None, help="comma list of NxT; default the ten of PERF.md / the brief")
    p.add_argument("--dtypes", default=None, help="comma list of fp32,bf16,fp16 (default fp32,bf16; --quick: fp32)")
    p.add_argument("--variants", default=None,
                   help="trunc,notrunc: with / without the truncateds input for the algorithms that have one "
                        "(default both; --quick: trunc)")
    p.add_argument("--actions", type=int, default=8, help="Retrace's action count K (default 8)")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU plumbing check: tiny shapes, backend='torch', torch.compile(backend='eager'), "
                        "perf_counter timing")
    p.add_argument("--device", default=None, help="cuda (default) or cpu")
    p.add_argument("--backend", default=None, help="scangen backend (default triton on cuda, torch on cpu)")
    p.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warmup per measurement (ms)")
    p.add_argument("--rep-ms", type=float, default=50.0, help="do_bench rep per measurement (ms)")
    p.add_argument("--call-ms", type=float, default=15.0, help="host-timed loop: target ms per repeat")
    p.add_argument("--call-repeats", type=int, default=3, help="host-timed loop: repeats (median)")
    p.add_argument("--rotate-mb", type=float, default=256.0,
                   help="rotate input sets until this many MB are cycled through (data that fits in L2)")
    p.add_argument("--max-sets", type=int, default=1024, help="cap on rotated input sets")
    p.add_argument("--time-budget", type=float, default=480.0,
                   help="seconds; configurations not started by then are recorded as skipped")
    p.add_argument("--compile-budget", type=float, default=None,
                   help="optional cap on cumulative torch.compile compile seconds (default: only the time budget)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--compile-workers", type=int, default=0,
                   help="before timing, compile the torch.compile baselines in this many child processes, "
                        "so that the run itself reads Inductor's on-disk caches (default 0: off)")
    p.add_argument("--compile-warm-part", default=None, help=argparse.SUPPRESS)  # i/n: a child of the above
    p.add_argument("--compile-backend", default=None, help="torch.compile backend (default inductor)")
    p.add_argument("--no-loop", action="store_true", help="skip the per-step loop baseline")
    p.add_argument("--layout", default="rows", choices=["rows", "time-major"],
                   help="storage of the [N, T] inputs: rows (time contiguous, default) or time-major "
                        "([T, N] memory, the same logical values; scangen's time-major tiles)")
    p.add_argument("--graph", action="store_true",
                   help="also time scangen's calls captured in a CUDA graph (device time without the "
                        "host; no L2 flush between replays): a table of its own in bench.md")
    p.add_argument("--loop-max-t", type=int, default=None, help="run the loop baseline only for T <= this "
                   "(default 1024); longer T gets an estimate from a few steps")
    p.add_argument("--ref-max-t", type=int, default=None,
                   help="float64 reference loop over the full T up to this T (default 1024); longer T: "
                        "reference on the window end (reverse) / start (forward) of this length, plus the "
                        "full-size float64 oracle")
    p.add_argument("--ref-rows", type=int, default=128, help="rows checked against the float64 reference")
    p.add_argument("--gen-elems", type=int, default=2 ** 18,
                   help="scangen.testing.make_inputs draws at most max(1, this // T) rows; the rest are "
                        "time-rolled copies (make_inputs draws on the CPU in float64 and is slow)")
    p.add_argument("--gen-rows", type=int, default=None, help="cap on rows drawn by make_inputs (default 1024)")
    p.add_argument("--copy-gib", type=float, default=None, help="copy size for the bandwidth floor (default 2)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    dry = args.dry_run
    args.device = args.device or ("cpu" if dry else "cuda")
    args.cuda = args.device.startswith("cuda")
    if args.cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on the GPU machine, or use --dry-run for the CPU plumbing check")
    args.backend = args.backend or ("triton" if args.cuda else "torch")
    args.compile_backend = args.compile_backend or ("eager" if dry else "inductor")
    args.shapes = parse_shapes(args.shapes) if args.shapes else (DRY_SHAPES if dry else DEFAULT_SHAPES)
    args.algos = parse_algos(args.algos) if args.algos else ALGORITHMS
    dts = args.dtypes or ("fp32" if args.quick else "fp32,bf16")
    args.dtypes = tuple(DTYPES[d.strip()] for d in dts.split(",") if d.strip())
    vs = args.variants or ("trunc" if args.quick else "trunc,notrunc")
    args.variants = tuple(v.strip() for v in vs.split(",") if v.strip())
    for v in args.variants:
        if v not in ("trunc", "notrunc"):
            raise SystemExit(f"unknown variant {v!r}; expected trunc, notrunc")
    args.loop_max_t = args.loop_max_t if args.loop_max_t is not None else (300 if dry else 1024)
    args.ref_max_t = args.ref_max_t if args.ref_max_t is not None else (64 if dry else 1024)
    args.gen_rows = args.gen_rows if args.gen_rows is not None else (2 if dry else 1024)
    args.copy_gib = args.copy_gib if args.copy_gib is not None else (0.0625 if dry else 2.0)
    if dry:
        args.rotate_mb = min(args.rotate_mb, 1.0)
    by_size = sorted(range(len(args.shapes)), key=lambda i: (args.shapes[i][0] * args.shapes[i][1], i))
    args.loop_shapes = ({args.shapes[i] for i in by_size[:2]} if args.quick else set(args.shapes))
    return args


# ---------------------------------------------------------------------------------------------
# timing

def sync(args):
    if args.cuda:
        torch.cuda.synchronize()


def host_median(fn, args, n=5):
    fn()
    sync(args)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync(args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def device_us(fn, args, warmup=None, rep=None):
    """triton.testing.do_bench median in us: CUDA-event time of one call, L2 flushed before each call
    (by do_bench's 256 MB memset, which also hides host overhead shorter than that memset)."""
    if not args.cuda:
        return host_median(fn, args)
    ms = triton_testing.do_bench(fn, warmup=warmup if warmup is not None else args.warmup_ms,
                                 rep=rep if rep is not None else args.rep_ms, return_mode="median")
    return ms * 1e3


def call_us(fn, args, target_ms=None, repeats=None, n_max=20000, n_fixed=None):
    """Host-timed back-to-back loop: wall time of n calls + one synchronize, / n; median of repeats.
    This is the full call as an application sees it: max(host overhead, device time) per call."""
    target_ms = args.call_ms if target_ms is None else target_ms
    repeats = args.call_repeats if repeats is None else repeats
    if n_fixed is not None:
        n = n_fixed
    else:
        fn()
        sync(args)
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        sync(args)
        est = max((time.perf_counter() - t0) / 3, 1e-7)
        n = int(min(n_max, max(3, target_ms * 1e-3 / est)))
    times = []
    for _ in range(repeats):
        sync(args)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync(args)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times) * 1e6, n


def paired_call_us(fn, floor_fn, args):
    """call_us for `fn` and for the empty launch `floor_fn`, alternating repeat by repeat:
    ``(fn_us, n, floor_us)``. The host's speed drifts by 2x within one process on the H200
    host (bench/NOTES.md, ninth round); a floor measured beside each call sees the same host."""
    repeats = args.call_repeats
    n = call_us(fn, args, repeats=1)[1]  # each warms up and sizes its loop
    nf = call_us(floor_fn, args, repeats=1)[1]
    times, floors = [], []
    for _ in range(repeats):
        floors.append(call_us(floor_fn, args, repeats=1, n_fixed=nf)[0])
        times.append(call_us(fn, args, repeats=1, n_fixed=n)[0])
    return statistics.median(times), n, statistics.median(floors)


def timed_once(fn, args):
    sync(args)
    t0 = time.perf_counter()
    out = fn()
    sync(args)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# floors

if triton is not None:
    @triton.jit
    def _empty_kernel(x_ptr, n):
        pass

    @triton.jit
    def _empty_noarg_kernel():
        pass


def _empty_launch(x, n):
    _empty_kernel[(1,)](x, n)


def measure_floors(args, run=None):
    floors = {}
    # -- device-to-device copy bandwidth (bytes read + bytes written)
    try:
        n = int(args.copy_gib * 2 ** 30) // 4
        src = torch.ones(n, dtype=torch.float32, device=args.device)
        dst = torch.empty_like(src)
        us = device_us(lambda: dst.copy_(src), args, warmup=25, rep=200)
        floors["copy_bytes"] = 2 * n * 4
        floors["copy_us"] = us
        floors["copy_bw_GBps"] = 2 * n * 4 / (us * 1e-6) / 1e9
        floors["copy_method"] = (f"dst.copy_(src), {n * 4 / 2 ** 30:g} GiB fp32, read + write counted, "
                                 + ("triton.testing.do_bench median" if args.cuda else "perf_counter median"))
    except Exception as exc:  # noqa: BLE001
        floors["copy_error"] = short_err(exc)
        floors["copy_bw_GBps"] = None
    # -- empty launch floor
    try:
        if args.cuda:
            sets = [{"x": torch.empty(1, device=args.device), "n": 1} for _ in range(4)]
            it = itertools.cycle(sets)
            fn = lambda: _empty_launch(**next(it))  # noqa: E731 - same wrapper shape as the ops' timing
            fn()
            sync(args)
            floors["launch_us"] = device_us(fn, args, warmup=25, rep=200)
            if run is not None:
                run.floor_fn = fn
            floors["launch_call_us"], floors["launch_call_n"] = call_us(fn, args, target_ms=50, repeats=5,
                                                                        n_max=50000)
            floors["launch_method"] = ("empty @triton.jit kernel (a pointer and an int), grid (1,), launched from "
                                       "Python through the same rotating-kwargs wrapper as the ops; launch_us: "
                                       "do_bench median (device-timed), launch_call_us: host-timed loop of "
                                       "back-to-back calls + one synchronize, median of 5")
            # for reference: the bare no-argument kernel, no wrapper (bench/probe_launch.py's "empty kernel")
            bare = lambda: _empty_noarg_kernel[(1,)]()  # noqa: E731
            bare()
            sync(args)
            floors["launch_noarg_us"] = device_us(bare, args, warmup=25, rep=100)
            floors["launch_noarg_call_us"], _ = call_us(bare, args, target_ms=50, repeats=5, n_max=50000)
        else:
            x = torch.zeros(1)
            it = itertools.cycle([{"x": x}])
            fn = lambda: (lambda x: x.add_(0))(**next(it))  # noqa: E731
            floors["launch_us"] = host_median(fn, args, n=200)
            floors["launch_call_us"], floors["launch_call_n"] = call_us(fn, args)
            if run is not None:
                run.floor_fn = fn
            floors["launch_method"] = "CPU dry run: a 1-element in-place torch op (no Triton launch)"
    except Exception as exc:  # noqa: BLE001
        floors["launch_error"] = short_err(exc)
        floors.setdefault("launch_us", None)
        floors.setdefault("launch_call_us", None)
    return floors


# ---------------------------------------------------------------------------------------------
# inputs

def gen_rows_for(N, T, args):
    return max(1, min(N, args.gen_rows, args.gen_elems // T if T <= args.gen_elems else 1))


def apply_no_trunc(algo, kw):
    """The no-truncation call: no truncateds tensor; GAE / V-trace bootstrap the window end through
    last_value [N]; TD(lambda) needs no bootstrap (next_values); discounted returns keep
    bootstrap_values (their only way to bootstrap T-1)."""
    kw.pop("truncateds", None)
    if algo in ("compute_gae", "compute_vtrace"):
        kw["last_value"] = kw.pop("bootstrap_values")[:, -1].clone()
    elif algo == "compute_lambda_returns":
        kw.pop("bootstrap_values", None)
    return kw


def make_master(algo, N, T, variant, args):
    g = gen_rows_for(N, T, args)
    trunc_rate = 0.0 if variant == "no" else 0.05
    kw = sg_testing.make_inputs(algo, g, T, seed=args.seed, dtype=torch.float64, device="cpu",
                                trunc_rate=trunc_rate, term_rate=0.05, A=args.actions)
    if variant == "no":
        apply_no_trunc(algo, kw)
    return kw


def build_inputs(master, N, T, dtype, args):
    """Cast the drawn rows to `dtype` on the device and fill N rows with time-rolled copies of them
    (each copy rolled by its own shift, the same for every tensor of a row)."""
    out = {}
    for k, v in master.items():
        if not torch.is_tensor(v):
            out[k] = v
            continue
        x = v.to(args.device)
        if x.is_floating_point():
            x = x.to(dtype)
        g = x.shape[0]
        if g != N:
            copies = -(-N // g)
            parts = [x]
            for j in range(1, copies):
                shift = (j * 7919 + 31 * j * j) % T if T > 1 else 0
                parts.append(torch.roll(x, shifts=shift, dims=1) if x.dim() >= 2 else x)
            x = torch.cat(parts, 0)[:N]
        x = x.contiguous()
        out[k] = sg_testing.as_time_major(x) if args.layout == "time-major" else x
    return out


def tensors_of(obj):
    if torch.is_tensor(obj):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors_of(o)]
    return []


def nbytes(obj):
    seen, total = set(), 0
    for t in tensors_of(obj):
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def clone_set(kw):
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()}


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def cycler(fn, sets, **extra):
    it = itertools.cycle(sets)
    if extra:
        return lambda: fn(**next(it), **extra)
    return lambda: fn(**next(it))


# ---------------------------------------------------------------------------------------------
# correctness

def tol_ratio(actual, expected, dtype):
    """max over elements of |actual - expected| / (atol * scale + rtol * |expected|), with
    scangen.testing's tolerances and scale (<= 1 passes, as scangen.testing.assert_close);
    inf where NaN / inf positions disagree or shapes differ."""
    if tuple(actual.shape) != tuple(expected.shape):
        return float("inf")
    tol = sg_testing.tolerance(dtype)
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(device=a.device, dtype=torch.float64)
    fin_e = torch.isfinite(e)
    scale = max(1.0, e[fin_e].abs().max().item()) if bool(fin_e.any()) else 1.0
    finite = torch.isfinite(a) & fin_e
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    allowed = tol.atol * scale + tol.rtol * e.abs()
    ratio = torch.where(finite, err / allowed, torch.zeros_like(a)).max().item() if a.numel() else 0.0
    bad = (torch.isnan(a) != torch.isnan(e))
    bad |= (torch.isinf(a) | torch.isinf(e)) & (a != e) & ~torch.isnan(a) & ~torch.isnan(e)
    if bool(bad.any()):
        return float("inf")
    return float(ratio)


def window(algo, T, args):
    if T <= args.ref_max_t:
        return slice(None), "full T"
    L = args.ref_max_t
    if algo in FORWARD:
        return slice(0, L), f"first {L} steps"
    return slice(T - L, T), f"last {L} steps"


def slice_kw(kw, rows, tsl, device="cpu"):
    out = {}
    for k, v in kw.items():
        if torch.is_tensor(v):
            v = v[:rows]
            if v.dim() >= 2:
                v = v[:, tsl]
            v = v.to(device)
        out[k] = v
    return out


class Expected:
    """The float64 reference on a slice (first ref_rows rows; the full T or its window end /
    start: a reverse scan's last L outputs depend only on the last L inputs, a forward scan's
    first L outputs only on the first L) and the float64 oracle (the eager vectorised baseline on
    float64 copies of the inputs, all rows and steps)."""

    def __init__(self, algo, kw, N, T, args, ref=None):
        self.rows = min(N, args.ref_rows)
        self.tsl, self.what = window(algo, T, args)
        self.ref = self.ref_error = self.oracle = self.oracle_error = None
        try:
            self.ref = ref if ref is not None else as_tuple(REFERENCES[algo](**slice_kw(kw, self.rows, self.tsl)))
        except Exception as exc:  # noqa: BLE001
            self.ref_error = short_err(exc)
        try:
            kw64 = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}
            with torch.no_grad():
                self.oracle = as_tuple(baselines.VECTORIZED[algo](**kw64))
            del kw64
        except Exception as exc:  # noqa: BLE001
            self.oracle_error = short_err(exc)
            if args.cuda:
                torch.cuda.empty_cache()
        self.oracle_vs_ref = None  # the oracle itself against the reference, float64 tolerances
        if self.ref is not None and self.oracle is not None and len(self.ref) == len(self.oracle):
            self.oracle_vs_ref = max(tol_ratio(o[:self.rows][:, self.tsl].cpu(), e, torch.float64)
                                     for o, e in zip(self.oracle, self.ref))

    def check(self, out):
        out = as_tuple(out)
        res = {"ref_window": f"{self.rows} rows, {self.what}"}
        if self.ref is not None:
            if len(out) != len(self.ref):
                res["ref"] = float("inf")
                res["note"] = f"{len(out)} outputs, reference has {len(self.ref)}"
            else:
                res["ref"] = max(tol_ratio(o[:self.rows][:, self.tsl].cpu(), e, o.dtype) for o, e in zip(out, self.ref))
        else:
            res["ref_error"] = self.ref_error
        if self.oracle is not None and len(out) == len(self.oracle):
            res["oracle"] = max(tol_ratio(o, e, o.dtype) for o, e in zip(out, self.oracle))
        elif self.oracle_error:
            res["oracle_error"] = self.oracle_error
        vals = [res[k] for k in ("ref", "oracle") if k in res]
        res["ok"] = bool(vals) and all(v <= 1.0 for v in vals) and "ref" in res
        return res

    def free(self):
        self.ref = self.oracle = None  # the reference slice stays cached in Run.refs for stage B


def check_str(c):
    if not c:
        return ""
    if c.get("ok"):
        return "ok"
    parts = []
    for k, lab in (("ref", "ref"), ("oracle", "f64")):
        if k in c and c[k] > 1.0:
            parts.append(f"{lab} {c[k]:.3g}x tol")
    if "ref_error" in c:
        parts.append("ref n/a")
    return "FAIL " + ", ".join(parts) if parts else "unchecked"


# ---------------------------------------------------------------------------------------------
# one configuration

def cuda_alive(args):
    if not args.cuda:
        return True
    try:
        torch.cuda.synchronize()
        torch.ones(1, device=args.device).add_(1)
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


class Run:
    def __init__(self, args):
        self.args = args
        self.compile_s = 0.0
        self.masters = {}
        self.refs = {}
        self.fatal = None
        self.records = []
        self.floors = {}
        self.floor_fn = None  # the empty launch, timed beside each scangen call (paired_call_us)

    def elapsed(self):
        return time.perf_counter() - T_START

    def over_budget(self):
        return self.elapsed() > self.args.time_budget

    def master(self, rec):
        key = (rec["algo"], rec["N"], rec["T"], rec["trunc"])
        if key not in self.masters:
            self.masters[key] = make_master(rec["algo"], rec["N"], rec["T"], rec["trunc"], self.args)
        return self.masters[key]

    def on_error(self, rec, part, exc):
        rec[part]["error"] = short_err(exc)
        rec[part]["traceback"] = traceback.format_exc(limit=6)
        if "out of memory" in str(exc).lower() and self.args.cuda:
            torch.cuda.empty_cache()
        if not cuda_alive(self.args):
            self.fatal = f"CUDA context lost after {rec['algo']} {rec['N']}x{rec['T']} {part}: {short_err(exc)}"


def rec_key(rec):
    return (rec["algo"], rec["N"], rec["T"], rec["dtype"], rec["trunc"])


def prepare(run, rec, part):
    """Inputs on the device, the float64 expectations and the rotated copies, or None on failure
    (recorded under rec[part])."""
    args = run.args
    algo, N, T, dtype = rec["algo"], rec["N"], rec["T"], DTYPES[rec["dtype"]]
    try:
        t0 = time.perf_counter()
        kw = build_inputs(run.master(rec), N, T, dtype, args)
        rec["gen_rows"] = gen_rows_for(N, T, args)
        rec["bytes_in"] = nbytes(kw)
        rec[part]["inputs_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        exp = Expected(algo, kw, N, T, args, ref=run.refs.get(rec_key(rec)))
        if exp.ref is not None:
            run.refs[rec_key(rec)] = exp.ref
        if exp.oracle_vs_ref is not None:
            rec["oracle_vs_ref"] = exp.oracle_vs_ref
        rec[part]["expected_s"] = time.perf_counter() - t0
        set_bytes = rec["bytes_in"]
        n_sets = 1 if set_bytes >= args.rotate_mb * 1e6 else min(
            args.max_sets, math.ceil(args.rotate_mb * 1e6 / max(set_bytes, 1)))
        sets = [kw] + [clone_set(kw) for _ in range(n_sets - 1)]
        rec["sets"] = n_sets
        return kw, exp, sets
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, part, exc)
        return None


def stage_scangen(run, rec):
    """Stage A: one scangen call checked, then timed (do_bench and host-timed loop); the loop
    baseline checked and timed (or estimated from a few steps)."""
    args = run.args
    algo, N, T = rec["algo"], rec["N"], rec["T"]
    s, lp = rec["scangen"], rec["loop"]
    prep = prepare(run, rec, "scangen")
    if prep is None:
        return
    kw, exp, sets = prep
    try:
        op = getattr(scangen, algo)
        out, first_s = timed_once(lambda: op(**kw, backend=args.backend), args)
        s["first_call_s"] = first_s  # includes Triton's JIT compile of this specialisation
        rec["bytes_out"] = nbytes(out)
        rec["bytes"] = rec["bytes_in"] + rec["bytes_out"]
        bw = run.floors.get("copy_bw_GBps")
        rec["floor_us"] = rec["bytes"] / (bw * 1e9) * 1e6 if bw else None
        s["check"] = exp.check(out)
        del out
        fn = cycler(op, sets, backend=args.backend)
        s["us"] = device_us(fn, args)
        if run.floor_fn is not None:  # the empty launch timed beside the call, repeat by repeat
            s["call_us"], s["call_n"], s["floor_call_us"] = paired_call_us(fn, run.floor_fn, args)
        else:
            s["call_us"], s["call_n"] = call_us(fn, args)
        if args.graph and args.cuda:
            try:  # a failed capture is recorded, not counted as a scangen error
                s["graph_us"] = 1e3 * triton_testing.do_bench_cudagraph(fn, rep=args.rep_ms,
                                                                        return_mode="median")
            except Exception as exc:  # noqa: BLE001
                s["graph_error"] = short_err(exc)
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "scangen", exc)
    if run.fatal:
        return
    loop = baselines.LOOPS[algo]
    try:
        if args.no_loop:
            lp["skipped"] = "--no-loop"
        elif T <= args.loop_max_t and (N, T) in args.loop_shapes and not run.over_budget():
            out, t1 = timed_once(lambda: loop(**kw), args)
            lp["check"] = exp.check(out)
            del out
            times = [t1] + [timed_once(lambda: loop(**kw), args)[1] for _ in range(2)]
            lp["us"] = statistics.median(times) * 1e6
            lp["method"] = "host-timed, median of 3 calls (each synchronised)"
        else:
            steps = min(T, 32)
            short = slice_kw(kw, N, slice(0, steps), device=args.device)
            loop(**short)
            _, t1 = timed_once(lambda: loop(**short), args)
            lp["estimate_us"] = t1 / steps * T * 1e6
            lp["skipped"] = (f"T > {args.loop_max_t}" if T > args.loop_max_t else
                             "--quick" if (N, T) not in args.loop_shapes else "time budget")
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "loop", exc)
    exp.free()


def stage_compile(run, rec):
    """Stage B: the torch.compile'd doubling scan compiled (timed), checked and timed, with scangen
    re-timed beside it (the speedup uses this pair)."""
    args = run.args
    algo = rec["algo"]
    c = rec["compile"]
    prep = prepare(run, rec, "compile")
    if prep is None:
        return
    kw, exp, sets = prep
    try:
        torch._dynamo.reset()  # one cache entry per configuration: no recompile limit, no guard chains
        cfn = torch.compile(baselines.VECTORIZED[algo], dynamic=False, fullgraph=True, backend=args.compile_backend)
        t0 = time.perf_counter()
        try:
            out, _ = timed_once(lambda: cfn(**kw), args)
        except Exception as exc:  # noqa: BLE001 - retry allowing graph breaks, and say so
            if not cuda_alive(args) or "out of memory" in str(exc).lower():
                raise
            c["fullgraph_error"] = short_err(exc)
            torch._dynamo.reset()
            cfn = torch.compile(baselines.VECTORIZED[algo], dynamic=False, backend=args.compile_backend)
            out, _ = timed_once(lambda: cfn(**kw), args)
        c["compile_s"] = time.perf_counter() - t0
        run.compile_s += c["compile_s"]
        if rec.get("bytes") is None:
            rec["bytes_out"] = nbytes(out)
            rec["bytes"] = rec["bytes_in"] + rec["bytes_out"]
            bw = run.floors.get("copy_bw_GBps")
            rec["floor_us"] = rec["bytes"] / (bw * 1e9) * 1e6 if bw else None
        c["check"] = exp.check(out)
        del out
        fn = cycler(cfn, sets)
        c["us"] = device_us(fn, args)
        c["call_us"], c["call_n"] = call_us(fn, args)
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "compile", exc)
    finally:
        torch._dynamo.reset()
        exp.free()
    if run.fatal or c.get("us") is None or rec["scangen"].get("error"):
        return
    try:  # scangen again, right beside it
        sfn = cycler(getattr(scangen, algo), sets, backend=args.backend)
        c["scangen_us"] = device_us(sfn, args)
        c["scangen_call_us"], _ = call_us(sfn, args)
    except Exception as exc:  # noqa: BLE001
        c["scangen_retime_error"] = short_err(exc)


def stages(args, records):
    """(stage, records) in priority order: scangen for fp32 and bf16 with truncations, the compile
    baseline for fp32 with truncations, scangen without truncations, then the remaining compile
    baselines. Inside a stage: algorithm-major, shapes in the given order."""
    def tier(dt, variant):
        return [r for r in records if r["dtype"] == dt and ((r["trunc"] == "no") == (variant == "notrunc"))]
    dts = [DTYPE_NAME[d] for d in args.dtypes]
    variants = list(args.variants)
    order = []
    first_v = variants[0]
    for dt in dts:
        order.append(("scangen", first_v, dt))
    if dts:
        order.append(("compile", first_v, dts[0]))
    for v in variants[1:]:
        for dt in dts:
            order.append(("scangen", v, dt))
    for dt in dts[1:]:
        order.append(("compile", first_v, dt))
    for v in variants[1:]:
        for dt in dts:
            order.append(("compile", v, dt))
    return [(stage, tier(dt, v)) for stage, v, dt in order]


# ---------------------------------------------------------------------------------------------
# derived numbers and reports

def derive(rec, floors):
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    d = {}
    L, Lc = floors.get("launch_us"), floors.get("launch_call_us")
    if s.get("us") and rec.get("floor_us"):
        d["pct_floor"] = 100.0 * rec["floor_us"] / s["us"]
    if s.get("call_us") and rec.get("floor_us"):
        d["pct_floor_call"] = 100.0 * rec["floor_us"] / s["call_us"]
    if s.get("us") and L:
        d["x_launch"] = s["us"] / L
    Lc = s.get("floor_call_us") or Lc  # the floor timed beside this call, where measured
    if s.get("call_us") and Lc:
        d["x_launch_call"] = s["call_us"] / Lc
    s_us = c.get("scangen_us") or s.get("us")  # scangen re-timed beside the compiled baseline
    s_call = c.get("scangen_call_us") or s.get("call_us")
    if s_us and c.get("us"):
        d["vs_compile"] = c["us"] / s_us
    if s_call and c.get("call_us"):
        d["vs_compile_call"] = c["call_us"] / s_call
    if s.get("call_us") and lp.get("us"):
        d["vs_loop"] = lp["us"] / s["call_us"]
    if s.get("call_us") and lp.get("estimate_us"):
        d["vs_loop_est"] = lp["estimate_us"] / s["call_us"]
    rec["derived"] = d
    return d


def f_us(x):
    if x is None:
        return ""
    if x < 10:
        return f"{x:.2f}"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def f_x(x):
    if x is None:
        return ""
    if x < 10:
        return f"{x:.2f}x"
    if x < 100:
        return f"{x:.1f}x"
    return f"{x:,.0f}x"


def f_pct(x):
    return "" if x is None else f"{x:.0f}%"


def cell(text):
    return str(text).replace("|", "/").replace("\n", " ")


def short_name(algo):
    return algo[len("compute_"):] if algo.startswith("compute_") else algo


def part_cell(part, value_fmt, key="us"):
    if part.get("error"):
        return "ERR"
    if part.get(key) is not None:
        return value_fmt(part[key])
    if part.get("skipped"):
        return "skipped"
    return ""


def check_cell(rec):
    if rec.get("skipped"):
        return f"not run ({rec['skipped']})"
    bits = []
    for name in ("scangen", "compile", "loop"):
        part = rec.get(name, {})
        if part.get("error"):
            bits.append(f"{name}: {part['error']}")
        elif part.get("check") and not part["check"].get("ok"):
            bits.append(f"{name}: {check_str(part['check'])}")
    if rec.get("oracle_vs_ref") is not None and rec["oracle_vs_ref"] > 1.0:
        bits.append(f"float64 oracle vs reference {rec['oracle_vs_ref']:.3g}x tol (bench/baselines.py bug?)")
    if not bits:
        checked = [n for n in ("scangen", "compile", "loop") if rec.get(n, {}).get("check", {}).get("ok")]
        return "ok" if checked else ""
    return cell("; ".join(bits))[:220]


TABLE_HEAD = ("| algo | N x T | trunc | MB | floor us | scangen us | % BW floor | x launch | call us | call x launch "
              "| torch.compile us | speedup | loop us | speedup | check |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def table_row(rec):
    d = rec.get("derived", {})
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    mb = f"{rec['bytes'] / 1e6:.1f}" if rec.get("bytes") else ""
    if lp.get("us") is not None:
        loop_us, loop_x = f_us(lp["us"]), f_x(d.get("vs_loop"))
    elif lp.get("error"):
        loop_us, loop_x = "ERR", ""
    elif lp.get("estimate_us") is not None:
        loop_us = f"skipped (~{f_us(lp['estimate_us'])})"
        loop_x = f"~{f_x(d.get('vs_loop_est'))}" if d.get("vs_loop_est") else ""
    else:
        loop_us, loop_x = ("skipped" if lp.get("skipped") else ""), ""
    comp = part_cell(c, f_us)
    if c.get("skipped") and c.get("us") is None:
        comp = "skipped"
    cols = [short_name(rec["algo"]), f"{rec['N']}x{rec['T']}", rec["trunc"], mb, f_us(rec.get("floor_us")),
            part_cell(s, f_us), f_pct(d.get("pct_floor")), f_x(d.get("x_launch")), part_cell(s, f_us, "call_us"),
            f_x(d.get("x_launch_call")), comp, f_x(d.get("vs_compile")), loop_us, loop_x, check_cell(rec)]
    return "| " + " | ".join(cell(x) for x in cols) + " |"


def targets(records, floors, dtype="fp32"):
    """PERF.md's targets evaluated on this run's measurements (one line each)."""
    recs = [r for r in records if r["dtype"] == dtype and r.get("derived")]
    lines = []

    def line(title, rows, ok, value, fmt):
        rows = [r for r in rows if value(r) is not None]
        if not rows:
            return
        bad = [r for r in rows if not ok(value(r))]
        worst = sorted(bad, key=lambda r: value(r), reverse=fmt == "x_hi")[:4]
        w = ", ".join(f"{short_name(r['algo'])} {r['N']}x{r['T']}{'' if r['trunc'] != 'no' else ' notrunc'}="
                      + (f"{value(r):.0f}%" if fmt == "pct" else f"{value(r):.2f}x") for r in worst)
        lines.append(f"- {title}: {len(rows) - len(bad)}/{len(rows)} pass" + (f"; worst: {w}" if bad else ""))

    big = [r for r in recs if r["N"] * r["T"] >= LARGE_ELEMS]
    line(">= 85% of BW floor at >= 16M elements", big, lambda v: v >= 85, lambda r: r["derived"].get("pct_floor"), "pct")
    few = [r for r in recs if (r["N"], r["T"]) in FEW_ROWS_LONG_T]
    line(">= 60% of BW floor, few rows / long T", few, lambda v: v >= 60, lambda r: r["derived"].get("pct_floor"), "pct")

    def graph_pct(r):  # --graph: the device time without the host
        g = r.get("scangen", {}).get("graph_us")
        return 100 * r["floor_us"] / g if g and r.get("floor_us") else None
    line(">= 85% of BW floor at >= 16M elements (CUDA graph)", big, lambda v: v >= 85, graph_pct, "pct")
    line(">= 60% of BW floor, few rows / long T (CUDA graph)", few, lambda v: v >= 60, graph_pct, "pct")
    prod = [r for r in recs if (r["N"], r["T"]) in PRODUCTION]
    line("<= 2x launch floor at production shapes (host-timed full call)", prod, lambda v: v <= 2,
         lambda r: r["derived"].get("x_launch_call"), "x_hi")
    line("<= 2x launch floor at production shapes (do_bench, device-timed)", prod, lambda v: v <= 2,
         lambda r: r["derived"].get("x_launch"), "x_hi")
    line("faster than torch.compile (do_bench)", recs, lambda v: v > 1,
         lambda r: r["derived"].get("vs_compile"), "x_lo")
    at = [r for r in recs if (r["N"], r["T"]) == (4096, 128)]
    line(">= 5x torch.compile at 4096x128 (do_bench)", at, lambda v: v >= 5,
         lambda r: r["derived"].get("vs_compile"), "x_lo")
    line(">= 5x torch.compile at 4096x128 (host-timed)", at, lambda v: v >= 5,
         lambda r: r["derived"].get("vs_compile_call"), "x_lo")
    return lines


def dtype_ratio_line(records):
    by = {}
    for r in records:
        us = r.get("scangen", {}).get("us")
        if us:
            by[(r["algo"], r["N"], r["T"], r["trunc"], r["dtype"])] = (us, r.get("bytes"))
    out = []
    for dt in ("bf16", "fp16"):
        t_r, b_r = [], []
        for (a, n, t, tr, d), (us, b) in by.items():
            if d == dt and (a, n, t, tr, "fp32") in by:
                us32, b32 = by[(a, n, t, tr, "fp32")]
                t_r.append(us / us32)
                if b and b32:
                    b_r.append(b / b32)
        if t_r:
            gm = math.exp(sum(map(math.log, t_r)) / len(t_r))
            bm = math.exp(sum(map(math.log, b_r)) / len(b_r)) if b_r else float("nan")
            out.append(f"- {dt}/fp32 scangen time ratio: geomean {gm:.2f} over {len(t_r)} configs "
                       f"(bytes ratio geomean {bm:.2f}; PERF.md: time should scale with bytes)")
    return out


def floors_line(floors):
    bw, L, Lc = floors.get("copy_bw_GBps"), floors.get("launch_us"), floors.get("launch_call_us")
    a = f"copy bandwidth {bw:,.0f} GB/s" if bw else f"copy bandwidth n/a ({floors.get('copy_error')})"
    b = (f"launch floor {L:.2f} us (do_bench) / {Lc:.2f} us (host-timed loop)" if L and Lc
         else f"launch floor n/a ({floors.get('launch_error')})")
    if floors.get("launch_noarg_us") and floors.get("launch_noarg_call_us"):
        b += (f" [bare no-arg kernel: {floors['launch_noarg_us']:.2f} / "
              f"{floors['launch_noarg_call_us']:.2f} us]")
    if L and Lc:
        # The device's host has a slow mode that inflates every host-bound number of a
        # process (bench/NOTES.md, fourth round, item 6): say which one this process ran in.
        b += (f"; host/device launch ratio {Lc / L:.1f}x (on the H200 host: ~3-3.8x in fast "
              f"processes, 5-6.5x in slow ones, where host-bound columns are inflated)")
    b += ("; call x launch divides by the empty launch timed beside each call (floor_call_us in "
          "the json), not by this one")
    return f"{a}; {b}"


def render_md(meta, floors, records, args):
    out = ["# scangen benchmark", "",
           f"- GPU: {meta.get('gpu')}; torch {meta['torch']}, triton {meta.get('triton')}, CUDA {meta.get('cuda')}, "
           f"scangen {meta['scangen']} ({meta.get('git') or 'no git'}); {meta['date']}",
           f"- Floors: {floors_line(floors)}",
           f"- Method: scangen backend={args.backend!r}; do_bench(warmup={args.warmup_ms:g} ms, rep={args.rep_ms:g} ms, "
           f"median); inputs stored {args.layout}; input sets rotated up to {args.rotate_mb:g} MB; "
           f"torch.compile(backend={args.compile_backend!r}, "
           "dynamic=False, fullgraph=True), mode default; loop baseline host-timed. See bench/README.md.",
           f"- Elapsed {meta.get('elapsed_s', 0):.0f} s (torch.compile compile time {meta.get('compile_s', 0):.0f} s)"
           + (f"; **stopped early: {meta['fatal']}**" if meta.get("fatal") else ""), ""]
    for dt in [DTYPE_NAME[d] for d in args.dtypes]:
        rows = [r for r in records if r["dtype"] == dt]
        if not rows:
            continue
        out += [f"## {dt}", "", TABLE_HEAD] + [table_row(r) for r in rows] + [""]
    graphed = [r for r in records if "graph_us" in r.get("scangen", {}) or "graph_error" in r.get("scangen", {})]
    if graphed:
        out += ["## CUDA-graph replays (device time without the host)", "",
                "Each call captured in a CUDA graph (input sets rotated within the graph, no L2 flush "
                "between replays), `triton.testing.do_bench_cudagraph` median, beside the do_bench time above.",
                "", "| algo | N x T | dtype | trunc | do_bench us | graph us | % BW floor (graph) |",
                "|---|---|---|---|---:|---:|---:|"]
        for r in graphed:
            s_ = r["scangen"]
            g = s_.get("graph_us")
            pct = (f_pct(100 * r["floor_us"] / g) if g and r.get("floor_us") else "")
            out.append("| " + " | ".join(cell(x) for x in [
                short_name(r["algo"]), f"{r['N']}x{r['T']}", r["dtype"], r["trunc"], f_us(s_.get("us")),
                f_us(g) if g else f"ERR {s_.get('graph_error', '')}", pct]) + " |")
        out.append("")
    out += ["## PERF.md targets (fp32)", ""] + (targets(records, floors) or ["- (no fp32 measurements)"])
    out += dtype_ratio_line(records) + [""]
    return "\n".join(out)


def render_summary(meta, floors, records, args, out_dir):
    """Compact, printed last: the remote run returns only the tail of stdout."""
    dt = "fp32" if torch.float32 in args.dtypes else DTYPE_NAME[args.dtypes[0]]
    rows = [r for r in records if r["dtype"] == dt and r["trunc"] in ("yes", "-")]
    lines = [f"=== scangen bench summary: {dt}, with truncations (full tables: {out_dir}/bench.md) ===",
             f"{meta.get('gpu')} | torch {meta['torch']} | triton {meta.get('triton')} | {floors_line(floors)}",
             "algo                shape        floor  scangen  %BW  xL(dev) xL(call)  vs.compile  vs.loop  check"]
    for r in rows:
        d = r.get("derived", {})
        s = r.get("scangen", {})
        sc = "ERR" if s.get("error") else f_us(s.get("us"))
        if r.get("skipped"):
            sc = "not run"
        vc = f_x(d.get("vs_compile")) or ("ERR" if r.get("compile", {}).get("error") else
                                          "skip" if r.get("compile", {}).get("skipped") else "")
        vl = f_x(d.get("vs_loop")) or (("~" + f_x(d["vs_loop_est"])) if d.get("vs_loop_est") else "")
        chk = check_cell(r)
        lines.append(f"{short_name(r['algo']):<19} {str(r['N']) + 'x' + str(r['T']):<12} {f_us(r.get('floor_us')):>6} "
                     f"{sc:>8} {f_pct(d.get('pct_floor')):>4} {f_x(d.get('x_launch')):>7} "
                     f"{f_x(d.get('x_launch_call')):>8} {vc:>11} {vl:>8}  {chk[:48]}")
    lines += ["targets (PERF.md, fp32, all variants):"] + targets(records, floors) + dtype_ratio_line(records)
    n_err = sum(1 for r in records for p in ("scangen", "compile", "loop") if r.get(p, {}).get("error"))
    n_fail = sum(1 for r in records for p in ("scangen", "compile", "loop")
                 if r.get(p, {}).get("check") and not r[p]["check"].get("ok"))
    n_skip = sum(1 for r in records if r.get("skipped"))
    lines.append(f"{len(records)} configs, {n_err} errors, {n_fail} failed checks, {n_skip} not run; "
                 f"elapsed {meta.get('elapsed_s', 0):.0f} s, compile {meta.get('compile_s', 0):.0f} s"
                 + (f"; STOPPED EARLY: {meta['fatal']}" if meta.get("fatal") else ""))
    return "\n".join(lines)


def jsonable(x):
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def write_outputs(out_dir, meta, floors, records, args):
    settings = {k: (str(v) if not isinstance(v, (int, float, str, bool, type(None))) else v)
                for k, v in vars(args).items()}
    settings["shapes"] = [f"{n}x{t}" for n, t in args.shapes]
    settings["dtypes"] = [DTYPE_NAME[d] for d in args.dtypes]
    settings["loop_shapes"] = sorted(f"{n}x{t}" for n, t in args.loop_shapes)
    doc = {"meta": meta, "floors": floors, "settings": settings, "measurements": records}
    tmp = out_dir / "bench.json.tmp"
    tmp.write_text(json.dumps(jsonable(doc), indent=1))
    tmp.replace(out_dir / "bench.json")
    md = render_md(meta, floors, records, args)
    tmp = out_dir / "bench.md.tmp"
    tmp.write_text(md)
    tmp.replace(out_dir / "bench.md")
    return md


def collect_meta(args):
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "python": platform.python_version(), "torch": torch.__version__,
            "triton": getattr(triton, "__version__", None), "scangen": scangen.__version__,
            "cuda": torch.version.cuda, "argv": sys.argv, "yaml_stubbed": YAML_STUBBED,
            "scangen_env": {k: v for k, v in os.environ.items() if k.startswith(("SCANGEN_", "TRITON_"))}}
    if args.cuda:
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=torch.cuda.get_device_name(0), sm_count=p.multi_processor_count,
                    gpu_mem_GiB=round(p.total_memory / 2 ** 30, 1))
        try:
            meta["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            pass
    else:
        meta["gpu"] = f"none (CPU dry run, {platform.processor() or platform.machine()})"
    if os.environ.get("SCANGEN_REV"):  # a copied tree's .git may be stale: the caller says which commit
        meta["git"] = os.environ["SCANGEN_REV"]
        return meta
    try:
        meta["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "scangen", "generated",
                                "templates", "specs"], capture_output=True, text=True, timeout=10).stdout.strip()
        if meta["git"] and dirty:
            meta["git"] += "+dirty"
    except Exception:  # noqa: BLE001
        meta["git"] = None
    return meta


def configurations(args):
    """Every configuration, in table order (dtype, algorithm, shape, with / without truncations)."""
    out = []
    for dtype in args.dtypes:
        for algo in args.algos:
            has = algo in HAS_TRUNC
            for N, T in args.shapes:
                for variant in args.variants:
                    if variant == "notrunc" and not has:
                        continue
                    out.append({"algo": algo, "N": N, "T": T, "dtype": DTYPE_NAME[dtype],
                                "trunc": ("yes" if variant == "trunc" else "no") if has else "-",
                                "scangen": {}, "compile": {}, "loop": {}})
    return out


def compile_warm_part(args):
    """A child of --compile-workers: compile (and call once) the torch.compile baseline of every
    n-th configuration, filling Inductor's caches, then exit. Nothing is timed or written."""
    part, parts = map(int, args.compile_warm_part.split("/"))
    run = Run(args)
    for i, rec in enumerate(configurations(args)):
        if i % parts != part:
            continue
        try:
            kw = build_inputs(run.master(rec), rec["N"], rec["T"], DTYPES[rec["dtype"]], args)
            torch._dynamo.reset()
            cfn = torch.compile(baselines.VECTORIZED[rec["algo"]], dynamic=False, fullgraph=True,
                                backend=args.compile_backend)
            cfn(**kw)
            sync(args)
        except Exception as exc:  # noqa: BLE001 - the timed run compiles again and reports it
            log(f"compile warm {rec['algo']} {rec['N']}x{rec['T']}: {short_err(exc)}")
        finally:
            torch._dynamo.reset()


def warm_compile_caches(args, argv, meta):
    """Run --compile-workers children (see compile_warm_part) and wait for them."""
    n = args.compile_workers
    base = list(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    children = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *base,
                                  "--compile-workers", "0", "--compile-warm-part", f"{i}/{n}"])
                for i in range(n)]
    left = max(1.0, args.time_budget - (time.perf_counter() - T_START))
    for child in children:
        try:
            child.wait(timeout=max(1.0, left - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            child.kill()
    meta["compile_warm_s"] = time.perf_counter() - t0
    meta["compile_workers"] = n
    log(f"torch.compile caches warmed by {n} processes in {meta['compile_warm_s']:.1f} s")


def progress_line(i, n, run, stage, rec):
    d = rec.get("derived", {})
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    bits = [f"[{i:>3}/{n} {run.elapsed():5.0f}s] {stage:<7} {rec['dtype']} {short_name(rec['algo'])} "
            f"{rec['N']}x{rec['T']} trunc={rec['trunc']}"]
    if stage == "scangen":
        if s.get("us") is not None:
            bits.append(f"scangen {f_us(s['us'])} us ({f_pct(d.get('pct_floor'))} of BW floor, "
                        f"{f_x(d.get('x_launch'))} launch; call {f_us(s.get('call_us'))} us, "
                        f"{f_x(d.get('x_launch_call'))} launch; first call {s.get('first_call_s', 0):.1f} s)")
        if lp.get("us") is not None:
            bits.append(f"loop {f_us(lp['us'])} us ({f_x(d.get('vs_loop'))})")
    else:
        if c.get("us") is not None:
            bits.append(f"compile {f_us(c['us'])} us vs scangen {f_us(c.get('scangen_us'))} us "
                        f"({f_x(d.get('vs_compile'))}; built in {c.get('compile_s', 0):.1f} s)")
        elif c.get("skipped"):
            bits.append(f"compile skipped: {c['skipped']}")
    bits.append(check_cell(rec) or "-")
    return "  ".join(bits)


def main(argv=None):
    args = parse_args(argv)
    if args.compile_warm_part:
        torch.set_grad_enabled(False)
        compile_warm_part(args)
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    run = Run(args)
    meta = collect_meta(args)
    log(f"scangen bench: {meta.get('gpu')} | torch {meta['torch']} | triton {meta.get('triton')} | "
        f"CUDA {meta.get('cuda')} | scangen {meta['scangen']} {meta.get('git') or ''}"
        + (" | pyyaml missing: stubbed" if YAML_STUBBED else ""))
    floors = measure_floors(args, run)
    run.floors = floors
    log(f"floors: {floors_line(floors)}")
    records = configurations(args)
    run.records = records
    plan = stages(args, records)
    if args.compile_workers > 0 and not args.no_compile:
        warm_compile_caches(args, argv, meta)
    if args.no_compile:
        for r in records:
            r["compile"]["skipped"] = "--no-compile"
        plan = [(st, rs) for st, rs in plan if st != "compile"]
    n_tasks = sum(len(rs) for _, rs in plan)
    log(f"{len(records)} configurations, {n_tasks} tasks; time budget {args.time_budget:g} s from start"
        + (f", compile budget {args.compile_budget:g} s" if args.compile_budget is not None else ""))

    def save():
        meta["elapsed_s"], meta["compile_s"], meta["fatal"] = run.elapsed(), run.compile_s, run.fatal
        try:
            for r in records:
                derive(r, floors)
            return write_outputs(out_dir, meta, floors, records, args)
        except Exception as exc:  # noqa: BLE001
            log(f"could not write outputs: {short_err(exc)}")
            return ""

    last_use, last_ref = {}, {}  # cached draws per (algo, shape, variant), references per configuration
    for k, (_, recs) in enumerate(plan):
        for rec in recs:
            last_use[(rec["algo"], rec["N"], rec["T"], rec["trunc"])] = k
            last_ref[rec_key(rec)] = k
    warmed = args.no_compile
    i = 0
    for k_stage, (stage, recs) in enumerate(plan):
        for rec in recs:
            i += 1
            why = ("CUDA context lost" if run.fatal else "time budget" if run.over_budget() else
                   f"compile budget ({args.compile_budget:g} s) spent"
                   if stage == "compile" and args.compile_budget is not None and run.compile_s > args.compile_budget
                   else None)
            if why:
                if stage == "scangen":
                    rec["skipped"] = why
                else:
                    rec["compile"]["skipped"] = why
                continue
            if not warmed:  # the compile worker pool and imports: paid once, not by the first configuration
                warmed = True
                try:
                    t0 = time.perf_counter()
                    warm = torch.compile(lambda x: (x * 2 + 1).sum(), dynamic=False, backend=args.compile_backend)
                    warm(torch.ones(64, device=args.device))
                    sync(args)
                    meta["compile_warmup_s"] = time.perf_counter() - t0
                    log(f"torch.compile warm-up {meta['compile_warmup_s']:.1f} s")
                except Exception as exc:  # noqa: BLE001
                    meta["compile_warmup_error"] = short_err(exc)
                    log(f"torch.compile warm-up failed: {short_err(exc)}")
                torch._dynamo.reset()
            try:
                (stage_scangen if stage == "scangen" else stage_compile)(run, rec)
            except Exception as exc:  # noqa: BLE001 - never let one configuration end the run
                run.on_error(rec, stage, exc)
            save()
            log(progress_line(i, n_tasks, run, stage, rec))
        for key in [key for key, k in last_use.items() if k == k_stage]:
            run.masters.pop(key, None)
        for key in [key for key, k in last_ref.items() if k == k_stage]:
            run.refs.pop(key, None)
    md = save()
    print(md, flush=True)
    print("", flush=True)
    print(render_summary(meta, floors, records, args, out_dir), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
