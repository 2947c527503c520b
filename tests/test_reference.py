"""Tests of the float64 references themselves: small cases worked out by hand, and the identities of
shared/SEMANTICS.md on random inputs. Everything else in the suite trusts these references."""

import pytest
import torch

from scangen.testing import reference as R
from scangen.testing import ALGORITHMS, assert_close, make_inputs

F64 = torch.float64


def row(*xs):
    return torch.tensor([xs], dtype=F64)


def flags(*xs):
    return torch.tensor([xs], dtype=torch.bool)


def check(actual, *expected):
    assert actual.dtype == F64
    assert_close(actual, row(*expected), dtype=F64)


def inputs64(name, seed, N=5, T=33, **kw):
    return make_inputs(name, N, T, seed=seed, dtype=F64, trunc_rate=0.15, term_rate=0.1, **kw)


def interior_not_truncated(kw):
    keep = ~kw["truncateds"].clone()
    keep[:, -1] = False
    return keep


# ---------------------------------------------------------------------------------------------
# Hand-computed cases. gamma = lambda = 0.5 throughout, so gamma * lambda = 0.25.

R3, V3 = row(1, 2, 3), row(0.5, 1, 2)
BOOT3 = row(9, 4, 8)  # 9 sits at a non-truncated interior step and must be ignored


def test_gae_truncation_in_the_middle_uses_its_bootstrap():
    # t=2 (window end): v_next = boot 8, delta = 3 + 0.5*8 - 2 = 5 -> A = 5
    # t=1 (truncated):  v_next = boot 4, delta = 2 + 0.5*4 - 1 = 3, beta = 0 -> A = 3
    # t=0:              v_next = V_1 = 1, delta = 1 + 0.5*1 - 0.5 = 1 -> A = 1 + 0.25*3 = 1.75
    adv = R.compute_gae(R3, V3, flags(0, 0, 0), flags(0, 1, 0), 0.5, 0.5, bootstrap_values=BOOT3)
    check(adv, 1.75, 3, 5)
    check(R.gae_returns(R3, V3, flags(0, 0, 0), flags(0, 1, 0), 0.5, 0.5, bootstrap_values=BOOT3), 2.25, 4, 7)


def test_gae_both_flags_termination_wins():
    # t=1 terminated and truncated: delta = 2 - 1 = 1 (no bootstrap), beta = 0 -> A = 1
    # t=0: A = 1 + 0.25*1 = 1.25; t=2 as before: 5
    adv = R.compute_gae(R3, V3, flags(0, 1, 0), flags(0, 1, 0), 0.5, 0.5, bootstrap_values=BOOT3)
    check(adv, 1.25, 1, 5)


def test_gae_last_value():
    # t=2: delta = 3 + 0.5*8 - 2 = 5; t=1: delta = 2 + 0.5*2 - 1 = 2 -> A = 2 + 0.25*5 = 3.25
    # t=0: delta = 1 + 0.5*1 - 0.5 = 1 -> A = 1 + 0.25*3.25 = 1.8125
    adv = R.compute_gae(R3, V3, flags(0, 0, 0), gamma=0.5, lambda_=0.5, last_value=torch.tensor([8.0]))
    check(adv, 1.8125, 3.25, 5)
    check(R.compute_gae(R3, V3, flags(0, 0, 0), None, 0.5, 0.5, bootstrap_values=BOOT3), 1.8125, 3.25, 5)
    # terminated at the window end: the last value is not used, delta_2 = 3 - 2 = 1
    check(R.compute_gae(R3, V3, flags(0, 0, 1), gamma=0.5, lambda_=0.5, last_value=torch.tensor([8.0])),
          1.5625, 2.25, 1)  # A_1 = 2 + 0.25*1, A_0 = 1 + 0.25*2.25


# V-trace, T=2: ratio_0 = 2 (clipped to 1), ratio_1 = 0.5; r = [1, 2], V = [1, 2], window bootstrap 4.
LOG_RATIO2 = torch.log(row(2.0, 0.5))
R2, V2, LAST2 = row(1, 2), row(1, 2), torch.tensor([4.0])


def vtrace2(**kw):
    return R.compute_vtrace(LOG_RATIO2, torch.zeros(1, 2, dtype=F64), V2, R2, flags(0, 0), gamma=0.5,
                            last_value=LAST2, **kw)


