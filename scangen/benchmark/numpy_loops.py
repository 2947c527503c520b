"""Per-step numpy loops of scangen's benchmarks (``scangen bench``, bench/cpu.py), written from
shared/SEMANTICS.md (nothing here imports scangen's compiler): the loop of Stable-Baselines3's
``RolloutBuffer.compute_returns_and_advantage`` over numpy ``[T, N]`` float buffers for GAE (one
flag, ``episode_starts``; truncation bootstraps folded into the rewards as SB3's
``collect_rollouts`` does), and loops in the same style for TD(lambda) and discounted returns.

Every ``prepare_*`` takes the keyword arguments of the scangen op (make_inputs' names) as
*logical* ``[N, T]`` CPU tensors in whatever memory layout the benchmark stores (rows, or
time-major views) plus ``layout``, does the conversion an SB3 user's buffer would already hold
(outside the timed call), and returns a thunk: one timed call, returning its outputs as logical
``[N, T]`` arrays (views). ``PREPARE`` maps an op's name to its ``prepare_*``.
"""
from __future__ import annotations

import numpy as np
import torch


def bootstrap_values_of(kw):
    """[N, T] bootstrap values of GAE / V-trace arguments (``last_value`` at T-1, else 0)."""
    if kw.get("bootstrap_values") is not None:
        return kw["bootstrap_values"]
    boot = torch.zeros_like(kw["values"])
    if kw.get("last_value") is not None:
        boot[:, -1] = kw["last_value"]
    return boot


def done_flags(kw):
    """terminateds | truncateds, a new tensor."""
    term = kw["terminateds"]
    return term | kw["truncateds"] if kw.get("truncateds") is not None else term.clone()


# ---------------------------------------------------------------------------------------------
# SB3-style numpy loops over [T, N] buffers


def _tn(x):
    """[T, N] numpy view of a logical [N, T] tensor."""
    return x.detach().numpy().T


def sb3_compute_gae(rewards, values, episode_starts, last_values, dones, gamma, gae_lambda):
    """RolloutBuffer.compute_returns_and_advantage's loop (stable-baselines3 2.x)."""
    buffer_size = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    last_gae_lam = 0
    for step in reversed(range(buffer_size)):
        if step == buffer_size - 1:
            next_non_terminal = 1.0 - dones.astype(np.float32)
            next_values = last_values
        else:
            next_non_terminal = 1.0 - episode_starts[step + 1]
            next_values = values[step + 1]
        delta = rewards[step] + gamma * next_values * next_non_terminal - values[step]
        last_gae_lam = delta + gamma * gae_lambda * next_non_terminal * last_gae_lam
        advantages[step] = last_gae_lam
    returns = advantages + values
    return advantages, returns


def prepare_sb3_gae(kw, layout):
    gamma, lam = float(kw.get("gamma", 0.99)), float(kw.get("lambda_", 0.95))
    term, done = _tn(kw["terminateds"]), _tn(done_flags(kw))
    trunc_only = done & ~term
    r = _tn(kw["rewards"]).copy(order="K")
    boot = _tn(bootstrap_values_of(kw))
    # collect_rollouts adds gamma * V(terminal observation) to the reward of a truncated step;
    # the window end's bootstrap is last_values instead
    r[:-1] += (gamma * boot[:-1] * trunc_only[:-1]).astype(np.float32)
    starts = np.zeros_like(r)
    starts[1:] = done[:-1]
    v, last, dones = _tn(kw["values"]), boot[-1].copy(), term[-1].copy()

    def call():
        adv, ret = sb3_compute_gae(r, v, starts, last, dones, gamma, lam)
        return adv.T, ret.T

    return call


def prepare_numpy_lambda_returns(kw, layout):
    gamma, lam = float(kw.get("gamma", 0.99)), float(kw.get("lambda_", 0.95))
    nv = kw["next_values"]
    if kw.get("bootstrap_values") is not None:
        at_boot = kw["truncateds"].clone() if kw.get("truncateds") is not None else torch.zeros_like(kw["terminateds"])
        at_boot[:, -1] = True
        nv = torch.where(at_boot, kw["bootstrap_values"], nv)
    r, nv = _tn(kw["rewards"]), _tn(nv)
    not_term = (~_tn(kw["terminateds"])).astype(np.float32)
    cont = (~_tn(done_flags(kw))).astype(np.float32)
    cont[-1] = 0.0

    def call():
        out = np.empty_like(r)
        g = np.zeros(r.shape[1], np.float32)
        for step in reversed(range(r.shape[0])):
            c = cont[step]
            g = r[step] + gamma * not_term[step] * nv[step] * (1.0 - lam * c) + gamma * lam * c * g
            out[step] = g
        return (out.T,)

    return call


def prepare_numpy_discounted_returns(kw, layout):
    gamma = float(kw.get("gamma", 0.99))
    cut = _tn(done_flags(kw)).copy(order="K")
    cut[-1] = True
    not_term = ~_tn(kw["terminateds"])
    boot = _tn(kw["bootstrap_values"]) if kw.get("bootstrap_values") is not None else 0.0
    r = _tn(kw["rewards"]) + (gamma * boot * (cut & not_term)).astype(np.float32)  # SB3's bootstrap fold
    cont = (~cut).astype(np.float32)

    def call():
        out = np.empty_like(r)
        g = np.zeros(r.shape[1], np.float32)
        for step in reversed(range(r.shape[0])):
            g = r[step] + gamma * cont[step] * g
            out[step] = g
        return (out.T,)

    return call


PREPARE = {
    "compute_gae": prepare_sb3_gae,
    "compute_lambda_returns": prepare_numpy_lambda_returns,
    "compute_discounted_returns": prepare_numpy_discounted_returns,
}
