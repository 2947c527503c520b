"""The per-step Python loops of scangen's benchmarks (``LOOPS``; ``baselines.LOOPS`` is this
dict), written from shared/SEMANTICS.md: the plain loop over T that many RL / LLM-RL libraries
run today, vectorised over rows only (one handful of kernel launches per step), with the same
keyword signature and default outputs as the public ``scangen.compute_*`` functions. Float
parameters only. Accumulation is float32 (float64 when a floating input is float64); outputs
take the promoted floating dtype of the inputs. Time is axis 1.
"""
from __future__ import annotations

import torch


def dtypes(*tensors):
    """(output dtype, accumulation dtype) from the floating tensors among ``tensors``."""
    out = None
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            out = t.dtype if out is None else torch.promote_types(out, t.dtype)
    out = torch.float32 if out is None else out
    return out, (torch.float64 if out == torch.float64 else torch.float32)



def _loop_boot_last(bootstrap_values, last_value, N, acc, device):
    if last_value is not None:
        return last_value.to(acc)
    if bootstrap_values is not None:
        return bootstrap_values[:, -1].to(acc)
    return torch.zeros(N, dtype=acc, device=device)


def gae_loop(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95, bootstrap_values=None,
             last_value=None):
    out, acc = dtypes(rewards, values, bootstrap_values, last_value)
    r, v, term = rewards.to(acc), values.to(acc), terminateds.to(acc)
    trunc = None if truncateds is None else truncateds.to(acc)
    boot = None if bootstrap_values is None else bootstrap_values.to(acc)
    N, T = r.shape
    adv = torch.empty_like(r)
    lastgaelam = torch.zeros(N, dtype=acc, device=r.device)
    for t in reversed(range(T)):
        if t == T - 1:
            nextvalues = _loop_boot_last(bootstrap_values, last_value, N, acc, r.device)
            notdone = 1.0 - term[:, t] if trunc is None else 1.0 - torch.maximum(term[:, t], trunc[:, t])
        else:
            nextvalues = v[:, t + 1]
            notdone = 1.0 - term[:, t]
            if trunc is not None:
                nextvalues = torch.where(trunc[:, t] > 0, boot[:, t] if boot is not None else 0.0, nextvalues)
                notdone = 1.0 - torch.maximum(term[:, t], trunc[:, t])
        delta = r[:, t] + gamma * (1.0 - term[:, t]) * nextvalues - v[:, t]
        lastgaelam = delta + gamma * lambda_ * notdone * lastgaelam
        adv[:, t] = lastgaelam
    return adv.to(out)


def vtrace_loop(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None, gamma=0.99,
                rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None, lambda_=1.0, pg_rho_bar=None):
    out, acc = dtypes(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value)
    r, v, term = rewards.to(acc), values.to(acc), terminateds.to(acc)
    trunc = None if truncateds is None else truncateds.to(acc)
    boot = None if bootstrap_values is None else bootstrap_values.to(acc)
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    ratio = torch.exp(log_pi_target.to(acc) - log_pi_behavior.to(acc))
    rho, c = ratio.clamp(max=rho_bar), lambda_ * ratio.clamp(max=c_bar)
    pg_rho = ratio.clamp(max=pg_rho_bar)
    N, T = r.shape
    vs, pg = torch.empty_like(r), torch.empty_like(r)
    acc_ = torch.zeros(N, dtype=acc, device=r.device)
    boot_last = _loop_boot_last(bootstrap_values, last_value, N, acc, r.device)
    for t in reversed(range(T)):
        done = term[:, t] if trunc is None else torch.maximum(term[:, t], trunc[:, t])
        if t == T - 1:
            v_next = vs_next = boot_last
        elif trunc is not None:
            b = boot[:, t] if boot is not None else torch.zeros_like(r[:, t])
            v_next = torch.where(trunc[:, t] > 0, b, v[:, t + 1])
            vs_next = torch.where(trunc[:, t] > 0, b, vs[:, t + 1])
        else:
            v_next, vs_next = v[:, t + 1], vs[:, t + 1]
        keep = gamma * (1.0 - term[:, t])
        acc_ = rho[:, t] * (r[:, t] + keep * v_next - v[:, t]) + gamma * c[:, t] * (1.0 - done) * acc_
        vs[:, t] = v[:, t] + acc_
        if t == T - 1:
            vs_next = boot_last
        pg[:, t] = pg_rho[:, t] * (r[:, t] + keep * (lambda_ * vs_next + (1 - lambda_) * v_next) - v[:, t])
    return vs.to(out), pg.to(out)


def retrace_loop(action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
                 terminateds, truncateds=None, gamma=0.99, lambda_=1.0, c_bar=1.0, rho_bar=1.0, *,
                 next_action_probs_target=None):
    out, acc = dtypes(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards,
                       next_action_probs_target)
    r, q, term = rewards.to(acc), q_values.to(acc), terminateds.to(acc)
    trunc = None if truncateds is None else truncateds.to(acc)
    pi, mu = action_probs_target.to(acc), action_probs_behavior.to(acc)
    nq, npi = next_q_values_all.to(acc), next_action_probs_target.to(acc)
    a = actions.long()
    N, T = r.shape
    q_ret, adv = torch.empty_like(r), torch.empty_like(r)
    carry = torch.zeros(N, dtype=acc, device=r.device)
    c_next = torch.zeros(N, dtype=acc, device=r.device)
    for t in reversed(range(T)):
        ratio = pi[:, t].gather(1, a[:, t, None]).squeeze(1) / mu[:, t]
        eq = (npi[:, t] * nq[:, t]).sum(-1)
        done = term[:, t] if trunc is None else torch.maximum(term[:, t], trunc[:, t])
        keep = gamma * (1.0 - term[:, t])
        carry = r[:, t] + keep * eq - q[:, t] + gamma * c_next * (1.0 - done) * carry
        q_ret_next = eq if t == T - 1 else torch.where(done > 0, eq, q_ret[:, t + 1])
        q_ret[:, t] = q[:, t] + carry
        adv[:, t] = ratio.clamp(max=rho_bar) * (r[:, t] + keep * q_ret_next - q[:, t])
        c_next = lambda_ * ratio.clamp(max=c_bar)
    return q_ret.to(out), adv.to(out)


