"""verl advantage estimators whose scans run through scangen.

    from scangen.integrations import verl as scangen_verl

    adv, ret = scangen_verl.compute_gae_advantage_return(rewards, values, response_mask, 1.0, 0.95)
    scangen_verl.register()  # needs verl: adds scangen_gae and scangen_reinforce_plus_plus

The two functions take the arguments of their namesakes in verl's ``verl/trainer/ppo/core_algos.py``
(verl 0.9) and return the same ``(advantages, returns)``, but where verl runs one Python iteration
per token, each runs one scangen scan over the whole batch:

* ``compute_gae_advantage_return`` is :func:`scangen.compute_masked_gae`, whose recurrence is verl's
  multi-turn GAE loop (values and advantages carried unchanged across tokens with mask 0), then
  the advantages whitened over the response tokens (:func:`masked_whiten`).
* ``compute_reinforce_plus_plus_outcome_advantage`` runs a small spec (``_RETURNS_SPEC``, compiled
  once per process by :func:`scangen.compile`): the discounted return over the response tokens,
  carried unchanged across tokens with mask 0 (verl 0.9; verl 0.8 and earlier reset it there),
  whitened and masked.

This module imports without verl; only :func:`register` needs it. docs/integrations/verl.md
states the semantics and the dtype rules, and how to enable the estimators in a verl config.
"""
from __future__ import annotations

import functools
import importlib
import inspect

import torch

import scangen

__all__ = ["GAE_NAME", "REINFORCE_PP_NAME", "compute_gae_advantage_return",
           "compute_reinforce_plus_plus_outcome_advantage", "masked_whiten", "register"]

GAE_NAME = "scangen_gae"
REINFORCE_PP_NAME = "scangen_reinforce_plus_plus"

# verl's trainer modules whose ``compute_advantage`` register() teaches to pass the critic's
# values to scangen_gae: the legacy RayPPOTrainer's and the v1 trainer's (verl 0.9).
_TRAINER_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils")

# verl's REINFORCE++ return (0.9): G_t = m_t * (r_t + gamma * C_{t+1}), where the carry C is
# updated on response tokens only.
_RETURNS_SPEC = """
name: verl_reinforce_pp_returns
# errors about the arguments (a device mix, a shape) name the public function they came from
function: compute_reinforce_plus_plus_outcome_advantage
doc: |
  REINFORCE++ returns as verl 0.9 computes them, reverse in time.

  C_t = m_t * (r_t + gamma * C_{t+1}) + (1 - m_t) * C_{t+1}, C_T = 0: the discounted return
  over the response tokens, carried unchanged across tokens with mask 0 (tool output,
  padding); returns_t = m_t * C_t (0 on tokens with mask 0).
direction: reverse
inputs:
  token_level_rewards: {kind: float, doc: "r_t per token."}
  response_mask: {kind: flag, doc: "m_t: 1 on tokens the policy generated, 0 elsewhere."}
params:
  gamma: {default: 1.0, doc: discount factor}
let:
  # a masked token's reward selected away (NaN or inf included), never multiplied by 0
  r: where(response_mask, token_level_rewards, 0)
scans:
  C:
    update: r + response_mask * gamma * C + (1 - response_mask) * C
outputs:
  returns: {expr: response_mask * C, doc: "m_t * C_t."}
"""


@functools.cache
def _returns_op():
    return scangen.compile(_RETURNS_SPEC)


# --------------------------------------------------------------------------- the computations

def _result_dtype(floats, mask):
    """The dtype verl's arithmetic gives: the promotion of its float inputs, and of a floating
    ``response_mask`` too (verl multiplies by the mask)."""
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in floats])
    return torch.promote_types(dtype, mask.dtype) if mask.is_floating_point() else dtype


