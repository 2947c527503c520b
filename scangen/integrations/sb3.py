"""Stable-Baselines3 rollout buffers whose GAE runs through :func:`scangen.compute_gae`.

    from stable_baselines3 import PPO
    from scangen.integrations.sb3 import RolloutBuffer

    model = PPO("MlpPolicy", "CartPole-v1", rollout_buffer_class=RolloutBuffer)

:class:`RolloutBuffer` and :class:`DictRolloutBuffer` subclass SB3's own and change one method,
``compute_returns_and_advantage``: the same ``advantages`` and ``returns`` (to float32 rounding),
from one vectorised scan instead of SB3's Python loop over the buffer's steps.

SB3's conventions, mapped onto ``compute_gae`` (docs/integrations/sb3.md has the derivation):

* The buffer is time-major ``[n_steps, n_envs]`` numpy; scangen reads it through
  ``torch.from_numpy`` views with ``time_dim=0`` (no transpose, no copy) and the results are
  written back into ``self.advantages`` and ``self.returns``.
* ``episode_starts[t + 1] == 1`` means step ``t`` was the last of its episode, so
  ``terminateds[t] = episode_starts[t + 1]`` for ``t < n_steps - 1`` and
  ``terminateds[n_steps - 1] = dones``. The buffer keeps ``episode_starts`` as the first
  ``n_steps`` rows of an ``[n_steps + 1, n_envs]`` array, so that shift is a view too.
* ``last_value = last_values``: SB3's ``V`` of the observation after the window.
* Timeouts: PPO's ``collect_rollouts`` has already added ``gamma * V(terminal_obs)`` to the
  reward of a truncated step and flags it done, so the buffer sees a termination with a
  modified reward; ``truncateds`` stays unset, exactly as SB3's own loop treats it.

The buffers take one keyword of their own, ``backend`` (``compute_gae``'s; default ``auto``),
e.g. ``rollout_buffer_kwargs={"backend": "torch"}``.
"""
from __future__ import annotations

import numpy as np
import torch

try:
    from stable_baselines3.common import buffers as _sb3_buffers
except ImportError as e:  # pragma: no cover - exercised only where SB3 is absent
    raise ImportError(
        "scangen.integrations.sb3 needs Stable-Baselines3: pip install \"stable-baselines3>=2.1\" "
        "\"gymnasium>=0.29.1\" (or, in scangen's checkout, pip install -e \".[sb3]\")"
    ) from e

import scangen

__all__ = ["RolloutBuffer", "DictRolloutBuffer"]


class _ScangenGAE:
    """The shared override; the SB3 buffer class comes after it in the MRO.

    ``backend`` (keyword, e.g. ``rollout_buffer_kwargs={"backend": "torch"}``) is passed to
    ``compute_gae``: None or ``"auto"`` picks scangen's CPU backend for the buffer's arrays."""

    def __init__(self, *args, backend: str | None = None, **kwargs):
        self.backend = backend
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        super().reset()
        # Row t + 1 of this array is "step t ended its episode": rows 0..n-1 are SB3's
        # episode_starts (filled in place by add()), rows 1..n the terminateds scangen reads.
        self._starts_ext = np.zeros((self.buffer_size + 1, self.n_envs), dtype=np.float32)
        self.episode_starts = self._starts_ext[:-1]

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """GAE(lambda) advantages and TD(lambda) returns, as SB3's own method computes them.

        :param last_values: ``V`` of the observation after the last step, one per env
            (any shape with ``n_envs`` elements, any device).
        :param dones: whether the last step ended its episode, one per env.
        """
        ext, starts = self._starts_ext, self.episode_starts
        # not the view of ext's first rows (rebound by the caller, or a copied or unpickled
        # buffer, whose two arrays no longer share memory): take its values
        if not (isinstance(starts, np.ndarray) and starts.base is ext
                and starts.ctypes.data == ext.ctypes.data):
            ext[:-1] = starts
        ext[-1] = np.asarray(dones).reshape(self.n_envs)
        last = last_values.detach().reshape(self.n_envs).to("cpu", torch.float32)
        adv, ret = scangen.compute_gae(
            torch.from_numpy(self.rewards), torch.from_numpy(self.values),
            torch.from_numpy(ext[1:]), gamma=float(self.gamma), lambda_=float(self.gae_lambda),
            last_value=last, time_dim=0, outputs=("advantages", "returns"), backend=self.backend)
        # SB3 rebinds self.returns to a new array; writing both in place gives the same values
        # and keeps any outside reference to the buffer's arrays current.
        np.copyto(self.advantages, adv.numpy())
        np.copyto(self.returns, ret.numpy())


class RolloutBuffer(_ScangenGAE, _sb3_buffers.RolloutBuffer):
    """SB3's ``RolloutBuffer`` with ``compute_returns_and_advantage`` run by scangen."""


class DictRolloutBuffer(_ScangenGAE, _sb3_buffers.DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` (dict observations) with ``compute_returns_and_advantage``
    run by scangen."""