def lambda_returns_loop(rewards, next_values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                        bootstrap_values=None):
    out, acc = dtypes(rewards, next_values, bootstrap_values)
    r, nv, term = rewards.to(acc), next_values.to(acc), terminateds.to(acc)
    trunc = None if truncateds is None else truncateds.to(acc)
    boot = None if bootstrap_values is None else bootstrap_values.to(acc)
    N, T = r.shape
    G = torch.empty_like(r)
    for t in reversed(range(T)):
        nv_t = nv[:, t]
        if boot is not None:
            if t == T - 1:
                nv_t = boot[:, t]
            elif trunc is not None:
                nv_t = torch.where(trunc[:, t] > 0, boot[:, t], nv_t)
        cut_value = r[:, t] + gamma * (1.0 - term[:, t]) * nv_t
        if t == T - 1:
            G[:, t] = cut_value
        else:
            done = term[:, t] if trunc is None else torch.maximum(term[:, t], trunc[:, t])
            mixed = r[:, t] + gamma * ((1 - lambda_) * nv_t + lambda_ * G[:, t + 1])
            G[:, t] = torch.where(done > 0, cut_value, mixed)
    return G.to(out)


def discounted_returns_loop(rewards, terminateds, truncateds=None, gamma=0.99, bootstrap_values=None):
    out, acc = dtypes(rewards, bootstrap_values)
    r, term = rewards.to(acc), terminateds.to(acc)
    trunc = None if truncateds is None else truncateds.to(acc)
    boot = None if bootstrap_values is None else bootstrap_values.to(acc)
    N, T = r.shape
    G = torch.empty_like(r)
    running = torch.zeros(N, dtype=acc, device=r.device)
    for t in reversed(range(T)):
        done = term[:, t] if trunc is None else torch.maximum(term[:, t], trunc[:, t])
        cut_value = r[:, t] if boot is None else r[:, t] + gamma * (1.0 - term[:, t]) * boot[:, t]
        if t == T - 1:
            running = cut_value
        else:
            running = torch.where(done > 0, cut_value, r[:, t] + gamma * running)
        G[:, t] = running
    return G.to(out)


def eligibility_traces_loop(gradients, dones, gamma, lambda_, seed_values=None):
    out, acc = dtypes(gradients, seed_values)
    x, d = gradients.to(acc), dones.to(acc)
    N, T = d.shape
    feat = x.dim() - 2
    z = torch.zeros((N,) + tuple(x.shape[2:]), dtype=acc, device=x.device)
    if seed_values is not None:
        s = seed_values.to(acc)
        z = z + (s.reshape(N, *([1] * feat)) if s.dim() == 1 and feat else s)
    out_t = torch.empty_like(x)
    for t in range(T):
        decay = gamma * lambda_ * (1.0 - d[:, t - 1]) if t > 0 else gamma * lambda_
        z = x[:, t] + (decay.reshape(N, *([1] * feat)) if torch.is_tensor(decay) else decay) * z
        out_t[:, t] = z
    return out_t.to(out)


def episodic_prefix_sum_loop(inputs, dones, seed_values=None, boundary="ends_at"):
    if boundary not in ("ends_at", "starts_at"):
        raise ValueError(f"boundary must be 'ends_at' or 'starts_at', got {boundary!r}")
    out, acc = dtypes(inputs, seed_values)
    x, d = inputs.to(acc), dones.to(acc)
    N, T = d.shape
    C = torch.zeros(N, dtype=acc, device=x.device) if seed_values is None else seed_values.to(acc)
    res = torch.empty_like(x)
    for t in range(T):
        if boundary == "ends_at":
            C = x[:, t] + (C if t == 0 else (1.0 - d[:, t - 1]) * C)
        else:
            C = x[:, t] + (1.0 - d[:, t]) * C
        res[:, t] = C
    return res.to(out)


def masked_gae_loop(token_level_rewards, values, response_mask, gamma=1.0, lambda_=1.0):
    """verl's multi-turn per-token loop: skipped tokens carry both the advantage and the next value."""
    out, acc = dtypes(token_level_rewards, values)
    r, v, m = token_level_rewards.to(acc), values.to(acc), response_mask.to(acc)
    N, T = r.shape
    nextvalues = torch.zeros(N, dtype=acc, device=r.device)
    lastgaelam = torch.zeros(N, dtype=acc, device=r.device)
    adv = torch.empty_like(r)
    for t in reversed(range(T)):
        delta = r[:, t] + gamma * nextvalues - v[:, t]
        new = delta + gamma * lambda_ * lastgaelam
        nextvalues = v[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = new * m[:, t] + (1 - m[:, t]) * lastgaelam
        adv[:, t] = lastgaelam
    return adv.to(out), (adv + v).to(out)


LOOPS = {
    "compute_gae": gae_loop,
    "compute_vtrace": vtrace_loop,
    "compute_retrace": retrace_loop,
    "compute_lambda_returns": lambda_returns_loop,
    "compute_discounted_returns": discounted_returns_loop,
    "compute_eligibility_traces": eligibility_traces_loop,
    "compute_episodic_prefix_sum": episodic_prefix_sum_loop,
    "compute_masked_gae": masked_gae_loop,
}
