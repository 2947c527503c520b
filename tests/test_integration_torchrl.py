"""scangen.integrations.torchrl against TorchRL's own estimators, on the same TensorDicts.

Every test builds one TensorDict, runs TorchRL's estimator and the drop-in of the same name on
clones of it, and compares every key written. The rollouts are random, with terminations and
truncations, batched envs ``[B, T]`` and leading batch dims ``[B1, B2, T]``; ``next`` holds the
true successor (``obs[t+1]`` inside an episode, a fresh observation where done), as collectors
write it. Where the values are precomputed, ``("next", "state_value")`` is drawn independently of
``state_value``, so an estimator that read ``state_value[t+1]`` for the successor would fail.
"""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.modules import ProbabilisticActor  # noqa: E402
from torchrl.objectives import ClipPPOLoss  # noqa: E402
from torchrl.objectives import value as trl  # noqa: E402

from scangen.integrations import torchrl as sg  # noqa: E402
from conftest import pyproject_extra  # noqa: E402

# fp32: TorchRL's scans (a loop, or a convolution with gamma*lambda powers) and scangen's
# (recursive doubling) round differently; at 33 steps of unit-scale data the gap is ~5e-7.
ATOL, RTOL = 2e-5, 1e-5
F = 3
BATCHES = [(4,), (2, 3)]
BATCH_IDS = ["B4", "B2x3"]


def _rollout(batch, T, *, seed=0, p_done=0.15):
    g = torch.Generator().manual_seed(seed)
    shape = (*batch, T)
    done = torch.rand(*shape, 1, generator=g) < p_done
    terminated = done & (torch.rand(*shape, 1, generator=g) < 0.5)
    obs = torch.randn(*batch, T + 1, F, generator=g)
    final = torch.randn(*shape, F, generator=g)  # the true successor where the episode ended
    return TensorDict({
        "obs": obs[..., :-1, :],
        "action_log_prob": 0.3 * torch.randn(*shape, 1, generator=g),
        "next": {"obs": torch.where(done, final, obs[..., 1:, :]),
                 "reward": torch.randn(*shape, 1, generator=g),
                 "done": done, "terminated": terminated, "truncated": done & ~terminated},
    }, list(shape))


def _precomputed(td, seed=1):
    """Values in the tensordict, the successor's drawn independently of state_value[t+1]."""
    g = torch.Generator().manual_seed(seed)
    td["state_value"] = torch.randn(td["next", "reward"].shape, generator=g)
    td["next", "state_value"] = torch.randn(td["next", "reward"].shape, generator=g)
    return td