def _wide(dtype):
    """Where the scans and the whitening run: float32 for half types (so a half-precision
    advantage is rounded once, after whitening, not twice), else the dtype itself."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _per_row(p, rewards):
    """A 1-D tensor of one value per row (``[bs]``) as ``[bs, 1]``: verl's loops multiply the
    param into each step's ``[bs]`` column, which is what such a tensor gives there."""
    if isinstance(p, torch.Tensor) and p.dim() == 1 and p.shape[0] == rewards.shape[0]:
        return p[:, None]
    return p


def _bool_mask(mask):
    return mask if mask.dtype == torch.bool else mask != 0


def masked_whiten(values, mask, shift_mean=True):
    """``values`` whitened over the tokens where ``mask`` is set, as verl's ``masked_whiten``.

    ``mean = sum(x * w) / (n + 1e-8)`` and ``var = sum((x - mean)^2 * w) / (n + 1e-8) * n / (n - 1)``
    over the elements where ``mask`` is nonzero (``w``: the mask's value there, 1 for 0/1 masks;
    ``n = mask.sum()``), and ``(x - mean) / sqrt(var + 1e-8)``, plus ``mean`` again if not
    ``shift_mean``. Every element is whitened, masked or not. ``n + 1e-8`` and ``n / (n - 1)``
    are computed as verl computes them, in the mask sum's own arithmetic: float32 for int, bool
    and float32 masks (where the 1e-8 vanishes), float64 for a float64 mask; with values of
    large mean and small spread the difference shows (2 values 1000 +- 0.001 in float64: -+0.705
    both, against -0.702 / +0.709 with the 1e-8 kept). The sums are taken in float32 (float64
    where values or mask are float64) and the result has ``values``' dtype, as verl's. A mask
    summing to 0 or 1 is a ``ValueError``, as in verl. Elements outside the mask never enter the
    statistics, even when not finite.
    """
    m = _bool_mask(mask)
    total = mask.sum()  # verl's mask_sum, in its dtype (int64 for int and bool masks)
    n = float(total)  # verl checks the count on the host too
    if n in (0.0, 1.0):
        raise ValueError(f"masked_whiten: the mask selects {n:g} element(s); the unbiased "
                         "variance needs at least 2")
    dtype = values.dtype  # verl's statistics are 0-dim tensors: they do not promote values
    wide = _wide(_result_dtype((values,), mask))
    x = values.to(wide)
    # every mask but a bool one weights its elements by its value, as verl's (an int mask of
    # 2s counts twice); the count n above is the mask's sum either way
    w = None if mask.dtype == torch.bool else mask.to(wide)

    def msum(v):
        v = torch.where(m, v, 0)
        return (v if w is None else v * w).sum()

    count = (total + 1e-8).to(wide)
    mean = msum(x) / count
    centered = x - mean
    var = msum(centered.square()) / count * (total / (total - 1)).to(wide)
    out = centered * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out.to(dtype)


def compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam, *,
                                 backend=None):
    """verl's ``compute_gae_advantage_return``: token-level GAE over the response tokens.

    Args:
        token_level_rewards: ``[bs, response_length]`` float, ``r_t``.
        values: ``[bs, response_length]`` float, ``V_t`` (the critic's).
        response_mask: ``[bs, response_length]``, 1 on tokens the policy generated, 0 on
            tool-output, observation and padding tokens (int, bool or float; values in {0, 1}).
        gamma: the discount, a float, or a tensor broadcastable to ``[bs, response_length]``,
            or one value per row, ``[bs]`` (as verl's loop broadcasts it).
        lam: GAE's lambda, the same kinds as ``gamma``.
        backend: scangen's backend (``None``: Triton on CUDA, numba or torch on the CPU).

    Returns:
        ``(advantages, returns)``, ``[bs, response_length]``: ``A_t`` of the masked recurrence
        (:func:`scangen.compute_masked_gae`) whitened over the masked tokens, and ``A_t + V_t``
        (not whitened). At tokens with mask 0 both hold the values carried from the next
        response token, as verl's loop leaves them. The dtype is that of verl's arithmetic
        (the inputs' promotion); the scan and the whitening run in float32 or wider.

    Example:
        >>> r = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]])
        >>> v = torch.tensor([[0.1, 0.2, 0.9, 0.9, 0.5, 0.0]])
        >>> m = torch.tensor([[1, 1, 0, 0, 1, 0]])  # a two-token tool output, then padding
        >>> adv, ret = compute_gae_advantage_return(r, v, m, gamma=1.0, lam=1.0)
        >>> ret
        tensor([[1.0000, 1.0000, 1.4000, 1.4000, 1.0000, 0.0000]])
    """
    out = _result_dtype((token_level_rewards, values), response_mask)
    with torch.no_grad():
        adv, ret = scangen.compute_masked_gae(
            token_level_rewards, values.to(_wide(out)), response_mask,
            _per_row(gamma, token_level_rewards), _per_row(lam, token_level_rewards),
            backend=backend)
        adv = masked_whiten(adv, response_mask)
    return adv.to(out), ret.to(out)


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards, response_mask,
                                                  config=None, *, backend=None, **kwargs):
    """verl's ``compute_reinforce_plus_plus_outcome_advantage`` (verl 0.9).

    Args:
        token_level_rewards: ``[bs, response_length]`` float, ``r_t``.
        response_mask: ``[bs, response_length]``, 1 on generated tokens, 0 elsewhere.
        config: verl's ``AlgoConfig`` (or anything with a ``gamma`` attribute), required.
        backend: scangen's backend. Other keywords (``index``, ``reward_baselines``, which
            verl's trainer passes to every registered estimator) are ignored.

    Returns:
        ``(advantages, returns)``: ``returns_t = m_t * C_t`` with ``C_t = m_t (r_t + gamma
        C_{t+1}) + (1 - m_t) C_{t+1}``, ``C_T = 0`` (the discounted return over the response
        tokens; tool-output spans pass it through unchanged, and their rewards are not added),
        in ``token_level_rewards``' dtype; ``advantages`` = the returns whitened over the
        masked tokens, then multiplied by the mask.
    """
    if config is None:
        raise ValueError("compute_reinforce_plus_plus_outcome_advantage: config is required "
                         "(its gamma), as in verl")
    m = _bool_mask(response_mask)
    out = _result_dtype((token_level_rewards,), response_mask)
    with torch.no_grad():
        returns = _returns_op()(token_level_rewards.to(_wide(out)), response_mask,
                                _per_row(config.gamma, token_level_rewards), backend=backend)
        adv = torch.where(m, masked_whiten(returns, response_mask), 0)
    return adv.to(out), returns.to(token_level_rewards.dtype)


# --------------------------------------------------------------------------- verl's registry

_NO_VALUES = (
    "{name}: no values given. verl's trainer passes values only to its built-in 'gae' "
    "estimator; scangen.integrations.verl.register() teaches the compute_advantage of {modules} "
    "to pass them to {name} too{why}. Call register() in the process that runs the trainer "
    "(docs/integrations/verl.md), or pass values= yourself.")
_ROUTED: dict = {}  # trainer module name -> None (routed) or the ImportError that prevented it


def _gae_estimator(token_level_rewards, response_mask, config=None, values=None, **kwargs):
    """``scangen_gae`` as verl's registry calls an estimator: its gamma and lam from
    ``config``; ``values`` by keyword (verl's own trainer passes it only through the routing
    that :func:`register` installs)."""
    if values is None:
        missing = {k: e for k, e in _ROUTED.items() if e is not None}
        why = "".join(f"; {k} could not be imported here ({e})" for k, e in missing.items())
        raise ValueError(_NO_VALUES.format(modules=", ".join(_TRAINER_MODULES),
                                           name=GAE_NAME, why=why))
    if config is None:
        raise ValueError(f"{GAE_NAME}: config is required (its gamma and lam)")
    return compute_gae_advantage_return(token_level_rewards, values, response_mask,
                                        config.gamma, config.lam)


