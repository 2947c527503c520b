"""Hand-written numba loops of the CPU benchmark (bench/cpu.py), one per algorithm, written from
shared/SEMANTICS.md, sharing no code with scangen's compiler: ``@numba.njit(parallel=True)``,
``prange`` over rows, sequential in time, the carries in registers; for time-major buffers,
``prange`` over tiles of rows with time outermost and the rows of the tile innermost, which is
what a careful hand-written loop over a ``[T, N]`` buffer does. Accumulates in float64, like
scangen's kernels. Run on float64 copies, it is also the benchmark's float64 oracle over every
row and step. Only float parameters (the benchmark passes no per-step tensors).

:func:`prepare_hand` takes the op's keyword arguments (make_inputs' names) as logical ``[N, T]``
tensors (``[N, T, K]`` for Retrace) in either memory layout, and returns a thunk: one timed
call, returning its outputs as logical ``[N, T]`` arrays (views).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

TILE = 256  # rows per tile of the time-major hand loop: 2 float64 carries each fit in L1

# ---------------------------------------------------------------------------------------------
# hand-written numba loops: per algorithm, one kernel over rows (each row in turn, its carries in
# registers) and one over tiles of time-major rows (time outermost, the tile's rows innermost,
# contiguous in memory; the carries in a small array). The two differ only in loop order.
# (No shared step function: numba 0.68 drops the stores of an inline="always" callee that
# unpacks a tuple inside a parallel=True caller, and without IR inlining the call costs 2-8x.)

_par = numba.njit(parallel=True, cache=True)


@_par
def _gae_rows(r, v, term, trunc, boot, gamma, lam, adv, ret):
    N, T = r.shape
    for i in numba.prange(N):
        a = 0.0
        for t in range(T - 1, -1, -1):
            te, tr = float(term[i, t]), float(trunc[i, t])
            vn = boot[i, t] if (t == T - 1 or tr != 0.0) else v[i, t + 1]
            a = r[i, t] + gamma * (1.0 - te) * vn - v[i, t] + gamma * lam * (1.0 - max(te, tr)) * a
            adv[i, t] = a
            ret[i, t] = a + v[i, t]


@_par
def _gae_tiles(r, v, term, trunc, boot, gamma, lam, adv, ret):
    N, T = r.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        A = np.zeros(min(N, lo + TILE) - lo)
        for t in range(T - 1, -1, -1):
            for j in range(A.shape[0]):
                i = lo + j
                te, tr = float(term[i, t]), float(trunc[i, t])
                vn = boot[i, t] if (t == T - 1 or tr != 0.0) else v[i, t + 1]
                a = r[i, t] + gamma * (1.0 - te) * vn - v[i, t] + gamma * lam * (1.0 - max(te, tr)) * A[j]
                A[j] = a
                adv[i, t] = a
                ret[i, t] = a + v[i, t]


@_par
def _vtrace_rows(lpt, lpb, v, r, term, trunc, boot, gamma, rho_bar, c_bar, lam, pg_rho_bar, vs, pg):
    N, T = r.shape
    for i in numba.prange(N):
        a = 0.0
        for t in range(T - 1, -1, -1):
            ratio = np.exp(float(lpt[i, t]) - float(lpb[i, t]))
            te, tr = float(term[i, t]), float(trunc[i, t])
            cut = t == T - 1 or tr != 0.0
            vn = boot[i, t] if cut else v[i, t + 1]
            vs_next = boot[i, t] if cut else v[i, t + 1] + a  # vs_{t+1} = V_{t+1} + A_{t+1}
            keep = gamma * (1.0 - te)
            a = min(rho_bar, ratio) * (r[i, t] + keep * vn - v[i, t]) \
                + gamma * lam * min(c_bar, ratio) * (1.0 - max(te, tr)) * a
            vs[i, t] = v[i, t] + a
            pg[i, t] = min(pg_rho_bar, ratio) * (r[i, t] + keep * (lam * vs_next + (1.0 - lam) * vn) - v[i, t])


@_par
def _vtrace_tiles(lpt, lpb, v, r, term, trunc, boot, gamma, rho_bar, c_bar, lam, pg_rho_bar, vs, pg):
    N, T = r.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        A = np.zeros(min(N, lo + TILE) - lo)
        for t in range(T - 1, -1, -1):
            for j in range(A.shape[0]):
                i = lo + j
                ratio = np.exp(float(lpt[i, t]) - float(lpb[i, t]))
                te, tr = float(term[i, t]), float(trunc[i, t])
                cut = t == T - 1 or tr != 0.0
                vn = boot[i, t] if cut else v[i, t + 1]
                vs_next = boot[i, t] if cut else v[i, t + 1] + A[j]
                keep = gamma * (1.0 - te)
                a = min(rho_bar, ratio) * (r[i, t] + keep * vn - v[i, t]) \
                    + gamma * lam * min(c_bar, ratio) * (1.0 - max(te, tr)) * A[j]
                A[j] = a
                vs[i, t] = v[i, t] + a
                pg[i, t] = min(pg_rho_bar, ratio) * (r[i, t] + keep * (lam * vs_next + (1.0 - lam) * vn) - v[i, t])


@_par
def _retrace_rows(pi, mu, q, nq, act, r, term, trunc, npi, gamma, lam, c_bar, rho_bar, q_ret, adv):
    N, T, K = nq.shape
    for i in numba.prange(N):
        a = 0.0
        c_next = 0.0  # c_T = 0
        for t in range(T - 1, -1, -1):
            ratio = pi[i, t, act[i, t]] / mu[i, t]
            eq = 0.0
            for k in range(K):
                eq += float(npi[i, t, k]) * float(nq[i, t, k])
            te, done = float(term[i, t]), max(float(term[i, t]), float(trunc[i, t]))
            keep = gamma * (1.0 - te)
            q_ret_next = eq if (t == T - 1 or done != 0.0) else q[i, t + 1] + a
            a = r[i, t] + keep * eq - q[i, t] + gamma * c_next * (1.0 - done) * a
            q_ret[i, t] = q[i, t] + a
            adv[i, t] = min(rho_bar, ratio) * (r[i, t] + keep * q_ret_next - q[i, t])
            c_next = lam * min(c_bar, ratio)


@_par
def _retrace_tiles(pi, mu, q, nq, act, r, term, trunc, npi, gamma, lam, c_bar, rho_bar, q_ret, adv):
    N, T, K = nq.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        A = np.zeros(min(N, lo + TILE) - lo)
        C = np.zeros(A.shape[0])
        for t in range(T - 1, -1, -1):
            for j in range(A.shape[0]):
                i = lo + j
                ratio = pi[i, t, act[i, t]] / mu[i, t]
                eq = 0.0
                for k in range(K):
                    eq += float(npi[i, t, k]) * float(nq[i, t, k])
                te, done = float(term[i, t]), max(float(term[i, t]), float(trunc[i, t]))
                keep = gamma * (1.0 - te)
                q_ret_next = eq if (t == T - 1 or done != 0.0) else q[i, t + 1] + A[j]
                a = r[i, t] + keep * eq - q[i, t] + gamma * C[j] * (1.0 - done) * A[j]
                A[j] = a
                q_ret[i, t] = q[i, t] + a
                adv[i, t] = min(rho_bar, ratio) * (r[i, t] + keep * q_ret_next - q[i, t])
                C[j] = lam * min(c_bar, ratio)


@_par
def _lambda_returns_rows(r, nv, term, trunc, boot, gamma, lam, out):
    N, T = r.shape
    for i in numba.prange(N):
        g = 0.0
        for t in range(T - 1, -1, -1):
            te, tr = float(term[i, t]), float(trunc[i, t])
            nvt = boot[i, t] if (t == T - 1 or tr != 0.0) else nv[i, t]
            if t == T - 1 or max(te, tr) != 0.0:
                g = r[i, t] + gamma * (1.0 - te) * nvt
            else:
                g = r[i, t] + gamma * ((1.0 - lam) * nvt + lam * g)
            out[i, t] = g


@_par
def _lambda_returns_tiles(r, nv, term, trunc, boot, gamma, lam, out):
    N, T = r.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        G = np.zeros(min(N, lo + TILE) - lo)
        for t in range(T - 1, -1, -1):
            for j in range(G.shape[0]):
                i = lo + j
                te, tr = float(term[i, t]), float(trunc[i, t])
                nvt = boot[i, t] if (t == T - 1 or tr != 0.0) else nv[i, t]
                if t == T - 1 or max(te, tr) != 0.0:
                    G[j] = r[i, t] + gamma * (1.0 - te) * nvt
                else:
                    G[j] = r[i, t] + gamma * ((1.0 - lam) * nvt + lam * G[j])
                out[i, t] = G[j]


@_par
def _discounted_returns_rows(r, term, trunc, boot, gamma, out):
    N, T = r.shape
    for i in numba.prange(N):
        g = 0.0
        for t in range(T - 1, -1, -1):
            te, tr = float(term[i, t]), float(trunc[i, t])
            if t == T - 1 or max(te, tr) != 0.0:
                g = r[i, t] + gamma * (1.0 - te) * boot[i, t]
            else:
                g = r[i, t] + gamma * g
            out[i, t] = g


@_par
def _discounted_returns_tiles(r, term, trunc, boot, gamma, out):
    N, T = r.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        G = np.zeros(min(N, lo + TILE) - lo)
        for t in range(T - 1, -1, -1):
            for j in range(G.shape[0]):
                i = lo + j
                te, tr = float(term[i, t]), float(trunc[i, t])
                if t == T - 1 or max(te, tr) != 0.0:
                    G[j] = r[i, t] + gamma * (1.0 - te) * boot[i, t]
                else:
                    G[j] = r[i, t] + gamma * G[j]
                out[i, t] = G[j]


@_par
def _eligibility_traces_rows(x, d, seed, gamma, lam, out):
    N, T = x.shape
    for i in numba.prange(N):
        z = float(seed[i])
        for t in range(T):
            d_prev = float(d[i, t - 1]) if t > 0 else 0.0
            z = x[i, t] + gamma * lam * (1.0 - d_prev) * z
            out[i, t] = z


@_par
def _eligibility_traces_tiles(x, d, seed, gamma, lam, out):
    N, T = x.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        Z = np.empty(min(N, lo + TILE) - lo)
        for j in range(Z.shape[0]):
            Z[j] = seed[lo + j]
        for t in range(T):
            for j in range(Z.shape[0]):
                i = lo + j
                d_prev = float(d[i, t - 1]) if t > 0 else 0.0
                Z[j] = x[i, t] + gamma * lam * (1.0 - d_prev) * Z[j]
                out[i, t] = Z[j]


@_par
def _episodic_prefix_sum_rows(x, d, seed, starts_at, out):
    N, T = x.shape
    for i in numba.prange(N):
        s = float(seed[i])
        for t in range(T):
            gate = float(d[i, t]) if starts_at else (float(d[i, t - 1]) if t > 0 else 0.0)
            s = x[i, t] + (1.0 - gate) * s
            out[i, t] = s


@_par
def _episodic_prefix_sum_tiles(x, d, seed, starts_at, out):
    N, T = x.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        S = np.empty(min(N, lo + TILE) - lo)
        for j in range(S.shape[0]):
            S[j] = seed[lo + j]
        for t in range(T):
            for j in range(S.shape[0]):
                i = lo + j
                gate = float(d[i, t]) if starts_at else (float(d[i, t - 1]) if t > 0 else 0.0)
                S[j] = x[i, t] + (1.0 - gate) * S[j]
                out[i, t] = S[j]


@_par
def _masked_gae_rows(r, v, m, gamma, lam, adv, ret):
    N, T = r.shape
    for i in numba.prange(N):
        a = 0.0
        nv = 0.0  # V at the next unmasked step
        for t in range(T - 1, -1, -1):
            if m[i, t] != 0:  # masked steps pass both carries through
                a = r[i, t] + gamma * nv - v[i, t] + gamma * lam * a
                nv = float(v[i, t])
            adv[i, t] = a
            ret[i, t] = a + v[i, t]


@_par
def _masked_gae_tiles(r, v, m, gamma, lam, adv, ret):
    N, T = r.shape
    for b in numba.prange((N + TILE - 1) // TILE):
        lo = b * TILE
        A = np.zeros(min(N, lo + TILE) - lo)
        NV = np.zeros(A.shape[0])
        for t in range(T - 1, -1, -1):
            for j in range(A.shape[0]):
                i = lo + j
                if m[i, t] != 0:
                    A[j] = r[i, t] + gamma * NV[j] - v[i, t] + gamma * lam * A[j]
                    NV[j] = v[i, t]
                adv[i, t] = A[j]
                ret[i, t] = A[j] + v[i, t]


KERNELS = {
    "compute_gae": (_gae_rows, _gae_tiles),
    "compute_vtrace": (_vtrace_rows, _vtrace_tiles),
    "compute_retrace": (_retrace_rows, _retrace_tiles),
    "compute_lambda_returns": (_lambda_returns_rows, _lambda_returns_tiles),
    "compute_discounted_returns": (_discounted_returns_rows, _discounted_returns_tiles),
    "compute_eligibility_traces": (_eligibility_traces_rows, _eligibility_traces_tiles),
    "compute_episodic_prefix_sum": (_episodic_prefix_sum_rows, _episodic_prefix_sum_tiles),
    "compute_masked_gae": (_masked_gae_rows, _masked_gae_tiles),
}


def _np(x):
    """A numpy view of a tensor (flags as uint8: numba's float() takes no bool)."""
    x = x.detach()
    return (x.view(torch.uint8) if x.dtype == torch.bool else x).numpy()


def _absent(N, T, dtype=np.uint8):
    return np.broadcast_to(np.zeros(1, dtype), (N, T))  # stride 0: read from one cached element


def _boot(kw, N, T):
    if kw.get("bootstrap_values") is not None:
        return _np(kw["bootstrap_values"])
    if kw.get("last_value") is not None:  # read only at T-1 (and truncated steps, absent then)
        return np.broadcast_to(_np(kw["last_value"])[:, None], (N, T))
    return _absent(N, T, np.float32)


def _flag(kw, name, N, T):
    return _np(kw[name]) if kw.get(name) is not None else _absent(N, T)


def _seed(kw, N):
    return _np(kw["seed_values"]) if kw.get("seed_values") is not None else np.zeros(N, np.float32)


def _hand_args(algo, kw, N, T):
    """(input arrays, params, number of outputs): the kernel's arguments before its outputs."""
    f, fl = _np, lambda name: _flag(kw, name, N, T)
    g = float(kw.get("gamma", 0.99))
    if algo == "compute_gae":
        return ((f(kw["rewards"]), f(kw["values"]), fl("terminateds"), fl("truncateds"), _boot(kw, N, T)),
                (g, float(kw.get("lambda_", 0.95))), 2)
    if algo == "compute_vtrace":
        rho = float(kw.get("rho_bar", 1.0))
        pg = kw.get("pg_rho_bar")
        return ((f(kw["log_pi_target"]), f(kw["log_pi_behavior"]), f(kw["values"]), f(kw["rewards"]),
                 fl("terminateds"), fl("truncateds"), _boot(kw, N, T)),
                (g, rho, float(kw.get("c_bar", 1.0)), float(kw.get("lambda_", 1.0)),
                 rho if pg is None else float(pg)), 2)
    if algo == "compute_retrace":
        return ((f(kw["action_probs_target"]), f(kw["action_probs_behavior"]), f(kw["q_values"]),
                 f(kw["next_q_values_all"]), f(kw["actions"]), f(kw["rewards"]), fl("terminateds"),
                 fl("truncateds"), f(kw["next_action_probs_target"])),
                (g, float(kw.get("lambda_", 1.0)), float(kw.get("c_bar", 1.0)), float(kw.get("rho_bar", 1.0))), 2)
    if algo == "compute_lambda_returns":
        nv = f(kw["next_values"])
        boot = f(kw["bootstrap_values"]) if kw.get("bootstrap_values") is not None else nv  # no override
        return ((f(kw["rewards"]), nv, fl("terminateds"), fl("truncateds"), boot),
                (g, float(kw.get("lambda_", 0.95))), 1)
    if algo == "compute_discounted_returns":
        return ((f(kw["rewards"]), fl("terminateds"), fl("truncateds"), _boot(kw, N, T)), (g,), 1)
    if algo == "compute_eligibility_traces":
        return ((f(kw["gradients"]), fl("dones"), _seed(kw, N)), (float(kw["gamma"]), float(kw["lambda_"])), 1)
    if algo == "compute_episodic_prefix_sum":
        boundary = kw.get("boundary", "ends_at")
        if boundary not in ("ends_at", "starts_at"):
            raise ValueError(f"boundary {boundary!r}")
        return ((f(kw["inputs"]), fl("dones"), _seed(kw, N)), (boundary == "starts_at",), 1)
    if algo == "compute_masked_gae":
        return ((f(kw["token_level_rewards"]), f(kw["values"]), fl("response_mask")),
                (float(kw.get("gamma", 1.0)), float(kw.get("lambda_", 1.0))), 2)
    raise KeyError(algo)


def _empty(N, T, dtype, layout):
    return np.empty((N, T), dtype) if layout == "rows" else np.empty((T, N), dtype).T


def prepare_hand(algo, kw, layout):
    """The hand-written numba loop of ``algo``; outputs in the input's float dtype (float64
    inputs: the float64 oracle)."""
    rows, tiles = KERNELS[algo]
    first = next(v for v in kw.values() if torch.is_tensor(v) and v.dim() >= 2 and v.is_floating_point())
    N, T = first.shape[:2]
    arrays, params, n_out = _hand_args(algo, kw, N, T)
    driver = rows if layout == "rows" else tiles
    dtype = np.float64 if first.dtype == torch.float64 else np.float32

    def call():
        outs = tuple(_empty(N, T, dtype, layout) for _ in range(n_out))
        driver(*arrays, *params, *outs)
        return outs

    return call
