"""Float64 reference implementations of scangen's built-in algorithms.

Written from shared/SEMANTICS.md as plain loops over time (vectorised over rows only), so that no
part of the generator can leak into the expected values; it imports nothing from the compiler.
Inputs are [N, T] with time last. Every input is upcast to float64 (flags to 0.0 / 1.0) before any
arithmetic and every output is float64, whatever the input dtype.
"""

import torch

F64 = torch.float64
BOUNDARIES = ("ends_at", "starts_at")


# ---------------------------------------------------------------------------------------------
# Shared input handling


def _f64(x, device):
    if torch.is_tensor(x):
        return x.to(device=device, dtype=F64)
    return torch.tensor(x, dtype=F64, device=device)  # never via float32: 0.9 must stay 0.9


def _param(x, shape, device):
    """gamma / lambda_ / clip constants: a float, or a tensor broadcastable to [N, T] (index at t)."""
    return torch.broadcast_to(_f64(x, device), shape)


def _flags(terminateds, truncateds, shape, device):
    term = _f64(terminateds, device)
    trunc = torch.zeros(shape, dtype=F64, device=device) if truncateds is None else _f64(truncateds, device)
    return term, trunc, torch.maximum(term, trunc)


def _bootstrap(bootstrap_values, last_value, shape, device):
    """[N, T] bootstrap; only entries at truncated steps and at T-1 are ever read. Default 0."""
    if bootstrap_values is not None and last_value is not None:
        raise ValueError("pass bootstrap_values or last_value, not both")
    boot = torch.zeros(shape, dtype=F64, device=device)
    if bootstrap_values is not None:
        boot[:] = _f64(bootstrap_values, device)
    if last_value is not None:
        boot[:, -1] = _f64(last_value, device)
    return boot


def _successor(x, trunc, boot, t):
    """x[t+1] for interior steps that are not truncated; the bootstrap at truncated steps and at T-1.

    Terminated steps get x[t+1] too; every caller multiplies it by (1 - term_t), so it never counts.
    """
    if t == x.shape[1] - 1:
        return boot[:, t]
    return torch.where(trunc[:, t] > 0, boot[:, t], x[:, t + 1])


def _per_row(v, like):
    """Broadcast a [N] per-step quantity against a [N, *F] carry."""
    return v.reshape(v.shape + (1,) * (like.dim() - 1))


# ---------------------------------------------------------------------------------------------
# 1. GAE


def gae_advantages_and_returns(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                               bootstrap_values=None, last_value=None):
    r = _f64(rewards, rewards.device)
    v = _f64(values, r.device)
    N, T = r.shape
    term, trunc, done = _flags(terminateds, truncateds, r.shape, r.device)
    boot = _bootstrap(bootstrap_values, last_value, r.shape, r.device)
    g, lam = _param(gamma, r.shape, r.device), _param(lambda_, r.shape, r.device)
    adv = torch.empty_like(r)
    carry = torch.zeros(N, dtype=F64, device=r.device)  # A_T = 0: the bootstrap enters via v_next only
    for t in reversed(range(T)):
        v_next = _successor(v, trunc, boot, t)
        delta = r[:, t] + g[:, t] * (1 - term[:, t]) * v_next - v[:, t]
        carry = delta + g[:, t] * lam[:, t] * (1 - done[:, t]) * carry
        adv[:, t] = carry
    return adv, adv + v


def compute_gae(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                bootstrap_values=None, last_value=None):
    return gae_advantages_and_returns(rewards, values, terminateds, truncateds, gamma, lambda_,
                                      bootstrap_values, last_value)[0]


def gae_returns(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                bootstrap_values=None, last_value=None):
    return gae_advantages_and_returns(rewards, values, terminateds, truncateds, gamma, lambda_,
                                      bootstrap_values, last_value)[1]


# ---------------------------------------------------------------------------------------------
# 2. V-trace


