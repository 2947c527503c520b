"""scangen.integrations.verl against float64 loops written from verl's algorithm (verl 0.9,
``verl/trainer/ppo/core_algos.py``), and against verl itself where its ``core_algos`` imports.

* compute_gae_advantage_return and compute_reinforce_plus_plus_outcome_advantage match the loops
  on single-turn masks (right and left padding), multi-turn masks (response runs interleaved with
  tool-output spans, an empty row), full masks; T = 1, 7, 333; gamma and lambda below 1 and at 1;
  float32, bfloat16 and float64 inputs; every CPU backend (Triton too, under TRITON_INTERPRET=1).
* verl's dtype rules (mixed inputs, float / int / bool masks), non-contiguous inputs, a worked
  multi-turn example, masked_whiten's edge cases.
* register(): both names in a registry with verl's contract, called as verl's trainer calls a
  registered estimator; the trainer's compute_advantage routed so that scangen_gae gets the
  critic's values; a clear ImportError without verl; the module imports without verl.
* Where verl imports (it needs ray and transformers, and its tensordict pin excludes TorchRL's, so
  CI installs it in a venv of its own and runs these there, from this file's last test): the same
  inputs through verl's own functions and registry, and its trainer's compute_advantage on a
  DataProto.
* On CUDA (skipped without): CUDA tensors through the Triton kernels, against the loops and verl.
"""
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import HAS_NUMBA, ON_GPU

from scangen.integrations import verl as sv
from scangen.testing import assert_close

try:  # verl's package imports ray, transformers, ... at import time
    from verl.trainer.ppo import core_algos as verl_core
    from verl.utils import torch_functional as verl_F
except Exception:  # noqa: BLE001 - absent, or present without its heavy dependencies
    verl_core = verl_F = None


def needs_verl(test):
    """The cases against verl itself (marked ``verl``): skipped where verl does not import, which
    is the main environment of CI; there test_real_verl_cases_in_verls_environment runs them
    with the Python of a venv that has verl (SCANGEN_VERL_PYTHON, set by .ci/run)."""
    skip = pytest.mark.skipif(verl_core is None, reason="verl's core_algos does not import here")
    return pytest.mark.verl(skip(test))


VERL_PYTHON = os.environ.get("SCANGEN_VERL_PYTHON", "")

ROOT = Path(__file__).resolve().parent.parent
F64 = torch.float64
CPU_BACKENDS = ("torch",) + (("numba",) if HAS_NUMBA else ())
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" and not ON_GPU
DTYPES = (torch.float32, torch.bfloat16, torch.float64)
MASKS = ("single_right", "single_left", "multi_turn", "full")
GAMMA_LAM = ((0.99, 0.95), (0.9, 0.7), (1.0, 1.0))

# Tolerances against the float64 loops: scangen.testing's per-dtype rows (the loops run on the
# same rounded inputs; whitening adds a few fp32 roundings). Against verl's own loop (float32):
# both sides carry float32 error, so twice the float32 row. Against verl in float64: verl takes
# the unbiased-variance factor n / (n - 1) as an int64 tensor division, which gives float32,
# so its float64 whitening is only good to ~6e-8 relative.
TOL_VERL = {torch.float32: dict(atol=2e-5, rtol=2e-4), torch.float64: dict(atol=1e-7, rtol=1e-6)}


class _Config(dict):
    """verl's AlgoConfig as its estimators read it: attributes and ``.get``."""
    __getattr__ = dict.__getitem__


# --------------------------------------------------------------------------- float64 references

def ref_gae(r, v, m, gamma, lam):
    """verl's GAE loop in float64: the TD error uses the value of the next response token, and
    tokens with mask 0 leave both carries (next value, last advantage) as they are."""
    r, v, m = (x.detach().cpu().to(F64) for x in (r, v, m))
    N, T = r.shape
    adv = torch.empty(N, T, dtype=F64)
    next_value, last = torch.zeros(N, dtype=F64), torch.zeros(N, dtype=F64)
    for t in reversed(range(T)):
        on = m[:, t] != 0
        delta = r[:, t] + gamma * next_value - v[:, t]
        last = torch.where(on, delta + gamma * lam * last, last)
        next_value = torch.where(on, v[:, t], next_value)
        adv[:, t] = last
    return adv, adv + v


