"""scangen.integrations.sb3 against the real Stable-Baselines3 (skipped where it is not installed).

* The buffers' ``compute_returns_and_advantage`` gives SB3's own buffer's advantages and returns
  on random rollouts (episode starts, dones at the window end, several n_envs, float32), and
  through DictRolloutBuffer too.
* SB3's timeout (the bootstrap folded into the reward) equals compute_gae's truncation.
* PPO on CartPole-v1 trained with SB3's buffer and with scangen's, from one seed, follows the
  same learning curve: the same episodes, the same logged losses to float32 rounding.
* Without SB3 the module's ImportError names the extra to install.
"""
import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sb3 = pytest.importorskip("stable_baselines3")
gym = pytest.importorskip("gymnasium")

from stable_baselines3.common import buffers as sb3_buffers  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import KVWriter, Logger  # noqa: E402

import scangen  # noqa: E402
from scangen.integrations import sb3 as scangen_sb3  # noqa: E402
from scangen.testing import assert_close  # noqa: E402
from conftest import pyproject_extra  # noqa: E402

# Tolerances, as multiples of the output's scale max(1, max|A|) (scangen.testing.assert_close).
# SB3's loop runs in float32, serially; scangen's torch backend in float32 by log-depth doubling,
# its numba backend serially in float32 (the call's accumulation type): the same terms summed in
# different orders, so no float32 result is exact. Each is checked against SB3's own loop run in
# float64, within the project's float32 tolerance (atol 1e-5 x scale, rtol 1e-4). Measured max
# abs error / scale at 1cb2c3c (docs/integrations/sb3.md): on the random rollouts below 1.4e-6
# (torch), 7.7e-7 (numba) and 1.2e-6 for SB3 itself; in the long-horizon case (2048 steps, no
# episode end, gamma 0.999, lambda 1) 8.6e-6 (torch), 5.7e-6 (numba) and 5.5e-6 (SB3). Against
# each other the two float32 results may differ by the sum of both errors: twice the bound.
TOL_F64 = dict(atol=1e-5, rtol=1e-4)
TOL_SB3 = dict(atol=2e-5, rtol=2e-4)

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
DICT_OBS = gym.spaces.Dict({"a": OBS, "b": gym.spaces.Box(0.0, 1.0, (2, 2), dtype=np.float32)})
ACT = gym.spaces.Discrete(2)


def _rollout(n_steps, n_envs, start_rate, seed):
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((n_steps, n_envs), dtype=np.float32)
    values = rng.standard_normal((n_steps, n_envs), dtype=np.float32)
    starts = (rng.random((n_steps, n_envs)) < start_rate).astype(np.float32)
    starts[0] = 1.0  # SB3 never reads row 0 (it gates the edge into the window); neither may we
    last_values = torch.from_numpy(rng.standard_normal((n_envs, 1), dtype=np.float32))
    dones = np.arange(n_envs) % 2 == 1  # half the envs end their episode at the window's end
    return rewards, values, starts, last_values, dones


def _filled(cls, obs_space, data, gamma, lam, dtype=np.float32):
    rewards, values, starts, last_values, dones = data
    n_steps, n_envs = rewards.shape
    buf = cls(n_steps, obs_space, ACT, device="cpu", gamma=gamma, gae_lambda=lam, n_envs=n_envs)
    if dtype == np.float32:  # as add() fills them: in place
        buf.rewards[:], buf.values[:], buf.episode_starts[:] = rewards, values, starts
    else:  # SB3's loop, unchanged, on float64 arrays: the reference
        buf.rewards, buf.values = rewards.astype(dtype), values.astype(dtype)
        buf.episode_starts = starts.astype(dtype)
        buf.advantages = buf.advantages.astype(dtype)
        last_values = last_values.double()
    buf.compute_returns_and_advantage(last_values, dones)
    return torch.from_numpy(np.asarray(buf.advantages)), torch.from_numpy(np.asarray(buf.returns))


PARAMS = [(0.99, 0.95), (0.9, 0.5), (0.999, 1.0)]
SHAPES = [(1, 1), (7, 3), (256, 1), (256, 4), (333, 13), (2048, 8)]


@pytest.mark.parametrize("gamma,lam", PARAMS, ids=[f"gamma{g}-lambda{l}" for g, l in PARAMS])
@pytest.mark.parametrize("n_steps,n_envs", SHAPES, ids=[f"T{t}-N{n}" for t, n in SHAPES])
def test_buffer_matches_sb3(n_steps, n_envs, gamma, lam):
    data = _rollout(n_steps, n_envs, start_rate=0.05, seed=n_steps * 100 + n_envs)
    adv, ret = _filled(scangen_sb3.RolloutBuffer, OBS, data, gamma, lam)
    adv_sb3, ret_sb3 = _filled(sb3_buffers.RolloutBuffer, OBS, data, gamma, lam)
    adv_f64, ret_f64 = _filled(sb3_buffers.RolloutBuffer, OBS, data, gamma, lam, np.float64)
    assert adv.dtype == ret.dtype == torch.float32
    assert_close(adv, adv_sb3, **TOL_SB3, name="advantages vs SB3")
    assert_close(ret, ret_sb3, **TOL_SB3, name="returns vs SB3")
    assert_close(adv, adv_f64, **TOL_F64, name="advantages vs SB3 in float64")
    assert_close(ret, ret_f64, **TOL_F64, name="returns vs SB3 in float64")
    assert_close(adv_sb3, adv_f64, **TOL_F64, name="SB3's own advantages vs float64")


