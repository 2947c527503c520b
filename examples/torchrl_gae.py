"""TorchRL's GAE computed by scangen, checked against TorchRL's own on the same rollout.

    pip install -e ".[torchrl]"      # from the checkout (not PyPI's "scangen")
    python examples/torchrl_gae.py

The rollout is random: 8 environments, 64 steps, episodes that end by termination or by
truncation, laid out as a TorchRL collector writes it (``("next", ...)`` holds the step's reward,
flags and the true next observation). Both estimators share one critic; the script prints the
largest difference between their advantages and value targets, and the first advantages.
"""
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.objectives.value import GAE as TorchRLGAE

from scangen.integrations.torchrl import GAE


def rollout(n_envs=8, n_steps=64, obs_dim=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(n_envs, n_steps, 1, generator=g) < 0.05
    terminated = done & (torch.rand(n_envs, n_steps, 1, generator=g) < 0.5)
    obs = torch.randn(n_envs, n_steps + 1, obs_dim, generator=g)
    final_obs = torch.randn(n_envs, n_steps, obs_dim, generator=g)  # where an episode ended
    return TensorDict({
        "obs": obs[:, :-1],
        "next": {
            "obs": torch.where(done, final_obs, obs[:, 1:]),
            "reward": torch.randn(n_envs, n_steps, 1, generator=g),
            "done": done,
            "terminated": terminated,
            "truncated": done & ~terminated,
        },
    }, batch_size=[n_envs, n_steps])


def main():
    torch.manual_seed(0)
    critic = TensorDictModule(torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(),
                                                  torch.nn.Linear(32, 1)),
                              in_keys=["obs"], out_keys=["state_value"])
    data = rollout()
    ours = GAE(gamma=0.99, lmbda=0.95, value_network=critic)(data.clone())
    ref = TorchRLGAE(gamma=0.99, lmbda=0.95, value_network=critic)(data.clone())
    diff = max((ours[k] - ref[k]).abs().max().item() for k in ("advantage", "value_target"))
    print(f"rollout {tuple(data.batch_size)}: {int(data['next', 'terminated'].sum())} "
          f"terminations, {int(data['next', 'truncated'].sum())} truncations")
    print("advantage[0, :4]:", [round(x, 4) for x in ours["advantage"][0, :4, 0].tolist()])
    print(f"max |scangen - torchrl| over advantage and value_target: {diff:.1e}")
    return diff


if __name__ == "__main__":
    main()