def compute_vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None, gamma=0.99,
                   rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None, lambda_=1.0, pg_rho_bar=None):
    r = _f64(rewards, rewards.device)
    dev, shape = r.device, r.shape
    v, lpt, lpb = _f64(values, dev), _f64(log_pi_target, dev), _f64(log_pi_behavior, dev)
    term, trunc, done = _flags(terminateds, truncateds, shape, dev)
    boot = _bootstrap(bootstrap_values, last_value, shape, dev)
    g, lam = _param(gamma, shape, dev), _param(lambda_, shape, dev)
    rho_bar, c_bar = _param(rho_bar, shape, dev), _param(c_bar, shape, dev)
    pg_rho_bar = rho_bar if pg_rho_bar is None else _param(pg_rho_bar, shape, dev)
    vs, pg = torch.empty_like(r), torch.empty_like(r)
    carry = torch.zeros(shape[0], dtype=F64, device=dev)
    for t in reversed(range(shape[1])):
        ratio = torch.exp(lpt[:, t] - lpb[:, t])
        rho = torch.minimum(rho_bar[:, t], ratio)
        c = lam[:, t] * torch.minimum(c_bar[:, t], ratio)
        keep = g[:, t] * (1 - term[:, t])  # discount of the successor; 0 at termination
        v_next = _successor(v, trunc, boot, t)
        carry = rho * (r[:, t] + keep * v_next - v[:, t]) + g[:, t] * c * (1 - done[:, t]) * carry
        vs[:, t] = v[:, t] + carry
        vs_next = _successor(vs, trunc, boot, t)  # vs[:, t+1] is already final
        target = lam[:, t] * vs_next + (1 - lam[:, t]) * v_next
        pg[:, t] = torch.minimum(pg_rho_bar[:, t], ratio) * (r[:, t] + keep * target - v[:, t])
    return vs, pg


# ---------------------------------------------------------------------------------------------
# 3. Retrace(lambda)


def compute_retrace(action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
                    terminateds, truncateds=None, gamma=0.99, lambda_=1.0, c_bar=1.0, rho_bar=1.0, *,
                    next_action_probs_target):
    r = _f64(rewards, rewards.device)
    dev, shape = r.device, r.shape
    pi, mu, q = _f64(action_probs_target, dev), _f64(action_probs_behavior, dev), _f64(q_values, dev)
    next_q, next_pi = _f64(next_q_values_all, dev), _f64(next_action_probs_target, dev)
    a = torch.as_tensor(actions, device=dev).long()
    term, _, done = _flags(terminateds, truncateds, shape, dev)
    g, lam = _param(gamma, shape, dev), _param(lambda_, shape, dev)
    c_bar, rho_bar = _param(c_bar, shape, dev), _param(rho_bar, shape, dev)
    q_ret, adv = torch.empty_like(r), torch.empty_like(r)
    carry = torch.zeros(shape[0], dtype=F64, device=dev)
    c_next = torch.zeros(shape[0], dtype=F64, device=dev)  # c_T = 0: nothing is traced past the window
    for t in reversed(range(shape[1])):
        ratio = pi[:, t].gather(1, a[:, t, None]).squeeze(1) / mu[:, t]
        eq = (next_pi[:, t] * next_q[:, t]).sum(-1)  # E_{pi(.|s_{t+1})} Q(s_{t+1}, .)
        keep = g[:, t] * (1 - term[:, t])
        carry = r[:, t] + keep * eq - q[:, t] + g[:, t] * c_next * (1 - done[:, t]) * carry
        if t == shape[1] - 1:
            q_ret_next = eq
        else:  # q_ret[:, t+1] belongs to the next episode after a boundary; terminated steps zero it anyway
            q_ret_next = torch.where(done[:, t] > 0, eq, q_ret[:, t + 1])
        q_ret[:, t] = q[:, t] + carry
        adv[:, t] = torch.minimum(rho_bar[:, t], ratio) * (r[:, t] + keep * q_ret_next - q[:, t])
        # c_t, used as c_{t+1} by step t-1; per-step lambda_ / c_bar are read at t+1 along with the ratio,
        # as SEMANTICS' c_{t+1} = lambda_{t+1} * min(c_bar_{t+1}, ratio_{t+1}) reads literally
        c_next = lam[:, t] * torch.minimum(c_bar[:, t], ratio)
    return q_ret, adv


# ---------------------------------------------------------------------------------------------
# 4. TD(lambda) returns and 5. discounted returns


def compute_lambda_returns(rewards, next_values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                           bootstrap_values=None):
    r = _f64(rewards, rewards.device)
    dev, (N, T) = r.device, r.shape
    nv = _f64(next_values, dev)
    term, trunc, done = _flags(terminateds, truncateds, r.shape, dev)
    g, lam = _param(gamma, r.shape, dev), _param(lambda_, r.shape, dev)
    if bootstrap_values is not None:  # overrides next_values where the successor is outside the trace
        boot = _f64(bootstrap_values, dev)
        at_boot = trunc.clone()
        at_boot[:, -1] = 1
        nv = torch.where(at_boot > 0, boot, nv)
    G = torch.empty_like(r)
    for t in reversed(range(T)):
        cut_value = r[:, t] + g[:, t] * (1 - term[:, t]) * nv[:, t]
        if t == T - 1:
            G[:, t] = cut_value
        else:
            mixed = r[:, t] + g[:, t] * ((1 - lam[:, t]) * nv[:, t] + lam[:, t] * G[:, t + 1])
            G[:, t] = torch.where(done[:, t] > 0, cut_value, mixed)
    return G


