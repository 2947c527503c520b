"""Plausible mistakes and edge inputs: each gets the right answer, or an error that names the
argument and what was expected, alike on every backend and on both paths (``direct``: a plain
call; ``autograd``: an input that requires a gradient, through the torch.library op).

Errors are compared by message fragments that name the argument. Calls are made twice where a
plan could change the outcome: the first call of a signature checks everything, later calls of
the same signature reuse its plan (scangen.runtime.plans).
"""
import fractions
import re

import numpy as np
import pytest
import torch

import scangen
from conftest import BACKENDS, ON_GPU, call_on, to_backend
from scangen import runtime
from scangen.testing import make_inputs, reference
from scangen.testing.helpers import ALGORITHMS, assert_close

PATHS = ("direct", "autograd")
N, T = 3, 5
# the first float input of each op (the tensor the autograd path makes require a gradient),
# and another float tensor for the tests that break the first one
FIRST = {"compute_gae": "rewards", "compute_vtrace": "log_pi_target",
         "compute_retrace": "action_probs_target", "compute_lambda_returns": "rewards",
         "compute_discounted_returns": "rewards", "compute_eligibility_traces": "gradients",
         "compute_episodic_prefix_sum": "inputs", "compute_masked_gae": "token_level_rewards"}
OTHER = {"compute_gae": "values", "compute_vtrace": "values", "compute_retrace": "q_values",
         "compute_lambda_returns": "next_values", "compute_discounted_returns": "bootstrap_values",
         "compute_eligibility_traces": "seed_values", "compute_episodic_prefix_sum": "seed_values",
         "compute_masked_gae": "values"}
FLAG = {"compute_gae": "terminateds", "compute_vtrace": "terminateds",
        "compute_retrace": "terminateds", "compute_lambda_returns": "terminateds",
        "compute_discounted_returns": "terminateds", "compute_eligibility_traces": "dones",
        "compute_episodic_prefix_sum": "dones", "compute_masked_gae": "response_mask"}
# CPU backends: the tests with 'meta' tensors compare them with CPU tensors
CPU_BACKENDS = () if ON_GPU else BACKENDS


def _inputs(name, n=N, t=T):
    return make_inputs(name, n, t, seed=0)


def _call(name, kw, backend, path, grad=None, **call_kw):
    """``name(**kw)`` on ``backend``; on the autograd path with ``grad`` (default: the op's
    first float input) requiring a gradient, and the backward run. Outputs as a tuple."""
    kw = to_backend(backend, kw)
    if path == "autograd":
        g = grad or FIRST[name]
        kw[g] = kw[g].detach().clone().requires_grad_(True)
    out = getattr(scangen, name)(**kw, backend=backend, **call_kw)
    outs = out if isinstance(out, tuple) else (out,)
    if path == "autograd":
        loss = sum(o.float().sum() for o in outs if o.requires_grad)
        assert torch.is_tensor(loss), "the autograd path returned no differentiable output"
        loss.backward()
    return tuple(o.detach().cpu() if o.device.type != "meta" else o for o in outs)


def _raises(exc, fragment, name, kw, backend, path, *, twice=True, **call_kw):
    """The call raises ``exc`` whose message holds ``fragment`` and starts with the function's
    name; ``twice``: on a second call too (the signature's plan, if one was made)."""
    for _ in range(2 if twice else 1):
        with pytest.raises(exc, match=re.escape(fragment)) as info:
            _call(name, kw, backend, path, **call_kw)
        assert str(info.value).startswith(f"{name}()"), str(info.value)


def _same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        assert_close(g, e, dtype=g.dtype)


# ------------------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.complex64, torch.bool])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_float_input_of_another_dtype_is_named(name, dtype, backend, path):
    kw = _inputs(name)
    kw[FIRST[name]] = kw[FIRST[name]].to(dtype)
    _raises(TypeError, f"'{FIRST[name]}' (float) must have dtype float16, bfloat16, float32, "
                       f"float64; got {str(dtype).replace('torch.', '')}",
            name, kw, backend, path, grad=OTHER[name])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint16])