def ref_rpp_returns(r, m, gamma):
    """verl 0.9's REINFORCE++ return in float64: discounted over the response tokens, carried
    across tokens with mask 0 (whose rewards are not added); 0 at tokens with mask 0."""
    r, m = r.detach().cpu().to(F64), m.detach().cpu()
    N, T = r.shape
    returns = torch.empty(N, T, dtype=F64)
    carry = torch.zeros(N, dtype=F64)
    for t in reversed(range(T)):
        on = m[:, t] != 0
        g = r[:, t] + gamma * carry
        returns[:, t] = torch.where(on, g, 0.0)
        carry = torch.where(on, g, carry)
    return returns


def ref_whiten(x, m, shift_mean=True):
    """verl's masked_whiten in float64: mean and unbiased variance over the masked elements,
    weighted by the mask's values (all but a bool mask's), with verl's counts: ``n = mask.sum()`` (a bf16 mask sums
    in bf16), and ``n + 1e-8`` and ``n / (n - 1)`` in float32 for int, bool and float32 masks
    (torch's default float type; the 1e-8 vanishes there), in the mask's own type otherwise."""
    m = m.detach().cpu()
    x, sel = x.detach().cpu().to(F64), (m != 0)
    w = m[sel].to(F64).tolist() if m.dtype != torch.bool else [1.0] * int(sel.sum())
    picked = x[sel].tolist()
    kind = m.dtype if m.is_floating_point() else torch.float32
    n = torch.tensor(float(m.sum()), dtype=kind)
    count = float(n + torch.tensor(1e-8, dtype=kind))
    bessel = float(n / (n - torch.tensor(1.0, dtype=kind)))
    mean = math.fsum(p * q for p, q in zip(picked, w)) / count
    var = math.fsum((p - mean) ** 2 * q for p, q in zip(picked, w)) / count * bessel
    out = (x - mean) / math.sqrt(var + 1e-8)
    return out if shift_mean else out + mean


def ref_gae_outputs(r, v, m, gamma, lam):
    adv, ret = ref_gae(r, v, m, gamma, lam)
    return ref_whiten(adv, m), ret


def ref_rpp_outputs(r, m, gamma):
    returns = ref_rpp_returns(r, m, gamma)
    return torch.where(m.cpu() != 0, ref_whiten(returns, m), 0.0), returns


# --------------------------------------------------------------------------- inputs

