"""TorchRL value estimators whose scans run through scangen.

    from scangen.integrations.torchrl import GAE, TDLambdaEstimator, VTrace

    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    gae(tensordict)  # writes "advantage" and "value_target", as torchrl's GAE does

Each class subclasses the TorchRL estimator of the same name and takes the same constructor
arguments, keys (``set_keys``), ``time_dim``, ``shifted`` value networks, tensor ``gamma``,
``steps_to_next_obs``, ``average_*`` and ``differentiable``. Only the numeric part changes:
where TorchRL calls ``generalized_advantage_estimate``, ``td_lambda_return_estimate`` or
``vtrace_advantage_estimate`` (or their ``vec_`` versions), these call one scangen scan. The rest
of the method bodies follow TorchRL's (torchrl 0.14), reusing its helpers for the value network,
the shifted layout and the normalisation. One extra keyword, ``backend``, is passed to scangen
(``None``: Triton on CUDA tensors, numba on CPU tensors, torch where numba is missing).

TorchRL gives the value of the successor state at every step, ``("next", "state_value")``, and
reads it inside episodes too; scangen's ``compute_gae`` and ``compute_vtrace`` read
``values[t+1]`` there and the bootstrap only at truncations and at the window end. The two agree
when ``("next", obs)[t]`` is ``obs[t+1]`` inside episodes, but not with ``MultiStep`` data, a
target critic or precomputed values. So GAE and V-trace run two small specs in TorchRL's
convention, compiled once per process by :func:`scangen.compile` (``_GAE_SPEC``,
``_VTRACE_SPEC``), which give TorchRL's numbers on any TensorDict. So does TD(lambda)
(``_TD_LAMBDA_SPEC``): :func:`scangen.compute_lambda_returns` cuts the trace at terminated steps,
where TorchRL cuts it at ``done`` alone (the two differ on a step terminated but not done, which
TorchRL accepts). docs/integrations/torchrl.md has the key-by-key mapping.
"""
from __future__ import annotations

import contextlib
import inspect

try:
    from tensordict import TensorDictBase, is_tensor_collection
    from tensordict.nn import dispatch
    from torchrl.objectives.utils import _maybe_get_or_select, hold_out_net
    from torchrl.objectives.value import advantages as _adv
    from torchrl.objectives.value.functional import SHAPE_ERR
except ImportError as e:  # pragma: no cover - exercised only where torchrl is absent
    raise ImportError(
        "scangen.integrations.torchrl needs TorchRL: pip install \"torchrl>=0.14.1,<0.15\" "
        "\"tensordict>=0.14.3,<0.15\" (or, in scangen's checkout, pip install -e \".[torchrl]\")"
    ) from e

import torch

import scangen

__all__ = ["GAE", "TDLambdaEstimator", "VTrace"]

# TorchRL's generalized_advantage_estimate: delta uses ("next", value) at every step.
_GAE_SPEC = """
name: torchrl_gae
doc: |
  GAE in TorchRL's convention, reverse in time.

  delta_t = r_t + gamma * (1 - term_t) * nv_t - V_t, A_t = delta_t + gamma * lambda_ *
  (1 - done_t) * A_{t+1}, A_T = 0; nv_t is the successor's value at every step.
direction: reverse
inputs:
  rewards: {kind: float, doc: "r_t: ('next', 'reward')."}
  values: {kind: float, doc: "V(s_t): 'state_value'."}
  next_values: {kind: float, doc: "V of the successor of step t: ('next', 'state_value')."}
  terminateds: {kind: flag, doc: "1 where no bootstrap: ('next', 'terminated')."}
  dones: {kind: flag, doc: "1 where the trace is cut: ('next', 'done')."}
params:
  gamma: {default: 0.99, doc: discount factor}
  lambda_: {default: 0.95, doc: trace decay}
scans:
  A:
    update: >-
      rewards + gamma * (1 - terminateds) * next_values - values
      + gamma * lambda_ * (1 - dones) * A
outputs:
  advantages: {expr: A, doc: "A_t: 'advantage'."}
  returns: {expr: A + values, doc: "A_t + V_t: 'value_target'."}
"""

