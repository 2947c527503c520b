#!/usr/bin/env python3
"""Built-in modules as generated at another revision against the checkout's, one process: each
call captured 20 times in one CUDA graph over rotated input sets (3x the L2 or more), the two
graphs replayed interleaved (device time), outputs compared first. For a change to specs or
templates that should not cost time (or should save it).

    mkdir -p ab_base && git archive <rev> generated | tar -x -C ab_base --strip-components=1
    PYTHONPATH=. python3 bench/dev/module_ab.py --base ab_base --out "$OUT" [--algos gae,...]
        [--shapes 16384x1024,...] [--time-major] [--new ab_new]

ab_base/ and ab_new/ are git-ignored: carry them to the device. ``--new``: a second folder of
modules in place of the checkout's (two spec variants against one base without a commit).
``--cpu``: the numba backend on CPU tensors instead, one thread (numba and torch), the two
callables timed interleaved on the host (PERF.md's method for a shared machine).
"""
from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

import scangen
from scangen import abi
from scangen.benchmark.floors import cache_bytes
from scangen.benchmark.inputs import as_tuple
from scangen.benchmark.suite import rotated
from scangen.benchmark.timing import captured, device_interleaved, interleaved
from scangen.testing import make_inputs, time_major_buffers

from rule_ab import variant  # bench/dev: name[:out+out][-input+input]

SHAPES = "4096x128,16384x64,1024x1024,16384x1024,64x65536"
CALLS = 20


def base_function(base: Path, algo: str, tmp: Path, tag: str = "base"):
    """``compute_<algo>`` of the module in ``base`` (with its ``_triton`` and ``_numba``
    companions), loaded under another name (``<algo>_<tag>``) beside the checkout's."""
    for suffix in ("", abi.TRITON_SUFFIX, abi.NUMBA_SUFFIX):
        (tmp / f"{algo}_{tag}{suffix}.py").write_text((base / f"{algo}{suffix}.py").read_text())
    module = abi.load_module(f"module_ab_{algo}_{tag}", tmp / f"{algo}_{tag}.py")
    return getattr(module, module.OP.function)


def _device_us(old, new, base_set, kw, rounds):
    """Each call captured CALLS times in one CUDA graph over rotated input sets (3x the L2 or
    more), the two graphs replayed interleaved: us per call, (old, new)."""
    sets, _ = rotated(base_set, 3 * cache_bytes(torch.device("cuda")), 16)
    g_new, _ = captured([lambda s=s, fn=new: fn(**s, **kw) for s in sets], CALLS)
    g_old, _ = captured([lambda s=s, fn=old: fn(**s, **kw) for s in sets], CALLS)
    t = device_interleaved({"base": g_old.replay, "new": g_new.replay}, rounds=rounds,
                           warmup_ms=5.0, rep_ms=20.0)
    del sets, g_new, g_old
    torch.cuda.empty_cache()
    return tuple(t[s].median_s * 1e6 / CALLS for s in ("base", "new"))


def _host_us(old, new, base_set, kw, rounds):
    """The two calls timed on the host, interleaved blocks of about 20 ms: us per call."""
    t = interleaved({"base": lambda: old(**base_set, **kw), "new": lambda: new(**base_set, **kw)},
                    rounds=max(rounds, 7))
    return tuple(t[s].median_s * 1e6 for s in ("base", "new"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="a folder of generated modules")
    ap.add_argument("--new", type=Path, default=None, help="a folder of generated modules (default: the checkout's)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--algos", default="gae,vtrace,lambda_returns,discounted_returns",
                    help="names, each optionally name[:out+out][-input+input], as rule_ab.py's")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--time-major", action="store_true", help="[T, N] inputs (time_dim=0), as layout_ab.py")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="numba backend, CPU tensors, one thread")
    ap.add_argument("--tag", default="module-ab")
    args = ap.parse_args()
    if args.cpu:
        import numba
        torch.set_num_threads(1)
        numba.set_num_threads(1)
        dev, machine = torch.device("cpu"), f"CPU {platform.machine()}, numba {numba.__version__}"
        what = "host time per call (numba backend, one thread), medians of interleaved blocks"
    else:
        dev, machine = torch.device("cuda"), torch.cuda.get_device_name()
        what = f"device time per call (one of {CALLS} in a CUDA graph), medians of interleaved replays"
    tmp = Path(tempfile.mkdtemp())
    kw = {"time_dim": 0} if args.time_major else {}
    if args.cpu:
        kw["backend"] = "numba"
    lines = [(f"# {args.tag}: {machine}, torch {torch.__version__}, triton "
              f"{__import__('triton').__version__}, {platform.node()}, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}"),
             (f"# base {args.base}, new {args.new or 'the checkout'}, layout "
              f"{'time-major' if args.time_major else 'rows'}; {what}")]
    for spec in args.algos.split(","):
        algo, kw_algo, drop = variant(spec, kw)
        new = (base_function(args.new, algo, tmp, "new") if args.new
               else getattr(scangen, f"compute_{algo}"))
        old = base_function(args.base, algo, tmp)
        for shape in args.shapes.split(","):
            N, T = map(int, shape.split("x"))
            base_set = make_inputs(algo, N, T, seed=0, device=dev, A=8)
            for name in drop:
                base_set.pop(name)
            base_set = time_major_buffers(base_set) if args.time_major else base_set
            diff = max(float((p - q).abs().max())
                       for p, q in zip(as_tuple(new(**base_set, **kw_algo)), as_tuple(old(**base_set, **kw_algo))))
            timed = _host_us if args.cpu else _device_us
            b_us, n_us = timed(old, new, base_set, kw_algo, args.rounds)
            line = (f"{spec:20s} {shape:>10s}  base {b_us:8.2f} us  new {n_us:8.2f} us  "
                    f"{n_us / b_us:5.3f}x  max diff {diff:.1e}")
            print(line, flush=True)
            lines.append(line)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.tag}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
