"""The work of the developer GPU benchmark, ``bench/bench.py``: its configurations, its priority
stages and its two kinds of task (``args``: bench.py's parsed arguments).

A scangen task (:func:`stage_scangen`): inputs, one call checked against the float64 reference
and the float64 oracle (:class:`.checks.Expected`), then timed (do_bench and the host-timed loop
beside the empty launch, :class:`.timing.CallTimer`; a CUDA-graph replay with ``--graph``);
the per-step loop baseline checked and timed (or estimated from 32 steps). A compile task
(:func:`stage_compile`): torch.compile of the doubling-scan baseline, check, time, and scangen
re-timed beside it. Every failure is recorded in the configuration's record and the run goes on.
"""
from __future__ import annotations

import math
import statistics
import time
import traceback

import torch

import scangen

from . import baselines
from .checks import Expected
from .inputs import clone_set, cycler, draw_rows, gen_rows_for, rolled_inputs, slice_kw, tensor_bytes
from .timing import first_line_error

HAS_TRUNC = ("compute_gae", "compute_vtrace", "compute_retrace", "compute_lambda_returns",
             "compute_discounted_returns")
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
DTYPE_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


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


def rec_key(rec):
    return (rec["algo"], rec["N"], rec["T"], rec["dtype"], rec["trunc"])


class Run:
    """One run's state: its settings and timer, the time budget (counted from ``t_start``), the
    drawn rows and references kept between stages, the floors, and a fatal error if any."""

    def __init__(self, args, timer, t_start):
        self.args, self.timer, self.t_start = args, timer, t_start
        self.compile_s = 0.0
        self.masters = {}
        self.refs = {}
        self.fatal = None
        self.records = []
        self.floors = {}
        self.floor_fn = None  # the empty launch, timed beside each scangen call (paired_call_us)

    def elapsed(self):
        return time.perf_counter() - self.t_start

    def over_budget(self):
        return self.elapsed() > self.args.time_budget

    def master(self, rec):
        key = (rec["algo"], rec["N"], rec["T"], rec["trunc"])
        if key not in self.masters:
            a = self.args
            self.masters[key] = draw_rows(rec["algo"], rec["N"], rec["T"], rec["trunc"], gen_rows=a.gen_rows,
                                          gen_elems=a.gen_elems, seed=a.seed, actions=a.actions)
        return self.masters[key]

    def inputs(self, rec):
        """The configuration's inputs on the device (rows drawn once, rolled to N)."""
        return rolled_inputs(self.master(rec), rec["N"], rec["T"], DTYPES[rec["dtype"]], self.args.device,
                             self.args.layout)

    def on_error(self, rec, part, exc):
        rec[part]["error"] = first_line_error(exc)
        rec[part]["traceback"] = traceback.format_exc(limit=6)
        if "out of memory" in str(exc).lower() and self.args.cuda:
            torch.cuda.empty_cache()
        if not cuda_alive(self.args):
            self.fatal = (f"CUDA context lost after {rec['algo']} {rec['N']}x{rec['T']} {part}: "
                          f"{first_line_error(exc)}")


def prepare(run, rec, part):
    """Inputs on the device, the float64 expectations and the rotated copies, or None on failure
    (recorded under rec[part])."""
    args = run.args
    algo, N, T = rec["algo"], rec["N"], rec["T"]
    try:
        t0 = time.perf_counter()
        kw = run.inputs(rec)
        rec["gen_rows"] = gen_rows_for(N, T, args.gen_rows, args.gen_elems)
        rec["bytes_in"] = tensor_bytes(kw)
        rec[part]["inputs_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        exp = Expected(algo, kw, N, T, args.ref_rows, args.ref_max_t, baselines.VECTORIZED[algo],
                       ref=run.refs.get(rec_key(rec)), cuda=args.cuda)
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


def _floor(run, rec, out):
    rec["bytes_out"] = tensor_bytes(out)
    rec["bytes"] = rec["bytes_in"] + rec["bytes_out"]
    bw = run.floors.get("copy_bw_GBps")
    rec["floor_us"] = rec["bytes"] / (bw * 1e9) * 1e6 if bw else None


