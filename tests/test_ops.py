"""Every built-in, through both generated implementations, against the float64 references.

The torch path and the Triton kernels (compiled on a GPU, interpreted on CPU) are each compared
with scangen.testing.reference, which is written from SEMANTICS.md without the generator.
"""
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl

import scangen
from conftest import BACKENDS, DEVICE, ON_GPU, to_backend
from scangen.testing import reference
from scangen import runtime
from scangen.kernels.lookback import lookback as _lookback
from scangen.kernels.lookback import lookback_joint as _lookback_joint
from scangen.kernels.lookback import lookback_joint_rows as _joint_lookback_rows
from scangen.kernels.lookback import lookback_rows as _lookback_rows
from scangen.testing import as_time_major, assert_close, make_inputs

ALGOS = sorted(reference.REFERENCES)
# The interpreter runs kernels in numpy: long rows stay on the GPU.
SHAPES = [(3, 1), (4, 7), (5, 333), (2, 4097)] + ([(67, 20000)] if ON_GPU else [])


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _run(name, inputs, backend, **kw):
    dev = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in inputs.items()}
    return tuple(o.cpu() for o in _tuple(getattr(scangen, name)(**dev, backend=backend, **kw)))


def _check(name, inputs, backend, **kw):
    expected = _tuple(reference.REFERENCES[name](**inputs))
    got = _run(name, inputs, backend, **kw)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape
        assert_close(g, e, dtype=g.dtype, name=f"{name} output {i} ({backend})")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"N{s[0]}-T{s[1]}")
@pytest.mark.parametrize("name", ALGOS)
def test_matches_reference(name, shape, backend):
    _check(name, make_inputs(name, *shape, seed=shape[1]), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGOS)
def test_defaults_and_no_truncation(name, backend):
    inputs = make_inputs(name, 4, 29, seed=1, trunc_rate=0.0)
    for key in ("truncateds", "bootstrap_values", "seed_values"):
        inputs.pop(key, None)
    _check(name, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGOS)
def test_non_contiguous_inputs(name, backend):
    """Every tensor is a strided slice of a larger buffer: no copy, same numbers."""
    inputs = make_inputs(name, 6, 40, seed=2)
    strided = {}
    for k, v in inputs.items():
        if torch.is_tensor(v) and v.dim() >= 2:
            big = torch.zeros(v.shape[0] * 2, v.shape[1] * 3, *v.shape[2:], dtype=v.dtype)
            big[::2, ::3] = v
            v = big[::2, ::3]
            assert not v.is_contiguous()
        strided[k] = v
    _check(name, strided, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGOS)