@pytest.mark.parametrize("name", ["compute_gae", "compute_masked_gae"])
def test_flag_input_of_another_dtype_is_named(name, dtype, backend, path):
    kw = _inputs(name)
    kw[FLAG[name]] = kw[FLAG[name]].to(dtype)
    _raises(TypeError, f"'{FLAG[name]}' (flag) must have dtype bool, uint8",
            name, kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool])
def test_index_input_of_another_dtype_is_named(dtype, backend, path):
    kw = _inputs("compute_retrace")
    kw["actions"] = kw["actions"].to(dtype)
    _raises(TypeError, "'actions' (index) must have dtype int32, int64; got "
                       + str(dtype).replace("torch.", ""),
            "compute_retrace", kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_values_other_than_0_and_1_agree_across_backends(backend, path):
    """Flags are 0 or 1 (docs/runtime.md, not checked: a pass over the data); other values
    are read the same way by every backend."""
    for name in ("compute_gae", "compute_episodic_prefix_sum", "compute_masked_gae"):
        kw = _inputs(name, 3, 9)
        for flag in (kw[FLAG[name]].to(torch.uint8) * 2, -kw[FLAG[name]].long(),
                     torch.full((3, 9), 0.5)):
            kw[FLAG[name]] = flag
            _same(_call(name, kw, backend, path), _call(name, kw, "torch", "direct"))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_actions_give_nan_on_every_backend(backend, path):
    """docs/algorithms/retrace.md: an action outside [0, K) gives NaN, not another action's
    value and not an error."""
    kw = _inputs("compute_retrace")
    kw["actions"][1, 2] = 4  # K = 4
    kw["actions"][2, 0] = -1
    targets, adv = _call("compute_retrace", kw, backend, path)
    assert adv[1, 2].isnan() and adv[2, 0].isnan()
    assert torch.isfinite(targets[0]).all() and torch.isfinite(adv[0]).all(), \
        "a bad action reached another row"
    _same((targets, adv), _call("compute_retrace", kw, "torch", "direct"))


# ------------------------------------------------------------------------------ shapes

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGORITHMS)
def test_mismatched_n_or_t_is_named(name, backend, path):
    kw = _inputs(name)
    kw[FLAG[name]] = kw[FLAG[name]][:, :-1]
    _raises(ValueError, f"'{FLAG[name]}' has shape [3, 4], expected [3, 5]",
            name, kw, backend, path)
    kw = _inputs(name)
    kw[FLAG[name]] = kw[FLAG[name]][:-1]
    _raises(ValueError, f"'{FLAG[name]}' has shape [2, 5], expected [3, 5]",
            name, kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shapes_that_do_not_extend_each_other_name_both(backend, path):
    """A batched flag beside unbatched rewards, or a [T] flag beside [N, T] rewards: neither
    shape is the other followed by feature dims. The error named 'rewards' alone, expecting
    [2, 3] (or [3])."""
    kw = _inputs("compute_gae")
    kw["terminateds"] = kw["terminateds"].expand(2, N, T)
    _raises(ValueError, "the shapes of 'rewards' [3, 5] and 'terminateds' [2, 3, 5] do not "
                        "match", "compute_gae", kw, backend, path)
    kw = _inputs("compute_gae")
    kw["terminateds"] = kw["terminateds"][0]
    _raises(ValueError, "the shapes of 'rewards' [3, 5] and 'terminateds' [5] do not match",
            "compute_gae", kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_time_dimension_names_the_input(backend, path):
    """It named the op's first input, whatever input was 0-dim."""
    kw = _inputs("compute_retrace")
    kw["rewards"] = kw["rewards"][0, 0]
    _raises(ValueError, "'rewards' needs a time dimension", "compute_retrace", kw, backend,
            path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_retrace_action_axis(backend, path):
    """An [N, T, K] input without K was taken as [N] rows of K = T steps ('the trailing axes
    differ: [4, 5]'); inputs of different K are each named."""
    kw = _inputs("compute_retrace")
    kw["next_q_values_all"] = kw["next_q_values_all"][..., 0]
    _raises(ValueError, "'next_q_values_all' has shape [3, 5], expected [3, 5, K]",
            "compute_retrace", kw, backend, path)
    kw = _inputs("compute_retrace")
    kw["next_q_values_all"] = torch.randn(N, T, 5)
    _raises(ValueError, "the [N, T, K] inputs differ in K, their last dim: "
                        "'action_probs_target' has 4, 'next_q_values_all' has 5",
            "compute_retrace", kw, backend, path)
    kw = _inputs("compute_retrace")
    kw["next_q_values_all"] = torch.randn(2, N, T, 4)
    _raises(ValueError, "the shapes of 'action_probs_behavior' [3, 5] and 'next_q_values_all' "
                        "[2, 3, 5, 4] do not match", "compute_retrace", kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGORITHMS)
def test_rows_of_any_rank_and_stride_match_the_reference(name, backend, path):
    """[T] alone, [B, N, T], rows expanded from one (stride 0) and every other element of a
    wider buffer: the float64 reference's numbers, on every backend and path."""
    kw = _inputs(name, 2, 6)
    expected = reference.REFERENCES[name](**kw)
    expected = expected if isinstance(expected, tuple) else (expected,)
    tensors = {k: v for k, v in kw.items() if torch.is_tensor(v)}
    one = _call(name, {**kw, **{k: v[0] for k, v in tensors.items()}}, backend, path)
    _same(one, tuple(e[0] for e in expected))
    batched = _call(name, {**kw, **{k: torch.stack([v, v]) for k, v in tensors.items()}},
                    backend, path)
    _same(batched, tuple(torch.stack([e, e]) for e in expected))
    expanded = _call(name, {**kw, **{k: v[:1].expand(v.shape) for k, v in tensors.items()}},
                     backend, path)
    _same(expanded, tuple(e[:1].expand(e.shape) for e in expected))
    strided = {k: torch.stack([v, torch.full_like(v, 7)], -1).select(-1, 0)
               if v.dim() == 2 else v for k, v in tensors.items()}
    _same(_call(name, {**kw, **strided}, backend, path), expected)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(0, T), (N, 0)], ids=["no-rows", "no-steps"])
@pytest.mark.parametrize("name", ["compute_gae", "compute_retrace", "compute_episodic_prefix_sum"])
def test_empty_inputs_give_empty_outputs_and_gradients(name, shape, backend, path):
    kw = _inputs(name)
    kw = {k: (v[:shape[0], :shape[1]] if torch.is_tensor(v) and v.dim() >= 2 else
              v[:shape[0]] if torch.is_tensor(v) else v) for k, v in kw.items()}
    for out in _call(name, kw, backend, path):
        assert out.shape == shape


@pytest.mark.parametrize("path", PATHS)
def test_a_backend_typo_is_an_error_on_empty_inputs_too(path):
    """Empty calls returned before the backend was chosen, so backend='Torch' passed."""
    kw = {k: v[:0] if torch.is_tensor(v) else v for k, v in _inputs("compute_gae").items()}
    _raises(ValueError, "backend must be one of 'auto', 'triton', 'numba', 'torch', got "
                        "'Torch'", "compute_gae", kw, "Torch", path)


# ------------------------------------------------------------------------------ time_dim

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_time_dim_must_be_an_int(backend, path):
    """time_dim=1.0 ran on the direct path and failed in the op's schema on the autograd
    path; '0' and None failed comparing with an int."""
    kw = _inputs("compute_gae")
    for td, what in ((1.0, "float 1.0"), ("0", "str '0'"), (None, "NoneType None")):
        _raises(TypeError, f"time_dim must be an int, got {what}", "compute_gae", kw,
                backend, path, time_dim=td)
    expected = _call("compute_gae", kw, backend, path, time_dim=0)
    _same(_call("compute_gae", kw, backend, path, time_dim=np.int64(0)), expected)
    for td in (2, -3):
        _raises(ValueError, f"time_dim={td} is out of range for 2-dimensional inputs",
                "compute_gae", kw, backend, path, time_dim=td)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float_time_dim_is_refused_after_an_int_plan(backend, path):
    """1.0 == 1 and both hash alike, so time_dim=1.0 after time_dim=1 calls of the same shapes
    took their plan (and fast path) and ran, where a fresh process refused it."""
    kw = _inputs("compute_gae")
    runtime.PLANS.clear()
    for _ in range(3):  # the plan, then its fast path
        expected = _call("compute_gae", kw, backend, path, time_dim=1)
    for td, what in ((1.0, "float 1.0"), (True, None)):
        if what is None:  # a bool is an int (operator.index takes it), as in a fresh process
            _same(_call("compute_gae", kw, backend, path, time_dim=td), expected)
        else:
            _raises(TypeError, f"time_dim must be an int, got {what}", "compute_gae", kw,
                    backend, path, time_dim=td)
    _same(_call("compute_gae", kw, backend, path, time_dim=np.int64(1)), expected)


# ------------------------------------------------------------------------------ outputs

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_edge_cases(backend, path):
    """outputs=() returned an empty tuple on the autograd path; a scan state's name
    ('st__A', kept for the backward) was an output on the direct path and an error about
    'at least one output' on the autograd path; bytes failed in the op's schema."""
    kw = _inputs("compute_gae")
    for bad in ((), []):
        _raises(ValueError, "outputs must name at least one output", "compute_gae", kw,
                backend, path, outputs=bad)
    _raises(ValueError, "outputs: unknown output 'st__A' (available: advantages, returns)",
            "compute_gae", kw, backend, path, outputs="st__A")
    for bad in (b"advantages", 3, ["advantages", 3]):
        _raises(TypeError, "outputs must be an output's name or a sequence of names, got",
                "compute_gae", kw, backend, path, outputs=bad)
    adv = _call("compute_gae", kw, backend, path)
    twice = _call("compute_gae", kw, backend, path, outputs=["advantages", "advantages"])
    _same(twice, adv + adv)


# ------------------------------------------------------------------------------ params

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_choice_param_takes_its_strings_only(backend, path):
    """A tensor boundary was taken as the choice's internal code: tensor(5.) ran."""
    name = "compute_episodic_prefix_sum"
    kw = _inputs(name)
    for bad in ("bogus", "ENDS_AT", 1.0, torch.tensor(1.0), torch.tensor(5.0),
                torch.tensor(0.0, dtype=torch.float64)):
        _raises(ValueError, "boundary must be one of 'ends_at', 'starts_at', got",
                name, dict(kw, boundary=bad), backend, path)
    _same(_call(name, dict(kw, boundary=None), backend, path),
          _call(name, dict(kw, boundary="ends_at"), backend, path))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_param_values(backend, path):
    kw = _inputs("compute_eligibility_traces")
    # a required param given as None: the autograd path said "got NoneType"
    _raises(TypeError, "compute_eligibility_traces() missing required argument 'gamma'",
            "compute_eligibility_traces", dict(kw, gamma=None), backend, path)
    # any real number: a Fraction failed in torch.scalar_tensor on the autograd path
    _same(_call("compute_eligibility_traces", dict(kw, gamma=fractions.Fraction(9, 10)),
                backend, path),
          _call("compute_eligibility_traces", dict(kw, gamma=0.9), backend, path))
    # an int beyond a float: a bare OverflowError, worded differently on each path
    _raises(ValueError, "gamma is out of the range of a float, got 1000",
            "compute_eligibility_traces", dict(kw, gamma=10 ** 400), backend, path)
    _raises(TypeError, "gamma must be a float or a tensor broadcastable to",
            "compute_eligibility_traces", dict(kw, gamma="0.99"), backend, path)
    _raises(TypeError, "got numpy.ndarray (torch.from_numpy() wraps a NumPy array",
            "compute_eligibility_traces", dict(kw, gamma=np.full((N, 1), 0.9)), backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_params(backend, path):
    kw = _inputs("compute_gae")
    for bad, text in ((torch.full((N,), 0.9), "gamma has shape [3], which does not broadcast "
                                               "to [3, 5]"),
                      (torch.full((2, N, T), 0.9), "gamma has shape [2, 3, 5], which does not "
                                                    "broadcast to [3, 5]")):
        _raises(ValueError, text, "compute_gae", dict(kw, gamma=bad), backend, path)
    # with feature dims a param of more dims than the base shape broadcasts to the full shape,
    # which the message names (it named the base shape [3, 5])
    feat = dict(kw, rewards=kw["rewards"][..., None].expand(N, T, 2).contiguous())
    _raises(ValueError, "gamma has shape [2, 3, 5, 2], which does not broadcast to [3, 5, 2]",
            "compute_gae", dict(feat, gamma=torch.full((2, N, T, 2), 0.9)), backend, path)
    for bad, dtype in ((torch.tensor(1), "torch.int64"), (torch.tensor(True), "torch.bool"),
                       (torch.tensor(0.9 + 0j), "torch.complex64")):
        _raises(TypeError, f"gamma must be a floating-point tensor, got {dtype}",
                "compute_gae", dict(kw, gamma=bad), backend, path)
    _raises(TypeError, "gamma must be a dense (strided) tensor, got torch.sparse_coo",
            "compute_gae", dict(kw, gamma=torch.full((N, 1), 0.9).to_sparse()), backend, path)
    expected = _call("compute_gae", dict(kw, gamma=0.9), backend, path)
    for good in (torch.tensor(0.9, dtype=torch.float64), torch.full((1,), 0.9),
                 torch.full((N, 1), 0.9), torch.full((T,), 0.9)):
        _same(_call("compute_gae", dict(kw, gamma=good), backend, path), expected)


# ------------------------------------------------------------------------------ devices, layouts

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_input_is_named(backend, path):
    """It failed in the signature: 'Cannot access data pointer of Tensor that doesn't have
    storage'."""
    kw = _inputs("compute_gae")
    kw["values"] = kw["values"].to_sparse()
    _raises(TypeError, "'values' must be a dense (strided) tensor, got torch.sparse_coo",
            "compute_gae", kw, backend, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", ["compute_gae", "compute_retrace"])
def test_meta_tensors_beside_a_cpu_plan(name, backend, path):
    """The plans' signature told devices by get_device(), -1 for CPU and 'meta' tensors alike,
    so a call with a 'meta' tensor among CPU ones matched the CPU call's plan and failed inside the backend ("can't convert
    meta device type tensor to numpy"); a call on 'meta' alone made a plan that later CPU
    calls of the same shapes then ran on ('Tensor on device cpu is not on the expected
    device meta')."""
    kw = _inputs(name)
    runtime.PLANS.clear()
    expected = [_call(name, kw, backend, path) for _ in range(3)][-1]  # plan and fast path
    mixed = dict(kw, q_values=kw["q_values"].to("meta")) if name == "compute_retrace" else \
        dict(kw, values=kw["values"].to("meta"))
    second = "q_values" if name == "compute_retrace" else "values"
    _raises(ValueError, f"'{second}' is on meta, but '{FIRST[name]}' is on cpu",
            name, mixed, backend, path)
    meta = {k: v.to("meta") if torch.is_tensor(v) else v for k, v in kw.items()}
    for _ in range(2):
        if backend == "torch":  # the torch path runs on any device: shapes alone
            outs = _call(name, meta, backend, path)
            assert [o.shape for o in outs] == [e.shape for e in expected]
            assert all(o.device.type == "meta" for o in outs)
        else:
            needs = "CPU tensors" if backend == "numba" else "CUDA tensors"
            _raises(ValueError, f"backend='{backend}' needs {needs}", name, meta, backend, path)
    _same(_call(name, kw, backend, path), expected)
    _same(_call(name, kw, "torch", "direct"), expected)  # a meta plan is not taken for CPU


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_on_flags_gives_no_gradient(backend, path):
    kw = _inputs("compute_gae")
    expected = _call("compute_gae", kw, backend, path)
    flags = kw["terminateds"].float().requires_grad_(True)
    _same(_call("compute_gae", dict(kw, terminateds=flags), backend, path), expected)
    assert flags.grad is None


# ------------------------------------------------------------------------------ signatures

@pytest.fixture(scope="module")
def ema_reset(tmp_path_factory):
    from pathlib import Path
    spec = Path(__file__).resolve().parent.parent / "examples" / "ema_reset.yaml"
    return scangen.compile(spec, cache_dir=tmp_path_factory.mktemp("cache"))


def test_unknown_keywords_and_extra_positionals(ema_reset):
    kw = _inputs("compute_gae")
    with pytest.raises(TypeError, match="unexpected keyword argument 'gama'"):
        scangen.compute_gae(**kw, gama=0.9)
    with pytest.raises(TypeError, match=r"takes from 3 to 8 positional arguments but 10"):
        scangen.compute_gae(*kw.values(), 0.9, 0.95, None, None, -1)
    x, starts = torch.randn(N, T), torch.rand(N, T) < 0.3
    with pytest.raises(TypeError, match="unexpected keyword argument 'decay_'"):
        ema_reset(x, starts, decay_=0.5)
    with pytest.raises(TypeError, match=r"takes from 2 to 4 positional arguments but 5"):
        ema_reset(x, starts, 0.9, None, 1)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_spec_names_its_arguments(ema_reset, backend, path):
    x, starts = torch.randn(N, T), torch.rand(N, T) < 0.3

    def call(**kw):
        kw = to_backend(backend, {"x": x, "starts": starts, "seed": torch.zeros(N), **kw})
        if path == "autograd":  # a float tensor requires a gradient
            grad = "x" if kw["x"].is_floating_point() else "seed"
            kw[grad] = kw[grad].clone().requires_grad_(True)
        return ema_reset(**kw, backend=backend)

    for kw, exc, text in (
            ({"x": x.int()}, TypeError, "'x' (float) must have dtype float16"),
            ({"starts": starts[:, :2]}, ValueError, "'starts' has shape [3, 2], expected [3, 5]"),
            ({"seed": torch.zeros(N + 1)}, ValueError, "'seed' has shape [4], expected [3]"),
            ({"decay": "0.5"}, TypeError, "decay must be a float or a tensor broadcastable to"),
            ({"decay": torch.full((N,), 0.5)}, ValueError, "decay has shape [3], which does "
                                                          "not broadcast to [3, 5]")):
        with pytest.raises(exc, match=re.escape(text)) as info:
            call(**kw)
        assert str(info.value).startswith("ema_reset()")


def test_torch_compile_keeps_the_message():
    """Under torch.compile the errors come from tracing (the op's fake implementation, or the
    checks before it): torch wraps some of them in its own exception types, whose text holds
    scangen's message."""
    kw = _inputs("compute_gae")
    for bad, text in (({"rewards": kw["rewards"].int()}, "'rewards' (float) must have dtype"),
                      ({"values": kw["values"][:, :4]}, "'values' has shape [3, 4], expected"),
                      ({"outputs": ()}, "outputs must name at least one output")):
        args = {**kw, **bad}
        torch._dynamo.reset()  # each traced afresh, with static shapes
        step = torch.compile(lambda a: scangen.compute_gae(**a), backend="eager")
        with pytest.raises(Exception, match=re.escape(text)):
            step(args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0)], ids=["no-rows", "no-steps"])
def test_empty_calls_give_zero_gradients(shape, backend, tmp_path):
    """An empty call of a spec differentiated through its torch path (an [N, T, K] input: no
    generated adjoint) gives every input a zero gradient of its shape, as specs with a generated
    adjoint do; it left .grad None."""
    op = scangen.compile("""
name: empty_k_grad
direction: reverse
inputs: {x: float, q: {kind: float, shape: [N, T, K]}}
scans:
  A: {update: "x + sum(q) + 0.5 * A"}
outputs: {A: A}
""", cache_dir=tmp_path)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    q = torch.randn(*shape, 2, dtype=torch.float64, requires_grad=True)
    call_on(op, backend, x, q).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape and not x.grad.any()
    assert q.grad is not None and q.grad.shape == q.shape and not q.grad.any()
