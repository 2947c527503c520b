"""Train Stable-Baselines3's PPO on CartPole-v1 with scangen computing its GAE.

    pip install -e ".[sb3]"          # from the checkout (not PyPI's "scangen")
    python examples/sb3_ppo.py                    # 8192 steps, seconds on a CPU
    python examples/sb3_ppo.py --timesteps 100000

The only change to a plain SB3 script is ``rollout_buffer_class=RolloutBuffer``
(``DictRolloutBuffer`` for dict observations); docs/integrations/sb3.md has the details.
"""
from __future__ import annotations

import argparse

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from scangen.integrations.sb3 import RolloutBuffer


def main(timesteps: int = 8192, seed: int = 0) -> float:
    env = make_vec_env("CartPole-v1", n_envs=4, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=256, batch_size=256, n_epochs=4, seed=seed,
                device="cpu", rollout_buffer_class=RolloutBuffer)
    model.learn(total_timesteps=timesteps)
    # Monitor's record of the last (up to) 100 training episodes
    mean = float(np.mean([ep["r"] for ep in model.ep_info_buffer]))
    print(f"PPO on CartPole-v1, {model.num_timesteps} steps, GAE by scangen: "
          f"mean episode reward of the last {len(model.ep_info_buffer)} episodes {mean:.1f}")
    return mean


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    main(args.timesteps, args.seed)
