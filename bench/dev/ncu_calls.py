#!/usr/bin/env python3
"""Call one op of a folder of generated modules a few times over rotated inputs, for Nsight
Compute (the device image has ``ncu``) to profile its kernels: DRAM bytes, L2 hit rates and the
kernel's duration, caches flushed before each profiled launch (ncu's default).

    M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
    PYTHONPATH=. ncu --kernel-name regex:lookback --launch-skip 4 --launch-count 2 --metrics $M \\
        --csv --log-file "$OUT/ncu.csv" python3 bench/dev/ncu_calls.py ab_base gae 8x262144

The folder is one that ``module_ab.py`` takes (git-ignored ``ab_*``, carried to the device).
bench/NOTES.md open question 18 used it (results/h200-2026-12-04-au-ncu-*.csv).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from module_ab import base_function  # bench/dev, beside this script
from scangen.testing import make_inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a folder of generated modules")
    ap.add_argument("algo", help="the op, e.g. gae")
    ap.add_argument("shape", help="NxT")
    ap.add_argument("--calls", type=int, default=8)
    args = ap.parse_args()
    N, T = map(int, args.shape.split("x"))
    fn = base_function(args.folder, args.algo, Path(tempfile.mkdtemp()), tag=args.folder.name)
    sets = [make_inputs(args.algo, N, T, seed=i, device="cuda", A=8) for i in range(4)]
    for i in range(args.calls):
        fn(**sets[i % 4])
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
