"""The benchmarks' timing library lives in the package (scangen/benchmark/timing.py), shared with
``scangen bench``; this module re-exports it so the scripts here import it as ``timing``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install

from scangen.benchmark.timing import *  # noqa: E402,F401,F403
