"""SB3's own ``compute_returns_and_advantage`` against scangen's buffer, on the CPU.

    python bench/dev/sb3_cpu.py --reps 31       # docs/integrations/sb3.md's table
    python bench/dev/sb3_cpu.py --threads 2 --reps 31 --backends torch,numba

All buffers hold the same random float32 data (5% episode starts); each timed call is one
``compute_returns_and_advantage``. SB3's buffer and scangen's (one per backend) run interleaved
in one process and the tables give medians, of thread CPU time and of wall time; every
buffer's advantages are checked against SB3's before timing.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]  # the checkout, for scangen

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import stable_baselines3  # noqa: E402
import torch  # noqa: E402
from stable_baselines3.common.buffers import RolloutBuffer as SB3Buffer  # noqa: E402

import scangen  # noqa: E402
from scangen.benchmark.meta import git_commit  # noqa: E402
from scangen.benchmark.timing import wall_and_cpu  # noqa: E402
from scangen.integrations.sb3 import RolloutBuffer as ScangenBuffer  # noqa: E402

SHAPES = ((2048, 1), (128, 4096), (2048, 64))  # n_steps x n_envs


def _filled(make, n_steps, n_envs, rate):
    rng = np.random.default_rng(0)  # the same data in every buffer
    b = make(n_steps, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), device="cpu",
             gamma=0.99, gae_lambda=0.95, n_envs=n_envs)
    b.rewards[:] = rng.standard_normal((n_steps, n_envs), dtype=np.float32)
    b.values[:] = rng.standard_normal((n_steps, n_envs), dtype=np.float32)
    b.episode_starts[:] = rng.random((n_steps, n_envs)) < rate
    last = torch.from_numpy(rng.standard_normal((n_envs, 1), dtype=np.float32))
    return b, last, rng.random(n_envs) < rate


def _time(buf, last, dones):
    """(CPU, wall) seconds of one call. With one torch thread all the work runs on this thread
    (numba's too), so its CPU time is what the call costs even while other processes share
    the cores; wall time also counts the time the thread waited for one."""
    wall, cpu = wall_and_cpu(lambda: buf.compute_returns_and_advantage(last, dones))
    return cpu, wall


def _load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=21, help="timed calls per buffer and shape")
    p.add_argument("--rate", type=float, default=0.05, help="episode-start rate")
    p.add_argument("--backends", default="torch,auto", help="scangen backends, comma-separated")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    backends = args.backends.split(",")
    try:
        import numba
        numba_version = numba.__version__
    except ImportError:
        numba_version = "absent"
    print(f"# {platform.machine()}, {torch.get_num_threads()} torch thread(s); python "
          f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"stable-baselines3 {stable_baselines3.__version__}, numba {numba_version}, scangen "
          f"{scangen.__version__} at {git_commit(ROOT) or 'n/a'}; load average before: {_load()}")
    rows = []
    for n_steps, n_envs in SHAPES:
        makers = [SB3Buffer] + [lambda *a, b=b, **k: ScangenBuffer(*a, backend=b, **k)
                                for b in backends]
        bufs = [_filled(m, n_steps, n_envs, args.rate) for m in makers]
        for b, last, dones in bufs:  # warm-up (plans, numba's compile) and check
            b.compute_returns_and_advantage(last, dones)
        ref = bufs[0][0].advantages
        scale = max(1.0, float(np.abs(ref).max()))
        for name, (b, _, _) in zip(backends, bufs[1:]):
            err = float(np.abs(ref - b.advantages).max()) / scale
            assert err < 2e-5, f"{n_steps}x{n_envs} {name}: advantages differ by {err:.2e} x scale"
        times = [[] for _ in bufs]
        for _ in range(args.reps):
            for t, args_ in zip(times, bufs):
                t.append(_time(*args_))
        rows.append(((n_steps, n_envs), [[statistics.median(x[k] for x in t) * 1e3 for k in (0, 1)]
                                         for t in times]))
    for k, clock in enumerate(("thread CPU time", "wall time")):
        print(f"\nmedian {clock} of {args.reps} calls (ms); in brackets SB3's time over scangen's")
        print("| n_steps x n_envs | SB3 | " + " | ".join(f"scangen {b}" for b in backends) + " |")
        print("| --- | ---: |" + " ---: |" * len(backends))
        for (n_steps, n_envs), med in rows:
            sb3 = med[0][k]
            cells = [f"{m[k]:.2f} ({sb3 / m[k]:.2f}x)" for m in med[1:]]
            print(f"| {n_steps} x {n_envs} | {sb3:.2f} | " + " | ".join(cells) + " |")
    print(f"\n# load average after: {_load()}")


if __name__ == "__main__":
    main()