def stage_scangen(run, rec):
    """Stage A: one scangen call checked, then timed (do_bench and host-timed loop); the loop
    baseline checked and timed (or estimated from a few steps)."""
    args, tm = run.args, run.timer
    algo, N, T = rec["algo"], rec["N"], rec["T"]
    s, lp = rec["scangen"], rec["loop"]
    prep = prepare(run, rec, "scangen")
    if prep is None:
        return
    kw, exp, sets = prep
    try:
        op = getattr(scangen, algo)
        out, first_s = tm.timed_once(lambda: op(**kw, backend=args.backend))
        s["first_call_s"] = first_s  # includes Triton's JIT compile of this specialisation
        _floor(run, rec, out)
        s["check"] = exp.check(out)
        del out
        fn = cycler(op, sets, backend=args.backend)
        s["us"] = tm.device_us(fn)
        if run.floor_fn is not None:  # the empty launch timed beside the call, repeat by repeat
            s["call_us"], s["call_n"], s["floor_call_us"] = tm.paired_call_us(fn, run.floor_fn)
        else:
            s["call_us"], s["call_n"] = tm.call_us(fn)
        if args.graph and args.cuda:
            try:  # a failed capture is recorded, not counted as a scangen error
                s["graph_us"] = tm.graph_us(fn)
            except Exception as exc:  # noqa: BLE001
                s["graph_error"] = first_line_error(exc)
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "scangen", exc)
    if run.fatal:
        return
    loop = baselines.LOOPS[algo]
    try:
        if args.no_loop:
            lp["skipped"] = "--no-loop"
        elif T <= args.loop_max_t and (N, T) in args.loop_shapes and not run.over_budget():
            out, t1 = tm.timed_once(lambda: loop(**kw))
            lp["check"] = exp.check(out)
            del out
            times = [t1] + [tm.timed_once(lambda: loop(**kw))[1] for _ in range(2)]
            lp["us"] = statistics.median(times) * 1e6
            lp["method"] = "host-timed, median of 3 calls (each synchronised)"
        else:
            steps = min(T, 32)
            short = slice_kw(kw, N, slice(0, steps), device=args.device)
            loop(**short)
            _, t1 = tm.timed_once(lambda: loop(**short))
            lp["estimate_us"] = t1 / steps * T * 1e6
            lp["skipped"] = (f"T > {args.loop_max_t}" if T > args.loop_max_t else
                             "--quick" if (N, T) not in args.loop_shapes else "time budget")
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "loop", exc)
    exp.free()


def compiled(algo, args, fullgraph=True):
    """The doubling-scan baseline of ``algo`` under torch.compile (one graph per configuration)."""
    kw = {"fullgraph": True} if fullgraph else {}
    return torch.compile(baselines.VECTORIZED[algo], dynamic=False, backend=args.compile_backend, **kw)


def stage_compile(run, rec):
    """Stage B: the torch.compile'd doubling scan compiled (timed), checked and timed, with scangen
    re-timed beside it (the speedup uses this pair)."""
    args, tm = run.args, run.timer
    algo = rec["algo"]
    c = rec["compile"]
    prep = prepare(run, rec, "compile")
    if prep is None:
        return
    kw, exp, sets = prep
    try:
        torch._dynamo.reset()  # one cache entry per configuration: no recompile limit, no guard chains
        cfn = compiled(algo, args)
        t0 = time.perf_counter()
        try:
            out, _ = tm.timed_once(lambda: cfn(**kw))
        except Exception as exc:  # noqa: BLE001 - retry allowing graph breaks, and say so
            if not cuda_alive(args) or "out of memory" in str(exc).lower():
                raise
            c["fullgraph_error"] = first_line_error(exc)
            torch._dynamo.reset()
            cfn = compiled(algo, args, fullgraph=False)
            out, _ = tm.timed_once(lambda: cfn(**kw))
        c["compile_s"] = time.perf_counter() - t0
        run.compile_s += c["compile_s"]
        if rec.get("bytes") is None:
            _floor(run, rec, out)
        c["check"] = exp.check(out)
        del out
        fn = cycler(cfn, sets)
        c["us"] = tm.device_us(fn)
        c["call_us"], c["call_n"] = tm.call_us(fn)
    except Exception as exc:  # noqa: BLE001
        run.on_error(rec, "compile", exc)
    finally:
        torch._dynamo.reset()
        exp.free()
    if run.fatal or c.get("us") is None or rec["scangen"].get("error"):
        return
    try:  # scangen again, right beside it
        sfn = cycler(getattr(scangen, algo), sets, backend=args.backend)
        c["scangen_us"] = tm.device_us(sfn)
        c["scangen_call_us"], _ = tm.call_us(sfn)
    except Exception as exc:  # noqa: BLE001
        c["scangen_retime_error"] = first_line_error(exc)