def test_vtrace_clipped_ratios():
    # t=1: rho = c = 0.5, delta = 2 + 0.5*4 - 2 = 2 -> A = 1, vs = 3; pg = 0.5*(2 + 0.5*4 - 2) = 1
    # t=0: rho = c = 1, delta = 1 + 0.5*2 - 1 = 1 -> A = 1 + 0.5*1*1 = 1.5, vs = 2.5; pg = 1 + 0.5*3 - 1 = 1.5
    vs, pg = vtrace2()
    check(vs, 2.5, 3)
    check(pg, 1.5, 1)
    # pg_rho_bar = 2 lets ratio_0 = 2 through for the policy gradient only: pg_0 = 2 * 1.5
    vs, pg = vtrace2(pg_rho_bar=2.0)
    check(vs, 2.5, 3)
    check(pg, 3, 1)


def test_vtrace_lambda_mixes_vs_and_values():
    # lambda = 0.5: c = [0.5, 0.25]; t=1: A = 1, vs = 3; t=0: A = 1 + 0.5*0.5*1 = 1.25, vs = 2.25
    # pg_1 = 0.5*(2 + 0.5*(0.5*4 + 0.5*4) - 2) = 1; pg_0 = 1 + 0.5*(0.5*3 + 0.5*2) - 1 = 1.25
    vs, pg = vtrace2(lambda_=0.5)
    check(vs, 2.25, 3)
    check(pg, 1.25, 1)


def test_vtrace_truncation_uses_bootstrap_for_vs_next():
    # on-policy, lambda = 1: A = [1 + 0.5*3, 3, 5] (GAE with lambda = 1), vs = V + A = [3, 4, 7]
    # pg_1 = 2 + 0.5*boot 4 - 1 = 3 (not vs_2); pg_0 = 1 + 0.5*vs_1 - 0.5 = 2.5; pg_2 = 3 + 0.5*8 - 2 = 5
    zero = torch.zeros(1, 3, dtype=F64)
    vs, pg = R.compute_vtrace(zero, zero, V3, R3, flags(0, 0, 0), flags(0, 1, 0), gamma=0.5, bootstrap_values=BOOT3)
    check(vs, 3, 4, 7)
    check(pg, 2.5, 3, 5)


# Retrace, T=2, A=2: a = [0, 1]; pi(.|s_0) = [.5, .5], pi(.|s_1) = [.8, .2]; mu(a_t|s_t) = [.25, .4]
# -> ratio = [2, 0.5], c = [1, 0.5], rho = [1, 0.5]. Q = [1, 2]; Q(s_1, .) = [3, 2], Q(s_2, .) = [4, 6];
# EQ_0 = .8*3 + .2*2 = 2.8, EQ_1 = .5*4 + .5*6 = 5; r = [1, 1].
def retrace2(term, trunc):
    return R.compute_retrace(
        torch.tensor([[[0.5, 0.5], [0.8, 0.2]]], dtype=F64), row(0.25, 0.4), row(1, 2),
        torch.tensor([[[3.0, 2.0], [4.0, 6.0]]], dtype=F64), torch.tensor([[0, 1]]), row(1, 1), term, trunc,
        gamma=0.5, next_action_probs_target=torch.tensor([[[0.8, 0.2], [0.5, 0.5]]], dtype=F64))


def test_retrace_hand():
    # t=1: A = 1 + 0.5*5 - 2 = 1.5 (c_2 = 0), q_ret = 3.5; adv = 0.5*(1 + 0.5*EQ_1 - 2) = 0.75
    # t=0: A = 1 + 0.5*2.8 - 1 + 0.5*c_1*1.5 = 1.4 + 0.375 = 1.775, q_ret = 2.775; adv = 1 + 0.5*3.5 - 1 = 1.75
    q_ret, adv = retrace2(flags(0, 0), flags(0, 0))
    check(q_ret, 2.775, 3.5)
    check(adv, 1.75, 0.75)


def test_retrace_truncation_and_termination():
    # truncated at t=0: A_0 = 1.4 (beta = 0), q_ret_0 = 2.4; adv_0 uses EQ_0: 1 + 0.5*2.8 - 1 = 1.4
    q_ret, adv = retrace2(flags(0, 0), flags(1, 0))
    check(q_ret, 2.4, 3.5)
    check(adv, 1.4, 0.75)
    # both flags at t=0: termination wins, A_0 = 1 - 1 = 0, adv_0 = 1 - 1 = 0
    q_ret, adv = retrace2(flags(1, 0), flags(1, 0))
    check(q_ret, 1, 3.5)
    check(adv, 0, 0.75)