def _critic(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return TensorDictModule(net, ["obs"], ["state_value"])


def _actor(seed=0):
    torch.manual_seed(seed)
    return ProbabilisticActor(TensorDictModule(torch.nn.Linear(F, 4), ["obs"], ["logits"]),
                              in_keys=["logits"], return_log_prob=True,
                              distribution_class=torch.distributions.Categorical)


def _compare(ref_cls, ours_cls, td, keys=("advantage", "value_target"), **kw):
    ref = ref_cls(**kw)(td.clone())
    ours = ours_cls(**{k: v for k, v in kw.items() if k != "vectorized"})(td.clone())
    for key in keys:
        assert ours[key].shape == ref[key].shape, key
        torch.testing.assert_close(ours[key], ref[key], atol=ATOL, rtol=RTOL,
                                   msg=lambda m, key=key: f"{key}: {m}")
    return ref, ours


@pytest.mark.parametrize("shifted", [False, True], ids=["two-calls", "shifted"])
@pytest.mark.parametrize("vectorized", [True, False], ids=["vec", "loop"])
@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator"])
def test_matches_torchrl_with_value_network(name, batch, vectorized, shifted):
    _compare(getattr(trl, name), getattr(sg, name), _rollout(batch, 33, seed=len(batch)),
             keys=("advantage", "value_target", "state_value", ("next", "state_value")),
             gamma=0.9, lmbda=0.8, value_network=_critic(), vectorized=vectorized,
             shifted=shifted)


@pytest.mark.parametrize("shifted", [False, True], ids=["two-calls", "shifted"])
@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
def test_vtrace_matches_torchrl(batch, shifted):
    kw = dict(gamma=0.9, c_thresh=0.8, rho_thresh=1.2, value_network=_critic(),
              actor_network=_actor(), shifted=shifted)
    _compare(trl.VTrace, sg.VTrace, _rollout(batch, 33, seed=2), **kw)
    assert sg.VTrace(**kw).in_keys == trl.VTrace(**kw).in_keys  # rewritten for dynamo


@pytest.mark.parametrize("T", [1, 2, 57])
@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_precomputed_values_whose_successors_do_not_chain(name, T):
    """TorchRL reads ("next", "state_value") at every step, inside episodes too."""
    kw = dict(gamma=0.95, value_network=None)
    kw.update(actor_network=_actor(), c_thresh=0.9) if name == "VTrace" else kw.update(lmbda=0.7)
    _compare(getattr(trl, name), getattr(sg, name), _precomputed(_rollout((5,), T, seed=T)),
             **kw)


@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_terminated_where_not_done(name):
    """TorchRL accepts ("next", "terminated") set where ("next", "done") is not (hand-made
    data: its environments set done wherever terminated): no bootstrap there, and the trace runs
    on. TD(lambda) went through compute_lambda_returns, which cut the trace at such steps."""
    td = _precomputed(_rollout((4,), 29, seed=15))
    g = torch.Generator().manual_seed(16)
    td["next", "terminated"] = torch.rand(td["next", "done"].shape, generator=g) < 0.2
    assert (td["next", "terminated"] & ~td["next", "done"]).sum() >= 5
    kw = dict(gamma=0.9, value_network=None)
    kw.update(actor_network=_actor(), c_thresh=0.9) if name == "VTrace" else kw.update(lmbda=0.8)
    _compare(getattr(trl, name), getattr(sg, name), td, **kw)


@pytest.mark.parametrize("shape", ["row", "step"])
@pytest.mark.parametrize("param", ["gamma", "lmbda"])
@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator"])
def test_tensor_gamma_and_lambda(name, param, shape):
    """Per-row [B, 1, 1] and per-step [B, T, 1] discounts. TorchRL's vectorized TD(lambda)
    rejects most of these shapes, so the reference is its loop (vectorized=False)."""
    B, T = 4, 21
    g = torch.Generator().manual_seed(7)
    value = 0.7 + 0.25 * torch.rand((B, 1, 1) if shape == "row" else (B, T, 1), generator=g)
    kw = {"gamma": 0.9, "lmbda": 0.8, param: value}
    _compare(getattr(trl, name), getattr(sg, name), _rollout((B,), T, seed=3),
             value_network=_critic(), vectorized=False, **kw)


def test_steps_to_next_obs_and_averaging():
    td = _rollout((3,), 25, seed=4)
    td["steps_to_next_obs"] = torch.randint(1, 4, (3, 25, 1))
    kw = dict(gamma=0.9, value_network=_critic())
    _compare(trl.GAE, sg.GAE, td, lmbda=0.8, average_gae=True, **kw)
    _compare(trl.TDLambdaEstimator, sg.TDLambdaEstimator, td, lmbda=0.8, average_rewards=True,
             keys=("advantage", "value_target", ("next", "reward")), **kw)
    _compare(trl.VTrace, sg.VTrace, td, actor_network=_actor(), average_adv=True, **kw)


def test_auto_reset_env():
    _compare(trl.GAE, sg.GAE, _rollout((3,), 30, seed=5), gamma=0.9, lmbda=0.8,
             value_network=_critic(), auto_reset_env=True)


@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_time_dim_zero(name):
    """A time-major tensordict [T, B], time_dim=0 (in the constructor and per call)."""
    td = _rollout((4,), 19, seed=6)
    td = torch.stack(td.unbind(1), 0)  # [T, B]
    kw = dict(gamma=0.9, value_network=_critic(), time_dim=0)
    kw.update(actor_network=_actor()) if name == "VTrace" else kw.update(lmbda=0.8)
    _compare(getattr(trl, name), getattr(sg, name), td, **kw)
    kw.pop("time_dim")
    ref = getattr(trl, name)(**kw)(td.clone(), time_dim=0) if name != "TDLambdaEstimator" else None
    if ref is not None:
        ours = getattr(sg, name)(**kw)(td.clone(), time_dim=0)
        torch.testing.assert_close(ours["advantage"], ref["advantage"], atol=ATOL, rtol=RTOL)


def test_set_keys_and_unpacked_call():
    td = _rollout((3,), 20, seed=8)
    for old, new in (("reward", "r"), ("done", "d"), ("terminated", "term")):
        td.rename_key_(("next", old), ("next", new))
    critic = TensorDictModule(_critic().module, ["obs"], ["v"])
    ests = [cls(gamma=0.9, lmbda=0.8, value_network=critic) for cls in (trl.GAE, sg.GAE)]
    for est in ests:
        est.set_keys(advantage="adv", value_target="vt", value="v", reward="r", done="d",
                     terminated="term")
    ref, ours = (est(td.clone()) for est in ests)
    for key in ("adv", "vt", "v"):
        torch.testing.assert_close(ours[key], ref[key], atol=ATOL, rtol=RTOL)
    # the kwargs form of the call (tensordict.nn.dispatch): returns (adv, vt)
    kwargs = dict(obs=td["obs"], next_obs=td["next", "obs"], next_r=td["next", "r"],
                  next_d=td["next", "d"], next_term=td["next", "term"])
    for a, b in zip(ests[1](**kwargs), ests[0](**kwargs)):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_differentiable_gradients_match(name):
    """differentiable=True with values computed outside (TorchRL holds a value_network's own
    parameters out of the graph): the gradient reaches the critic through scangen's op exactly
    as through TorchRL's estimator."""
    td = _rollout((3,), 20, seed=9)
    grads = []
    for mod in (trl, sg):
        critic, x = _critic(), td.clone()
        x["state_value"] = critic.module(x["obs"])
        x["next", "state_value"] = critic.module(x["next", "obs"])
        kw = dict(gamma=0.9, value_network=None, differentiable=True)
        kw.update(actor_network=_actor()) if name == "VTrace" else kw.update(lmbda=0.8)
        out = getattr(mod, name)(**kw)(x)
        (out["advantage"].square().sum() + out["value_target"].sum()).backward()
        grads.append([p.grad for p in critic.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_gae_value_estimate():
    td = _rollout((3,), 20, seed=10)
    kw = dict(gamma=0.9, lmbda=0.8, value_network=_critic())
    torch.testing.assert_close(sg.GAE(**kw).value_estimate(td.clone()),
                               trl.GAE(**kw).value_estimate(td.clone()), atol=ATOL, rtol=RTOL)


def test_ppo_loss_make_value_estimator():
    """A TorchRL loss takes the drop-in through make_value_estimator (PPO passes the critic's
    parameters as params and target_params)."""
    td = _rollout((3,), 20, seed=11)
    td["action"] = torch.randint(0, 4, (3, 20))
    td["action_log_prob"] = td["action_log_prob"].squeeze(-1)  # the shape the actor writes
    losses = []
    for cls in (trl.GAE, sg.GAE):
        critic = _critic()
        loss = ClipPPOLoss(_actor(), critic)
        loss.make_value_estimator(cls(gamma=0.9, lmbda=0.8, value_network=critic))
        assert type(loss.value_estimator) is cls
        losses.append(loss(td.clone()))
    for key in ("loss_objective", "loss_critic"):
        torch.testing.assert_close(losses[1][key], losses[0][key], atol=ATOL, rtol=RTOL)


class _CountingBackend:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_torch_compile_fullgraph(name):
    """fullgraph=True: no graph break, one graph, TorchRL's numbers. GAE calls its critic inside
    the graph (TorchRL 0.14's own estimators break there, on their NaN check: the drop-ins trace
    it branch-free); the others read precomputed values, V-trace calls its actor."""
    torch._dynamo.reset()
    td = _rollout((4,), 24, seed=12)
    if name == "GAE":
        kw = dict(gamma=0.9, lmbda=0.8, value_network=_critic())
    elif name == "TDLambdaEstimator":
        kw = dict(gamma=0.9, lmbda=0.8, value_network=None)
        td = _precomputed(td)
    else:
        kw = dict(gamma=0.9, value_network=None, actor_network=_actor())
        td = _precomputed(td)
    est, ref = getattr(sg, name)(**kw), getattr(trl, name)(**kw)
    counting = _CountingBackend()
    step = torch.compile(lambda t: est(t), fullgraph=True, backend=counting)
    got, expected = step(td.clone()), ref(td.clone())
    for key in ("advantage", "value_target"):
        torch.testing.assert_close(got[key], expected[key], atol=ATOL, rtol=RTOL)
    assert counting.graphs == 1


def test_triton_kernels_of_the_specs():
    """The compiled specs' Triton kernels (on CUDA, or the interpreter on CPU) agree too."""
    import os
    if not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"):
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    td = _precomputed(_rollout((3,), 37, seed=13)).to(device)
    actor = _actor().to(device)
    for ref_cls, cls, kw in ((trl.GAE, sg.GAE, dict(lmbda=0.8)),
                             (trl.TDLambdaEstimator, sg.TDLambdaEstimator, dict(lmbda=0.8)),
                             (trl.VTrace, sg.VTrace, dict(actor_network=actor))):
        ref = ref_cls(gamma=0.9, value_network=None, **kw)(td.clone())
        ours = cls(gamma=0.9, value_network=None, backend="triton", **kw)(td.clone())
        for key in ("advantage", "value_target"):
            torch.testing.assert_close(ours[key], ref[key], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["GAE", "TDLambdaEstimator", "VTrace"])
def test_float64(name):
    td = _precomputed(_rollout((3,), 30, seed=14)).apply(
        lambda x: x.double() if x.is_floating_point() else x)
    # float64 buffers: with float ones, TorchRL's gamma * lmbda is a float32 product
    f64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    kw = dict(gamma=f64(0.97), value_network=None)
    kw.update(actor_network=_actor().double()) if name == "VTrace" else kw.update(lmbda=f64(0.9))
    ref, ours = _compare(getattr(trl, name), getattr(sg, name), td, **kw)
    assert ours["advantage"].dtype == torch.float64
    torch.testing.assert_close(ours["advantage"], ref["advantage"], atol=1e-12, rtol=1e-12)


def test_example_script(capsys):
    path = Path(__file__).resolve().parent.parent / "examples" / "torchrl_gae.py"
    spec = importlib.util.spec_from_file_location("torchrl_gae_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main() < 1e-5
    assert "max |scangen - torchrl|" in capsys.readouterr().out


def test_import_error_names_what_to_install(monkeypatch):
    """The libraries themselves, in the versions the integration supports (scangen is not on
    PyPI: "scangen[torchrl]" there is another project), and the checkout's extra."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("torchrl", "tensordict")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "scangen.integrations.torchrl")
    with pytest.raises(ImportError) as err:
        import scangen.integrations.torchrl  # noqa: F401
    message = str(err.value)
    for req in pyproject_extra("torchrl"):  # pyproject.toml's versions, each quoted
        assert f'"{req}"' in message, (req, message)
    assert 'pip install -e ".[torchrl]"' in message, message


def test_signatures_show_torchrls_arguments_and_backend():
    """help() and IDEs see TorchRL's keyword arguments plus ``backend``, not
    ``(*, backend=None, **kwargs)``; each drop-in's list is its TorchRL class's."""
    import inspect

    from torchrl.objectives.value import advantages as adv

    from scangen.integrations import torchrl as sg

    for ours, theirs in ((sg.GAE, adv.GAE), (sg.TDLambdaEstimator, adv.TDLambdaEstimator),
                         (sg.VTrace, adv.VTrace)):
        got = inspect.signature(ours).parameters
        want = inspect.signature(theirs).parameters
        assert list(got) == list(want) + ["backend"], (ours, list(got))
        assert got["backend"].kind is inspect.Parameter.KEYWORD_ONLY
        assert got["backend"].default is None
    assert {"gamma", "lmbda", "value_network"} <= set(inspect.signature(sg.GAE).parameters)
