"""CPU benchmark (issue 19): scangen's numba backend against its torch path, an SB3-style numpy
loop, a verl-style torch loop, TorchRL's GAE and a hand-written numba loop, beside the copy floor.

    python bench/cpu.py --quick                        # GAE and V-trace, 3 shapes, rows, 1 thread
    python bench/cpu.py                                # the full grid: 8 algos x 8 shapes x 2 layouts, 1 and all threads
    python bench/cpu.py --algos gae,masked_gae --shapes 4096x128,1024x1024 --layouts rows,time-major --threads 1,all

One process; in every configuration the implementations (and two 256 MB copies, the floor)
are timed round-robin (scangen.benchmark.timing.interleaved beside floors.CopyFloor), each
result checked first against the float64 reference and the float64 oracle (the hand loop run on
float64 copies; scangen.benchmark.checks). The baselines are in bench/cpu_baselines.py and
bench/hand_numba.py, the summary in bench/cpu_report.py. Results:
``bench/results/cpu-<date>-<host>.csv`` (one row per implementation and configuration) and a
markdown summary beside it, rewritten after every configuration.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]
# torch's and numba's OpenMP teams live side by side in this process; spinning after a parallel
# region (libgomp's default), one team's idle threads take the cores from the next
# implementation in the round-robin. Set OMP_WAIT_POLICY yourself to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
import torch  # noqa: E402

import cpu_baselines as B  # noqa: E402
import scangen  # noqa: E402
from cpu_report import fresh_text, progress_line, render  # noqa: E402
from scangen import testing  # noqa: E402
from scangen.benchmark.checks import FORWARD, span_ratio, window  # noqa: E402
from scangen.benchmark.floors import CopyFloor  # noqa: E402
from scangen.benchmark.inputs import apply_no_trunc, as_tuple, tensor_bytes, time_slice  # noqa: E402
from scangen.benchmark.meta import host_tag, machine_meta, run_child, write_csv  # noqa: E402
from scangen.benchmark.timing import checked, cycling, interleaved  # noqa: E402
from scangen.testing import reference  # noqa: E402

ALGOS = tuple(testing.ALGORITHMS)
SHAPES = ((4, 128), (1, 2048), (8, 2048), (4096, 128), (1024, 1024), (256, 4096), (64, 16384), (1, 1048576))
QUICK = dict(algos="gae,vtrace", shapes="8x2048,4096x128,1024x1024", layouts="rows", threads="1", rounds=5)
# GAE computes both outputs in every implementation (SB3, verl and TorchRL all return both);
# the others use the ops' default outputs.
OUTPUTS = {"compute_gae": ("advantages", "returns")}
# per-step loops (one Python iteration per step) are timed over a window of T past --loop-max-t
BASELINES = {
    "numpy_loop": ({"compute_gae": B.prepare_sb3_gae, "compute_lambda_returns": B.prepare_numpy_lambda_returns,
                    "compute_discounted_returns": B.prepare_numpy_discounted_returns}, True),
    "verl_loop": ({"compute_gae": B.prepare_verl_gae, "compute_masked_gae": B.prepare_verl_masked_gae}, True),
    "torchrl_vec": ({"compute_gae": B.prepare_torchrl_vec_gae}, False),
    "torchrl_loop": ({"compute_gae": B.prepare_torchrl_gae}, True),
}
COLUMNS = ("date", "commit", "host", "algo", "N", "T", "elems", "layout", "threads", "impl", "median_ms",
           "min_ms", "max_ms", "rounds", "n_inner", "ratio_to_numba_backend", "pct_of_floor", "floor_ms",
           "copy_GBps", "bytes", "first_call_ms", "check_ref", "check_oracle", "ok", "estimated", "load1",
           "oracle_vs_ref", "note")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"preset: {QUICK} (explicit options win)")
    p.add_argument("--algos", help="comma list (gae or compute_gae); default all eight")
    p.add_argument("--shapes", help="comma list of NxT; default " + ",".join(f"{n}x{t}" for n, t in SHAPES))
    p.add_argument("--layouts", help="rows,time-major (default both)")
    p.add_argument("--threads", help="comma list of counts or 'all' (default 1,all)")
    p.add_argument("--rounds", type=int, help="round-robin rounds per configuration (default 7)")
    p.add_argument("--sample-ms", type=float, default=20.0, help="length of one timed sample (a block of calls)")
    p.add_argument("--rotate-mb", type=float, default=128.0,
                   help="clone input sets until they total this (rotated between calls, so inputs come from memory)")
    p.add_argument("--max-sets", type=int, default=32)
    p.add_argument("--floor-mb", type=int, default=256, help="size of the copy that measures the bandwidth")
    p.add_argument("--loop-max-t", type=int, default=16384,
                   help="per-step loops with longer T are timed over their last (first) this many steps, scaled")
    p.add_argument("--ref-rows", type=int, default=256)
    p.add_argument("--ref-max-t", type=int, default=2048, help="the float64 reference covers at most this window of T")
    p.add_argument("--term-rate", type=float, default=0.05)
    p.add_argument("--trunc-rate", type=float, default=0.05,
                   help="0: no truncateds passed (GAE / V-trace get last_value)")
    p.add_argument("--actions", type=int, default=8, help="Retrace's action count")
    p.add_argument("--fresh-shape", default="4096x128", help="shape of the fresh-process first call")
    p.add_argument("--no-fresh", action="store_true", help="skip the fresh-process first calls")
    p.add_argument("--out", default=str(HERE / "results"), help="directory of the CSV and the summary")
    p.add_argument("--tag", default=None, help="file name tag (default: the host name)")
    args = p.parse_args(argv)
    preset = QUICK if args.quick else dict(algos=None, shapes=None, layouts="rows,time-major", threads="1,all",
                                            rounds=7)
    for k, v in preset.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.algos = [a if a.startswith("compute_") else f"compute_{a}" for a in args.algos.split(",")] \
        if args.algos else list(ALGOS)
    unknown = set(args.algos) - set(ALGOS)
    if unknown:
        p.error(f"unknown algos {sorted(unknown)}")
    args.shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")] \
        if args.shapes else list(SHAPES)
    args.layouts = args.layouts.split(",")
    if set(args.layouts) - {"rows", "time-major"}:
        p.error("layouts: rows, time-major")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.threads = sorted({cores if t == "all" else int(t) for t in args.threads.split(",")})
    args.fresh_shape = tuple(int(x) for x in args.fresh_shape.lower().split("x"))
    return args


# ---------------------------------------------------------------------------------------------
# inputs and expected values


def draw(algo, N, T, args):
    """make_inputs' arguments for one shape, fp32 rows; without truncations as bench/bench.py."""
    kw = testing.make_inputs(algo, N, T, seed=0, dtype=torch.float64, trunc_rate=args.trunc_rate,
                             term_rate=args.term_rate, A=args.actions)
    return apply_no_trunc(algo, kw) if args.trunc_rate == 0 else kw