def test_lambda_returns_hand():
    nv = row(1, 2, 3)
    # G_2 = 3 + 0.5*3 = 4.5; G_1 = 2 + 0.5*(0.5*2 + 0.5*4.5) = 3.625; G_0 = 1 + 0.5*(0.5*1 + 0.5*3.625) = 2.15625
    check(R.compute_lambda_returns(R3, nv, flags(0, 0, 0), None, 0.5, 0.5), 2.15625, 3.625, 4.5)
    # bootstrap overrides only t = T-1 (no truncation): G_2 = 3 + 0.5*10 = 8, G_1 = 2 + 0.5*(1 + 4) = 4.5,
    # G_0 = 1 + 0.5*(0.5 + 2.25) = 2.375
    boot = row(9, 9, 10)
    check(R.compute_lambda_returns(R3, nv, flags(0, 0, 0), None, 0.5, 0.5, boot), 2.375, 4.5, 8)
    # truncated at t=1 with bootstrap 6: G_1 = 2 + 0.5*6 = 5 (cut), G_0 = 1 + 0.5*(0.5 + 2.5) = 2.5
    boot = row(9, 6, 10)
    check(R.compute_lambda_returns(R3, nv, flags(0, 0, 0), flags(0, 1, 0), 0.5, 0.5, boot), 2.5, 5, 8)
    # both flags at t=1: G_1 = 2, G_0 = 1 + 0.5*(0.5 + 1) = 1.75
    check(R.compute_lambda_returns(R3, nv, flags(0, 1, 0), flags(0, 1, 0), 0.5, 0.5, boot), 1.75, 2, 8)


def test_discounted_returns_hand():
    # no bootstrap: G_2 = 3, G_1 = 2 + 1.5 = 3.5, G_0 = 1 + 1.75 = 2.75
    check(R.compute_discounted_returns(R3, flags(0, 0, 0), gamma=0.5), 2.75, 3.5, 3)
    # truncated at t=1: G_2 = 3 + 0.5*8 = 7, G_1 = 2 + 0.5*4 = 4, G_0 = 1 + 0.5*4 = 3 (boot 9 ignored)
    check(R.compute_discounted_returns(R3, flags(0, 0, 0), flags(0, 1, 0), 0.5, BOOT3), 3, 4, 7)
    # terminated at the window end: G_2 = 3
    check(R.compute_discounted_returns(R3, flags(0, 0, 1), flags(0, 1, 0), 0.5, BOOT3), 3, 4, 3)


def test_eligibility_traces_hand():
    # z_0 = 1 + 0.25*seed 4 = 2; z_1 = 2 + 0.25*2 = 2.5; d_1 = 1 cuts the edge into t=2: z_2 = 3
    z = R.compute_eligibility_traces(row(1, 2, 3), flags(0, 1, 0), 0.5, 0.5, seed_values=torch.tensor([4.0]))
    check(z, 2, 2.5, 3)


def test_episodic_prefix_sum_hand():
    x, d, seed = row(1, 2, 3, 4), flags(0, 1, 0, 0), torch.tensor([10.0])
    # ends_at: the done step t=1 still adds to its episode; the sum restarts at t=2
    check(R.compute_episodic_prefix_sum(x, d, seed), 11, 13, 3, 7)
    # starts_at: the done step t=1 opens a new episode
    check(R.compute_episodic_prefix_sum(x, d, seed, boundary="starts_at"), 11, 2, 5, 9)


def test_masked_gae_hand():
    # mask [1, 0, 1, 1, 0]; rewards at masked steps (9) never count. NV = [V_2, V_2, V_3, 0, 0] = [2, 2, 3, 0, 0]
    # t=4 masked: A = 0; t=3: delta = 4 + 0 - 3 = 1 -> A = 1; t=2: delta = 2 + 1.5 - 2 = 1.5 -> A = 1.75
    # t=1 masked: A = 1.75 carried; t=0: delta = 1 + 0.5*2 - 1 = 1 -> A = 1 + 0.25*1.75 = 1.4375
    v = row(1, 5, 2, 3, 7)
    adv, ret = R.compute_masked_gae(row(1, 9, 2, 4, 9), v, flags(1, 0, 1, 1, 0), 0.5, 0.5)
    check(adv, 1.4375, 1.75, 1.75, 1, 0)
    check(ret, 2.4375, 6.75, 3.75, 4, 7)


