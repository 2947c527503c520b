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
DIR/bench.json, DIR/bench.md and DIR/bench.csv are rewritten after every task. See bench/README.md.

This file is the command line and the run's loop; the timing, floors, checks, tasks and reports
are scangen.benchmark's (timing, floors, checks, inputs, gpu_tasks, gpu_report).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

T_START = time.perf_counter()  # the time budget counts from here (imports included)
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the checkout, for scangen
    sys.path.insert(0, str(ROOT))

YAML_STUBBED = False
if importlib.util.find_spec("yaml") is None:
    # scangen/__init__ imports scangen.compiler.spec, which imports yaml; the built-in ops never parse YAML
    _stub = types.ModuleType("yaml")
    _stub.__doc__ = "stub installed by bench/bench.py: pyyaml is not installed; the built-in ops do not need it"
    sys.modules["yaml"] = _stub
    YAML_STUBBED = True

import torch  # noqa: E402

import scangen  # noqa: E402
from scangen import testing as sg_testing  # noqa: E402
from scangen.benchmark import baselines, gpu_report  # noqa: E402
from scangen.benchmark.floors import gpu_floors  # noqa: E402
from scangen.benchmark.gpu_tasks import (  # noqa: E402
    DTYPES, Run, configurations, rec_key, stage_compile, stage_scangen, stages)
from scangen.benchmark.meta import git_commit  # noqa: E402
from scangen.benchmark.timing import CallTimer, first_line_error as short_err  # noqa: E402

try:
    import triton
except Exception:  # noqa: BLE001 - the CPU dry run works without Triton
    triton = None

ALGORITHMS = tuple(sg_testing.ALGORITHMS)
DEFAULT_SHAPES = ((4096, 128), (128, 1024), (32768, 16), (16384, 64), (1024, 1024), (16384, 1024),
                  (256, 8192), (64, 65536), (8, 262144), (1, 1048576))
DRY_SHAPES = ((4, 16), (3, 37), (2, 300), (1, 1100))


def log(msg):
    print(msg, flush=True)


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
    p.add_argument("--out", required=True, help="output directory (bench.json, bench.md, bench.csv)")
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


def timer_of(args):
    return CallTimer(args.cuda, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, call_ms=args.call_ms,
                     call_repeats=args.call_repeats)


# ---------------------------------------------------------------------------------------------
# the run

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
    # SCANGEN_REV: a copied tree's .git may be stale, the caller says which commit
    meta["git"] = git_commit(ROOT)
    return meta


def compile_warm_part(args):
    """A child of --compile-workers: compile (and call once) the torch.compile baseline of every
    n-th configuration, filling Inductor's caches, then exit. Nothing is timed or written."""
    part, parts = map(int, args.compile_warm_part.split("/"))
    run = Run(args, timer_of(args), T_START)
    for i, rec in enumerate(configurations(args)):
        if i % parts != part:
            continue
        try:
            kw = run.inputs(rec)
            torch._dynamo.reset()
            cfn = torch.compile(baselines.VECTORIZED[rec["algo"]], dynamic=False, fullgraph=True,
                                backend=args.compile_backend)
            cfn(**kw)
            run.timer.sync()
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


def main(argv=None):
    args = parse_args(argv)
    if args.compile_warm_part:
        torch.set_grad_enabled(False)
        compile_warm_part(args)
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    run = Run(args, timer_of(args), T_START)
    meta = collect_meta(args)
    log(f"scangen bench: {meta.get('gpu')} | torch {meta['torch']} | triton {meta.get('triton')} | "
        f"CUDA {meta.get('cuda')} | scangen {meta['scangen']} {meta.get('git') or ''}"
        + (" | pyyaml missing: stubbed" if YAML_STUBBED else ""))
    floors, run.floor_fn = gpu_floors(run.timer, args.device, args.copy_gib)
    run.floors = floors
    log(f"floors: {gpu_report.floors_line(floors)}")
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
                gpu_report.derive(r, floors)
            return gpu_report.write_outputs(out_dir, meta, floors, records, args)
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
                    run.timer.sync()
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
            log(gpu_report.progress_line(i, n_tasks, run, stage, rec))
        for key in [key for key, k in last_use.items() if k == k_stage]:
            run.masters.pop(key, None)
        for key in [key for key, k in last_ref.items() if k == k_stage]:
            run.refs.pop(key, None)
    md = save()
    print(md, flush=True)
    print("", flush=True)
    print(gpu_report.render_summary(meta, floors, records, args, out_dir), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