def as_dtype(kw, dtype):
    return {k: (v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}


class Expected:
    """The float64 reference (scangen.testing.reference) on the first ``ref_rows`` rows over a
    window of at most ``ref_max_t`` steps (scangen.benchmark.checks.window), and the float64
    oracle: the hand loop on float64 copies, every row and step (itself checked against the
    reference). ``check(outs, span)``: outputs covering steps ``span`` (loops timed over a
    window of T cover only it), float32 tolerances."""

    def __init__(self, algo, kw64, N, T, args):
        self.rows = min(N, args.ref_rows)
        self.span = window(algo, T, args.ref_max_t)
        ref_fn = reference.gae_advantages_and_returns if algo == "compute_gae" else reference.REFERENCES[algo]
        sub = {k: (v[:self.rows] if torch.is_tensor(v) else v) for k, v in time_slice(kw64, *self.span).items()}
        self.ref = as_tuple(ref_fn(**sub))
        self.oracle = tuple(torch.from_numpy(o) for o in B.prepare_hand(algo, kw64, "rows")())
        t64 = testing.tolerance(torch.float64)
        self.oracle_vs_ref = span_ratio(self.oracle, (0, T), self.ref, self.span, self.rows, t64)
        self.tol = testing.tolerance(torch.float32)

    def check(self, outs, span):
        outs = as_tuple(outs)
        ref = span_ratio(outs, span, self.ref, self.span, self.rows, self.tol)
        oracle = span_ratio(outs, span, self.oracle, (0, self.oracle[0].shape[1]), None, self.tol)
        return {"ref": ref, "oracle": oracle, "ok": ref <= 1.0 and oracle <= 1.0}


# ---------------------------------------------------------------------------------------------
# one configuration


def scangen_kw(kw, layout):
    """The op's arguments: [N, T] rows, or the time-major memory as [T, N(, K)] with time_dim=0."""
    if layout == "rows":
        return kw
    return {k: (v.transpose(0, 1) if torch.is_tensor(v) and v.dim() >= 2 else v) for k, v in kw.items()}


def scangen_thunk(algo, kw, layout, backend):
    """One call of the op (its outputs as it returns them: [T, N] for time-major inputs)."""
    op, skw = getattr(scangen, algo), scangen_kw(kw, layout)
    extra = dict(time_dim=0 if layout == "time-major" else -1, backend=backend)
    if algo in OUTPUTS:
        extra["outputs"] = OUTPUTS[algo]
    return lambda: op(**skw, **extra)


def scangen_check(exp, layout, T):
    if layout == "rows":
        return lambda out: exp.check(out, (0, T))
    return lambda out: exp.check(tuple(o.transpose(0, 1) for o in as_tuple(out)), (0, T))


def pinned(threads, restore):
    """(enter, leave) for timing.interleaved: the thread count of one candidate's blocks."""
    def set_to(n):
        torch.set_num_threads(n)
        numba.set_num_threads(n)
    return (lambda: set_to(threads)), (lambda: set_to(restore))


def candidates(algo, sets, layout, threads, exp, N, T, args):
    """Every implementation of one configuration, run once and checked."""
    full, sg_check = (0, T), scangen_check(exp, layout, T)
    out = [checked("numba_backend", cycling([scangen_thunk(algo, s, layout, "numba") for s in sets]), sg_check)]
    if threads > 1:  # the same op pinned to one thread (timing.interleaved's settings), for the scaling
        out.append(checked("numba_backend_1t", cycling([scangen_thunk(algo, s, layout, "numba") for s in sets]),
                           sg_check, note="numba backend pinned to 1 thread"))
    out.append(checked("torch_path", cycling([scangen_thunk(algo, s, layout, "torch") for s in sets]), sg_check))
    for name, (per_algo, per_step) in BASELINES.items():
        if algo not in per_algo or (name.startswith("torchrl") and not B.torchrl_available()):
            continue
        span, use = full, sets
        if per_step and T > args.loop_max_t:
            L = args.loop_max_t
            span = (0, L) if algo in FORWARD else (T - L, T)
            use = [time_slice(s, *span) for s in sets]
        note = f"timed over steps {span[0]}..{span[1] - 1}, x{T / (span[1] - span[0]):g}" if span != full else ""
        out.append(checked(name, cycling([per_algo[algo](s, layout) for s in use]),
                           lambda o, span=span: exp.check(o, span), scale=T / (span[1] - span[0]), note=note))
    hand_layout = "rows" if layout == "rows" or N == 1 else "time-major"
    out.append(checked("hand_numba", cycling([B.prepare_hand(algo, s, hand_layout) for s in sets]),
                       lambda o: exp.check(o, full), note=f"{hand_layout} driver"))
    return out


def run_config(algo, N, T, layout, threads, sets, nbytes, exp, floor, meta, args):
    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    cands = candidates(algo, sets, layout, threads, exp, N, T, args)
    fns = {c.name: c.fn for c in cands if c.ran}
    fns.update(floor.fns())
    settings = {"numba_backend_1t": pinned(1, threads)} if "numba_backend_1t" in fns else None
    timings = interleaved(fns, rounds=args.rounds, target_s=args.sample_ms / 1e3, settings=settings)
    bw, per_kind = floor.bandwidth(timings)
    floor_ms = nbytes / bw * 1e3
    base = {"date": meta["date"][:10], "commit": meta["commit"], "host": meta["host"], "algo": algo, "N": N,
            "T": T, "elems": N * T, "layout": layout, "threads": threads, "bytes": nbytes, "floor_ms": floor_ms,
            "copy_GBps": bw / 1e9, "load1": os.getloadavg()[0]}
    numba_ms = timings["numba_backend"].median_s * 1e3 if "numba_backend" in timings else math.nan
    rows = []
    for c in cands:
        t = timings.get(c.name)
        ms = t.median_s * 1e3 * c.scale if t else math.nan
        rows.append({**base, "impl": c.name, "median_ms": ms,
                     "min_ms": t.min_s * 1e3 * c.scale if t else None, "max_ms": t.max_s * 1e3 * c.scale if t else None,
                     "rounds": len(t.samples) if t else 0, "n_inner": t.n_inner if t else None,
                     "ratio_to_numba_backend": ms / numba_ms, "pct_of_floor": 100 * floor_ms / ms,
                     "first_call_ms": c.first_call_s * 1e3 if c.first_call_s is not None else None,
                     "check_ref": c.check.get("ref"), "check_oracle": c.check.get("oracle"),
                     "ok": bool(c.check.get("ok")) and c.ran, "estimated": c.scale != 1.0,
                     "note": "; ".join(x for x in (c.error, c.note) if x)})
    kinds = ", ".join(f"{k} {v / 1e9:.2f} GB/s" for k, v in per_kind.items())
    rows.append({**base, "impl": "floor", "median_ms": floor_ms, "ratio_to_numba_backend": floor_ms / numba_ms,
                 "pct_of_floor": 100.0, "ok": True, "estimated": False,
                 "note": f"bytes / best copy bandwidth ({kinds}; {args.floor_mb} MB copy, {threads} thread(s))"})
    return rows


def make_sets(kw32, layout, args):
    """The input set in its layout and clones of it up to --rotate-mb (at most --max-sets)."""
    kw = testing.as_time_major(kw32) if layout == "time-major" else {k: v for k, v in kw32.items()}
    nbytes = tensor_bytes([v for v in kw.values() if torch.is_tensor(v)])
    n = max(1, min(args.max_sets, int(args.rotate_mb * 2 ** 20 // max(nbytes, 1))))
    sets = [kw] + [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()} for _ in range(n - 1)]
    return sets, nbytes


# ---------------------------------------------------------------------------------------------
# fresh-process first call

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import scangen
t2 = time.perf_counter()
from scangen import testing
torch.set_num_threads({threads})
kw = testing.make_inputs({algo!r}, {N}, {T}, seed=0, dtype=torch.float32, A={A})
extra = {{}}
if {tm}:
    kw = {{k: (v.transpose(0, 1).contiguous() if torch.is_tensor(v) and v.dim() >= 2 else v) for k, v in kw.items()}}
    extra["time_dim"] = 0
t3 = time.perf_counter()
op = getattr(scangen, {algo!r})  # loads the op's generated module on first use
t4 = time.perf_counter()
op(**kw, backend="numba", **extra)
t5 = time.perf_counter()
op(**kw, backend="numba", **extra)
t6 = time.perf_counter()
print(json.dumps(dict(import_torch_s=t1 - t0, import_scangen_s=t2 - t1, lookup_s=t4 - t3, call_s=t5 - t4,
                      first_call_s=t5 - t3, second_call_s=t6 - t5)))
"""


def fresh_first_calls(args):
    """A child per algorithm and layout, twice: with an empty numba cache directory (numba
    compiles the kernels) and with the generated kernels' own cache (warm: this process has
    called every op it times)."""
    out = []
    N, T = args.fresh_shape
    with tempfile.TemporaryDirectory(prefix="scangen-numba-cold-") as cold:
        for algo in args.algos:
            for layout in args.layouts:
                code = CHILD.format(algo=algo, N=N, T=T, A=args.actions, threads=args.threads[0],
                                    tm=layout == "time-major")
                env = {"PYTHONPATH": str(ROOT)}
                runs = [run_child(code, cwd=str(ROOT), env={**env, "NUMBA_CACHE_DIR": f"{cold}/{algo}-{layout}"}),
                        run_child(code, cwd=str(ROOT), env=env)]
                out.append({"algo": algo, "layout": layout, "runs": runs})
                print(f"fresh process {algo} {layout}: cold cache " + fresh_text(runs[0]) + " | warm cache "
                      + fresh_text(runs[1]), flush=True)
    code = ("import json, time; import torch; t = time.perf_counter(); import numba; "
            "print(json.dumps(dict(import_numba_s=time.perf_counter() - t)))")
    return out, run_child(code, cwd=str(ROOT))


def numba_cache_state(algos):
    cache = ROOT / "generated" / "__pycache__"
    names = {a: a.removeprefix("compute_") + "_numba." for a in algos}
    files = [p.name for p in cache.glob("*.nbi")] if cache.is_dir() else []
    return {a: any(f.startswith(n) for f in files) for a, n in names.items()}


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    meta = machine_meta(ROOT)
    meta.update(torchrl_importable=B.torchrl_available(), numba_threading_layer=numba.config.THREADING_LAYER,
                settings=" ".join(f"{k}={v}" for k, v in sorted(vars(args).items()) if k not in ("quick",)))
    meta["numba_disk_cache_before_run"] = numba_cache_state(args.algos)
    meta["env"] = {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "NUMBA_", "SCANGEN_", "MKL_"))}
    meta["loadavg_start"] = os.getloadavg()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"cpu-{datetime.date.today().isoformat()}-{args.tag or host_tag()}"
    k = 1
    while (out_dir / f"{stem}.csv").exists():
        k += 1
        stem = f"cpu-{datetime.date.today().isoformat()}-{args.tag or host_tag()}-{k}"
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    print(f"# {meta['cpu']}, {meta['cores']} cores; torch {meta['torch']}, numba {meta['numba']}, numpy "
          f"{meta['numpy']}, torchrl {meta['torchrl']}; commit {meta['commit']}\n# writing {csv_path}", flush=True)
    floors = {n: CopyFloor(args.floor_mb << 20, n) for n in args.threads}
    rows, fresh, numba_import, t_start = [], [], None, time.perf_counter()
    n_cfg = len(args.algos) * len(args.shapes) * len(args.layouts) * len(args.threads)
    i = 0
    for algo in args.algos:
        for N, T in args.shapes:
            kw64 = draw(algo, N, T, args)
            exp = Expected(algo, kw64, N, T, args)
            kw32 = as_dtype(kw64, torch.float32)
            del kw64
            for layout in args.layouts:
                sets, in_bytes = make_sets(kw32, layout, args)
                total = in_bytes + len(exp.ref) * N * T * 4  # fp32 outputs
                for threads in args.threads:
                    i += 1
                    cfg_rows = run_config(algo, N, T, layout, threads, sets, total, exp, floors[threads], meta, args)
                    for r in cfg_rows:
                        r["oracle_vs_ref"] = exp.oracle_vs_ref
                    rows += cfg_rows
                    print(f"[{i}/{n_cfg} {time.perf_counter() - t_start:.0f}s] " + progress_line(cfg_rows),
                          flush=True)
                    write_csv(csv_path, rows, COLUMNS, meta)
                    md_path.write_text(render(meta, rows, fresh, numba_import, args))
                del sets
    if not args.no_fresh:
        fresh, numba_import = fresh_first_calls(args)
    for f in floors.values():
        f.close()
    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    try:
        meta["numba_threading_layer"] = numba.threading_layer()  # known once a parallel kernel ran
    except ValueError:
        pass
    meta["loadavg_end"] = os.getloadavg()
    write_csv(csv_path, rows, COLUMNS, meta)
    md = render(meta, rows, fresh, numba_import, args)
    md_path.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