def _route_values(module, core_algos):
    """Wrap ``module.compute_advantage`` so that ``adv_estimator == 'scangen_gae'`` runs scangen's
    GAE on ``data.batch['values']``, as verl's own 'gae' branch does for its GAE (including the
    response-mask fallback and the optional PF-PPO reweighting); every other estimator goes to
    verl's function unchanged."""
    original = module.compute_advantage
    if getattr(original, "_scangen_routed", False):
        return

    signature = inspect.signature(original)

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        if adv_estimator != GAE_NAME:
            return original(data, adv_estimator, *args, **kwargs)
        bound = signature.bind(data, adv_estimator, *args, **kwargs)
        bound.apply_defaults()
        gamma, lam, config = (bound.arguments.get(k) for k in ("gamma", "lam", "config"))
        batch = data.batch
        if "values" not in batch.keys():
            raise ValueError(f"{GAE_NAME} needs the critic's values, and this batch has none "
                             f"(keys: {', '.join(sorted(batch.keys()))}): set "
                             f"critic.enable=True, which verl sets by itself only for its own "
                             f"'gae'")
        if "response_mask" not in batch.keys():
            batch["response_mask"] = module.compute_response_mask(data)
        batch["advantages"], batch["returns"] = compute_gae_advantage_return(
            batch["token_level_rewards"], batch["values"], batch["response_mask"], gamma, lam)
        if config is not None and config.get("use_pf_ppo", False):
            data = core_algos.compute_pf_ppo_reweight_data(
                data, config.pf_ppo.get("reweight_method"), config.pf_ppo.get("weight_pow"))
        return data

    compute_advantage._scangen_routed = True
    module.compute_advantage = compute_advantage


def _install(core_algos, trainer_modules):
    """Register both estimators in ``core_algos``' registry and route values through each of
    ``trainer_modules`` (module objects)."""
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    for name, fn in ((GAE_NAME, _gae_estimator),
                     (REINFORCE_PP_NAME, compute_reinforce_plus_plus_outcome_advantage)):
        old = registry.get(name) if isinstance(registry, dict) else None
        if (old is not None and old is not fn and getattr(old, "__module__", None) == __name__
                and getattr(old, "__qualname__", None) == fn.__qualname__):
            del registry[name]  # this module reloaded: its new function replaces its old one
        core_algos.register_adv_est(name)(fn)
    for module in trainer_modules:
        _route_values(module, core_algos)


def register(*, trainer=True):
    """Add ``scangen_gae`` and ``scangen_reinforce_plus_plus`` to verl's advantage-estimator
    registry (``core_algos.register_adv_est``), so ``algorithm.adv_estimator=scangen_gae`` (with
    ``critic.enable=True``) or ``=scangen_reinforce_plus_plus`` selects them.

    verl's trainer calls registered estimators with ``token_level_rewards``, ``response_mask``
    and ``config`` only (plus ``index``, ``reward_baselines`` where present), never the critic's
    values. With ``trainer=True`` register() also wraps the ``compute_advantage`` of verl's
    trainer modules (those that import here) so that they pass ``data.batch['values']`` to
    ``scangen_gae``. Calling it again is harmless. It must run in the process that runs the
    trainer: in verl's Ray ``TaskRunner``, e.g. through Ray's ``worker_process_setup_hook``
    (docs/integrations/verl.md). Raises ImportError when verl's ``core_algos`` cannot be imported.
    """
    try:
        core_algos = importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as e:
        raise ImportError(
            "scangen.integrations.verl.register() needs verl, which could not be imported "
            f"({e}); pip install verl. The compute functions of this module work without it."
        ) from e
    modules = []
    for name in _TRAINER_MODULES if trainer else ():
        try:
            modules.append(importlib.import_module(name))
            _ROUTED[name] = None
        except ImportError as e:  # an older or trimmed verl: the registry still works
            _ROUTED.setdefault(name, e)
    _install(core_algos, modules)