# ---------------------------------------------------------------------------------------------
# Identities of SEMANTICS.md on random inputs

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_one_is_discounted_return_minus_values(seed):
    kw = inputs64("gae", seed)
    adv = R.compute_gae(**kw, gamma=0.9, lambda_=1.0)
    G = R.compute_discounted_returns(kw["rewards"], kw["terminateds"], kw["truncateds"], 0.9, kw["bootstrap_values"])
    assert_close(adv, G - kw["values"], dtype=F64)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_returns_are_gae_plus_values(seed, lam):
    kw = inputs64("gae", seed)
    v = kw["values"]
    next_values = torch.cat([v[:, 1:], torch.full_like(v[:, :1], float("nan"))], 1)  # last entry overridden
    G = R.compute_lambda_returns(kw["rewards"], next_values, kw["terminateds"], kw["truncateds"], 0.9, lam,
                                 kw["bootstrap_values"])
    assert_close(G, R.compute_gae(**kw, gamma=0.9, lambda_=lam) + v, dtype=F64)


@pytest.mark.parametrize("boundary", R.BOUNDARIES)
def test_prefix_sum_with_every_step_done_is_its_input(boundary):
    x = torch.randn(4, 17, dtype=F64, generator=torch.Generator().manual_seed(0))
    out = R.compute_episodic_prefix_sum(x, torch.ones(4, 17, dtype=torch.bool), boundary=boundary)
    assert_close(out, x, dtype=F64)


@pytest.mark.parametrize("lam", [1.0, 0.9])
@pytest.mark.parametrize("seed", SEEDS)
def test_vtrace_on_policy_is_gae(seed, lam):
    kw = inputs64("vtrace", seed)
    kw["log_pi_behavior"] = kw["log_pi_target"]
    vs, pg = R.compute_vtrace(**kw, gamma=0.9, lambda_=lam)
    gae_kw = {k: kw[k] for k in ("rewards", "values", "terminateds", "truncateds", "bootstrap_values")}
    adv, ret = R.gae_advantages_and_returns(**gae_kw, gamma=0.9, lambda_=lam)
    assert_close(vs, ret, dtype=F64, name="vs")
    assert_close(pg, adv, dtype=F64, name="pg")


def greedy_on_policy_retrace_inputs(seed, A=3):
    """pi one-hot at the taken action, mu = 1: ratio 1 everywhere, and EQ_t = Q_{t+1} inside an episode."""
    kw = inputs64("retrace", seed, A=A)
    a = kw["actions"]
    kw["action_probs_target"] = torch.nn.functional.one_hot(a, A).to(F64)
    kw["action_probs_behavior"] = torch.ones_like(kw["rewards"])
    kw["next_action_probs_target"] = torch.nn.functional.one_hot(a.roll(-1, 1), A).to(F64)
    eq = (kw["next_action_probs_target"] * kw["next_q_values_all"]).sum(-1)
    return kw, eq


@pytest.mark.parametrize("lam", [1.0, 0.7])
@pytest.mark.parametrize("seed", SEEDS)
def test_retrace_greedy_on_policy_is_lambda_return(seed, lam):
    kw, eq = greedy_on_policy_retrace_inputs(seed)
    q_ret, adv = R.compute_retrace(**kw, gamma=0.9, lambda_=lam)
    G = R.compute_lambda_returns(kw["rewards"], eq, kw["terminateds"], kw["truncateds"], 0.9, lam)
    assert_close(q_ret, G, dtype=F64)
    if lam == 1.0:  # q_ret_t = r_t + gamma q_ret_next_t exactly, so the advantage is q_ret - Q
        assert_close(adv, q_ret - kw["q_values"], dtype=F64)


@pytest.mark.parametrize("seed", SEEDS)
def test_retrace_lambda_zero_is_expected_sarsa(seed):
    kw = inputs64("retrace", seed)
    q_ret, _ = R.compute_retrace(**kw, gamma=0.9, lambda_=0.0)
    eq = (kw["next_action_probs_target"] * kw["next_q_values_all"]).sum(-1)
    assert_close(q_ret, kw["rewards"] + 0.9 * (~kw["terminateds"]).to(F64) * eq, dtype=F64)