def make_mask(kind, N, T, gen):
    """``[N, T]`` int64 response masks of verl's shapes."""
    m = torch.zeros(N, T, dtype=torch.int64)
    for i in range(N):
        if kind == "full":
            m[i] = 1
        elif kind in ("single_right", "single_left"):
            n = int(torch.randint(1, T + 1, (), generator=gen))
            m[i, :n] = 1
            if kind == "single_left":
                m[i] = m[i].flip(0)
        else:  # turns between tool-output spans, then padding; row 1 opens with a tool span
            if i == N - 1:
                continue  # an empty response row
            t = int(i == 1) * int(torch.randint(1, 6, (), generator=gen))
            end = T - int(torch.randint(0, max(1, T // 4), (), generator=gen))
            while t < end:
                run = int(torch.randint(1, 25, (), generator=gen))
                m[i, t:min(t + run, end)] = 1
                t += run + int(torch.randint(1, 15, (), generator=gen))
    if m.sum() < 2:
        m[:, 0] = 1
    return m


def make_inputs(kind, N, T, dtype, seed=0):
    """Rewards and values on every token (nonzero on masked tokens too, which must not count)."""
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(N, T, generator=gen, dtype=F64).to(dtype)
    v = torch.randn(N, T, generator=gen, dtype=F64).to(dtype)
    return r, v, make_mask(kind, N, T, gen)


def _ids(p):
    return str(p).replace("torch.", "").replace("(", "").replace(")", "").replace(", ", "-")


# --------------------------------------------------------------------------- against the loops

@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("gamma_lam", GAMMA_LAM, ids=_ids)
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("T", (1, 7, 333), ids=lambda t: f"T{t}")
@pytest.mark.parametrize("kind", MASKS)
def test_gae_matches_reference(kind, T, dtype, gamma_lam, backend):
    r, v, m = make_inputs(kind, 6, T, dtype, seed=T)
    adv, ret = sv.compute_gae_advantage_return(r, v, m, *gamma_lam, backend=backend)
    exp_adv, exp_ret = ref_gae_outputs(r, v, m, *gamma_lam)
    assert adv.dtype == ret.dtype == dtype
    assert_close(adv, exp_adv, name="advantages")
    assert_close(ret, exp_ret, name="returns")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("gamma", (0.97, 1.0), ids=lambda g: f"gamma{g}")
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("T", (1, 7, 333), ids=lambda t: f"T{t}")
@pytest.mark.parametrize("kind", MASKS)
def test_reinforce_pp_matches_reference(kind, T, dtype, gamma, backend):
    r, _, m = make_inputs(kind, 6, T, dtype, seed=T + 1)
    adv, ret = sv.compute_reinforce_plus_plus_outcome_advantage(
        r, m, _Config(gamma=gamma), backend=backend, index=None)
    exp_adv, exp_ret = ref_rpp_outputs(r, m, gamma)
    assert adv.dtype == ret.dtype == dtype
    assert_close(adv, exp_adv, name="advantages")
    assert_close(ret, exp_ret, name="returns")


@pytest.mark.skipif(not INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
def test_triton_interpreted_matches_reference(dtype):
    r, v, m = make_inputs("multi_turn", 5, 333, dtype, seed=3)
    adv, ret = sv.compute_gae_advantage_return(r, v, m, 0.99, 0.95, backend="triton")
    for got, exp in zip((adv, ret), ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(got, exp)
    adv, ret = sv.compute_reinforce_plus_plus_outcome_advantage(
        r, m, _Config(gamma=0.97), backend="triton")
    for got, exp in zip((adv, ret), ref_rpp_outputs(r, m, 0.97)):
        assert_close(got, exp)


def test_multi_turn_worked_example():
    """Two generated tokens, a two-token tool output, one generated token, then padding."""
    r = torch.tensor([[0.0, 0.0, 5.0, 5.0, 1.0, 7.0]])  # rewards on masked tokens are ignored
    v = torch.tensor([[0.1, 0.2, 0.9, 0.9, 0.5, 3.0]])
    m = torch.tensor([[1, 1, 0, 0, 1, 0]])
    adv, ret = sv.compute_gae_advantage_return(r, v, m, gamma=0.5, lam=1.0)
    # A_4 = 1 - 0.5 = 0.5; A_1 = 0 + 0.5 * V_4 - 0.2 + 0.5 * A_4 = 0.3; A_0 = 0.5 * 0.2 - 0.1 + 0.15
    raw = torch.tensor([[0.15, 0.3, 0.5, 0.5, 0.5, 0.0]], dtype=F64)
    assert_close(ret, raw + v.double())
    assert_close(adv, ref_whiten(raw, m))
    _, returns = sv.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config(gamma=0.5))
    assert_close(returns, torch.tensor([[0.25, 0.5, 0.0, 0.0, 1.0, 0.0]], dtype=F64))


# --------------------------------------------------------------------------- dtypes and layouts

@pytest.mark.parametrize("mask_dtype", (torch.int64, torch.bool, torch.float32, torch.bfloat16),
                         ids=_ids)
def test_dtype_rules_follow_verls_arithmetic(mask_dtype):
    r, v, m = make_inputs("multi_turn", 4, 50, torch.float64, seed=5)
    r, v, m = r.bfloat16(), v.float(), m.to(mask_dtype)
    adv, ret = sv.compute_gae_advantage_return(r, v, m, 0.99, 0.95)
    assert adv.dtype == ret.dtype == torch.float32  # bf16 rewards + fp32 values
    for got, exp in zip((adv, ret), ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(got, exp)
    adv, ret = sv.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config(gamma=0.9))
    # verl: returns in the rewards' dtype; advantages * mask promote with a floating mask
    assert ret.dtype == torch.bfloat16
    assert adv.dtype == (torch.promote_types(torch.bfloat16, mask_dtype)
                         if mask_dtype.is_floating_point else torch.bfloat16)
    for got, exp in zip((adv, ret), ref_rpp_outputs(r, m, 0.9)):
        assert_close(got, exp, dtype=torch.bfloat16)


def test_non_contiguous_inputs():
    r, v, m = make_inputs("multi_turn", 6, 200, torch.float32, seed=7)
    r2, v2, m2 = (x.repeat_interleave(2, dim=1)[:, ::2] for x in (r, v, m))
    assert not r2.is_contiguous()
    for got, exp in zip(sv.compute_gae_advantage_return(r2, v2, m2, 0.99, 0.95),
                        ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(got, exp)


def test_masked_whiten_edge_cases():
    x = torch.tensor([[1.0, 2.0, float("nan"), 4.0], [float("inf"), 0.5, 3.0, -1.0]])
    m = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]])
    got = sv.masked_whiten(x, m)
    sel = m.bool()
    assert_close(got[sel], ref_whiten(x, m)[sel])  # the non-finite masked-out entries never count
    assert_close(sv.masked_whiten(x, m, shift_mean=False)[sel], ref_whiten(x, m, False)[sel])
    assert sv.masked_whiten(x.bfloat16(), m).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"selects 0 element\(s\)"):
        sv.masked_whiten(x, torch.zeros_like(m))
    one = torch.zeros_like(m)
    one[0, 0] = 1
    with pytest.raises(ValueError, match=r"selects 1 element\(s\)"):
        sv.masked_whiten(x, one)


def test_per_row_gamma_and_lambda_of_shape_bs():
    """verl's loops multiply gamma and lam into each step's [bs] column, so a [bs] tensor is a
    value per row there; scangen refused it (it does not broadcast to [bs, T])."""
    r, v, m = make_inputs("multi_turn", 5, 40, F64, seed=21)
    gamma = torch.tensor([0.5, 0.9, 1.0, 0.99, 0.0], dtype=F64)
    lam = torch.tensor([0.95, 1.0, 0.0, 0.5, 0.9], dtype=F64)
    for got, exp in zip(sv.compute_gae_advantage_return(r, v, m, gamma, lam),
                        ref_gae_outputs(r, v, m, gamma, lam)):
        assert_close(got, exp)
    config = _Config(gamma=gamma)
    for got, exp in zip(sv.compute_reinforce_plus_plus_outcome_advantage(r, m, config),
                        ref_rpp_outputs(r, m, gamma)):
        assert_close(got, exp)


def test_argument_errors_name_the_public_function():
    with pytest.raises(ValueError, match=r"^compute_reinforce_plus_plus_outcome_advantage\(\): "
                                         r"'response_mask' has shape \[2, 5\], expected \[2, 4\]"):
        sv.compute_reinforce_plus_plus_outcome_advantage(torch.ones(2, 4), torch.ones(2, 5),
                                                         _Config(gamma=1.0))


def test_masked_whiten_counts_as_verl_does():
    """verl adds the 1e-8 to the count in float32 unless the mask is float64 (there it stays),
    which shows on values of large mean and small spread: scangen added it in float64 for every
    mask (-0.702 / +0.709 where verl gives -+0.705 with an int mask; the verl audit's case).
    And a float mask weights the sums, as verl's masked_sum multiplies by it."""
    x = torch.tensor([1000.001, 999.999], dtype=F64)
    for mask, expected in ((torch.tensor([1, 1]), (0.7053456158585152, -0.7053456158585152)),
                           (torch.tensor([True, True]), (0.7053456158585152, -0.7053456158585152)),
                           (torch.tensor([1.0, 1.0]), (0.7053456158585152, -0.7053456158585152)),
                           (torch.tensor([1.0, 1.0], dtype=F64),
                            (0.7088635290366649, -0.7018101606060925))):
        got = sv.masked_whiten(x, mask)
        assert got.dtype == F64
        assert_close(got, torch.tensor(expected, dtype=F64), atol=1e-12, rtol=1e-12)
        assert_close(got, ref_whiten(x, mask), atol=1e-12, rtol=1e-12)
    g = torch.Generator().manual_seed(3)
    y = torch.randn(5, 40, generator=g, dtype=F64)
    weights = torch.rand(5, 40, generator=g) * (torch.rand(5, 40, generator=g) < 0.7)
    for shift in (True, False):
        assert_close(sv.masked_whiten(y, weights, shift), ref_whiten(y, weights, shift),
                     atol=1e-6, rtol=1e-6)  # float32 statistics: a float32 mask
        assert_close(sv.masked_whiten(y, weights.double(), shift),
                     ref_whiten(y, weights.double(), shift), atol=1e-12, rtol=1e-12)
    # an int mask weights by its values too, as verl's (values * mask).sum(): its 2s counted
    # once in the sums and twice in n, before
    ints = (torch.rand(5, 40, generator=g) * 3).long()
    assert_close(sv.masked_whiten(y, ints), ref_whiten(y, ints), atol=1e-6, rtol=1e-6)
    assert_close(sv.masked_whiten(torch.tensor([1., 2., 4., 7.]), torch.tensor([2, 1, 1, 0])),
                 torch.tensor([-0.7071, 0.0, 1.4142, 3.5355]), atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- registry and trainer

def _fake_core_algos():
    """verl's registry contract: a name maps to one function; registering another is an error."""
    registry = {}

    def register_adv_est(name):
        def decorator(fn):
            if name in registry and registry[name] != fn:
                raise ValueError(f"Adv estimator {name} has already been registered")
            registry[name] = fn
            return fn
        return decorator

    calls = []
    return types.SimpleNamespace(
        ADV_ESTIMATOR_REGISTRY=registry, register_adv_est=register_adv_est,
        get_adv_estimator_fn=registry.__getitem__, pf_calls=calls,
        compute_pf_ppo_reweight_data=lambda data, method, power: (
            calls.append((method, power)) or data))


def _fake_trainer():
    """A trainer module as register() sees it: ``compute_advantage`` with verl 0.9's signature."""
    seen = []

    def compute_advantage(data, adv_estimator, gamma=1.0, lam=1.0, num_repeat=1,
                          norm_adv_by_std_in_grpo=True, config=None):
        seen.append(adv_estimator)
        return data

    return types.SimpleNamespace(compute_advantage=compute_advantage, seen=seen,
                                 compute_response_mask=lambda data: data.batch["_mask"])


def test_registered_estimators_take_verls_calling_convention():
    core = _fake_core_algos()
    sv._install(core, [])
    sv._install(core, [])  # registering again is harmless
    # and after importlib.reload of this module (a notebook's autoreload): the registry holds the
    # old module's function objects, which verl's registry would refuse to replace
    for name, fn in list(core.ADV_ESTIMATOR_REGISTRY.items()):
        core.ADV_ESTIMATOR_REGISTRY[name] = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        core.ADV_ESTIMATOR_REGISTRY[name].__qualname__ = fn.__qualname__
    sv._install(core, [])
    r, v, m = make_inputs("multi_turn", 5, 60, torch.float32, seed=9)
    config = _Config(gamma=0.99, lam=0.95)
    # as verl's compute_advantage calls any registered estimator
    kwargs = dict(token_level_rewards=r, response_mask=m, config=config,
                  index=[str(i // 2) for i in range(5)], reward_baselines=torch.zeros(5))
    rpp = core.get_adv_estimator_fn(sv.REINFORCE_PP_NAME)(**kwargs)
    for got, exp in zip(rpp, ref_rpp_outputs(r, m, 0.99)):
        assert_close(got, exp)
    gae = core.get_adv_estimator_fn(sv.GAE_NAME)
    with pytest.raises(ValueError, match="scangen_gae: no values given"):
        gae(**kwargs)
    for got, exp in zip(gae(values=v, **kwargs), ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(got, exp)


def test_trainer_routes_values_to_scangen_gae():
    core, trainer = _fake_core_algos(), _fake_trainer()
    original = trainer.compute_advantage
    sv._install(core, [trainer])
    sv._install(core, [trainer])  # wrapped once
    assert trainer.compute_advantage.__wrapped__ is original
    r, v, m = make_inputs("single_right", 4, 40, torch.float32, seed=11)
    data = types.SimpleNamespace(batch={"token_level_rewards": r, "values": v, "_mask": m})
    config = _Config(gamma=0.99, lam=0.95, use_pf_ppo=True,
                     pf_ppo={"reweight_method": "pow", "weight_pow": 2.0})
    out = trainer.compute_advantage(data, adv_estimator=sv.GAE_NAME, gamma=0.99, lam=0.95,
                                    num_repeat=1, norm_adv_by_std_in_grpo=True, config=config)
    assert out is data and trainer.seen == [] and core.pf_calls == [("pow", 2.0)]
    assert data.batch["response_mask"] is m  # the fallback verl's own 'gae' branch takes
    for key, exp in zip(("advantages", "returns"), ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(data.batch[key], exp)
    trainer.compute_advantage(data, "grpo", config=config)
    assert trainer.seen == ["grpo"]
    # the critic left off: verl enables it by itself only for its own 'gae'
    no_critic = types.SimpleNamespace(batch={"token_level_rewards": r, "_mask": m})
    with pytest.raises(ValueError, match=r"critic\.enable=True"):
        trainer.compute_advantage(no_critic, adv_estimator=sv.GAE_NAME, config=config)


def test_register_without_verl_raises_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", None)
    with pytest.raises(ImportError, match=r"needs verl.*pip install verl"):
        sv.register()


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                  os.environ.get("PYTHONPATH")])))


def test_module_imports_without_verl():
    code = ("import sys; sys.modules['verl'] = None\n"
            "import torch\n"
            "from scangen.integrations import verl as sv\n"
            "r = torch.ones(2, 3); m = torch.ones(2, 3, dtype=torch.int64)\n"
            "adv, ret = sv.compute_gae_advantage_return(r, r, m, 0.9, 0.9, backend='torch')\n"
            "print(ret[0, 0].item())\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    # A = (1.629, 0.9, 0) for r = V = 1 and gamma = lam = 0.9; returns = A + V
    assert abs(float(out.stdout.split()[-1]) - 2.629) < 1e-5


def test_example_script_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "verl_gae.py"), "--bs", "8",
                          "--length", "300"], env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "REINFORCE++ max abs error vs float64 loop" in out.stdout


# --------------------------------------------------------------------------- against verl itself

@needs_verl
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=_ids)
@pytest.mark.parametrize("kind", MASKS)
def test_matches_verl(kind, dtype):
    r, v, m = make_inputs(kind, 8, 333, dtype, seed=13)
    tol = TOL_VERL[dtype]
    for got, exp in zip(sv.compute_gae_advantage_return(r, v, m, 0.99, 0.95),
                        verl_core.compute_gae_advantage_return(r, v, m, 0.99, 0.95)):
        assert got.dtype == exp.dtype
        assert_close(got, exp, **tol)
    config = _Config(gamma=0.97)
    for got, exp in zip(sv.compute_reinforce_plus_plus_outcome_advantage(r, m, config),
                        verl_core.compute_reinforce_plus_plus_outcome_advantage(r, m, config)):
        assert got.dtype == exp.dtype
        assert_close(got, exp, **tol)
    for shift in (True, False):
        assert_close(sv.masked_whiten(r, m, shift), verl_F.masked_whiten(r, m, shift), **tol)


@needs_verl
def test_per_row_gamma_matches_verl():
    r, v, m = make_inputs("multi_turn", 4, 60, torch.float32, seed=23)
    gamma, lam = torch.tensor([0.5, 0.9, 1.0, 0.99]), torch.tensor([0.95, 1.0, 0.0, 0.5])
    for got, exp in zip(sv.compute_gae_advantage_return(r, v, m, gamma, lam),
                        verl_core.compute_gae_advantage_return(r, v, m, gamma, lam)):
        assert_close(got, exp, **TOL_VERL[torch.float32])
    config = _Config(gamma=gamma)
    for got, exp in zip(sv.compute_reinforce_plus_plus_outcome_advantage(r, m, config),
                        verl_core.compute_reinforce_plus_plus_outcome_advantage(r, m, config)):
        assert_close(got, exp, **TOL_VERL[torch.float32])


@needs_verl
@pytest.mark.parametrize("mask_dtype", (torch.int64, torch.bool, torch.float32, torch.float64,
                                        torch.bfloat16), ids=_ids)
def test_masked_whiten_matches_verls_arithmetic(mask_dtype):
    """Values of large mean and small spread, where verl's count arithmetic shows, and a
    weighted float mask, against verl's masked_whiten."""
    g = torch.Generator().manual_seed(19)
    x = 1000.0 + 1e-3 * torch.randn(6, 300, generator=g, dtype=torch.float64)
    m = torch.rand(6, 300, generator=g) < 0.6
    m = m if mask_dtype == torch.bool else m.to(mask_dtype)
    for shift in (True, False):
        got, exp = sv.masked_whiten(x, m, shift), verl_F.masked_whiten(x, m, shift)
        assert got.dtype == exp.dtype
        assert_close(got, exp, atol=1e-9, rtol=1e-9)
    if mask_dtype.is_floating_point:
        w = (torch.rand(6, 300, generator=g) * m).to(mask_dtype)
        assert_close(sv.masked_whiten(x, w), verl_F.masked_whiten(x, w), atol=1e-9, rtol=1e-9)
    elif mask_dtype != torch.bool:  # int weights count as verl counts them
        w = m * torch.randint(1, 4, m.shape, generator=g).to(mask_dtype)
        assert_close(sv.masked_whiten(x, w), verl_F.masked_whiten(x, w), atol=1e-9, rtol=1e-9)


@needs_verl
def test_register_with_verl():
    sv.register()
    sv.register()
    r, v, m = make_inputs("multi_turn", 6, 100, torch.float32, seed=17)
    config = _Config(gamma=0.99, lam=0.95)
    fn = verl_core.get_adv_estimator_fn(sv.REINFORCE_PP_NAME)
    exp = verl_core.get_adv_estimator_fn("reinforce_plus_plus")(
        token_level_rewards=r, response_mask=m, config=config)
    for got, e in zip(fn(token_level_rewards=r, response_mask=m, config=config), exp):
        assert_close(got, e, **TOL_VERL[torch.float32])
    gae = verl_core.get_adv_estimator_fn(sv.GAE_NAME)(
        token_level_rewards=r, response_mask=m, config=config, values=v)
    for got, e in zip(gae, verl_core.compute_gae_advantage_return(r, v, m, 0.99, 0.95)):
        assert_close(got, e, **TOL_VERL[torch.float32])


@needs_verl
def test_verl_trainer_compute_advantage_routes_scangen_gae():
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    from verl import DataProto
    sv.register()
    r, v, m = make_inputs("multi_turn", 6, 100, torch.float32, seed=19)
    config = _Config(gamma=0.99, lam=0.95, use_pf_ppo=False)
    got = ray_trainer.compute_advantage(
        DataProto.from_dict({"token_level_rewards": r, "values": v, "response_mask": m}),
        adv_estimator=sv.GAE_NAME, gamma=0.99, lam=0.95, config=config)
    exp = ray_trainer.compute_advantage(
        DataProto.from_dict({"token_level_rewards": r, "values": v, "response_mask": m}),
        adv_estimator="gae", gamma=0.99, lam=0.95, config=config)
    for key in ("advantages", "returns"):
        assert_close(got.batch[key], exp.batch[key], **TOL_VERL[torch.float32])


# --------------------------------------------------------------------------- CUDA

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("kind", ("single_right", "multi_turn"))
def test_cuda_matches_reference(kind, dtype):
    r, v, m = make_inputs(kind, 64, 4097, dtype, seed=23)
    r, v, m = r.cuda(), v.cuda(), m.cuda()
    adv, ret = sv.compute_gae_advantage_return(r, v, m, 0.99, 0.95)
    assert adv.is_cuda and adv.dtype == dtype
    for got, exp in zip((adv, ret), ref_gae_outputs(r, v, m, 0.99, 0.95)):
        assert_close(got, exp)
    adv, ret = sv.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config(gamma=0.97))
    assert ret.is_cuda and ret.dtype == dtype
    for got, exp in zip((adv, ret), ref_rpp_outputs(r, m, 0.97)):
        assert_close(got, exp)


