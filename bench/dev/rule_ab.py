#!/usr/bin/env python3
"""A dispatch-rule change against the default, one process: for each built-in and shape, the
call captured 20 times in one CUDA graph over rotated input sets (3x the L2 or more) under the
default settings and again under ``--settings`` (module constants, as layout_ab.py's
``--baseline``: e.g. ``scangen.runtime.launch.MAXNREG=128``), the two graphs replayed
interleaved; outputs compared first.

    PYTHONPATH=. python3 bench/dev/rule_ab.py --settings scangen.runtime.launch.MAXNREG=128 \\
        --out "$OUT" [--shapes 8x262144,...] [--algos gae,...] [--time-major]
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

import scangen
from scangen.benchmark.floors import cache_bytes
from scangen.benchmark.inputs import as_tuple
from scangen.benchmark.suite import rotated
from scangen.benchmark.timing import captured, device_interleaved
from scangen.testing.helpers import make_inputs, time_major_buffers

from layout_ab import ALGOS, CALLS, settings  # bench/dev, beside this script


def variant(spec: str, kw: dict) -> tuple[str, dict, tuple]:
    """--algos entries: ``name[:out+out][-drop+drop]``, e.g. ``gae:advantages+returns`` (outputs=)
    or ``vtrace-truncateds+bootstrap_values`` (those inputs left out, to their defaults): the op's
    name, the call's keywords (``kw`` and outputs=) and the inputs to leave out."""
    spec, _, drop = spec.partition("-")
    algo, _, outs = spec.partition(":")
    return algo, {**kw, **({"outputs": tuple(outs.split("+"))} if outs else {})}, tuple(filter(None, drop.split("+")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", required=True, help="pkg.mod.NAME=int,... for the new side")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--shapes", default="256x8192,64x65536,8x262144,1x1048576")
    ap.add_argument("--algos", default=",".join(ALGOS), help="names, each optionally name[:out+out][-input+input] "
                    "(outputs asked for; inputs left to their defaults)")
    ap.add_argument("--time-major", action="store_true", help="[T, N] inputs (time_dim=0)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tag", default="rule-ab")
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = cache_bytes(dev)
    lines = [(f"# {args.tag}: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
              f"{__import__('triton').__version__}, {platform.node()}, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}"),
             (f"# default against {args.settings}, layout "
              f"{'time-major' if args.time_major else 'rows'}; device time per call (one of "
              f"{CALLS} in a CUDA graph), medians of interleaved replays")]
    for spec in args.algos.split(","):
        algo, kw, drop = variant(spec, {"time_dim": 0} if args.time_major else {})
        fn = getattr(scangen, f"compute_{algo}")
        for shape in args.shapes.split(","):
            N, T = map(int, shape.split("x"))
            base = make_inputs(algo, N, T, seed=0, device=dev, A=8)
            for name in drop:
                base.pop(name)
            sets, _ = rotated(time_major_buffers(base) if args.time_major else base, 3 * l2, 16)
            old_out = as_tuple(fn(**sets[0], **kw))
            g_old, _ = captured([lambda s=s: fn(**s, **kw) for s in sets], CALLS)
            with settings(args.settings):
                new_out = as_tuple(fn(**sets[0], **kw))
                g_new, _ = captured([lambda s=s: fn(**s, **kw) for s in sets], CALLS)
            diff = max(float((p - q).abs().max()) for p, q in zip(old_out, new_out))
            t = device_interleaved({"old": g_old.replay, "new": g_new.replay},
                                   rounds=args.rounds, warmup_ms=5.0, rep_ms=20.0)
            o_us, n_us = (t[s].median_s * 1e6 / CALLS for s in ("old", "new"))
            line = (f"{spec:20s} {shape:>10s}  default {o_us:8.2f} us  new {n_us:8.2f} us  "
                    f"{n_us / o_us:5.3f}x  max diff {diff:.1e}")
            print(line, flush=True)
            lines.append(line)
            del sets, g_old, g_new
            torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.tag}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
