"""Time-major against rows on CUDA, one process: for each built-in and shape, the same inputs
stored ``[N, T]`` (rows) and ``[T, N]`` (time-major, ``time_dim=0``), each call captured 20 times
in one CUDA graph over rotated input sets (3x the L2 or more), the two graphs replayed
interleaved (issue 22's target: time-major at most 1.3x the rows device time). The time-major
outputs are checked against the rows outputs first. ``--baseline`` also captures the
time-major call under other settings of the dispatch rule (module constants, e.g.
``scangen.runtime.launch.LANES_ROWS_A_WARP=16``), replayed beside the two: a rule change A/B in
one process.

    PYTHONPATH=. python3 bench/dev/layout_ab.py --out "$OUT" [--shapes 4096x128,...] [--algos gae,...]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import platform
import time
from pathlib import Path

import torch

import scangen
from scangen.benchmark.floors import cache_bytes
from scangen.benchmark.inputs import tensor_bytes
from scangen.benchmark.timing import captured, device_interleaved
from scangen.testing.helpers import make_inputs, time_major_buffers

ALGOS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
         "eligibility_traces", "episodic_prefix_sum", "masked_gae")
SHAPES = "4096x128,128x1024,32768x16,16384x64,1024x1024,16384x1024,256x8192,64x65536"
CALLS = 20


def max_diff(rows_out, tm_out) -> float:
    """The largest difference between a call's rows outputs and its time-major ones."""
    as_tuple = [o if isinstance(o, tuple) else (o,) for o in (rows_out, tm_out)]
    return max(float((p - q.transpose(0, 1)).abs().max()) for p, q in zip(*as_tuple))


def set_constants(spec: str) -> list:
    """Give the module constants of ``spec`` ("pkg.mod.NAME=int,...") those values (cast to each
    constant's type); returns ``(module, name, old value)`` for each, in order."""
    old = []
    for item in filter(None, spec.split(",")):
        path, value = item.split("=")
        mod, name = path.rsplit(".", 1)
        m = importlib.import_module(mod)
        old.append((m, name, getattr(m, name)))
        kind = type(getattr(m, name))
        # bool("0") is True: booleans read as integers
        setattr(m, name, bool(int(value)) if kind is bool else kind(value))
    return old


@contextlib.contextmanager
def settings(spec: str):
    """Within the block, the module constants of ``spec`` ("pkg.mod.NAME=int,...") take those
    values, and calls make fresh plans (runtime.config.fresh_plans)."""
    from scangen.runtime import config
    old = set_constants(spec)
    try:
        with config.fresh_plans():
            yield
    finally:
        for m, name, v in reversed(old):
            setattr(m, name, v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--tag", default="layout-ab")
    ap.add_argument("--baseline", default="",
                    help="time-major also under these settings, e.g. "
                         "scangen.runtime.launch.LANES_ROWS_A_WARP=16 (module constants)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = cache_bytes(dev)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), host=platform.node(),
                gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=__import__("triton").__version__, argv=" ".join(__import__("sys").argv))
    rows = []
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        for algo in args.algos.split(","):
            fn = getattr(scangen, f"compute_{algo}")
            base = make_inputs(algo, N, T, seed=0, device=dev, A=8)
            set_bytes = tensor_bytes(base)
            k = max(1, min(16, math.ceil(3 * l2 / set_bytes), int(8e9 // set_bytes)))
            sets = [base] + [{a: v.clone() if torch.is_tensor(v) else v for a, v in base.items()}
                             for _ in range(k - 1)]
            tm_sets = [time_major_buffers(s) for s in sets]
            r_out = fn(**sets[0])
            t_out = fn(**tm_sets[0], time_dim=0)
            diff = max_diff(r_out, t_out)
            g_rows, _ = captured([lambda s=s: fn(**s) for s in sets], CALLS)
            g_tm, _ = captured([lambda s=s: fn(**s, time_dim=0) for s in tm_sets], CALLS)
            graphs = {"rows": g_rows.replay, "tm": g_tm.replay}
            if args.baseline:
                with settings(args.baseline):
                    diff = max(diff, max_diff(r_out, fn(**tm_sets[0], time_dim=0)))
                    g_base, _ = captured([lambda s=s: fn(**s, time_dim=0) for s in tm_sets], CALLS)
                graphs["base"] = g_base.replay
            t = device_interleaved(graphs, rounds=args.rounds,
                                   warmup_ms=args.rep_ms / 4, rep_ms=args.rep_ms)
            r_us, t_us = (t[s].median_s * 1e6 / CALLS for s in ("rows", "tm"))
            row = dict(algo=algo, shape=shape, rows_us=r_us, tm_us=t_us, ratio=t_us / r_us,
                       sets=k, max_abs_diff=diff)
            extra = ""
            if args.baseline:
                row["base_us"] = b_us = t["base"].median_s * 1e6 / CALLS
                extra = f"  baseline {b_us:8.2f} us {b_us / r_us:5.2f}x"
            rows.append(row)
            print(f"{algo:20s} {shape:10s} rows {r_us:8.2f} us  time-major {t_us:8.2f} us  "
                  f"{t_us / r_us:5.2f}x{extra}  diff {diff:.1e}", flush=True)
            del sets, tm_sets, g_rows, g_tm, graphs
            torch.cuda.empty_cache()
        write(out, args.tag, meta, rows)


def write(out, tag, meta, rows):
    (out / f"{tag}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    ok = sum(r["ratio"] <= 1.3 for r in rows)
    based = any("base_us" in r for r in rows)  # a --baseline run
    lines = [f"# Time-major against rows ({meta['gpu']}, torch {meta['torch']}, Triton "
             f"{meta['triton']}, {meta['date']})", "", f"`{meta['argv']}`", "",
             f"Device time: one of {CALLS} calls captured in a CUDA graph over rotated input sets, "
             "the two layouts' graphs replayed interleaved (do_bench medians). fp32. "
             f"Within 1.3x: {ok} of {len(rows)}.", "",
             "| algo | N x T | rows us | time-major us | time-major / rows | "
             + ("baseline us | " if based else "") + "max diff |",
             "|---|---|---|---|---|" + ("---|" if based else "") + "---|"]
    lines += [f"| {r['algo']} | {r['shape']} | {r['rows_us']:.2f} | {r['tm_us']:.2f} | "
              f"{r['ratio']:.2f} | " + (f"{r['base_us']:.2f} | " if based else "")
              + f"{r['max_abs_diff']:.1e} |" for r in rows]
    (out / f"{tag}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