# TorchRL's vtrace_advantage_estimate: the scan's TD error uses ("next", value) at every step;
# the advantage uses vs_{t+1} inside episodes and ("next", value) where done and at T-1.
_VTRACE_SPEC = """
name: torchrl_vtrace
doc: |
  V-trace in TorchRL's convention, reverse in time.

  rho_t = exp(log_pi_t - log_mu_t), A_t = min(rho_thresh, rho_t) * (r_t + gamma * (1 - term_t) *
  nv_t - V_t) + gamma * (1 - done_t) * min(c_thresh, rho_t) * A_{t+1}, vs_t = V_t + A_t;
  adv_t = min(rho_thresh, rho_t) * (r_t + gamma * (1 - term_t) * vs_next_t - V_t) with vs_next_t
  = vs_{t+1} inside an episode and nv_t where done and at t = T-1.
direction: reverse
inputs:
  log_pi: {kind: float, doc: "log pi(a_t|s_t) under the actor network now."}
  log_mu: {kind: float, doc: "log mu(a_t|s_t) of the behaviour policy: 'sample_log_prob'."}
  values: {kind: float, doc: "V(s_t): 'state_value'."}
  next_values: {kind: float, doc: "V of the successor of step t: ('next', 'state_value')."}
  rewards: {kind: float, doc: "r_t: ('next', 'reward')."}
  terminateds: {kind: flag, doc: "1 where no bootstrap: ('next', 'terminated')."}
  dones: {kind: flag, doc: "1 where the trace is cut: ('next', 'done')."}
params:
  gamma: {default: 0.99, doc: discount factor}
  rho_thresh: {default: 1.0, doc: clip of the importance weight}
  c_thresh: {default: 1.0, doc: clip of the trace coefficient}
let:
  rho: exp(log_pi - log_mu)
  discount: gamma * (1 - terminateds)
  vs_next: where(where(is_last, 1, dones), next_values, next(values, 0) + next(A, 0))
scans:
  A:
    update: >-
      min(rho_thresh, rho) * (rewards + discount * next_values - values)
      + gamma * (1 - dones) * min(c_thresh, rho) * A
outputs:
  advantages:
    expr: min(rho_thresh, rho) * (rewards + discount * vs_next - values)
    doc: "'advantage'."
  targets: {expr: values + A, doc: "vs_t: 'value_target'."}
"""

# TorchRL's td_lambda_return_estimate: terminated zeroes the bootstrap, done (alone) cuts the trace.
_TD_LAMBDA_SPEC = """
name: torchrl_td_lambda
doc: |
  TD(lambda) returns in TorchRL's convention, reverse in time.

  nv_t = (1 - term_t) * the successor's value; G_t = r_t + gamma * nv_t where done_t and at
  t = T-1, else r_t + gamma * ((1 - lambda_) * nv_t + lambda_ * G_{t+1}): a terminated step that
  is not done keeps the trace running.
direction: reverse
inputs:
  rewards: {kind: float, doc: "r_t: ('next', 'reward')."}
  next_values: {kind: float, doc: "V of the successor of step t: ('next', 'state_value')."}
  terminateds: {kind: flag, doc: "1 where no bootstrap: ('next', 'terminated')."}
  dones: {kind: flag, doc: "1 where the trace is cut: ('next', 'done')."}
params:
  gamma: {default: 0.99, doc: discount factor}
  lambda_: {default: 0.95, doc: trace decay}
let:
  cut: where(is_last, 1, dones)
scans:
  G:
    alpha: rewards + gamma * (1 - terminateds) * next_values * (1 - lambda_ * (1 - cut))
    beta: gamma * lambda_ * (1 - cut)
outputs:
  returns: {expr: G, doc: "'value_target'."}
"""

_SPECS = {"gae": _GAE_SPEC, "vtrace": _VTRACE_SPEC, "td_lambda": _TD_LAMBDA_SPEC}
_OPS: dict = {}


def _op(name: str):
    """The compiled spec's function, built on first use (estimators build it in __init__, so a
    ``torch.compile`` trace only ever finds it here)."""
    fn = _OPS.get(name)
    if fn is None:
        fn = _OPS[name] = scangen.compile(_SPECS[name])
    return fn


def _check_shapes(*tensors):
    if any(t.shape != tensors[0].shape for t in tensors[1:]):
        raise RuntimeError(SHAPE_ERR)