def test_masked_gae_all_ones_is_gae():
    kw = inputs64("masked_gae", 0)
    r, v = kw["token_level_rewards"], kw["values"]
    adv, ret = R.compute_masked_gae(r, v, torch.ones_like(r, dtype=torch.bool), 0.9, 0.8)
    assert_close(adv, R.compute_gae(r, v, torch.zeros_like(r, dtype=torch.bool), None, 0.9, 0.8), dtype=F64)
    assert_close(ret, adv + v, dtype=F64)


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_gae_skips_masked_steps(seed):
    """Valid steps give the same advantages as plain GAE on the row with its masked steps removed."""
    kw = inputs64("masked_gae", seed, T=40)
    r, v, m = kw["token_level_rewards"], kw["values"], kw["response_mask"]
    adv, _ = R.compute_masked_gae(r, v, m, 0.9, 0.8)
    for i in range(r.shape[0]):
        ri, vi = r[i, m[i]][None], v[i, m[i]][None]
        expected = R.compute_gae(ri, vi, torch.zeros_like(ri, dtype=torch.bool), None, 0.9, 0.8)
        assert_close(adv[i, m[i]][None], expected, dtype=F64, name=f"row {i}")


def test_eligibility_traces_with_unit_decay_are_prefix_sums():
    kw = inputs64("eligibility_traces", 0)
    z = R.compute_eligibility_traces(kw["gradients"], kw["dones"], 1.0, 1.0, kw["seed_values"])
    assert_close(z, R.compute_episodic_prefix_sum(kw["gradients"], kw["dones"], kw["seed_values"]), dtype=F64)


@pytest.mark.parametrize("seed_shape", ["per_row", "per_feature"])
def test_eligibility_traces_features_scan_independently(seed_shape):
    kw = inputs64("eligibility_traces", 0, F=(2, 3))
    if seed_shape == "per_row":
        kw["seed_values"] = kw["seed_values"][:, 0, 0]
    z = R.compute_eligibility_traces(**kw)
    for f in [(0, 0), (1, 2)]:
        seed = kw["seed_values"] if seed_shape == "per_row" else kw["seed_values"][:, f[0], f[1]]
        one = R.compute_eligibility_traces(kw["gradients"][:, :, f[0], f[1]], kw["dones"], kw["gamma"],
                                           kw["lambda_"], seed)
        assert_close(z[:, :, f[0], f[1]], one, dtype=F64)


# ---------------------------------------------------------------------------------------------
# Boundary rules shared by the two-flag algorithms

WITH_BOOTSTRAP = ["compute_gae", "compute_vtrace", "compute_lambda_returns", "compute_discounted_returns"]
TWO_FLAGS = WITH_BOOTSTRAP + ["compute_retrace"]


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def assert_identical(a, b):
    for x, y in zip(as_tuple(a), as_tuple(b), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("name", WITH_BOOTSTRAP)
def test_bootstrap_ignored_at_non_truncated_interior_steps(name):
    kw = inputs64(name, 3)
    other = dict(kw, bootstrap_values=torch.where(interior_not_truncated(kw), 1e6, kw["bootstrap_values"]))
    assert_identical(R.REFERENCES[name](**kw), R.REFERENCES[name](**other))


@pytest.mark.parametrize("name", TWO_FLAGS)
def test_termination_wins_over_truncation(name):
    kw = inputs64(name, 4)
    both = kw["terminateds"] & kw["truncateds"]
    assert both.any()
    term_only = dict(kw, truncateds=kw["truncateds"] & ~kw["terminateds"])
    assert_identical(R.REFERENCES[name](**kw), R.REFERENCES[name](**term_only))


@pytest.mark.parametrize("name", ["compute_gae", "compute_vtrace"])
def test_last_value_is_the_window_end_bootstrap(name):
    kw = inputs64(name, 5)
    last = kw["bootstrap_values"][:, -1].clone()
    only_end = torch.zeros_like(kw["bootstrap_values"])
    only_end[:, -1] = last
    no_trunc = dict(kw, truncateds=torch.zeros_like(kw["truncateds"]))
    via_last = R.REFERENCES[name](**dict(no_trunc, bootstrap_values=None, last_value=last))
    assert_identical(via_last, R.REFERENCES[name](**dict(no_trunc, bootstrap_values=only_end)))
    with pytest.raises(ValueError, match="not both"):
        R.REFERENCES[name](**kw, last_value=last)


def test_unknown_boundary_raises():
    kw = inputs64("episodic_prefix_sum", 0)
    with pytest.raises(ValueError, match="boundary"):
        R.compute_episodic_prefix_sum(**kw, boundary="bogus")


# ---------------------------------------------------------------------------------------------
# Per-row and per-step constants


def test_per_step_gamma_zero_acts_as_termination():
    """rlax's encoding: discount_t = gamma (1 - term_t) with no termination flags gives the same GAE."""
    kw = inputs64("gae", 6)
    gamma_t = 0.9 * (~kw["terminateds"]).to(F64)
    encoded = R.compute_gae(**dict(kw, terminateds=torch.zeros_like(kw["terminateds"])), gamma=gamma_t, lambda_=0.8)
    assert_close(encoded, R.compute_gae(**kw, gamma=0.9, lambda_=0.8), dtype=F64)


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n != "compute_episodic_prefix_sum"])
def test_per_row_constants_match_row_by_row_calls(name):
    kw = inputs64(name, 7, N=3, T=11)
    gammas = [0.5, 0.9, 0.99]
    batched = as_tuple(R.REFERENCES[name](**dict(kw, gamma=torch.tensor(gammas, dtype=F64)[:, None])))
    for i, g in enumerate(gammas):
        row_kw = {k: v[i:i + 1] if torch.is_tensor(v) else v for k, v in kw.items()}
        single = as_tuple(R.REFERENCES[name](**dict(row_kw, gamma=g)))
        for b, s in zip(batched, single, strict=True):
            assert_close(b[i:i + 1], s, dtype=F64, name=f"row {i}")