def compute_discounted_returns(rewards, terminateds, truncateds=None, gamma=0.99, bootstrap_values=None):
    r = _f64(rewards, rewards.device)
    dev, (N, T) = r.device, r.shape
    term, _, done = _flags(terminateds, truncateds, r.shape, dev)
    boot = _bootstrap(bootstrap_values, None, r.shape, dev)
    g = _param(gamma, r.shape, dev)
    G = torch.empty_like(r)
    for t in reversed(range(T)):
        cut_value = r[:, t] + g[:, t] * (1 - term[:, t]) * boot[:, t]  # the window end cuts like a truncation
        if t == T - 1:
            G[:, t] = cut_value
        else:
            G[:, t] = torch.where(done[:, t] > 0, cut_value, r[:, t] + g[:, t] * G[:, t + 1])
    return G


# ---------------------------------------------------------------------------------------------
# 6. Eligibility traces and 7. episodic prefix sum (forward scans)


def _seed(seed_values, x):
    N, feat = x.shape[0], x.shape[2:]
    if seed_values is None:
        return torch.zeros((N,) + feat, dtype=F64, device=x.device)
    seed = _f64(seed_values, x.device)
    if seed.dim() == 1 and feat:  # a per-row seed shared by every feature
        seed = seed.reshape((N,) + (1,) * len(feat))
    return torch.broadcast_to(seed, (N,) + feat).clone()


def compute_eligibility_traces(gradients, dones, gamma, lambda_, seed_values=None):
    x = _f64(gradients, gradients.device)
    N, T = x.shape[:2]
    d = _f64(dones, x.device)
    g, lam = _param(gamma, (N, T), x.device), _param(lambda_, (N, T), x.device)
    z = _seed(seed_values, x)  # z_{-1}
    d_prev = torch.zeros(N, dtype=F64, device=x.device)  # d_{-1} = 0: the seed always flows into z_0
    out = torch.empty_like(x)
    for t in range(T):
        z = x[:, t] + _per_row(g[:, t] * lam[:, t] * (1 - d_prev), z) * z
        out[:, t] = z
        d_prev = d[:, t]
    return out


def compute_episodic_prefix_sum(inputs, dones, seed_values=None, boundary="ends_at"):
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    x = _f64(inputs, inputs.device)
    N, T = x.shape[:2]
    d = _f64(dones, x.device)
    C = _seed(seed_values, x)  # C_{-1}
    d_prev = torch.zeros(N, dtype=F64, device=x.device)
    out = torch.empty_like(x)
    for t in range(T):
        # ends_at: a done step is the last of its episode, so it resets the sum *after* itself
        gate = d_prev if boundary == "ends_at" else d[:, t]
        C = x[:, t] + _per_row(1 - gate, C) * C
        out[:, t] = C
        d_prev = d[:, t]
    return out


# ---------------------------------------------------------------------------------------------
# 8. Token-level masked GAE


def compute_masked_gae(token_level_rewards, values, response_mask, gamma=1.0, lambda_=1.0):
    r = _f64(token_level_rewards, token_level_rewards.device)
    dev, (N, T) = r.device, r.shape
    v, m = _f64(values, dev), _f64(response_mask, dev)
    g, lam = _param(gamma, r.shape, dev), _param(lambda_, r.shape, dev)
    adv = torch.empty_like(r)
    carry = torch.zeros(N, dtype=F64, device=dev)
    nv = torch.zeros(N, dtype=F64, device=dev)  # NV_t: value at the next unmasked step, 0 past the end
    for t in reversed(range(T)):
        delta = r[:, t] + g[:, t] * nv - v[:, t]
        # masked steps (tool output, padding) pass both carries through untouched
        carry = m[:, t] * (delta + g[:, t] * lam[:, t] * carry) + (1 - m[:, t]) * carry
        adv[:, t] = carry
        nv = m[:, t] * v[:, t] + (1 - m[:, t]) * nv
    return adv, adv + v


REFERENCES = {
    "compute_gae": compute_gae,
    "compute_vtrace": compute_vtrace,
    "compute_retrace": compute_retrace,
    "compute_lambda_returns": compute_lambda_returns,
    "compute_discounted_returns": compute_discounted_returns,
    "compute_eligibility_traces": compute_eligibility_traces,
    "compute_episodic_prefix_sum": compute_episodic_prefix_sum,
    "compute_masked_gae": compute_masked_gae,
}
