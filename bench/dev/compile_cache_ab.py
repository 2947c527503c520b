"""``scangen.compile`` of a spec already in the cache, in a fresh process: through the spec index
(no SymPy, no rendering) against the full path (the index removed before the process starts, so
the spec is validated and rendered again and the committed entry reused, as every compile did
before the index).

    python bench/dev/compile_cache_ab.py [--spec examples/ema_reset.yaml] [--rounds 9]

Each round starts one process a side, in alternating order (the two cannot share a process:
the first compile of a process is what is timed), each timing ``import scangen``,
``scangen.compile`` and the first call (torch backend off: the numba backend, its kernel from
numba's disk cache) with ``time.perf_counter``; prints the medians and their ratio, and the
machine. Results: bench/results/cpu-*-compile-index.txt.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
import scangen
t1 = time.perf_counter()
fn = scangen.compile(sys.argv[1], cache_dir=sys.argv[2])
t2 = time.perf_counter()
x = torch.randn(8, 256)
starts = torch.rand(8, 256) < 0.1
fn(x, starts)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "compile": t2 - t1, "first_call": t3 - t2,
                  "sympy": "sympy" in sys.modules}))
"""


def child(spec: str, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SCANGEN_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    out = subprocess.run([sys.executable, "-c", CHILD, spec, str(cache)], env=env,
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "examples" / "ema_reset.yaml"))
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    import torch

    import scangen
    cache = Path(tempfile.mkdtemp(prefix="scangen-compile-ab-"))
    first = child(args.spec, cache)  # builds the entry and the numba cache
    runs = {"index": [], "full": []}
    for r in range(args.rounds):
        for side in (("index", "full") if r % 2 == 0 else ("full", "index")):
            if side == "full":
                for p in cache.glob("spec-*.json"):
                    p.unlink()
            got = child(args.spec, cache)
            assert got["sympy"] is (side == "full"), (side, got)
            runs[side].append(got)
    print(f"# scangen.compile of a cached spec in a fresh process: spec index against full path")
    print(f"# {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; python {platform.python_version()}, torch {torch.__version__}, "
          f"scangen {scangen.__version__}; {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
    print(f"# {Path(args.spec).name}, {args.rounds} rounds, one process a side a round, "
          f"alternating; the first build (not timed in the table): compile "
          f"{first['compile']:.3f} s, first call {first['first_call']:.3f} s")
    print("| phase | full path s (median) | spec index s (median) | index / full |")
    print("|---|---|---|---|")
    for phase in ("import", "compile", "first_call"):
        full = statistics.median(g[phase] for g in runs["full"])
        index = statistics.median(g[phase] for g in runs["index"])
        print(f"| {phase} | {full:.3f} | {index:.3f} | {index / full:.2f}x |")


if __name__ == "__main__":
    main()