def test_buffer_matches_sb3_long_horizon():
    data = _rollout(2048, 16, start_rate=0.0, seed=1)
    adv, ret = _filled(scangen_sb3.RolloutBuffer, OBS, data, 0.999, 1.0)
    adv_sb3, ret_sb3 = _filled(sb3_buffers.RolloutBuffer, OBS, data, 0.999, 1.0)
    adv_f64, _ = _filled(sb3_buffers.RolloutBuffer, OBS, data, 0.999, 1.0, np.float64)
    assert_close(adv, adv_sb3, **TOL_SB3, name="advantages vs SB3")
    assert_close(ret, ret_sb3, **TOL_SB3, name="returns vs SB3")
    assert_close(adv, adv_f64, **TOL_F64, name="advantages vs SB3 in float64")
    assert_close(adv_sb3, adv_f64, **TOL_F64, name="SB3's own advantages vs float64")


@pytest.mark.parametrize("start_rate", [0.0, 0.5, 1.0])
def test_dict_buffer_matches_sb3(start_rate):
    data = _rollout(64, 5, start_rate, seed=7)
    adv, ret = _filled(scangen_sb3.DictRolloutBuffer, DICT_OBS, data, 0.99, 0.95)
    adv_sb3, ret_sb3 = _filled(sb3_buffers.DictRolloutBuffer, DICT_OBS, data, 0.99, 0.95)
    assert_close(adv, adv_sb3, **TOL_SB3, name="advantages vs SB3")
    assert_close(ret, ret_sb3, **TOL_SB3, name="returns vs SB3")


def test_sb3_timeout_is_a_truncation_with_its_bootstrap():
    # docs/integrations/sb3.md: PPO folds gamma * V(terminal obs) into a timed-out step's reward
    # and flags it done; compute_gae's own form of that step is truncateds + bootstrap_values.
    rewards, values, starts, last, dones = data = _rollout(64, 4, 0.1, seed=11)
    rng = np.random.default_rng(12)
    v_term = rng.standard_normal(rewards.shape, dtype=np.float32)
    ended = np.concatenate([starts[1:], dones[None].astype(np.float32)]) == 1  # step t ended
    timeout = ended & (rng.random(rewards.shape) < 0.5)
    assert timeout.sum() > 5 and (ended & ~timeout).sum() > 5
    folded = (rewards + np.where(timeout, np.float32(0.99) * v_term, 0)).astype(np.float32)
    adv_sb3, _ = _filled(sb3_buffers.RolloutBuffer, OBS, (folded, *data[1:]), 0.99, 0.95)
    boot = np.where(timeout, v_term, 0).astype(np.float32)
    boot[-1] = np.where(timeout[-1], v_term[-1], last.numpy().ravel())
    adv = scangen.compute_gae(
        torch.from_numpy(rewards), torch.from_numpy(values), torch.from_numpy(ended & ~timeout),
        torch.from_numpy(timeout), gamma=0.99, lambda_=0.95,
        bootstrap_values=torch.from_numpy(boot), time_dim=0)
    assert_close(adv, adv_sb3, **TOL_SB3, name="truncation vs SB3's folded timeout")


def test_buffer_writes_in_place_and_survives_a_rebound_episode_starts():
    data = _rollout(50, 3, 0.1, seed=3)
    buf = scangen_sb3.RolloutBuffer(50, OBS, ACT, device="cpu", n_envs=3)
    advantages, returns = buf.advantages, buf.returns
    buf.rewards[:], buf.values[:] = data[0], data[1]
    buf.episode_starts = data[2].copy()  # a caller's own array, not the buffer's view
    buf.compute_returns_and_advantage(data[3], data[4])
    assert buf.advantages is advantages and buf.returns is returns
    expected = _filled(sb3_buffers.RolloutBuffer, OBS, data, buf.gamma, buf.gae_lambda)
    assert_close(torch.from_numpy(buf.advantages), expected[0], **TOL_SB3, name="advantages")
    buf.reset()  # a fresh rollout goes back to the shifted view
    assert np.shares_memory(buf.episode_starts, buf._starts_ext)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_buffer_copied_in_the_middle_of_a_rollout(how):
    """A copied or unpickled buffer's episode_starts is no longer a view of the array the scan
    reads (a copy does not keep one array a view of another), so the episode starts add() wrote
    after the copy were lost: advantages off by up to 2.6 (the integration audit's case)."""
    import copy
    import pickle
    data = _rollout(12, 3, 0.3, seed=5)
    rewards, values, starts, last_values, dones = data
    bufs = []
    for cls in (sb3_buffers.RolloutBuffer, scangen_sb3.RolloutBuffer):
        buf = cls(12, OBS, ACT, device="cpu", gamma=0.9, gae_lambda=0.8, n_envs=3)
        for t in range(12):
            if t == 5:
                buf = copy.deepcopy(buf) if how == "deepcopy" else pickle.loads(pickle.dumps(buf))
            buf.add(np.zeros((3, 3), np.float32), np.zeros((3, 1)), rewards[t], starts[t],
                    torch.from_numpy(values[t]), torch.zeros(3))
        buf.compute_returns_and_advantage(last_values, dones)
        bufs.append(buf)
    assert starts[5:].sum() >= 3  # episode starts written after the copy
    for name in ("advantages", "returns"):
        assert_close(torch.from_numpy(getattr(bufs[1], name)),
                     torch.from_numpy(getattr(bufs[0], name)), **TOL_SB3, name=name)


