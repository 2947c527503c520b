"""TorchRL's own value estimators against scangen's drop-ins, on the CPU.

    python bench/dev/torchrl_cpu.py         # one thread, 4096 x 128, 5% terminations
    python bench/dev/torchrl_cpu.py --threads 2 --reps 31 --shape 1024x512

Each timed call is one estimator call on a TensorDict ``[B, T]`` holding float32 rewards and
precomputed values (``value_network=None``, so no critic runs: what is timed is the estimator;
V-trace still runs its actor), ``done == terminated`` at the given rate. The drop-ins run with
``backend=None`` (numba on CPU tensors, where numba is installed) and with ``backend="torch"``.
A second table times the numeric part alone: the function TorchRL's estimator calls by default
against the scangen op the drop-in calls. Every call runs once first (compiles included, outputs
checked against TorchRL's); then the calls of each table run interleaved, in one process, and
the tables give medians of wall time and of the calling thread's CPU time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]  # the checkout, for scangen

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.modules import ProbabilisticActor  # noqa: E402
from torchrl.objectives import value as trl  # noqa: E402
from torchrl.objectives.value import functional as trl_fn  # noqa: E402

from scangen.benchmark.meta import machine_meta  # noqa: E402
from scangen.benchmark.timing import wall_and_cpu  # noqa: E402
from scangen.integrations import torchrl as sg  # noqa: E402

BACKENDS = {"scangen": None, "scangen, torch": "torch"}


def _data(B, T, rate, seed=0):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(B, T, 1, generator=g) < rate
    return TensorDict({
        "obs": torch.randn(B, T, 3, generator=g),
        "state_value": torch.randn(B, T, 1, generator=g),
        "action_log_prob": 0.3 * torch.randn(B, T, 1, generator=g),
        "next": {"reward": torch.randn(B, T, 1, generator=g),
                 "state_value": torch.randn(B, T, 1, generator=g),
                 "done": done, "terminated": done.clone()},
    }, [B, T])


def _estimators(which):
    """{name: estimator}, TorchRL's first; GAE's ``vectorized`` left unset (its loop)."""
    kw = dict(gamma=0.99, value_network=None)
    if which == "vtrace":
        torch.manual_seed(0)
        kw["actor_network"] = ProbabilisticActor(
            TensorDictModule(torch.nn.Linear(3, 4), ["obs"], ["logits"]), in_keys=["logits"],
            return_log_prob=True, distribution_class=torch.distributions.Categorical)
    else:
        kw["lmbda"] = 0.95
    name = {"gae": "GAE", "td_lambda": "TDLambdaEstimator", "vtrace": "VTrace"}[which]
    ests = {f"torchrl {name}": getattr(trl, name)(**kw)}
    for label, backend in BACKENDS.items():
        ests[f"{label} {name}"] = getattr(sg, name)(**kw, backend=backend)
    return {k: (lambda est=est: est(td_shared.clone(False))) for k, est in ests.items()}


def _functions(which, td):
    """The numeric calls alone, on the tensordict's tensors (time_dim=1 of [B, T, 1])."""
    r, v, nv = td["next", "reward"], td["state_value"], td["next", "state_value"]
    d = t = td["next", "done"]
    gamma, lmbda = torch.tensor(0.99), torch.tensor(0.95)
    lp, lm = td["action_log_prob"], 0.9 * td["action_log_prob"]
    if which == "gae":
        fns = {"torchrl generalized_advantage_estimate": lambda: trl_fn.
               generalized_advantage_estimate(gamma, lmbda, v, nv, r, d, t, time_dim=1)}
        ours = ("torchrl_gae op", lambda b: sg._op("gae")(
            r, v, nv, t, d, gamma=gamma, lambda_=lmbda, time_dim=1,
            outputs=("advantages", "returns"), backend=b))
    elif which == "td_lambda":
        fns = {"torchrl vec_td_lambda_return_estimate": lambda: trl_fn.
               vec_td_lambda_return_estimate(gamma, lmbda, nv, r, d, t, time_dim=1)}
        ours = ("torchrl_td_lambda op", lambda b: sg._op("td_lambda")(
            r, nv, t, d, gamma=gamma, lambda_=lmbda, time_dim=1, backend=b))
    else:
        fns = {"torchrl vtrace_advantage_estimate": lambda: trl_fn.
               vtrace_advantage_estimate(gamma, lp, lm, v, nv, r, d, t, time_dim=1)}
        ours = ("torchrl_vtrace op", lambda b: sg._op("vtrace")(
            lp, lm, v, nv, r, t, d, gamma=gamma, time_dim=1,
            outputs=("advantages", "targets"), backend=b))
    for label, backend in BACKENDS.items():
        fns[f"{label} {ours[0]}"] = lambda b=backend, f=ours[1]: f(b)
    return fns


def _outputs(out):
    if isinstance(out, TensorDict):
        return [out["advantage"], out["value_target"]]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check(calls):
    """One call of each (the warm-up, compiles included), checked against the first's outputs."""
    ref_out = None
    for fn in calls.values():
        out = _outputs(fn())
        ref_out = ref_out or out
        for a, b in zip(out, ref_out):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _table(calls, reps):
    """Interleaved medians of ``calls`` (name -> no-argument function), the first the reference."""
    times = {name: [] for name in calls}
    for _ in range(reps):
        for name, fn in calls.items():
            times[name].append(wall_and_cpu(fn))
    med = {k: [statistics.median(x[i] for x in ts) for i in (0, 1)] for k, ts in times.items()}
    ref = next(iter(med.values()))
    for name, (wall, cpu) in med.items():
        print(f"| {name} | {wall * 1e3:.2f} | {cpu * 1e3:.2f} | {ref[1] / cpu:.2f}x |")


def main():
    global td_shared
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=21, help="timed calls per row")
    p.add_argument("--rate", type=float, default=0.05, help="termination rate")
    p.add_argument("--shape", default="4096x128", help="B x T")
    p.add_argument("--algos", default="gae,td_lambda,vtrace")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    B, T = (int(x) for x in args.shape.split("x"))
    td_shared = _data(B, T, args.rate)
    meta = machine_meta(ROOT, ("torch", "numba", "torchrl", "tensordict", "scangen"))
    print(f"# {meta['cpu']}, {meta['cores']} cores, {torch.get_num_threads()} torch thread(s); "
          + ", ".join(f"{k} {meta[k]}" for k in ("python", "torch", "numba", "torchrl",
                                                   "tensordict", "scangen", "commit"))
          + f"; {B} x {T} float32, {args.rate:.0%} terminations, medians of {args.reps} "
          f"interleaved calls")
    print("| call | wall ms | thread CPU ms | TorchRL / this (CPU) |")
    print("| --- | ---: | ---: | ---: |")
    algos = args.algos.split(",")
    tables = [_estimators(w) for w in algos] + [_functions(w, td_shared) for w in algos]
    # Every call once before any is timed: besides compiling, the large temporaries of the
    # first calls settle the allocator's thresholds, which would otherwise tax whichever
    # table ran first with page faults (2x on the first GAE rows, measured).
    for calls in tables:
        _check(calls)
    for calls in tables:
        _table(calls, args.reps)


td_shared = None

if __name__ == "__main__":
    main()