@pytest.mark.gpu
@needs_verl
def test_cuda_matches_verl():
    r, v, m = (x.cuda() for x in make_inputs("multi_turn", 16, 1000, torch.float32, seed=29))
    for got, exp in zip(sv.compute_gae_advantage_return(r, v, m, 0.99, 0.95),
                        verl_core.compute_gae_advantage_return(r, v, m, 0.99, 0.95)):
        assert_close(got, exp, **TOL_VERL[torch.float32])


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("junk", (float("nan"), float("inf")), ids=("nan", "inf"))
def test_placeholders_on_masked_tokens_change_nothing(junk, backend):
    """NaN or inf rewards and values on masked tokens (tool output, padding) reach no output at a
    response token, and no GAE advantage anywhere: bit for bit the call with zeros there."""
    r, v, m = make_inputs("multi_turn", 6, 57, torch.float32, seed=5)
    skipped = m == 0
    assert skipped.any() and (~skipped).any()
    r0, v0 = r.masked_fill(skipped, 0.0), v.masked_fill(skipped, 0.0)
    adv, ret = sv.compute_gae_advantage_return(r0, v0, m, 0.99, 0.95, backend=backend)
    rpp_adv, rpp_ret = sv.compute_reinforce_plus_plus_outcome_advantage(
        r0, m, _Config(gamma=0.97), backend=backend)
    for rj, vj in ((r0.masked_fill(skipped, junk), v0), (r0, v0.masked_fill(skipped, junk))):
        got_adv, got_ret = sv.compute_gae_advantage_return(rj, vj, m, 0.99, 0.95, backend=backend)
        assert torch.equal(got_adv, adv)
        assert torch.equal(got_ret[~skipped], ret[~skipped])
    got = sv.compute_reinforce_plus_plus_outcome_advantage(
        r0.masked_fill(skipped, junk), m, _Config(gamma=0.97), backend=backend)
    assert torch.equal(got[0], rpp_adv) and torch.equal(got[1], rpp_ret)


def test_real_verl_cases_in_verls_environment():
    """The cases against verl itself, run by the Python of an environment that has verl
    (SCANGEN_VERL_PYTHON: .ci/run builds it from .ci/verl-requirements.txt, since verl and
    TorchRL pin incompatible tensordicts): every one of them must pass there, none skipped but
    those that need a GPU."""
    if verl_core is not None:
        pytest.skip("verl imports in this environment: its cases ran here")
    if not VERL_PYTHON:
        pytest.skip("SCANGEN_VERL_PYTHON is not set (.ci/run sets it)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([VERL_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "-m", "verl and not gpu", str(Path(__file__))],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    summary = out.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 10 and "skipped" not in summary, out[-4000:]