def test_time_major(name, backend):
    """time_dim=0 reads [T, N] buffers (CleanRL / SB3 layout) and returns [T, N]."""
    inputs = make_inputs(name, 5, 23, seed=3)
    expected = _tuple(reference.REFERENCES[name](**inputs))
    tm = {k: (v.transpose(0, 1) if torch.is_tensor(v) and v.dim() >= 2 else v)
          for k, v in inputs.items()}
    got = _run(name, tm, backend, time_dim=0)
    for g, e in zip(got, expected):
        assert g.shape == e.T.shape
        assert_close(g.T, e, dtype=g.dtype, name=f"{name} time-major")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_outputs_and_returns_in_one_pass(backend):
    inputs = make_inputs("gae", 3, 50, seed=4)
    adv, ret = _run("compute_gae", inputs, backend, outputs=("advantages", "returns"))
    ref_adv, ref_ret = reference.gae_advantages_and_returns(**inputs)
    assert_close(adv, ref_adv, dtype=adv.dtype)
    assert_close(ret, ref_ret, dtype=ret.dtype)
    (only,) = _run("compute_gae", inputs, backend, outputs="returns")
    assert_close(only, ref_ret, dtype=only.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_last_value(backend):
    inputs = make_inputs("gae", 4, 17, seed=5)
    inputs.pop("bootstrap_values")
    inputs["last_value"] = torch.randn(4)
    _check("compute_gae", inputs, backend)


BOOTSTRAPPED = ("compute_gae", "compute_vtrace", "compute_lambda_returns", "compute_discounted_returns")


def _where_bootstrap_is_added(inputs):
    """SEMANTICS.md: the bootstrap enters at truncated steps and at T-1, where the step did not
    terminate (termination wins); every other entry is ignored, never added."""
    at = inputs["truncateds"].clone()
    at[:, -1] = True
    return at & ~inputs["terminateds"]


def _bootstrap_inputs(name):
    inputs = make_inputs(name, 4, 31, seed=6, trunc_rate=0.2, term_rate=0.2)
    inputs["truncateds"][0, -1] = inputs["terminateds"][0, -1] = True  # terminated at T-1
    inputs["truncateds"][1, 5] = inputs["terminateds"][1, 5] = True    # both flags: termination wins
    return inputs


def _with_junk(inputs, where, junk):
    boot = inputs["bootstrap_values"]
    return dict(inputs, bootstrap_values=torch.where(where, torch.full_like(boot, junk), boot))


def _assert_same_outputs(name, inputs, other, backend):
    base = _run(name, inputs, backend)
    for i, (got, want) in enumerate(zip(_run(name, other, backend), base)):
        assert torch.isfinite(want).all()
        assert torch.equal(got, want), f"{name} output {i} ({backend}) read an ignored bootstrap entry"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("junk", [1e6, float("nan"), float("inf")], ids=["big", "nan", "inf"])
@pytest.mark.parametrize("name", BOOTSTRAPPED)
def test_bootstrap_ignored_where_not_added(name, junk, backend):
    """bootstrap_values' entries that the contract ignores (interior steps that are not
    truncated, and terminated steps, truncated or last) change nothing, NaN or inf included (the
    specs select the bootstrap, they do not multiply it by zero): outputs equal bit for bit those
    of the same call with zeros there."""
    inputs = _bootstrap_inputs(name)
    ignored = ~_where_bootstrap_is_added(inputs)
    assert (ignored & inputs["terminateds"]).sum() > 5
    clean = _with_junk(inputs, ignored, 0.0)
    _assert_same_outputs(name, clean, _with_junk(clean, ignored, junk), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", BOOTSTRAPPED)
def test_ignored_bootstrap_entries_have_zero_gradient(name, backend):
    """The adjoint kernels agree: NaN in every ignored bootstrap entry leaves every gradient
    finite, and the bootstrap's gradient is zero at every ignored entry."""
    inputs = make_inputs(name, 3, 19, seed=7, trunc_rate=0.2, term_rate=0.2)
    added = _where_bootstrap_is_added(inputs)
    values = to_backend(backend, _with_junk(inputs, ~added, float("nan")))
    leaves = {k: v.requires_grad_() for k, v in values.items()
              if torch.is_tensor(v) and v.is_floating_point()}
    out = _tuple(getattr(scangen, name)(**values, backend=backend))
    sum(o.sum() for o in out).backward()
    for k, leaf in leaves.items():
        assert torch.isfinite(leaf.grad).all(), f"{name} d/d{k} ({backend}) not finite"
    boot_grad = leaves["bootstrap_values"].grad.cpu()
    assert (boot_grad[~added] == 0).all()
    assert (boot_grad[added] != 0).any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("junk", [float("nan"), float("inf"), 1e6], ids=["nan", "inf", "big"])
def test_masked_gae_skips_masked_steps(junk, backend):
    """SEMANTICS.md: masked GAE's steps with response_mask 0 neither consume nor change the
    carries, so their values and rewards change no advantage, and no return at a step the mask
    keeps: bit for bit the call with zeros there, whatever the junk (NaN and inf included)."""
    inputs = make_inputs("masked_gae", 4, 37, seed=8)
    skipped = ~inputs["response_mask"]
    assert skipped.sum() > 10
    clean = {**inputs, **{k: inputs[k].masked_fill(skipped, 0.0) for k in ("values", "token_level_rewards")}}
    adv, ret = _run("compute_masked_gae", clean, backend, outputs=("advantages", "returns"))
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    for key in ("values", "token_level_rewards"):
        other = dict(clean, **{key: clean[key].masked_fill(skipped, junk)})
        got_adv, got_ret = _run("compute_masked_gae", other, backend, outputs=("advantages", "returns"))
        assert torch.equal(got_adv, adv), f"{key} ({backend}) at a skipped step reached the advantages"
        assert torch.equal(got_ret[~skipped], ret[~skipped])


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_row_and_per_step_params(backend):
    inputs = make_inputs("gae", 4, 19, seed=7)
    inputs["gamma"] = torch.rand(4, 1) * 0.5 + 0.5
    inputs["lambda_"] = torch.rand(4, 19)
    _check("compute_gae", inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eligibility_trailing_features(backend):
    _check("compute_eligibility_traces",
           make_inputs("eligibility_traces", 3, 21, seed=8, F=(2, 3)), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_major_trailing_features(backend):
    """Time-major buffers with feature dims: float inputs [T, N, F1, F2], flags [T, N] (they
    apply to every feature), seeds [N] or [N, F1, F2]. A [T, N] flag cannot be walked by one row
    stride over (N, F1, F2), and its copy was the same tensor again: RecursionError on every
    backend. Twice: the second call re-binds the plan, which copies the flag the same way."""
    for seed_shape in ("rows", "features"):
        inputs = make_inputs("eligibility_traces", 3, 21, seed=8, F=(2, 3))
        if seed_shape == "rows":
            inputs["seed_values"] = inputs["seed_values"][:, 0, 0].contiguous()
        expected = _tuple(reference.compute_eligibility_traces(**inputs))
        tm = {k: (v.transpose(0, 1).contiguous() if torch.is_tensor(v) and k != "seed_values"
                  else v) for k, v in inputs.items()}
        assert tm["dones"].shape == (21, 3) and tm["gradients"].shape == (21, 3, 2, 3)
        for _ in range(2):
            got = _run("compute_eligibility_traces", tm, backend, time_dim=0)
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert_close(g.transpose(0, 1), e, dtype=g.dtype,
                             name=f"time-major with features ({backend}, seeds {seed_shape})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefix_sum_starts_at(backend):
    inputs = make_inputs("episodic_prefix_sum", 3, 21, seed=9)
    _check("compute_episodic_prefix_sum", dict(inputs, boundary="starts_at"), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_dtypes(dtype, backend):
    inputs = make_inputs("gae", 3, 45, seed=10, dtype=dtype)
    (out,) = _run("compute_gae", inputs, backend)
    assert out.dtype == dtype
    assert_close(out, reference.compute_gae(**inputs), dtype=dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty(backend):
    for shape in [(0, 5), (3, 0)]:
        inputs = make_inputs("gae", 3, 5, seed=0)
        inputs = {k: (torch.empty(shape, dtype=v.dtype) if torch.is_tensor(v) else v)
                  for k, v in inputs.items()}
        (out,) = _run("compute_gae", inputs, backend)
        assert out.shape == shape


def test_retrace_without_next_action_probs_explains():
    inputs = make_inputs("retrace", 2, 5, seed=0)
    inputs.pop("next_action_probs_target")
    with pytest.raises(TypeError, match="missing required argument 'next_action_probs_target'"
                                        ".*successor"):
        scangen.compute_retrace(**inputs)


def test_exclusive_bootstrap_and_last_value():
    inputs = make_inputs("gae", 2, 5, seed=0)
    with pytest.raises(ValueError, match="pass at most one of bootstrap_values, last_value"):
        scangen.compute_gae(**inputs, last_value=torch.zeros(2))


def test_unknown_output_lists_the_public_outputs():
    """The error names the outputs a user can ask for, not the states the backward saves."""
    inputs = make_inputs("gae", 2, 5, seed=0)
    with pytest.raises(ValueError, match=r"unknown output 'advantage' \(available: advantages, "
                                         r"returns\)$"):
        scangen.compute_gae(**inputs, outputs="advantage")


@pytest.mark.parametrize("name", ["gae", "vtrace", "retrace", "lambda_returns",
                                  "discounted_returns", "eligibility_traces",
                                  "episodic_prefix_sum", "masked_gae"])
def test_docstring_lists_arguments_in_signature_order_and_no_saved_states(name):
    """help(compute_*): Args in the function's own order (params may come between inputs), and
    Returns without the scan states saved for the backward pass (st__*)."""
    import inspect
    fn = getattr(scangen, f"compute_{name}")
    doc = fn.__doc__
    args = doc.split("Args:")[1].split("Returns:")[0]
    listed = [line.strip().split(":")[0] for line in args.splitlines() if line.strip()]
    assert listed == list(inspect.signature(fn).parameters)
    returns = doc.split("Returns:")[1]
    assert "st__" not in returns and returns.strip()


def test_a_numpy_array_is_named_with_the_way_to_wrap_it():
    """A NumPy array where a tensor goes: the argument, the type, torch.from_numpy (it failed
    with "unhashable type: 'numpy.ndarray'" from the plan cache), on the first call and after
    a plan for tensors exists; a list names its type too."""
    inputs = make_inputs("gae", 2, 5, seed=0)
    scangen.compute_gae(**inputs)  # a plan for tensors
    for _ in range(2):
        with pytest.raises(TypeError, match=r"compute_gae\(\): 'rewards' must be a torch.Tensor, "
                                            r"got numpy.ndarray \(torch.from_numpy\(\) wraps"):
            scangen.compute_gae(**dict(inputs, rewards=inputs["rewards"].numpy()))
    with pytest.raises(TypeError, match=r"'values' must be a torch.Tensor, got list$"):
        scangen.compute_gae(**dict(inputs, values=inputs["values"].tolist()))


def test_numpy_scalars_are_params_and_bad_outputs_are_named():
    """A NumPy float32 gamma is a number like any other (np.float64, a float subclass, always
    was); a bool is not; outputs= of another type than names says so."""
    import numpy as np
    inputs = make_inputs("gae", 2, 5, seed=0)
    want = scangen.compute_gae(**dict(inputs, gamma=0.75))
    for gamma in (np.float32(0.75), np.float64(0.75), np.float16(0.75)):
        torch.testing.assert_close(scangen.compute_gae(**dict(inputs, gamma=gamma)), want)
    with pytest.raises(TypeError, match=r"gamma must be a float or a tensor broadcastable to "
                                        r"\[2, 5\], got bool"):
        scangen.compute_gae(**dict(inputs, gamma=True))
    grad = dict(inputs, rewards=inputs["rewards"].clone().requires_grad_(True))
    with pytest.raises(TypeError, match=r"gamma must be a float or a tensor broadcastable to "
                                        r"the inputs' \[N, T\], got bool"):  # autograd's path
        scangen.compute_gae(**dict(grad, gamma=True))
    torch.testing.assert_close(scangen.compute_gae(**dict(grad, gamma=np.float32(0.75))), want)
    for bad in (3, ["advantages", 3]):
        with pytest.raises(TypeError, match=r"outputs must be an output's name or a sequence of "
                                            r"names, got "):
            scangen.compute_gae(**inputs, outputs=bad)


def test_bad_boundary():
    inputs = make_inputs("episodic_prefix_sum", 2, 5, seed=0)
    with pytest.raises(ValueError, match="boundary must be one of 'ends_at', 'starts_at'"):
        scangen.compute_episodic_prefix_sum(**dict(inputs, boundary="bogus"))
    # The same check on the autograd path (the torch.library op), which maps choices itself.
    grad_inputs = dict(inputs, inputs=inputs["inputs"].clone().requires_grad_(True))
    with pytest.raises(ValueError, match="boundary must be one of 'ends_at', 'starts_at'"):
        scangen.compute_episodic_prefix_sum(**dict(grad_inputs, boundary="bogus"))
    with pytest.raises(ValueError, match="boundary must be one of 'ends_at', 'starts_at'"):
        scangen.compute_episodic_prefix_sum(**dict(grad_inputs, boundary=1))


def test_shape_mismatch_names_argument():
    inputs = make_inputs("gae", 3, 5, seed=0)
    inputs["values"] = inputs["values"][:, :4]
    with pytest.raises(ValueError, match=r"'values' has shape \[3, 4\], expected \[3, 5\]"):
        scangen.compute_gae(**inputs)


def test_integer_rewards_refused():
    inputs = make_inputs("gae", 3, 5, seed=0)
    inputs["rewards"] = inputs["rewards"].long()
    with pytest.raises(TypeError, match="'rewards' \\(float\\) must have dtype"):
        scangen.compute_gae(**inputs)


def test_backend_env_var_and_argument(monkeypatch):
    inputs = make_inputs("gae", 2, 5, seed=0)
    monkeypatch.setenv("SCANGEN_BACKEND", "bogus")
    runtime.reload_env()
    try:
        with pytest.raises(ValueError, match="SCANGEN_BACKEND must be one of 'auto', 'triton', "
                                             "'numba', 'torch', got 'bogus'"):
            scangen.compute_gae(**inputs)
        scangen.compute_gae(**inputs, backend="torch")  # the argument wins over the variable
        with pytest.raises(ValueError, match="backend must be"):
            scangen.compute_gae(**inputs, backend="cuda")
    finally:
        monkeypatch.delenv("SCANGEN_BACKEND")
        runtime.reload_env()


@pytest.mark.parametrize("name,dtype", [("compute_gae", torch.float32),
                                        ("compute_masked_gae", torch.float32),
                                        ("compute_retrace", torch.float32),
                                        ("compute_gae", torch.float64),
                                        ("compute_masked_gae", torch.float64)])
def test_lookback_family_matches_reference(name, dtype, monkeypatch):
    """The T-split kernel family, forced on shapes where it spans several chunks; float64
    accumulates in two-word slots (the workspace layout changes with the word size)."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    runtime.reload_env()
    try:
        for seed in (11, 12, 13):  # one plan, one kept workspace: its halves alternate
            _check(name, make_inputs(name, 2, 2100 if not ON_GPU else 50000, seed=seed,
                                     dtype=dtype), "triton")
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()


@pytest.mark.parametrize("name,dtype", [("compute_gae", torch.float32),
                                        ("compute_masked_gae", torch.float32),
                                        ("compute_vtrace", torch.float32),
                                        ("compute_eligibility_traces", torch.float32),
                                        ("compute_retrace", torch.float32),
                                        ("compute_masked_gae", torch.float64)])
def test_lookback_over_row_tiles_of_time_major_buffers(name, dtype, monkeypatch):
    """Time-major buffers ([T, N], time_dim=0) in the look-back family: tiles of adjacent rows
    (runtime.config TM_LB_ROWS), a carry per row, the last tile partly past the rows (37 rows
    in tiles of 8 or 32, two or more chunks a row); three calls on one plan, so that its
    workspace halves alternate."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    runtime.reload_env()
    runtime.PLANS.clear()
    try:
        for seed in (21, 22, 23):
            inputs = make_inputs(name, 37, 200 if not ON_GPU else 9000, seed=seed, dtype=dtype)
            expected = _tuple(reference.REFERENCES[name](**inputs))
            tm = {k: v.transpose(0, 1).contiguous() if torch.is_tensor(v) and v.dim() >= 2 else v
                  for k, v in inputs.items()}
            got = _run(name, tm, "triton", time_dim=0)
            for i, (g, e) in enumerate(zip(got, expected)):
                assert_close(g.transpose(0, 1), e, dtype=g.dtype, name=f"{name} output {i}")
        cfgs = {p.config for p in runtime.PLANS.values()}
        assert {c.family for c in cfgs} == {"lookback"} and min(c.block_n for c in cfgs) > 1
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()
        runtime.PLANS.clear()


@pytest.mark.parametrize("name", ["compute_eligibility_traces", "compute_episodic_prefix_sum"])
@pytest.mark.parametrize("N,T,tile", [(70, 150, (16, 32, 4)), (40, 16, (16, 16, 2))])
def test_time_major_tiles_of_light_calls(name, N, T, tile):
    """Time-major tiles of 16 rows on 2 or 4 warps (vectors across rows, the scan across lanes:
    LANES off below runtime.launch.LANES_NARROW_MIN_STEPS steps), forced here: several chunks a
    row and a last row tile partly past the rows."""
    from scangen.runtime.config import Config, override
    inputs = make_inputs(name, N, T, seed=N)
    expected = _tuple(reference.REFERENCES[name](**inputs))
    with override(lambda c: Config(tile[0], tile[1], 1, tile[2], "stream")):
        got = _run(name, as_time_major(inputs), "triton")
    for g, e in zip(got, expected):
        assert_close(g, e, dtype=g.dtype, name=name)


@pytest.mark.parametrize("name", [n for n in reference.REFERENCES if n != "compute_retrace"])
@pytest.mark.parametrize("family,warps,steps", [
    ("stream", 1, 16), ("persist", 1, 16), ("lookback", 1, 16), ("stream", 2, 16),
    ("persist", 2, 16), ("stream", 4, 16), ("lookback", 4, 16), ("stream", 2, 64)])
def test_time_major_tiles_a_row_a_lane(name, family, warps, steps):
    """Time-major tiles of 32 rows take LANES (runtime.launch.lanes: the rows' alignment hidden
    from Triton so that each lane walks whole rows): several chunks a row (or one, the whole row
    of 48 steps in a 64-step chunk on two warps) and a last row tile partly past the rows, in
    each family; on two or four warps, each over part of the steps (16 steps: every op's
    look-back loads fit timemajor.TM_LB_LANES_LOADS)."""
    from scangen.runtime.config import Config, override
    N, T = 40, 48
    inputs = make_inputs(name, N, T, seed=T)
    expected = _tuple(reference.REFERENCES[name](**inputs))
    runtime.PLANS.clear()
    with override(lambda c: Config(32, steps, 1, warps, family)):
        got = _run(name, as_time_major(inputs), "triton")
        (plan,) = runtime.PLANS.values()
        bootstrap = any(i.kind == "float" and i.shape == "NT" and i.optional for i in plan.op.inputs)
        assert plan.lp.meta["LANES"] == (2 if bootstrap else 1)  # volatile loads or not
    runtime.PLANS.clear()
    for g, e in zip(got, expected):
        assert_close(g, e, dtype=g.dtype, name=name)


@pytest.mark.parametrize("name", ["compute_gae", "compute_masked_gae"])
def test_lookback_with_its_first_wait(name, monkeypatch):
    """The look-back kernels with LB_SPIN on (runtime.launch_params.lookback_spin: rows of many chunks wait on
    their nearest predecessor alone before reading whole windows), forced here on short rows."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    monkeypatch.setattr(runtime.launch_params, "LB_SPIN_CHUNKS", 1)
    runtime.reload_env()
    runtime.PLANS.clear()
    try:
        for seed in (14, 15):
            _check(name, make_inputs(name, 2, 2100 if not ON_GPU else 50000, seed=seed), "triton")
        (plan,) = runtime.PLANS.values()
        assert plan.lp.meta["LB_SPIN"] is True
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()
        runtime.PLANS.clear()


@pytest.mark.parametrize("name", ["compute_gae", "compute_masked_gae"])
def test_lookback_in_program_id_order(name, monkeypatch):
    """The look-back kernels with LB_PID on (runtime.launch_params.lookback_pid: chunks in the order of
    program ids, the counter only for the workspace half), forced here for every call; three
    calls on one plan, so that its workspace halves alternate."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    monkeypatch.setattr(runtime.launch_params, "lookback_pid", lambda c, cfg: cfg.family == "lookback")
    runtime.reload_env()
    runtime.PLANS.clear()
    try:
        for seed in (16, 17, 18):
            _check(name, make_inputs(name, 2, 2100 if not ON_GPU else 50000, seed=seed), "triton")
        (plan,) = runtime.PLANS.values()
        assert plan.lp.meta["LB_PID"] is True
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()
        runtime.PLANS.clear()


@pytest.mark.parametrize("name", ALGOS)
def test_full_and_partial_tiles(name, monkeypatch):
    """Calls whose tiles are all full run without bounds masks (runtime.launch.even): both kinds of
    call, in the stream family and in the look-back family (T split across programs)."""
    for family, shapes in (("stream", [(4, 64), (4, 48)]), ("lookback", [(1, 2048), (1, 2000)])):
        monkeypatch.setenv("SCANGEN_FAMILY", family)
        runtime.reload_env()
        evens = []
        for shape in shapes:
            runtime.PLANS.clear()
            _check(name, make_inputs(name, *shape, seed=shape[1]), "triton")
            (plan,) = runtime.PLANS.values()
            evens.append(plan.lp.meta["EVEN"])
        assert evens == [True, False], (family, evens)
    monkeypatch.delenv("SCANGEN_FAMILY")
    runtime.reload_env()
    runtime.PLANS.clear()


def test_unused_pointer_slots_after_the_first_launch():
    """After a plan's first launch its calls pass None in the unused pointer slots (absent
    optional inputs, float params, outputs not asked for), for Triton's launcher to take as
    null pointers. A call that goes through Triton's own launch path again (a launch hook; the
    interpreter always does) gets a real tensor back in those slots, and the same results."""
    runtime.PLANS.clear()
    x = make_inputs("compute_vtrace", 3, 40, seed=5)
    del x["truncateds"]  # absent optional inputs, float params, and one of two outputs asked for
    expected = reference.compute_vtrace(**x)[1]
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
    first = scangen.compute_vtrace(**x, outputs="pg_advantages", backend="triton")
    (plan,) = runtime.PLANS.values()
    plan.lp.direct = True  # as after a first launch on a GPU
    seen = []
    launch = runtime.launch.launch

    def spy(c, kernel, grid, args, *rest):
        seen.append(args)
        launch(c, kernel, grid, args, *rest)

    with mock.patch.object(runtime.launch, "launch", spy):
        again = scangen.compute_vtrace(**x, outputs="pg_advantages", backend="triton")
    runtime.PLANS.clear()
    assert any(a is None for a in seen[0]), "no unused slot was passed as None"
    for got in (first, again):
        assert_close(got.cpu(), expected, dtype=got.dtype, name="vtrace pg_advantages")


@pytest.mark.parametrize("name,arrays", [("compute_gae", 3), ("compute_masked_gae", 7)])
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_lookback_workspace_is_kept_and_reset_for_the_next_call(acc, name, arrays, monkeypatch):
    """The look-back workspace is made once per plan and stream: after each call its ticket
    counter has advanced by the call's programs, the half this call used holds every slot's
    words, and the half the next call will use is all-one bits again."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    runtime.reload_env()
    try:
        runtime.PLANS.clear()
        N, T = 2, 2100
        words = 2 if acc == torch.float64 else 1
        for call in range(3):
            x = make_inputs(name, N, T, seed=call, dtype=acc)
            _check(name, x, "triton")
            (plan,) = [p for p in runtime.PLANS.values() if p.lp.workspaces]
            (ws,) = plan.lp.workspaces.values()
            progs = N * -(-T // plan.config.block_t)
            assert progs > 2  # several chunks per row: the look-back has predecessors to read
            assert ws[:2].view(torch.int64).item() == (call + 1) * progs - 1
            halves = ws[2:].view(2, arrays * progs * words)
            assert (halves[(call + 1) % 2] == -1).all(), "the next call's half was not reset"
            used = halves[call % 2].view(arrays, progs, words)
            assert not (used == -1).all(dim=2).any(), "a slot of this call's half is unwritten"
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()


def test_plan_is_reused_and_new_gamma_takes_effect():
    inputs = make_inputs("gae", 3, 9, seed=12)
    a = scangen.compute_gae(**dict(inputs, gamma=0.9), backend="torch")
    b = scangen.compute_gae(**dict(inputs, gamma=0.5), backend="torch")
    assert_close(a, reference.compute_gae(**dict(inputs, gamma=0.9)), dtype=a.dtype)
    assert_close(b, reference.compute_gae(**dict(inputs, gamma=0.5)), dtype=b.dtype)


FIRST_FLOAT = {"compute_gae": "rewards", "compute_vtrace": "rewards", "compute_retrace": "rewards",
               "compute_lambda_returns": "rewards", "compute_discounted_returns": "rewards",
               "compute_eligibility_traces": "gradients", "compute_episodic_prefix_sum": "inputs",
               "compute_masked_gae": "token_level_rewards"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGOS)
def test_nan_and_inf_stay_in_their_row(name, backend):
    """A NaN or inf never reaches another row, and every step the loop keeps finite has the
    loop's value. (Within its row a NaN follows the recurrence's arithmetic: 0 * NaN is NaN, so
    it can reach earlier episodes too; the loop references differ on that and are not judged.)"""
    inputs = make_inputs(name, 4, 37, seed=13)
    if name == "compute_masked_gae":
        # steps the op consumes: a skipped step's NaN is selected away (test_masked_gae_skips_masked_steps)
        inputs["response_mask"] = inputs["response_mask"].clone()
        inputs["response_mask"][1, 20] = inputs["response_mask"][2, 5] = True
    x = inputs[FIRST_FLOAT[name]].clone()
    x[1, 20] = float("nan")
    x[2, 5] = float("inf")
    inputs[FIRST_FLOAT[name]] = x
    expected = _tuple(reference.REFERENCES[name](**inputs))
    got = _run(name, inputs, backend)
    for g, e in zip(got, expected):
        assert_close(g[[0, 3]], e[[0, 3]], dtype=g.dtype, name=f"{name} ({backend})")
        both = torch.isfinite(g) & torch.isfinite(e)
        assert_close(torch.where(both, g.double(), 0.0), torch.where(both, e, 0.0),
                     dtype=g.dtype, name=f"{name} finite steps ({backend})")
        assert not torch.isfinite(g[1, 20]) and not torch.isfinite(e[1, 20])


@triton.jit
def _lookback_probe(ws_a, ws_b, ws_s, vals, out, step, ACC: tl.constexpr,
                    WINDOW: tl.constexpr, SPIN: tl.constexpr):
    # vals: this chunk's aggregate (a, b) and the initial state
    carry = _lookback(ws_a, ws_b, ws_s, step, step, tl.load(vals), tl.load(vals + 1),
                          tl.load(vals + 2), WINDOW, SPIN, ACC)
    tl.store(out, carry)


@pytest.mark.parametrize("window,spin", [(32, False), (128, False), (512, False), (128, True)])
@pytest.mark.parametrize("inclusive_at", [None, 0, 5, 130, 298])
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_lookback_composes_many_predecessors(inclusive_at, acc, window, spin):
    """The look-back of chunk 300: aggregates of chunks 0..299 are written and at most one
    inclusive state (the rest read as unwritten), so it composes across several windows (one
    window of 512) in one pass and must match the float64 composition; with or without its
    first wait on the nearest predecessor alone (runtime.launch_params.lookback_window, lookback_spin)."""
    step = 300
    g = torch.Generator().manual_seed(3)
    a = torch.randn(step + 1, generator=g, dtype=torch.float64)
    b = torch.rand(step + 1, generator=g, dtype=torch.float64) * 0.2 + 0.9
    s = torch.randn(step + 1, generator=g, dtype=torch.float64)
    init = 0.25
    unwritten = torch.full((step + 1,), -1, dtype=torch.int32 if acc == torch.float32 else torch.int64)
    ws_a, ws_b, ws_s = (unwritten.clone().view(acc).to(DEVICE) for _ in range(3))
    ws_a[:step], ws_b[:step] = a[:step].to(acc), b[:step].to(acc)
    lo = 0
    base = init
    if inclusive_at is not None:
        ws_s[inclusive_at] = s[inclusive_at].to(acc)
        lo, base = inclusive_at + 1, s[inclusive_at].to(acc).double().item()
    expected = torch.tensor(base, dtype=torch.float64)
    for j in range(lo, step):  # the chunks in scan order, each applied to the state before it
        expected = a[j].to(acc).double() + b[j].to(acc).double() * expected
    out = torch.zeros(1, dtype=acc, device=DEVICE)
    agg_a, agg_b = a[step].to(acc).item(), b[step].to(acc).item()
    vals = torch.tensor([agg_a, agg_b, init], dtype=acc, device=DEVICE)
    _lookback_probe[(1,)](ws_a, ws_b, ws_s, vals, out, step,
                          ACC=tl.float64 if acc == torch.float64 else tl.float32, WINDOW=window,
                          SPIN=spin)
    tol = 1e-12 if acc == torch.float64 else 1e-4
    assert abs(out.item() - expected.item()) <= tol * max(1.0, abs(expected.item()))
    # It published its own aggregate and inclusive state.
    assert ws_a[step].item() == pytest.approx(agg_a, rel=1e-6)
    assert ws_s[step].item() == pytest.approx(agg_a + agg_b * expected.item(), rel=1e-4, abs=1e-4)


@triton.jit
def _lookback_rows_probe(ws_a, ws_b, ws_s, vals, out, step, ACC: tl.constexpr, BN: tl.constexpr,
                         WINDOW: tl.constexpr, SPIN: tl.constexpr):
    # vals: this chunk's aggregates a [BN], b [BN] and the initial states [BN]
    r = tl.arange(0, BN)
    carry = _lookback_rows(ws_a, ws_b, ws_s, step, step, tl.load(vals + r),
                               tl.load(vals + BN + r), tl.load(vals + 2 * BN + r), BN, WINDOW,
                               SPIN, ACC)
    tl.store(out + r, carry)


# each row's one inclusive state (None: none), so rows stop in different windows
ROW_INCLUSIVE = [(None, 0, 5, 298), (130, 130, 130, 130), (299, None, 17, 150)]


@pytest.mark.parametrize("window,spin", [(16, False), (32, False), (16, True)])
@pytest.mark.parametrize("inclusive_at", ROW_INCLUSIVE)
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_lookback_over_a_tile_of_rows(inclusive_at, acc, window, spin):
    """The look-back of a tile of 4 rows (time-major buffers, runtime.config TM_LB_ROWS) at chunk
    300: every row has its own nearest inclusive state, so rows finish in different windows,
    and each carry must match its own row's float64 composition."""
    step, bn = 300, len(inclusive_at)
    g = torch.Generator().manual_seed(5)
    a = torch.randn(step + 1, bn, generator=g, dtype=torch.float64)
    b = torch.rand(step + 1, bn, generator=g, dtype=torch.float64) * 0.2 + 0.9
    s = torch.randn(step + 1, bn, generator=g, dtype=torch.float64)
    init = torch.tensor([0.25, -1.0, 0.5, 2.0], dtype=torch.float64)
    int_t = torch.int32 if acc == torch.float32 else torch.int64
    ws_a, ws_b, ws_s = (torch.full((step + 1, bn), -1, dtype=int_t).view(acc) for _ in range(3))
    ws_a[:step], ws_b[:step] = a[:step].to(acc), b[:step].to(acc)
    expected = []
    for i, at in enumerate(inclusive_at):
        lo, x = 0, init[i].to(acc).double().item()
        if at is not None:
            ws_s[at, i] = s[at, i].to(acc)
            lo, x = at + 1, s[at, i].to(acc).double().item()
        for j in range(lo, step):
            x = a[j, i].to(acc).double().item() + b[j, i].to(acc).double().item() * x
        expected.append(x)
    vals = torch.cat([a[step], b[step], init]).to(acc).to(DEVICE)
    out = torch.zeros(bn, dtype=acc, device=DEVICE)
    ws_a, ws_b, ws_s = (w.reshape(-1).to(DEVICE) for w in (ws_a, ws_b, ws_s))
    _lookback_rows_probe[(1,)](ws_a, ws_b, ws_s, vals, out, step,
                               ACC=tl.float64 if acc == torch.float64 else tl.float32, BN=bn,
                               WINDOW=window, SPIN=spin)
    tol = 1e-12 if acc == torch.float64 else 1e-4
    for i, (got, want) in enumerate(zip(out.tolist(), expected)):
        assert abs(got - want) <= tol * max(1.0, abs(want)), (i, got, want)
    # It published every row's aggregate and inclusive state.
    ws_a, ws_s = ws_a.reshape(step + 1, bn).cpu(), ws_s.reshape(step + 1, bn).cpu()
    assert torch.allclose(ws_a[step].double(), a[step].to(acc).double())
    for i, want in enumerate(expected):
        got = ws_s[step, i].item()
        assert got == pytest.approx(a[step, i].item() + b[step, i].item() * want, rel=1e-4, abs=1e-4)


@triton.jit
def _joint_lookback_rows_probe(ws, vals, out, n, step, ACC: tl.constexpr, BN: tl.constexpr,
                               WINDOW: tl.constexpr, SPIN: tl.constexpr):
    # vals: [7, BN] this chunk's aggregates (p, q, r, u, v) and initial states (second, first)
    i = tl.arange(0, BN)
    c2, c1 = _joint_lookback_rows(ws, n, step, step, tl.load(vals + i), tl.load(vals + BN + i),
                                  tl.load(vals + 2 * BN + i), tl.load(vals + 3 * BN + i),
                                  tl.load(vals + 4 * BN + i), tl.load(vals + 5 * BN + i),
                                  tl.load(vals + 6 * BN + i), BN, WINDOW, SPIN, ACC)
    tl.store(out + i, c2)
    tl.store(out + BN + i, c1)


@pytest.mark.parametrize("window,spin", [(16, False), (16, True)])
@pytest.mark.parametrize("inclusive_at", ROW_INCLUSIVE)
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_joint_lookback_over_a_tile_of_rows(inclusive_at, acc, window, spin):
    """The joint look-back (masked GAE's two chained scans) of a tile of 4 rows at chunk 300,
    each row with its own nearest inclusive state pair: each row's carries must match the
    float64 composition of its maps x -> [[p, q], [0, r]] x + (u, v)."""
    step, bn = 300, len(inclusive_at)
    n = (step + 1) * bn  # words of one array
    g = torch.Generator().manual_seed(6)
    p, r = (torch.rand(step + 1, bn, generator=g, dtype=torch.float64) * 0.2 + 0.9 for _ in range(2))
    q, u, v = (torch.randn(step + 1, bn, generator=g, dtype=torch.float64) * 0.3 for _ in range(3))
    s2, s1 = (torch.randn(step + 1, bn, generator=g, dtype=torch.float64) for _ in range(2))
    init2 = torch.tensor([0.25, -1.0, 0.5, 2.0], dtype=torch.float64)
    init1 = torch.tensor([-0.5, 0.75, 0.0, 1.5], dtype=torch.float64)
    int_t = torch.int32 if acc == torch.float32 else torch.int64
    ws = torch.full((7, step + 1, bn), -1, dtype=int_t).view(acc)
    for k, arr in enumerate((p, q, r, u, v)):
        ws[k, :step] = arr[:step].to(acc)
    expected = []
    for i, at in enumerate(inclusive_at):
        lo, x2, x1 = 0, float(init2[i].to(acc)), float(init1[i].to(acc))
        if at is not None:
            ws[5, at, i], ws[6, at, i] = s2[at, i].to(acc), s1[at, i].to(acc)
            lo, x2, x1 = at + 1, float(s2[at, i].to(acc)), float(s1[at, i].to(acc))
        for j in range(lo, step):
            pj, qj, rj, uj, vj = (float(w[j, i].to(acc)) for w in (p, q, r, u, v))
            x2, x1 = pj * x2 + qj * x1 + uj, rj * x1 + vj
        expected.append((x2, x1))
    vals = torch.stack([p[step], q[step], r[step], u[step], v[step], init2, init1]).to(acc)
    out = torch.zeros(2, bn, dtype=acc, device=DEVICE)
    ws_dev = ws.reshape(-1).to(DEVICE)
    _joint_lookback_rows_probe[(1,)](ws_dev, vals.reshape(-1).to(DEVICE), out, n, step,
                                     ACC=tl.float64 if acc == torch.float64 else tl.float32,
                                     BN=bn, WINDOW=window, SPIN=spin)
    tol = 1e-12 if acc == torch.float64 else 2e-4
    for i, (want2, want1) in enumerate(expected):
        got2, got1 = out[0, i].item(), out[1, i].item()
        assert abs(got2 - want2) <= tol * max(1.0, abs(want2)), (i, got2, want2)
        assert abs(got1 - want1) <= tol * max(1.0, abs(want1)), (i, got1, want1)
    ws = ws_dev.reshape(7, step + 1, bn).cpu()
    for i, (want2, want1) in enumerate(expected):  # it published each row's inclusive pair
        pv, qv, rv, uv, vv = (float(w[step, i]) for w in (p, q, r, u, v))
        assert ws[5, step, i].item() == pytest.approx(pv * want2 + qv * want1 + uv, rel=1e-3, abs=1e-3)
        assert ws[6, step, i].item() == pytest.approx(rv * want1 + vv, rel=1e-3, abs=1e-3)


@triton.jit
def _joint_lookback_probe(ws, vals, out, n, step, ACC: tl.constexpr, WINDOW: tl.constexpr,
                          SPIN: tl.constexpr):
    # vals: this chunk's aggregate (p, q, r, u, v) and the initial states (second, first)
    c2, c1 = _lookback_joint(ws, n, step, step, tl.load(vals), tl.load(vals + 1),
                             tl.load(vals + 2), tl.load(vals + 3), tl.load(vals + 4),
                             tl.load(vals + 5), tl.load(vals + 6), WINDOW, SPIN, ACC)
    tl.store(out, c2)
    tl.store(out + 1, c1)


@pytest.fixture(scope="module")
def joint_lookback():
    # the helper the look-back kernels of joint pairs (masked GAE) call through lookback_joint_tile
    return _joint_lookback_probe


@pytest.mark.parametrize("window,spin", [(32, False), (512, False), (128, True)])
@pytest.mark.parametrize("inclusive_at", [None, 0, 5, 130, 298])
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_joint_lookback_composes_many_predecessors(joint_lookback, inclusive_at, acc, window,
                                                   spin):
    """The joint look-back (chain="joint") of chunk 300: five-word aggregates of chunks 0..299
    written, and at most one inclusive state pair; its carry must match the float64
    composition of the maps x -> [[p, q], [0, r]] x + (u, v) on x = (second, first)."""
    step, n = 300, 301
    g = torch.Generator().manual_seed(4)
    p, r = (torch.rand(n, generator=g, dtype=torch.float64) * 0.2 + 0.9 for _ in range(2))
    q, u, v = (torch.randn(n, generator=g, dtype=torch.float64) * 0.3 for _ in range(3))
    s2, s1 = torch.randn(n, generator=g, dtype=torch.float64), torch.randn(n, generator=g,
                                                                          dtype=torch.float64)
    init2, init1 = 0.25, -0.5
    words = torch.full((7, n), -1, dtype=torch.int32 if acc == torch.float32 else torch.int64)
    ws = words.view(acc)
    for k, arr in enumerate((p, q, r, u, v)):
        ws[k, :step] = arr[:step].to(acc)
    lo, x2, x1 = 0, init2, init1
    if inclusive_at is not None:
        ws[5, inclusive_at], ws[6, inclusive_at] = s2[inclusive_at].to(acc), s1[inclusive_at].to(acc)
        lo = inclusive_at + 1
        x2, x1 = (float(w[inclusive_at].to(acc)) for w in (s2, s1))
    for j in range(lo, step):  # chunks in scan order, each applied to the state before it
        pj, qj, rj, uj, vj = (float(a[j].to(acc)) for a in (p, q, r, u, v))
        x2, x1 = pj * x2 + qj * x1 + uj, rj * x1 + vj
    vals = torch.tensor([float(a[step].to(acc)) for a in (p, q, r, u, v)] + [init2, init1],
                        dtype=acc, device=DEVICE)
    out = torch.zeros(2, dtype=acc, device=DEVICE)
    ws = ws.to(DEVICE)
    joint_lookback[(1,)](ws, vals, out, n, step,
                         ACC=tl.float64 if acc == torch.float64 else tl.float32, WINDOW=window,
                         SPIN=spin)
    tol = 1e-12 if acc == torch.float64 else 2e-4
    for got, want in zip(out.tolist(), (x2, x1)):
        assert abs(got - want) <= tol * max(1.0, abs(want)), (got, want)
    # It published its own aggregate and inclusive state pair.
    pv, qv, rv, uv, vv = vals[:5].tolist()
    assert ws[0, step].item() == pytest.approx(pv, rel=1e-6)
    assert ws[5, step].item() == pytest.approx(pv * x2 + qv * x1 + uv, rel=1e-3, abs=1e-3)
    assert ws[6, step].item() == pytest.approx(rv * x1 + vv, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("actions", [1, 3, 8, 16])
def test_retrace_action_counts(actions):
    """Retrace's sums over the action axis: dense blocks when K is a power of two (offsets
    t * BLOCK_K + k, runtime.launch.k_dense), strided loads otherwise; both against the reference."""
    inputs = make_inputs("retrace", 5, 37, seed=13, A=actions)
    _check("compute_retrace", inputs, "triton", outputs=("targets", "advantages"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("as_tensor", [False, True])
def test_reused_plan_follows_a_param_default_that_names_another(backend, as_tensor):
    """V-trace's pg_rho_bar defaults to rho_bar. Calls with the same signature reuse one plan;
    each must take pg_rho_bar from its own rho_bar (a plan once kept the first call's)."""
    inputs = make_inputs("vtrace", 3, 20, seed=14)
    inputs = {k: v for k, v in inputs.items() if k not in ("rho_bar", "pg_rho_bar")}
    outs = ("targets", "pg_advantages")
    for rho_bar in (1.0, 0.3, 0.6):
        rb = torch.full((3, 1), rho_bar, dtype=torch.float32) if as_tensor else rho_bar
        ref = reference.compute_vtrace(**inputs, rho_bar=rb, pg_rho_bar=rb)
        got = _run("compute_vtrace", dict(inputs, rho_bar=rb), backend, outputs=outs)
        for g, e in zip(got, ref):
            assert_close(g, e, dtype=g.dtype, name=f"vtrace rho_bar={rho_bar} ({backend})")


_BUILTINS = ["gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
             "eligibility_traces", "episodic_prefix_sum", "masked_gae"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", _BUILTINS)
def test_reused_plan_takes_every_float_param_of_the_call(name, backend):
    """Every float param of every built-in, changed between two calls of one signature: the
    second call (a reused plan) must give what a fresh plan gives."""
    fn = getattr(scangen, f"compute_{name}")
    op = fn.__globals__["OP"]
    inputs = make_inputs(name, 3, 20, seed=15)
    floats = [p.name for p in op.params if not p.choices]
    # params that default to another param are left out unless they are the one changed, so
    # that they follow the param they name (V-trace's pg_rho_bar follows rho_bar)
    aliases = {p.name for p in op.params if isinstance(p.default, str) and not p.choices}
    base = {k: v for k, v in inputs.items() if k not in floats}
    dev = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in base.items()}
    for p in floats:
        first = dict(dev, **{q: 0.9 for q in floats if q not in aliases or q == p})
        second = dict(first, **{p: 0.5})
        fn(**first, backend=backend)  # makes the plan
        reused = fn(**second, backend=backend)
        runtime.PLANS.clear()
        fresh = fn(**second, backend=backend)
        for r, f in zip(reused if isinstance(reused, tuple) else (reused,),
                        fresh if isinstance(fresh, tuple) else (fresh,)):
            assert torch.equal(r, f), f"{name}: {p} changed between calls of one plan ({backend})"
