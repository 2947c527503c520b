"""Baselines of scangen's benchmarks (``scangen bench``, bench/bench.py), written from
shared/SEMANTICS.md (nothing here imports scangen's compiler).

Two families, each with the same keyword signature and the same default outputs as the public
``scangen.compute_*`` functions (so ``fn(**scangen.testing.make_inputs(...))`` works for all three):

* ``VECTORIZED[name]``: per-algorithm alpha / beta / outputs built with whole-tensor PyTorch ops,
  then a Hillis-Steele doubling scan (log2(T) passes, each composing every step with the one 2^k
  away). The benchmarks wrap the whole function in ``torch.compile`` (one graph per call
  signature). Run eagerly on float64 inputs it accumulates in float64: bench/bench.py uses that
  as a full-size float64 oracle where the reference loops are too slow (long T).
* ``LOOPS[name]`` (written in :mod:`.loops`): the plain per-step Python loop over T that many RL /
  LLM-RL libraries run today (vectorised over rows only, one handful of kernel launches per
  step). Float parameters only.

Accumulation is float32 (float64 when a floating input is float64); outputs take the promoted
floating dtype of the inputs, as scangen's do. Time is axis 1 ([N, T] or [N, T, K]).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .loops import LOOPS, dtypes as _dtypes

__all__ = ["LOOPS", "VECTORIZED", "doubling_scan", "gae", "vtrace", "retrace", "lambda_returns",
           "discounted_returns", "eligibility_traces", "episodic_prefix_sum", "masked_gae"]


# ---------------------------------------------------------------------------------------------
# helpers (the dtype rule, ``_dtypes``, is shared with the loops: loops.dtypes)

def _f(x, acc):
    """Tensors to the accumulation dtype (flags become 0.0 / 1.0); Python numbers unchanged."""
    return x.to(acc) if isinstance(x, torch.Tensor) else x


def _col(x):
    """[N] -> [N, 1] so a per-row tensor broadcasts against [N, T]; numbers unchanged."""
    return x[:, None] if isinstance(x, torch.Tensor) and x.dim() == 1 else x


def _out(x, dtype):
    return x.to(dtype)


# ---------------------------------------------------------------------------------------------
# the vectorised log-depth scan

def doubling_scan(alpha, beta, reverse):
    """A_t = alpha_t + beta_t * A_{t+1} (reverse) or A_{t-1} (forward) along the LAST axis, carry 0.

    Hillis-Steele: after the pass with offset k, element t holds the affine map covering 2k steps
    (a, b) so that A_t = a_t + b_t * A_{t +- 2k}; composing with the neighbour k away is
    a <- a + b * a_nb, b <- b * b_nb; positions past the window edge see the identity (0, 1).
    """
    alpha, beta = torch.broadcast_tensors(alpha, beta)
    a, b = alpha, beta
    T = a.shape[-1]
    k = 1
    while k < T:
        if reverse:
            a_nb = F.pad(a[..., k:], (0, k))
        else:
            a_nb = F.pad(a[..., :-k], (k, 0))
        new_a = a + b * a_nb
        if 2 * k < T:  # b is still needed by a later pass
            if reverse:
                b_nb = F.pad(b[..., k:], (0, k), value=1.0)
            else:
                b_nb = F.pad(b[..., :-k], (k, 0), value=1.0)
            b = b * b_nb
        a = new_a
        k *= 2
    return a


def _shift_next(x, fill=0.0):
    """x[:, t+1] along axis 1, ``fill`` at t = T-1 (works for [N, T] and [N, T, K])."""
    pad = [0, 0] * (x.dim() - 2) + [0, 1]
    return F.pad(x[:, 1:], pad, value=fill)


def _shift_prev(x, fill=0.0):
    """x[:, t-1] along axis 1, ``fill`` at t = 0."""
    pad = [0, 0] * (x.dim() - 2) + [1, 0]
    return F.pad(x[:, :-1], pad, value=fill)


def _is_last(T, device):
    return torch.arange(T, device=device) == T - 1  # [T] bool, broadcasts against [N, T]


def _successor(x, trunc, bootstrap_values, last_value, acc):
    """SEMANTICS' v_next for any per-step quantity x: x[t+1] inside the trajectory, the bootstrap at
    truncated steps and at T-1 (bootstrap_values, with last_value at T-1; 0 when neither is given)."""
    N, T = x.shape
    last = _is_last(T, x.device)
    cut = last if trunc is None else (trunc | last)
    boot = 0.0 if bootstrap_values is None else bootstrap_values.to(acc)
    nxt = torch.where(cut, boot, _shift_next(x))
    if last_value is not None:
        nxt = torch.where(last, last_value.to(acc)[:, None], nxt)
    return nxt


def _flags(terminateds, truncateds, acc):
    term = terminateds.to(acc)
    if truncateds is None:
        return term, term, None
    trunc_b = truncateds.to(torch.bool)
    return term, torch.maximum(term, truncateds.to(acc)), trunc_b


# ---------------------------------------------------------------------------------------------
# 1-8, vectorised

def gae(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95, bootstrap_values=None,
        last_value=None):
    out, acc = _dtypes(rewards, values, bootstrap_values, last_value)
    r, v = rewards.to(acc), values.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    term, done, trunc = _flags(terminateds, truncateds, acc)
    v_next = _successor(v, trunc, bootstrap_values, last_value, acc)
    alpha = r + g * (1 - term) * v_next - v
    beta = g * lam * (1 - done)
    return _out(doubling_scan(alpha, beta, reverse=True), out)


def vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None, gamma=0.99,
           rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None, lambda_=1.0, pg_rho_bar=None):
    out, acc = _dtypes(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value)
    r, v = rewards.to(acc), values.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    rho_bar, c_bar = _f(rho_bar, acc), _f(c_bar, acc)
    pg_rho_bar = rho_bar if pg_rho_bar is None else _f(pg_rho_bar, acc)
    term, done, trunc = _flags(terminateds, truncateds, acc)
    ratio = torch.exp(log_pi_target.to(acc) - log_pi_behavior.to(acc))
    rho = torch.clamp(ratio, max=rho_bar) if not isinstance(rho_bar, torch.Tensor) else torch.minimum(ratio, rho_bar)
    c = lam * (torch.clamp(ratio, max=c_bar) if not isinstance(c_bar, torch.Tensor) else torch.minimum(ratio, c_bar))
    keep = g * (1 - term)
    v_next = _successor(v, trunc, bootstrap_values, last_value, acc)
    A = doubling_scan(rho * (r + keep * v_next - v), g * c * (1 - done), reverse=True)
    vs = v + A
    vs_next = _successor(vs, trunc, bootstrap_values, last_value, acc)
    pg_rho = (torch.clamp(ratio, max=pg_rho_bar) if not isinstance(pg_rho_bar, torch.Tensor)
              else torch.minimum(ratio, pg_rho_bar))
    pg = pg_rho * (r + keep * (lam * vs_next + (1 - lam) * v_next) - v)
    return _out(vs, out), _out(pg, out)


def retrace(action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
            terminateds, truncateds=None, gamma=0.99, lambda_=1.0, c_bar=1.0, rho_bar=1.0, *,
            next_action_probs_target=None):
    out, acc = _dtypes(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards,
                       next_action_probs_target)
    r, q = rewards.to(acc), q_values.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    term, done, trunc = _flags(terminateds, truncateds, acc)
    N, T = r.shape
    pi_a = torch.gather(action_probs_target, -1, actions.long().unsqueeze(-1)).squeeze(-1).to(acc)
    ratio = pi_a / action_probs_behavior.to(acc)
    c = lam * torch.clamp(ratio, max=c_bar)
    rho = torch.clamp(ratio, max=rho_bar)
    eq = (next_action_probs_target.to(acc) * next_q_values_all.to(acc)).sum(-1)
    keep = g * (1 - term)
    c_next = _shift_next(c)  # c_{t+1}, c_T = 0
    A = doubling_scan(r + keep * eq - q, g * c_next * (1 - done), reverse=True)
    q_ret = q + A
    cut = (done > 0) | _is_last(T, r.device)
    q_ret_next = torch.where(cut, eq, _shift_next(q_ret))
    adv = rho * (r + keep * q_ret_next - q)
    return _out(q_ret, out), _out(adv, out)


def lambda_returns(rewards, next_values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                   bootstrap_values=None):
    out, acc = _dtypes(rewards, next_values, bootstrap_values)
    r, nv = rewards.to(acc), next_values.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    term, done, trunc = _flags(terminateds, truncateds, acc)
    T = r.shape[1]
    last = _is_last(T, r.device)
    if bootstrap_values is not None:
        at_boot = last if trunc is None else (trunc | last)
        nv = torch.where(at_boot, bootstrap_values.to(acc), nv)
    cut = torch.maximum(done, last.to(acc))
    alpha = r + g * (1 - term) * nv * (1 - lam * (1 - cut))
    beta = g * lam * (1 - cut)
    return _out(doubling_scan(alpha, beta, reverse=True), out)


def discounted_returns(rewards, terminateds, truncateds=None, gamma=0.99, bootstrap_values=None):
    out, acc = _dtypes(rewards, bootstrap_values)
    r = rewards.to(acc)
    g = _f(gamma, acc)
    term, done, _ = _flags(terminateds, truncateds, acc)
    cut = torch.maximum(done, _is_last(r.shape[1], r.device).to(acc))
    boot = 0.0 if bootstrap_values is None else bootstrap_values.to(acc)
    alpha = r + g * (1 - term) * cut * boot
    beta = g * (1 - cut)
    return _out(doubling_scan(alpha, beta, reverse=True), out)


def _forward_with_seed(x, beta_nt, seed_values, acc):
    """Forward scan along axis 1 of x ([N, T] or [N, T, *F]) with per-step beta [N, T] and seed z_{-1}
    folded into step 0: A_0 = x_0 + beta_0 * seed."""
    feat = x.dim() - 2
    xt = x.movedim(1, -1)  # [N, *F, T]
    bt = beta_nt.reshape(beta_nt.shape[0], *([1] * feat), beta_nt.shape[1])
    if seed_values is not None:
        s = seed_values.to(acc)
        if s.dim() == 1 and feat:
            s = s.reshape(s.shape[0], *([1] * feat))
        s = torch.broadcast_to(s, xt.shape[:-1])
        first = xt[..., :1] + bt[..., :1] * s[..., None]
        xt = torch.cat([first, xt[..., 1:]], dim=-1)
    return doubling_scan(xt, bt, reverse=False).movedim(-1, 1)


def eligibility_traces(gradients, dones, gamma, lambda_, seed_values=None):
    out, acc = _dtypes(gradients, seed_values)
    x = gradients.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    d_prev = _shift_prev(dones.to(acc))  # d_{-1} = 0
    beta = torch.broadcast_to(g * lam * (1 - d_prev), dones.shape)
    return _out(_forward_with_seed(x, beta, seed_values, acc), out)


def episodic_prefix_sum(inputs, dones, seed_values=None, boundary="ends_at"):
    if boundary not in ("ends_at", "starts_at"):
        raise ValueError(f"boundary must be 'ends_at' or 'starts_at', got {boundary!r}")
    out, acc = _dtypes(inputs, seed_values)
    x = inputs.to(acc)
    d = dones.to(acc)
    beta = 1 - (_shift_prev(d) if boundary == "ends_at" else d)
    return _out(_forward_with_seed(x, beta, seed_values, acc), out)


def masked_gae(token_level_rewards, values, response_mask, gamma=1.0, lambda_=1.0):
    out, acc = _dtypes(token_level_rewards, values)
    r, v, m = token_level_rewards.to(acc), values.to(acc), response_mask.to(acc)
    g, lam = _f(gamma, acc), _f(lambda_, acc)
    # W_t = V at the first s >= t with m_s = 1 (0 if none); NV_t = W_{t+1}
    W = doubling_scan(m * v, 1 - m, reverse=True)
    nv = _shift_next(W)
    delta = r + g * nv - v
    A = doubling_scan(m * delta, m * (g * lam) + (1 - m), reverse=True)
    return _out(A, out), _out(A + v, out)


VECTORIZED = {
    "compute_gae": gae,
    "compute_vtrace": vtrace,
    "compute_retrace": retrace,
    "compute_lambda_returns": lambda_returns,
    "compute_discounted_returns": discounted_returns,
    "compute_eligibility_traces": eligibility_traces,
    "compute_episodic_prefix_sum": episodic_prefix_sum,
    "compute_masked_gae": masked_gae,
}
