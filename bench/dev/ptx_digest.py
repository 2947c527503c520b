"""Digest of the PTX every generated Triton kernel compiles to, for sm_90, with no GPU.

For refactors of the Triton template that should not change the machine code (moving code into
``@triton.jit`` helpers, which Triton inlines): run it before and after and compare. Equal
digests mean the same PTX, line for line, once the debug lines (``.loc``, ``.file``, comments
and the ``.debug_*`` sections, which name source lines) are left out; then the change needs no
timing on the device. A differing case writes both PTX files for a diff with ``--ptx DIR``.

    python bench/dev/ptx_digest.py --out /tmp/before.json [--only gae,vtrace] [--jobs 2]
    python bench/dev/ptx_digest.py --out /tmp/after.json --compare /tmp/before.json --ptx /tmp/ptx

The cases: tests/test_offline_compile.py's (each family, lean entries, fp64 with absent inputs
and general strides, the row-tile look-back, the GROUPED order) and the time-major lane tiles
(LANES 1 and 2, warps splitting the steps), each module of scangen.generated.
"""
import argparse
import hashlib
import importlib
import json
import os
import pkgutil
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CASES = {  # name: scangen.testing.compile_case keywords
    "stream-short": dict(family="stream", block_n=64, block_t=32),
    "stream-long": dict(family="stream", block_n=1, block_t=1024),
    "stream-one-chunk": dict(family="stream", block_n=1, block_t=1024, one_chunk=True),
    "lookback": dict(family="lookback", block_n=1, block_t=1024),
    "lookback-pid": dict(family="lookback", block_n=1, block_t=1024, lb_pid=True),
    "persist-long": dict(family="persist", block_n=1, block_t=1024),
    "persist-fp64-general": dict(family="persist", block_n=2, block_t=256, general=True),
    "stream-fp64-general": dict(family="stream", block_n=4, block_t=256, general=True),
    "lookback-fp64-general": dict(family="lookback", block_n=1, block_t=1024, general=True),
    "stream-lean": dict(family="stream", block_n=64, block_t=32, lean=True),
    "persist-lean": dict(family="persist", block_n=1, block_t=1024, lean=True),
    "lookback-lean": dict(family="lookback", block_n=1, block_t=1024, lean=True),
    "lookback-rows": dict(family="lookback", block_n=16, block_t=64),
    "lookback-rows-tm": dict(family="lookback", block_n=32, block_t=64, time_major=True),
    "stream-tm-lanes": dict(family="stream", block_n=32, block_t=64, time_major=True, lanes=1),
    "stream-tm-lanes2": dict(family="stream", block_n=32, block_t=64, time_major=True, lanes=2),
    "stream-tm-lane-warps": dict(family="stream", block_n=32, block_t=128, time_major=True,
                                 lanes=1, lane_warps=4),
    "lookback-tm-lane-warps": dict(family="lookback", block_n=32, block_t=128, time_major=True,
                                   lanes=1, lane_warps=4),
    "stream-grouped": dict(family="stream", block_n=64, block_t=32, grouped=True),
    "lookback-grouped": dict(family="lookback", block_n=1, block_t=1024, grouped=True),
    "persist-grouped": dict(family="persist", block_n=1, block_t=1024, grouped=True),
}


def normalise(ptx: str) -> str:
    """The PTX without what names source lines: debug sections, .loc/.file lines, comments."""
    ptx = re.split(r"^\s*\.section\s+\.debug", ptx, maxsplit=1, flags=re.M)[0]
    keep = []
    for line in ptx.splitlines():
        s = line.strip()
        if not s or s.startswith((".loc", ".file", "//", "$L__func_end", "$L__tmp")):
            continue
        keep.append(line.split("//")[0].rstrip())
    return "\n".join(keep) + "\n"


def compile_one(job):
    name, case = job
    os.environ.pop("TRITON_INTERPRET", None)
    from scangen.testing import compile_case
    module = importlib.import_module(f"scangen.generated.{name}")
    kw = dict(CASES[case])
    if kw.get("grouped") and not module.OP.kernels.grouped:
        return name, case, None, None
    try:
        c = compile_case(module, kw.pop("family"), **kw)
    except Exception as exc:  # a case this op cannot take is recorded, not fatal
        msg = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        return name, case, msg, None
    ptx = normalise(c.asm["ptx"])
    return name, case, hashlib.sha256(ptx.encode()).hexdigest()[:16], ptx


def main():
    import scangen.generated
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON of digests to write")
    ap.add_argument("--compare", help="JSON of an earlier run: report the cases that differ")
    ap.add_argument("--ptx", help="folder for the normalised PTX of differing cases (with --compare)"
                    " or of every case")
    ap.add_argument("--only", help="comma-separated module names (default: every op)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    mods = sorted(m.name for m in pkgutil.iter_modules(scangen.generated.__path__)
                  if not m.name.endswith(("_numba", "_triton")))
    if args.only:
        mods = [m for m in mods if m in args.only.split(",")]
    jobs = [(m, c) for m in mods for c in CASES]
    old = json.loads(Path(args.compare).read_text())["digests"] if args.compare else None
    import triton
    digests, differ = {}, []
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, case, digest, ptx in pool.map(compile_one, jobs):
            if digest is None:
                continue
            key = f"{name}/{case}"
            digests[key] = digest
            changed = old is not None and old.get(key) != digest
            if changed:
                differ.append(key)
            if args.ptx and ptx and (old is None or changed):
                Path(args.ptx).mkdir(parents=True, exist_ok=True)
                Path(args.ptx, key.replace("/", "__") + ".ptx").write_text(ptx)
            print(f"{key:55s} {digest}{'  DIFFERS' if changed else ''}", flush=True)
    Path(args.out).write_text(json.dumps({"triton": triton.__version__,
                                          "digests": digests}, indent=1, sort_keys=True))
    if old is not None:
        missing = sorted(set(old) - set(digests))
        print(f"\n{len(digests)} cases, {len(differ)} differ, {len(missing)} missing")
        for key in differ + missing:
            print("  ", key, old.get(key), "->", digests.get(key))
        sys.exit(1 if differ or missing else 0)


if __name__ == "__main__":
    main()