# --------------------------------------------------------------------------- PPO on CartPole

class _Records(KVWriter):
    """Every dump of SB3's logger (one per PPO iteration), as dicts."""

    def __init__(self):
        self.rows = []

    def write(self, key_values, key_excluded, step=0):
        self.rows.append({k: v for k, v in key_values.items() if not k.startswith("time/")})


class _Episodes(BaseCallback):
    def __init__(self):
        super().__init__()
        self.returns = []

    def _on_step(self):
        self.returns += [i["episode"]["r"] for i in self.locals["infos"] if "episode" in i]
        return True


def _train(buffer_class):
    # A 40-step time limit so that timeouts (SB3's bootstrap folded into the reward) occur.
    env = make_vec_env("CartPole-v1", n_envs=4, seed=0, env_kwargs={"max_episode_steps": 40})
    model = sb3.PPO("MlpPolicy", env, n_steps=256, batch_size=256, n_epochs=4, seed=0,
                    device="cpu", rollout_buffer_class=buffer_class)
    records, episodes = _Records(), _Episodes()
    model.set_logger(Logger(folder=None, output_formats=[records]))
    model.learn(total_timesteps=4 * 256 * 4, callback=episodes)
    return model, records.rows, episodes.returns


@pytest.fixture
def one_thread():
    # A 64-unit MLP gains nothing from threads, and on a busy 2-core machine torch's thread pool
    # made each run over 10x slower (measured: 11 s against 0.8 s).
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_ppo_cartpole_same_learning_curve(one_thread):
    model, rows, episodes = _train(scangen_sb3.RolloutBuffer)
    assert isinstance(model.rollout_buffer, scangen_sb3.RolloutBuffer)
    model_sb3, rows_sb3, episodes_sb3 = _train(None)  # SB3's default buffer
    assert type(model_sb3.rollout_buffer) is sb3_buffers.RolloutBuffer
    assert len(episodes) > 50 and max(episodes) == 40.0  # timeouts happened
    assert episodes == episodes_sb3  # the same actions, so the same episodes
    assert len(rows) == len(rows_sb3) == 4
    for i, (row, ref) in enumerate(zip(rows, rows_sb3)):
        assert row.keys() == ref.keys()
        for key, value in ref.items():
            # the advantages differ by float32 rounding (above), and so, through PPO's updates,
            # do the logged values. Measured: value_loss (~80) 4e-7 relative; policy_gradient_loss
            # and explained_variance, means of O(1) terms that nearly cancel (~1e-3), 1e-7 absolute
            assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-6), f"iteration {i}: {key}"
    for p, p_sb3 in zip(model.policy.parameters(), model_sb3.policy.parameters()):
        assert_close(p.detach(), p_sb3.detach(), atol=1e-5, rtol=1e-4, name="policy weights")


def test_example_trains(one_thread, capsys):
    spec = importlib.util.spec_from_file_location(
        "sb3_ppo_example", Path(__file__).resolve().parent.parent / "examples" / "sb3_ppo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(timesteps=1024)
    assert "GAE by scangen: mean episode reward" in capsys.readouterr().out


# --------------------------------------------------------------------------- without SB3

def test_import_error_names_what_to_install(monkeypatch):
    """The libraries themselves (scangen is not on PyPI: "scangen[sb3]" there is another
    project), and the checkout's extra."""
    monkeypatch.setitem(sys.modules, "stable_baselines3.common", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "scangen.integrations.sb3")
    with pytest.raises(ImportError) as err:
        importlib.import_module("scangen.integrations.sb3")
    message = str(err.value)
    for req in pyproject_extra("sb3"):  # pyproject.toml's versions, each quoted
        assert f'"{req}"' in message, (req, message)
    assert 'pip install -e ".[sb3]"' in message, message