class _ScangenEstimator:
    """What the three share: TorchRL's preamble (gamma, the value network called, the shifted
    layout applied), in TorchRL's order."""

    def _gamma(self, tensordict, *names):
        """TorchRL's buffers moved to the reward's device; gamma ** steps_to_next_obs."""
        reward = tensordict.get(("next", self.tensor_keys.reward))
        for name in names:
            if getattr(self, name).device != reward.device:
                setattr(self, name, getattr(self, name).to(reward.device))
        gamma = self.gamma
        steps_to_next_obs = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        if steps_to_next_obs is not None:
            gamma = gamma ** steps_to_next_obs.view_as(reward)
        return gamma

    def _values(self, tensordict, params, target_params, hold_out=False):
        """``(value, next_value)``: from the value network when there is one (as TorchRL calls
        it, shifted or not), else read from the tensordict. The network's parameters are held
        out of the graph when no params are given, or always with ``hold_out`` (V-trace)."""
        if self.value_network is None:
            value = tensordict.get(self.tensor_keys.value)
            next_value = tensordict.get(("next", self.tensor_keys.value))
            for v, key in ((value, self.tensor_keys.value),
                           (next_value, ("next", self.tensor_keys.value))):
                if v is None:
                    raise ValueError(f"The tensor with key {key} is missing, and no value "
                                     "network was provided.")
            return value, next_value
        if params is not None:
            params = params.detach()
            if target_params is None:
                target_params = params.clone(False)
        hold_out = hold_out or (params is None and target_params is None)
        with hold_out_net(self.value_network) if hold_out else contextlib.nullcontext():
            value, next_value, valid = self._call_value_nets(
                data=tensordict, params=params, next_params=target_params,
                single_call=self.shifted, value_key=self.tensor_keys.value,
                detach_next=True, vmap_randomness=self.vmap_randomness)
        if valid is not None:
            tensordict.set("shifted_valid", valid)
        return value, next_value

    @staticmethod
    def _sanitize_next_obs_nan(data, in_keys):
        """TorchRL's NaN-next-observation fix-up (a NaN in ``("next", k)`` reads ``k``), made
        traceable under ``torch.compile``: TorchRL's own branches on ``nan_mask.any()`` to copy
        the tensordict only when there is a NaN, which breaks the graph. Traced, the ``where``
        is applied to ``data`` itself: the same values, and where there is no NaN the same
        tensordict afterwards; with NaNs, the caller's ``("next", k)`` is left sanitised and
        receives the values too (TorchRL's eager copy would not)."""
        if not torch.compiler.is_compiling():
            return _adv.ValueEstimatorBase._sanitize_next_obs_nan(data, in_keys)
        for k in in_keys:
            root = data.get(k, default=None)
            if root is None or not root.is_floating_point():
                continue
            next_k = ("next", *k) if isinstance(k, tuple) else ("next", k)
            nxt = data.get(next_k, default=None)
            if nxt is None or nxt.shape != root.shape:
                continue
            data.set(next_k, torch.where(torch.isnan(nxt), root, nxt))
        return data

    def _signals(self, tensordict, time_dim):
        """``(reward, done, terminated, valid, time_dim)`` after TorchRL's shifted-layout fix-up
        (the last valid step of a shifted batch is marked done, not terminated)."""
        time_dim = self._get_time_dim(time_dim, tensordict)
        valid = tensordict.get("shifted_valid", default=None)
        data = self._prepare_shifted_tensordict(tensordict, valid, time_dim)
        reward = data.get(("next", self.tensor_keys.reward))
        done = data.get(("next", self.tensor_keys.done))
        terminated = data.get(("next", self.tensor_keys.terminated), default=done)
        return reward, done, terminated, valid, time_dim


def _check_batch(tensordict):
    if tensordict.batch_dims < 1:
        raise RuntimeError("Expected input tensordict to have at least one dimension, got "
                           f"tensordict.batch_size = {tensordict.batch_size}")


