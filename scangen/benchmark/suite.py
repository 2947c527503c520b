"""``scangen bench``: scangen on this machine, beside the loops users run.

For every configuration (algorithm x shape x dtype x layout) :func:`run` draws the inputs
(``scangen.testing.make_inputs``), computes the float64 reference over a window of steps
(:class:`.checks.WindowReference`), runs each implementation once and checks it against the
reference (``scangen.testing.assert_close``), then times those that passed, round-robin with a copy of a
buffer beyond the last-level cache (the bandwidth floor, measured beside them), and returns
one row per implementation (``report.COLUMNS``). An implementation whose check fails is
reported and not timed.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .. import testing
from . import baselines, floors, meta, numpy_loops, timing
from .checks import WindowReference as Expected, window
from .inputs import as_tuple, tensor_bytes, time_slice

IMPLS = {
    "scangen": "scangen, its default backend (numba on the CPU, Triton on CUDA)",
    "scangen_torch": "scangen's torch path (backend='torch')",
    "compiled_scan": "a torch.compile'd log-depth doubling scan",
    "torch_loop": "a per-step torch loop over T, vectorised over rows",
    "numpy_loop": "an SB3-style per-step numpy loop (GAE, TD(lambda), discounted returns; CPU)",
}
BASELINES = {"cpu": ("scangen_torch", "torch_loop", "numpy_loop"),
             "cuda": ("scangen_torch", "compiled_scan", "torch_loop")}
ALGOS = ("compute_gae", "compute_vtrace", "compute_masked_gae")
SHAPES = {"cpu": ((4096, 128), (1024, 1024), (1, 1048576)),
          "cuda": ((4096, 128), (16384, 1024), (64, 65536), (1, 1048576))}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
DTYPE_ALIASES = {"fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "fp16": "float16"}
LAYOUTS = ("rows", "time-major")
# GAE computes both outputs everywhere: SB3, verl and TorchRL all return both.
OUTPUTS = {"compute_gae": ("advantages", "returns")}
PER_STEP = ("torch_loop", "numpy_loop")


@dataclass(frozen=True)
class Settings:
    """What one run measures and how (``scangen bench``'s options, parsed)."""

    algos: tuple = ALGOS
    shapes: tuple = SHAPES["cpu"]
    device: str = "cpu"
    dtypes: tuple = ("float32",)
    layouts: tuple = ("rows",)
    threads: int | None = None          # None: every core this process may use
    impls: tuple = ("scangen",) + BASELINES["cpu"]
    rounds: int = 7                     # samples per implementation (the median is reported)
    sample_ms: float = 20.0             # CPU: calls per sample last about this long
    loop_max_t: int = 4096              # per-step loops past this T run over a window, scaled
    ref_max_t: int = 1024               # the float64 reference covers at most this many steps
    rotate_mb: float | None = None      # input sets cycled; None: default_sizes()
    floor_mb: float | None = None       # the copy; None: default_sizes()
    seed: int = 0


QUICK = {"rounds": 3, "sample_ms": 10.0, "loop_max_t": 1024}


@dataclass(frozen=True)
class Config:
    algo: str
    N: int
    T: int
    dtype: str
    layout: str

    @property
    def label(self) -> str:
        return f"{self.algo.removeprefix('compute_')} {self.N}x{self.T} {self.dtype} {self.layout}"


def configurations(s: Settings) -> list[Config]:
    return [Config(a, N, T, d, lay) for a in s.algos for N, T in s.shapes for d in s.dtypes for lay in s.layouts]


def _split(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def settings_from_args(args) -> Settings:
    """The command's options as Settings; a ValueError names a bad one."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    algos = tuple(n if n.startswith("compute_") else f"compute_{n}" for n in args.names) or ALGOS
    unknown = [a for a in algos if a not in testing.ALGORITHMS]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {', '.join(unknown)}; `scangen list` shows them")
    try:
        shapes = tuple(tuple(int(x) for x in s.lower().split("x")) for s in _split(args.shapes)) \
            if args.shapes else SHAPES[device]
    except ValueError:
        raise ValueError(f"--shapes takes NxT[,NxT...], got {args.shapes!r}") from None
    if any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise ValueError(f"--shapes takes NxT[,NxT...] with N, T >= 1, got {args.shapes!r}")
    dtypes = tuple(DTYPE_ALIASES.get(d, d) for d in _split(args.dtype or "float32"))
    if set(dtypes) - set(DTYPES):
        raise ValueError(f"--dtype: one or more of {', '.join(DTYPES)}, got {args.dtype!r}")
    layouts = tuple(_split(args.layout or "rows"))
    if set(layouts) - set(LAYOUTS):
        raise ValueError(f"--layout: rows and/or time-major, got {args.layout!r}")
    base = tuple(_split(args.baselines)) if args.baselines is not None else BASELINES[device]
    if set(base) - (set(IMPLS) - {"scangen"}):
        raise ValueError(f"--baselines: any of {', '.join(k for k in IMPLS if k != 'scangen')}, got {args.baselines!r}")
    if device == "cuda" and "numpy_loop" in base:
        raise ValueError("--baselines numpy_loop runs on the CPU only")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be >= 1")
    s = Settings(algos=algos, shapes=shapes, device=device, dtypes=dtypes, layouts=layouts, threads=args.threads,
                 impls=("scangen",) + base, rounds=5 if device == "cuda" else 7, floor_mb=args.floor_mb)
    if args.quick:
        s = replace(s, **QUICK)
    return replace(s, rounds=args.rounds) if args.rounds else s


# ---------------------------------------------------------------------------------------------
# inputs and the float64 reference


def draw(cfg: Config, s: Settings):
    """(arguments on the device in the configuration's dtype and layout, Expected). The float64
    reference reads the inputs as the call does, rounded to the configuration's dtype (a bf16
    call's inputs differ from the float64 draw by up to 0.4%, more than its output tolerance)."""
    dt = DTYPES[cfg.dtype]
    kw64 = testing.make_inputs(cfg.algo, cfg.N, cfg.T, seed=s.seed, dtype=torch.float64)
    kw64 = {k: (v.to(dt).double() if torch.is_tensor(v) and v.is_floating_point() else v)
            for k, v in kw64.items()}
    expected = Expected(cfg.algo, kw64, cfg.T, s.ref_max_t)
    kw = {k: (v.to(s.device, dt if v.is_floating_point() else v.dtype) if torch.is_tensor(v) else v)
          for k, v in kw64.items()}
    return (testing.as_time_major(kw) if cfg.layout == "time-major" else kw), expected


def rotated(kw, budget_bytes, max_sets=32):
    """``kw`` and clones of it (strides kept) until they total ``budget_bytes``, so that calls
    cycling through them read their inputs from memory, not from cache."""
    nbytes = tensor_bytes(kw)
    n = max(1, min(max_sets, math.ceil(budget_bytes / max(nbytes, 1))))
    return [kw] + [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()} for _ in range(n - 1)], nbytes


# ---------------------------------------------------------------------------------------------
# the implementations


def _with_returns(fn):
    """A GAE baseline that returns (advantages, returns), as the op is asked to."""
    def call(**kw):
        adv = fn(**kw)
        return adv, adv + kw["values"]
    return call


def _scangen_thunk(algo, kw, layout, backend):
    """One call of the op; time-major buffers go in as [T, N(, K)] with time_dim=0, as a caller
    holding them would pass them (the outputs come back [T, N])."""
    import scangen
    op = getattr(scangen, algo)
    extra = {"backend": backend, **({"outputs": OUTPUTS[algo]} if algo in OUTPUTS else {})}
    if layout == "time-major":
        kw = {k: (v.transpose(0, 1) if torch.is_tensor(v) and v.dim() >= 2 else v) for k, v in kw.items()}
        extra["time_dim"] = 0
    return lambda: op(**kw, **extra)


def _thunks(impl, algo, sets, layout, dtype):
    """(thunks over the input sets, output transform for the check, note) of one implementation,
    or None where it has no version of this algorithm / dtype."""
    if impl in ("scangen", "scangen_torch"):
        back = (lambda o: tuple(x.transpose(0, 1) for x in as_tuple(o))) if layout == "time-major" else None
        return [_scangen_thunk(algo, kw, layout, None if impl == "scangen" else "torch") for kw in sets], back, ""
    if impl == "torch_loop":
        fn = baselines.LOOPS[algo]
        fn = _with_returns(fn) if algo in OUTPUTS else fn
        return [lambda kw=kw: fn(**kw) for kw in sets], None, ""
    if impl == "compiled_scan":
        fn = baselines.VECTORIZED[algo]
        torch._dynamo.reset()  # one compiled graph per configuration
        cfn = torch.compile(_with_returns(fn) if algo in OUTPUTS else fn, dynamic=False, fullgraph=True)
        return [lambda kw=kw: cfn(**kw) for kw in sets], None, "first call compiles"
    if impl == "numpy_loop":
        # numpy has no bfloat16, and a float16 loop accumulates in float16, past the check's
        # tolerance (SB3's buffers are float32): half dtypes have no numpy loop
        if algo not in numpy_loops.PREPARE or dtype in ("bfloat16", "float16"):
            return None
        return [numpy_loops.PREPARE[algo](kw, layout) for kw in sets], None, ""
    raise KeyError(impl)


def candidates(cfg: Config, sets, expected: Expected, s: Settings) -> list[timing.Candidate]:
    """Every implementation of one configuration, run once and checked (not yet timed)."""
    sync = torch.cuda.synchronize if s.device == "cuda" else None
    out = []
    for impl in s.impls:
        span, use, note = (0, cfg.T), sets, ""
        if impl in PER_STEP and cfg.T > s.loop_max_t:  # one Python iteration per step: a window, scaled
            span = window(cfg.algo, cfg.T, s.loop_max_t)
            use = [time_slice(kw, *span) for kw in sets]
            note = f"timed over steps {span[0]}..{span[1] - 1}, x{cfg.T / (span[1] - span[0]):g}"
        try:
            made = _thunks(impl, cfg.algo, use, cfg.layout, cfg.dtype)
        except Exception as exc:  # noqa: BLE001
            out.append(timing.Candidate(impl, None, error=f"prepare: {timing.short_error(exc)}"))
            continue
        if made is None:
            continue
        thunks, back, extra = made

        def check(o, span=span, back=back):
            return expected.check(back(o) if back else o, span, DTYPES[cfg.dtype])

        out.append(timing.checked(impl, timing.cycling(thunks), check, sync=sync,
                                  scale=cfg.T / (span[1] - span[0]), note="; ".join(x for x in (note, extra) if x)))
    return out


# ---------------------------------------------------------------------------------------------
# one configuration, then all


def _status(c: timing.Candidate) -> tuple[str, str]:
    if not c.ran:
        return "error", c.error
    if not c.passed:
        return "failed", c.check.get("message") or c.check.get("error", "")
    return "ok", ""


def measure(cfg: Config, s: Settings, floor, base: dict) -> list[dict]:
    """The rows of one configuration."""
    kw, expected = draw(cfg, s)
    sets, in_bytes = rotated(kw, s.rotate_mb * 2 ** 20)
    nbytes = in_bytes + len(expected.ref) * cfg.N * cfg.T * DTYPES[cfg.dtype].itemsize
    cands = candidates(cfg, sets, expected, s)
    fns = {c.name: c.fn for c in cands if c.passed}
    fns.update(floor.fns())
    try:
        if s.device == "cuda":
            timings = timing.device_interleaved(fns, rounds=s.rounds)
        else:
            timings = timing.interleaved(fns, rounds=s.rounds, target_s=s.sample_ms / 1e3)
    finally:
        if "compiled_scan" in s.impls:
            torch._dynamo.reset()
    bw, _ = floor.bandwidth(timings)
    floor_ms = nbytes / bw * 1e3
    ms = {c.name: timings[c.name].median_s * 1e3 * c.scale for c in cands if c.name in timings}
    rows = []
    for c in cands:
        t, status = timings.get(c.name), _status(c)
        m = ms.get(c.name)
        speedup = m / ms["scangen"] if m and "scangen" in ms and c.name != "scangen" else None
        backend = {"scangen": _backend(s.device), "scangen_torch": "torch"}.get(c.name)
        rows.append({**base, "algo": cfg.algo, "N": cfg.N, "T": cfg.T, "dtype": cfg.dtype, "layout": cfg.layout,
                     "impl": c.name, "backend": backend, "median_ms": m,
                     "min_ms": t.min_s * 1e3 * c.scale if t else None, "max_ms": t.max_s * 1e3 * c.scale if t else None,
                     "rounds": len(t.samples) if t else 0,
                     "first_call_ms": c.first_call_s * 1e3 if c.first_call_s is not None else None,
                     "bytes": nbytes, "floor_ms": floor_ms, "copy_GBps": bw / 1e9,
                     "pct_of_floor": 100 * floor_ms / m if m else None, "speedup": speedup,
                     "check": status[0], "err_x_tol": c.check.get("err"), "check_steps": c.check.get("steps"),
                     "estimated": c.scale != 1.0,
                     "note": "; ".join(x for x in (status[1], c.note) if x)})
    return rows


def _backend(device) -> str:
    from ..runtime import select_backend
    try:
        return select_backend("scangen bench", None, torch.device(device))
    except ValueError as exc:  # a bad SCANGEN_BACKEND: the calls will fail and say so
        return f"? ({exc})"


def _numba():
    from ..runtime import numba as numbapath
    if not numbapath.available():
        return None
    import numba
    return numba


def _set_threads(n, numba_n=None):
    """Pin torch's and numba's thread counts (every implementation runs with the same); returns
    the previous pair."""
    nb = _numba()
    before = (torch.get_num_threads(), nb.get_num_threads() if nb else None)
    torch.set_num_threads(n)
    if nb:
        nb.set_num_threads(min(numba_n or n, nb.config.NUMBA_NUM_THREADS))
    return before


def default_sizes(device, cache: int) -> tuple[int, int]:
    """``(copy bytes, rotation bytes)``: the floor's copy buffer and the input sets' total. Each
    spans twice the last-level cache ``cache``, so the copy's two buffers (and the sets cycled
    through) cover four times it and every pass reads memory; the copy at least 256 MiB on the
    CPU and 1 GiB on CUDA, the sets at least 64 MiB, and on the CPU neither above 1 GiB: a VM
    may report its host's whole cache (480 MiB on this project's Intel VM, where 4x the cache a
    buffer made a 3.8 GB copy whose allocation took 20-60 s)."""
    if str(device).startswith("cuda"):
        return max(1 << 30, 2 * cache), max(64 << 20, 2 * cache)
    return min(max(256 << 20, 2 * cache), 1 << 30), min(max(64 << 20, 2 * cache), 1 << 30)


def run(s: Settings, on_config=None, on_start=None) -> list[dict]:
    """Every configuration of ``s``; ``on_start(cfg)`` before each, ``on_config(cfg, cfg_rows,
    rows_so_far)`` after each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = s.threads or cores
    cache = floors.cache_bytes(s.device)
    default_floor, default_rotate = default_sizes(s.device, cache)
    floor_bytes = int(s.floor_mb * 2 ** 20) if s.floor_mb else default_floor
    if s.rotate_mb is None:
        s = replace(s, rotate_mb=default_rotate / 2 ** 20)
    info = meta.machine_meta(Path(__file__).resolve().parents[2],
                               packages=("scangen", "torch", "numpy", "numba", "triton"), device=s.device)
    base = {**{k: info.get(k) for k in ("date", "host", "cpu", "gpu", "cores", "commit", "scangen", "python",
                                        "torch", "numpy", "numba", "triton")},
            "device": s.device, "threads": threads, "cache_MiB": cache / 2 ** 20, "floor_MiB": floor_bytes / 2 ** 20}
    before = _set_threads(threads)
    floor = floors.DeviceCopyFloor(floor_bytes, s.device) if s.device == "cuda" else \
        floors.CopyFloor(floor_bytes, threads)
    rows = []
    try:
        for cfg in configurations(s):
            if on_start:
                on_start(cfg)
            try:
                cfg_rows = measure(cfg, s, floor, base)
            except Exception as exc:  # noqa: BLE001  (inputs that could not be drawn or moved)
                cfg_rows = [{**base, "algo": cfg.algo, "N": cfg.N, "T": cfg.T, "dtype": cfg.dtype,
                             "layout": cfg.layout, "impl": "scangen", "check": "error",
                             "note": f"configuration: {timing.short_error(exc)}"}]
            rows += cfg_rows
            if on_config:
                on_config(cfg, cfg_rows, rows)
    finally:
        floor.close()
        _set_threads(*before)
    return rows


# ---------------------------------------------------------------------------------------------
# the command


def main(args) -> int:
    """``scangen bench``: 0 when every check passed, 1 when one failed or raised."""
    from . import report
    if args.from_csv:
        rows = report.read_csv(args.from_csv)
        if not rows:
            raise ValueError(f"{args.from_csv}: no rows")
        print(report.header(rows) + "\n" + report.table(rows))
        if args.plot:
            report.plot(rows, args.plot)
            print(f"wrote {args.plot}")
        return 0
    s = settings_from_args(args)
    if args.plot:
        report.require_matplotlib()  # before measuring, not after
    if s.device == "cpu" and (s.threads or 2) > 1 and "OMP_WAIT_POLICY" not in os.environ:
        print("note: several threads; OMP_WAIT_POLICY=PASSIVE in the environment keeps torch's and numba's "
              "idle threads from spinning on the cores the next implementation needs", file=sys.stderr)
    progress = report.Progress(len(configurations(s)))

    def on_config(cfg, cfg_rows, rows):
        if len(rows) == len(cfg_rows) and rows[0].get("copy_GBps"):  # the first: the floor is known
            progress.write(report.header(rows))
        progress.done(report.config_line(cfg_rows))
        if args.csv:
            report.write_csv(args.csv, rows)

    rows = run(s, on_config, on_start=lambda cfg: progress.start(cfg.label))
    progress.close()
    print("\n" + report.table(rows))
    if args.csv:
        print(f"wrote {args.csv}")
    if args.plot:
        report.plot(rows, args.plot)
        print(f"wrote {args.plot}")
    bad = report.failures(rows)
    for line in bad:
        print(f"CHECK FAILED (not timed): {line}" if " check failed: " in line else f"ERROR (not timed): {line}")
    return 1 if bad else 0
