#!/usr/bin/env python3
"""What the forward-AD and torch.func checks at the top of every call cost on the host: full
calls (launch included) with the checks as shipped against the same calls with them stubbed
out, interleaved in one process, medians of per-call wall time over blocks of calls.

    PYTHONPATH=. python3 bench/dev/call_checks_ab.py [--device cuda] [--calls 2000] [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import time
import types

import torch

import scangen
from scangen.runtime import ops
from scangen.testing import make_inputs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shapes", default="4096x128,128x1024")
    ap.add_argument("--algos", default="gae,vtrace,eligibility_traces")
    args = ap.parse_args()
    shipped = (ops._forward_ad, ops._peek_interpreter_stack)
    stubbed = (types.SimpleNamespace(_current_level=-1), lambda: None)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print(f"device {args.device} ({torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'})"
          f", torch {torch.__version__}")
    for shape in args.shapes.split(","):
        n, t = map(int, shape.split("x"))
        for algo in args.algos.split(","):
            fn = getattr(scangen, f"compute_{algo}")
            inputs = make_inputs(algo, n, t, seed=0, device=args.device)
            for _ in range(50):
                fn(**inputs)
            sync()
            times = {"shipped": [], "stubbed": []}
            for r in range(args.rounds):
                for name, (fwad, peek) in (("shipped", shipped), ("stubbed", stubbed))[::1 - 2 * (r % 2)]:
                    ops._forward_ad, ops._peek_interpreter_stack = fwad, peek
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        fn(**inputs)
                    sync()
                    times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
            ops._forward_ad, ops._peek_interpreter_stack = shipped
            a, b = statistics.median(times["shipped"]), statistics.median(times["stubbed"])
            print(f"{algo:20s} {shape:10s} shipped {a:7.2f} us  stubbed {b:7.2f} us  {a / b:.3f}x")


if __name__ == "__main__":
    main()