class GAE(_ScangenEstimator, _adv.GAE):
    """:class:`torchrl.objectives.value.GAE`, with the advantage recursion run by scangen.

    Takes TorchRL's arguments, plus ``backend`` (scangen's: ``None``, ``"triton"``,
    ``"numba"`` or ``"torch"``). ``vectorized`` is accepted and ignored: there is one
    implementation.
    """

    def __init__(self, *, backend: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.backend = backend
        _op("gae")

    def _gae(self, tensordict, params, target_params, time_dim):
        _check_batch(tensordict)
        gamma = self._gamma(tensordict, "gamma", "lmbda")
        value, next_value = self._values(tensordict, params, target_params)
        reward, done, terminated, valid, time_dim = self._signals(tensordict, time_dim)
        reward, done, terminated = self._prepare_signals(reward, done, terminated, value)
        return gamma, value, next_value, reward, done, terminated, valid, time_dim

    def _scan(self, gamma, value, next_value, reward, done, terminated, time_dim):
        _check_shapes(next_value, value, reward, done, terminated)
        return _op("gae")(reward, value, next_value, terminated, done, gamma=gamma,
                          lambda_=self.lmbda, time_dim=time_dim,
                          outputs=("advantages", "returns"), backend=self.backend)

    @_adv._self_set_skip_existing
    @_adv._self_set_grad_enabled
    @dispatch
    def forward(self, tensordict: TensorDictBase, *, params=None, target_params=None,
                time_dim: int | None = None) -> TensorDictBase:
        """As :meth:`torchrl.objectives.value.GAE.forward`: writes the advantage and the value
        target (advantage + value) into ``tensordict`` and returns it."""
        gamma, value, next_value, reward, done, terminated, valid, time_dim = self._gae(
            tensordict, params, target_params, time_dim)
        if self.auto_reset_env:
            truncated = self._broadcast_optional(tensordict.get(("next", "truncated")), value)
            # TorchRL adds gamma * V(s_t) where truncated (skipping the add when none is): a
            # select keeps the other rewards' bits without a data-dependent branch.
            reward = torch.where(truncated, reward + gamma * value * truncated, reward)
            terminated = done
        adv, value_target = self._scan(gamma, value, next_value, reward, done, terminated,
                                       time_dim)
        if self.average_gae:
            adv = self._normalize_advantage(adv, valid, groups=self._group_ids(tensordict))
        tensordict.set(self.tensor_keys.advantage, adv)
        tensordict.set(self.tensor_keys.value_target, value_target)
        self._mask_shifted_output(tensordict, valid)
        return tensordict

    def value_estimate(self, tensordict, params=None, target_params=None,
                       time_dim: int | None = None, **kwargs):
        """As :meth:`torchrl.objectives.value.GAE.value_estimate`: the value target only."""
        if self.is_stateless and params is None:
            raise RuntimeError("Expected params to be passed to advantage module but got none.")
        gamma, value, next_value, reward, done, terminated, _, time_dim = self._gae(
            tensordict, params, target_params, time_dim)
        return self._scan(gamma, value, next_value, reward, done, terminated, time_dim)[1]


class TDLambdaEstimator(_ScangenEstimator, _adv.TDLambdaEstimator):
    """:class:`torchrl.objectives.value.TDLambdaEstimator`, with the lambda-returns computed by
    one scangen scan in TorchRL's convention (``_TD_LAMBDA_SPEC``). TorchRL's ``forward`` is
    kept: it calls :meth:`value_estimate`, the only method overridden.

    Takes TorchRL's arguments, plus ``backend``. ``vectorized`` is accepted and ignored.
    """

    def __init__(self, *, backend: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.backend = backend
        _op("td_lambda")

    def value_estimate(self, tensordict, target_params=None, next_value=None,
                       time_dim: int | None = None, **kwargs):
        """As :meth:`torchrl.objectives.value.TDLambdaEstimator.value_estimate`."""
        gamma = self._gamma(tensordict, "gamma", "lmbda")
        reward = tensordict.get(("next", self.tensor_keys.reward))
        if self.average_rewards:
            groups = self._group_ids(tensordict)
            if groups is None:
                reward = reward - reward.mean()
                reward = reward / reward.std().clamp_min(1e-4)
            else:
                reward = _adv._standardize_by_group(reward, groups)
            tensordict.set(("next", self.tensor_keys.reward), reward)
        if next_value is None:
            next_value = self._next_value(tensordict, target_params, kwargs=kwargs)
        reward, done, terminated, _, time_dim = self._signals(tensordict, time_dim)
        _check_shapes(next_value, reward, done, terminated)
        return _op("td_lambda")(reward, next_value, terminated, done, gamma=gamma,
                                lambda_=self.lmbda, time_dim=time_dim, backend=self.backend)


class VTrace(_ScangenEstimator, _adv.VTrace):
    """:class:`torchrl.objectives.value.VTrace`, with the V-trace targets and advantages computed
    by one scangen scan. Takes TorchRL's arguments (``actor_network``, ``rho_thresh``,
    ``c_thresh``, ...), plus ``backend``.
    """

    def __init__(self, *, backend: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.backend = backend
        _op("vtrace")

    @property
    def in_keys(self):
        # TorchRL's reads super().in_keys, which dynamo (torch 2.13) resolves to the property
        # object, so torch.compile fails on every call (dispatch reads in_keys); the same list
        # (ValueEstimatorBase.in_keys plus the log-prob key), built without super().
        keys = self.tensor_keys
        net_keys = getattr(self.value_network, "in_keys", None)
        in_keys = [] if net_keys is None else (
            list(net_keys) + [("next", keys.reward), ("next", keys.done),
                              ("next", keys.terminated)] + [("next", k) for k in net_keys])
        if self.group_key is not None and self.group_key not in in_keys:
            in_keys.append(self.group_key)
        return in_keys + [keys.sample_log_prob]

    @_adv._self_set_skip_existing
    @_adv._self_set_grad_enabled
    @dispatch
    def forward(self, tensordict: TensorDictBase, *, params=None, target_params=None,
                time_dim: int | None = None) -> TensorDictBase:
        """As :meth:`torchrl.objectives.value.VTrace.forward`: the log-probabilities of the
        actions under ``actor_network`` against ``sample_log_prob``; writes the advantage and
        the V-trace target."""
        _check_batch(tensordict)
        gamma = self._gamma(tensordict, "gamma")
        value, next_value = self._values(tensordict, params, target_params, hold_out=True)
        lp = _maybe_get_or_select(tensordict, self.tensor_keys.sample_log_prob)
        if is_tensor_collection(lp):
            lp = lp.sum(dim="feature", reduce=True)
        log_mu = lp.view_as(value)
        with hold_out_net(self.actor_network):
            log_pi = _adv._call_actor_net(actor_net=self.actor_network, data=tensordict,
                                          params=None,
                                          log_prob_key=self.tensor_keys.sample_log_prob)
            log_pi = log_pi.view_as(value)
        reward, done, terminated, valid, time_dim = self._signals(tensordict, time_dim)
        _check_shapes(next_value, value, reward, done)
        device = value.device
        adv, value_target = _op("vtrace")(
            log_pi, log_mu, value, next_value, reward, terminated, done, gamma=gamma,
            rho_thresh=self.rho_thresh.to(device), c_thresh=self.c_thresh.to(device),
            time_dim=time_dim, outputs=("advantages", "targets"), backend=self.backend)
        if self.average_adv:
            groups = self._group_ids(tensordict)
            if groups is None:
                adv = (adv - adv.mean()) / adv.std().clamp_min(1e-5)
            else:
                adv = _adv._standardize_by_group(adv, groups, eps=1e-5)
        tensordict.set(self.tensor_keys.advantage, adv)
        tensordict.set(self.tensor_keys.value_target, value_target)
        self._mask_shifted_output(tensordict, valid)
        return tensordict


def _torchrl_signature(cls, base) -> None:
    """``cls.__init__`` shows ``base``'s keyword arguments plus ``backend`` (``help()``, IDEs,
    ``inspect.signature``), where its own ``(*, backend=None, **kwargs)`` passes them on."""
    params = list(inspect.signature(base.__init__).parameters.values())
    backend = inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None,
                                annotation="str | None")
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    cls.__init__.__signature__ = inspect.Signature(params[:at] + [backend] + params[at:])


for _cls, _base in ((GAE, _adv.GAE), (TDLambdaEstimator, _adv.TDLambdaEstimator),
                    (VTrace, _adv.VTrace)):
    _torchrl_signature(_cls, _base)
del _cls, _base