# ---------------------------------------------------------------------------------------------
# Dtypes, generators and the comparison helper


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_references_upcast_every_input(name, dtype):
    low = make_inputs(name, 3, 9, seed=8, dtype=dtype)
    up = {k: v.to(F64) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in low.items()}
    for a, b in zip(as_tuple(R.REFERENCES[name](**low)), as_tuple(R.REFERENCES[name](**up)), strict=True):
        assert a.dtype == F64 and a.shape[:2] == (3, 9)
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_make_inputs_is_deterministic_and_in_domain(name):
    kw = make_inputs(name, 6, 50, seed=9, trunc_rate=0.1, term_rate=0.1)
    again = make_inputs(name[len("compute_"):], 6, 50, seed=9, trunc_rate=0.1, term_rate=0.1)
    assert kw.keys() == again.keys()
    for k, v in kw.items():
        assert torch.equal(v, again[k]) if torch.is_tensor(v) else v == again[k]
        if torch.is_tensor(v) and k in ("terminateds", "truncateds", "dones", "response_mask"):
            assert v.dtype == torch.bool
    if "terminateds" in kw:
        assert (kw["terminateds"] & kw["truncateds"]).any()
    if name == "compute_retrace":
        for k in ("action_probs_target", "next_action_probs_target"):
            assert_close(kw[k].sum(-1), torch.ones(6, 50), name=k)
        assert kw["action_probs_behavior"].min() >= 0.1 and kw["actions"].dtype == torch.int64
    if name == "compute_vtrace":
        assert kw["log_pi_behavior"].min() >= torch.log(torch.tensor(0.1)) - 1e-6
    if name == "compute_masked_gae":
        m = kw["response_mask"]
        assert m.any() and (~m).any() and (m[:, 1:] != m[:, :-1]).sum() > 6  # several runs, not one block


def test_assert_close_is_nan_aware_and_reports_indices():
    e = torch.tensor([[1.0, float("nan"), 3.0]], dtype=F64)
    assert_close(e.float(), e)  # NaN where the reference has NaN is fine
    with pytest.raises(AssertionError, match=r"at \(0, 2\)"):
        assert_close(torch.tensor([[1.0, float("nan"), float("nan")]]), e, name="nan")
    with pytest.raises(AssertionError, match=r"at \(0, 1\)"):
        assert_close(torch.tensor([[1.0, 2.0, 3.0]]), e)
    with pytest.raises(AssertionError, match="max abs error 1.000e-02"):
        assert_close(torch.tensor([[1.01, float("nan"), 3.0]]), e)


def test_golden_files_are_what_the_references_give():
    import make_golden  # noqa: PLC0415 (only this test needs it)

    assert make_golden.main(["--check"]) == 0, "run: python tests/make_golden.py"
