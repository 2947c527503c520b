"""Baselines of the CPU benchmark (bench/cpu.py), written from shared/SEMANTICS.md, sharing no code
with scangen's compiler (the SB3-style numpy loops live in scangen.benchmark.numpy_loops, which
``scangen bench`` runs too; the hand-written numba loops in bench/hand_numba.py).

Every ``prepare_*`` takes the keyword arguments of the scangen op (make_inputs' names) as
*logical* ``[N, T]`` tensors (``[N, T, K]`` for Retrace) in whatever memory layout the
benchmark stores (rows, or time-major views) plus ``layout``, does the conversion a caller of
that library would have done while collecting the data (outside the timed call), and returns a
thunk: one timed call, returning its outputs as logical ``[N, T]`` tensors or arrays (views).

- ``hand``: a hand-written numba loop per algorithm (bench/hand_numba.py), also the float64
  oracle.
- ``sb3_gae``: the loop of Stable-Baselines3's ``RolloutBuffer.compute_returns_and_advantage``
  and loops in the same style for TD(lambda) and discounted returns (imported from
  scangen.benchmark.numpy_loops).
- ``verl_gae`` / ``verl_masked_gae``: per-step torch loops over T like verl's
  ``compute_gae_advantage_return`` (the masked one is verl's loop verbatim, without the
  whitening that verl applies afterwards).
- ``torchrl_vec_gae`` / ``torchrl_gae``: TorchRL's ``vec_generalized_advantage_estimate`` and
  ``generalized_advantage_estimate`` on ``[N, T, 1]`` tensors (``None`` when torchrl is absent).
"""
from __future__ import annotations

import torch

from hand_numba import prepare_hand
from scangen.benchmark.numpy_loops import (
    bootstrap_values_of, done_flags, prepare_numpy_discounted_returns, prepare_numpy_lambda_returns,
    prepare_sb3_gae)

__all__ = ["prepare_hand", "prepare_numpy_discounted_returns", "prepare_numpy_lambda_returns",
           "prepare_sb3_gae", "prepare_torchrl_gae", "prepare_torchrl_vec_gae", "prepare_verl_gae",
           "prepare_verl_masked_gae", "next_values", "torchrl_available", "torchrl_version"]


# ---------------------------------------------------------------------------------------------
# successors and flags as the other libraries store them (prepared outside the timed call)


_bootstrap_t = bootstrap_values_of


def next_values(kw):
    """V of each step's true successor ([N, T], the inputs' layout): V_{t+1}, or the bootstrap at
    truncated steps and at T-1 (TorchRL's ``("next", "state_value")``)."""
    v, boot = kw["values"], _bootstrap_t(kw)
    nv = torch.empty_like(v)
    nv[:, :-1] = v[:, 1:]
    nv[:, -1] = boot[:, -1]
    return torch.where(kw["truncateds"], boot, nv) if kw.get("truncateds") is not None else nv


_done = done_flags


# ---------------------------------------------------------------------------------------------
# verl-style per-step torch loops over [N, T]


def prepare_verl_gae(kw, layout):
    gamma, lam = float(kw.get("gamma", 0.99)), float(kw.get("lambda_", 0.95))
    r, v, nv = kw["rewards"], kw["values"], next_values(kw)
    not_term = (~kw["terminateds"]).to(r.dtype)
    cont = (~_done(kw)).to(r.dtype)
    dim = 1 if layout == "rows" else 0

    def call():
        with torch.no_grad():
            lastgaelam = 0
            advantages_reversed = []
            for t in reversed(range(r.shape[-1])):
                delta = r[:, t] + gamma * not_term[:, t] * nv[:, t] - v[:, t]
                lastgaelam = delta + gamma * lam * cont[:, t] * lastgaelam
                advantages_reversed.append(lastgaelam)
            advantages = torch.stack(advantages_reversed[::-1], dim=dim)
            if dim == 0:
                advantages = advantages.t()
            returns = advantages + v
        return advantages, returns

    return call


def prepare_verl_masked_gae(kw, layout):
    gamma, lam = float(kw.get("gamma", 1.0)), float(kw.get("lambda_", 1.0))
    token_level_rewards, values = kw["token_level_rewards"], kw["values"]
    response_mask = kw["response_mask"].to(values.dtype)  # verl's mask is numeric
    dim = 1 if layout == "rows" else 0

    def call():
        with torch.no_grad():
            nextvalues = 0
            lastgaelam = 0
            advantages_reversed = []
            gen_len = token_level_rewards.shape[-1]
            for t in reversed(range(gen_len)):
                delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
                lastgaelam_ = delta + gamma * lam * lastgaelam
                # skip values and TD-error on observation tokens
                nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues
                lastgaelam = lastgaelam_ * response_mask[:, t] + (1 - response_mask[:, t]) * lastgaelam
                advantages_reversed.append(lastgaelam)
            advantages = torch.stack(advantages_reversed[::-1], dim=dim)
            if dim == 0:
                advantages = advantages.t()
            returns = advantages + values
        return advantages, returns

    return call


# ---------------------------------------------------------------------------------------------
# TorchRL


def _torchrl():
    try:
        from torchrl.objectives.value import functional
    except Exception:  # noqa: BLE001  (absent, or a build that does not import)
        return None
    return functional


def torchrl_version():
    try:
        import torchrl
        return torchrl.__version__
    except Exception:  # noqa: BLE001
        return None


def _prepare_torchrl(fn_name, kw, layout):
    F = _torchrl()
    fn = getattr(F, fn_name)
    gamma, lam = float(kw.get("gamma", 0.99)), float(kw.get("lambda_", 0.95))
    # [N, T, 1] (time_dim=-2), or the time-major memory as [T, N, 1] (time_dim=0)
    lay = (lambda x: x.unsqueeze(-1)) if layout == "rows" else (lambda x: x.t().unsqueeze(-1))
    args = [lay(x) for x in (kw["values"], next_values(kw), kw["rewards"], _done(kw), kw["terminateds"])]
    time_dim = -2 if layout == "rows" else 0
    back = (lambda x: x.squeeze(-1)) if layout == "rows" else (lambda x: x.squeeze(-1).t())

    def call():
        with torch.no_grad():
            adv, target = fn(gamma, lam, *args, time_dim=time_dim)
        return back(adv), back(target)

    return call


def prepare_torchrl_vec_gae(kw, layout):
    return _prepare_torchrl("vec_generalized_advantage_estimate", kw, layout)


def prepare_torchrl_gae(kw, layout):
    return _prepare_torchrl("generalized_advantage_estimate", kw, layout)


def torchrl_available() -> bool:
    return _torchrl() is not None
