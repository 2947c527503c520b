"""bench/bench.py's baselines live in the package (scangen/benchmark/baselines.py), shared with
``scangen bench``; this module re-exports them so bench.py imports them as ``baselines``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

from scangen.benchmark.baselines import *  # noqa: E402,F401,F403
