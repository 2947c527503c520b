"""Every backend on the machine gives the same answer, edge cases included.

Each built-in and the example spec run through torch, numba (CPU tensors) and Triton (the GPU,
or the interpreter in CI) on the same inputs; every result is compared with the float64
reference and with the torch path. The cases are the ones a user meets at the edges: T = 1,
N = 0, T = 0, both flags on one step, NaN and inf inputs, an out-of-range index, long masked
runs, and per-row and per-step tensor params.
"""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest
import torch

import scangen
from conftest import DEVICE, HAS_NUMBA, ON_GPU
from scangen import runtime
from scangen.testing.reference import REFERENCES
from scangen.testing import ALGORITHMS, as_time_major, assert_close, make_inputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _backends():
    out = [("torch", DEVICE)]
    if ON_GPU or runtime.backends.interpreting():
        out.append(("triton", DEVICE))
    if HAS_NUMBA:
        out.append(("numba", "cpu"))
    return out


BACKENDS = _backends()


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _to(inputs, device):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}


def _run(fn, inputs, **kw):
    """``{backend: outputs on the CPU}`` for every backend here."""
    return {b: tuple(o.cpu() for o in _tuple(fn(**_to(inputs, dev), backend=b, **kw)))
            for b, dev in BACKENDS}


def _agree(got: dict, expected, name: str, rows=slice(None)):
    """Every backend matches ``expected`` (float64) on ``rows`` and the torch path everywhere,
    NaN and inf positions included."""
    for b, outs in got.items():
        assert len(outs) == len(expected), b
        for k, (o, e) in enumerate(zip(outs, expected)):
            assert_close(o[rows], e[rows], dtype=o.dtype, name=f"{name} output {k} ({b})")
            assert_close(o, got["torch"][k], dtype=o.dtype, name=f"{name} output {k} ({b} "
                                                                   f"against torch)")


def _slice(inputs, rows=slice(None), steps=slice(None)):
    """Rows and steps of every [N, T(, K)] input; [N] inputs lose only rows."""
    out = {}
    for k, v in inputs.items():
        if torch.is_tensor(v):
            v = v[rows] if v.dim() < 2 else v[rows, steps]
        out[k] = v
    return out


def _reference(name, inputs):
    return _tuple(REFERENCES[name](**inputs))


def _float_input(name, inputs):
    """The first [N, T] float input, the one the NaN / inf cases poison."""
    return next(k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()
                and v.dim() == 2)


def _check(name, inputs, rows=slice(None), clean=None, **kw):
    got = _run(getattr(scangen, name), {**inputs, **kw})
    _agree(got, _reference(name, {**(clean if clean is not None else inputs), **kw}), name, rows)
    return got


@pytest.mark.parametrize("name", ALGORITHMS)
def test_one_step(name):
    _check(name, make_inputs(name, 3, 1, seed=1))


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("empty", ["N0", "T0"])
def test_empty(name, empty):
    inputs = make_inputs(name, 2, 5, seed=2)
    inputs = _slice(inputs, rows=slice(0, 0)) if empty == "N0" else _slice(inputs, steps=slice(0, 0))
    got = _run(getattr(scangen, name), inputs)
    shape = (0, 5) if empty == "N0" else (2, 0)
    for b, outs in got.items():
        assert all(tuple(o.shape) == shape for o in outs), (b, [o.shape for o in outs])


@pytest.mark.parametrize("name", ALGORITHMS)
def test_both_flags_on_many_steps(name):
    _check(name, make_inputs(name, 4, 41, seed=3, term_rate=0.4, trunc_rate=0.4))


def _odd_bytes(flags: torch.Tensor, seed: int) -> torch.Tensor:
    """``flags`` (bool) as bytes whose True entries are 1, 2, 7 or 255 (uint8)."""
    g = torch.Generator().manual_seed(seed)
    values = torch.tensor([1, 2, 7, 255], dtype=torch.uint8)
    return values[torch.randint(0, 4, flags.shape, generator=g)] * flags.to(torch.uint8)


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("layout", ["rows", "time-major"])
def test_bool_flags_of_any_nonzero_byte_read_true(name, layout):
    """A bool flag whose byte is not 0 or 1 (``.view(torch.bool)`` of other bytes,
    ``torch.frombuffer``, a NumPy view) is True on every backend: numba read the byte, so a 2
    acted as 2 and ``1 - terminateds`` was -1."""
    inputs = make_inputs(name, 5, 37, seed=4, term_rate=0.3, trunc_rate=0.3)
    odd = {}
    for i, (k, v) in enumerate(inputs.items()):
        raw = _odd_bytes(v, seed=i) if torch.is_tensor(v) and v.dtype == torch.bool else v
        if layout == "time-major":  # the bytes copied as uint8, viewed as bool after
            raw = as_time_major(raw)
        odd[k] = raw.view(torch.bool) if torch.is_tensor(v) and v.dtype == torch.bool else raw
    assert any(torch.is_tensor(v) and v.dtype == torch.bool and v.view(torch.uint8).max() > 1
               for v in odd.values()), "no odd bytes drawn"
    _check(name, odd, clean=inputs)


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_non_finite_inputs_stay_in_their_row(name, bad):
    clean = make_inputs(name, 3, 29, seed=4)
    if "response_mask" in clean:  # steps masked GAE consumes (a skipped step's NaN is ignored)
        clean["response_mask"][0, [7, 20]] = True
    inputs = dict(clean)
    key = _float_input(name, inputs)
    poisoned = inputs[key].clone()
    poisoned[0, 7] = bad
    poisoned[0, 20] = bad
    inputs[key] = poisoned
    got = _check(name, inputs, rows=slice(1, None), clean=clean)
    if bad != bad:  # NaN reaches an output of row 0
        assert any(torch.isnan(o[0]).any() for o in got["torch"])


def test_retrace_out_of_range_action_gives_nan():
    clean = make_inputs("compute_retrace", 3, 17, seed=5, A=4)
    inputs = dict(clean)
    actions = inputs["actions"].clone()
    actions[0, 9] = 4   # == K
    actions[1, 3] = -1
    inputs["actions"] = actions
    got = _check("compute_retrace", inputs, rows=slice(2, None), clean=clean)
    for b, (targets, advantages) in got.items():
        # the step's own ratio is NaN, and through c_t every earlier step of its row
        assert torch.isnan(advantages[0, 9]) and torch.isnan(advantages[1, 3]), b
        assert torch.isnan(targets[0, :9]).all() and torch.isnan(targets[1, :3]).all(), b
        assert torch.isfinite(targets[2]).all(), b


def test_masked_gae_long_masked_runs():
    inputs = make_inputs("compute_masked_gae", 3, 400, seed=6)
    mask = inputs["response_mask"].clone()
    mask[0, 20:350] = False          # a long tool-output span inside the response
    mask[1, :] = False               # a row with no response token at all
    mask[2, 399] = True              # a response token at the window end
    inputs["response_mask"] = mask
    _check("compute_masked_gae", inputs, gamma=0.99, lambda_=0.95)


def _scalar_params(name):
    sig = inspect.signature(getattr(scangen, name))
    return [p for p in ("gamma", "lambda_") if p in sig.parameters]


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if _scalar_params(n)])
@pytest.mark.parametrize("per", ["row", "step"])
def test_tensor_params(name, per):
    N, T = 4, 23
    inputs = make_inputs(name, N, T, seed=7)
    g = torch.Generator().manual_seed(8)
    shape = (N, 1) if per == "row" else (N, T)
    for p in _scalar_params(name):
        inputs[p] = 0.8 + 0.2 * torch.rand(shape, generator=g)
    _check(name, inputs)


# ---------------------------------------------------------------------------------------------
# The example spec, compiled at run time


def _example():
    spec = importlib.util.spec_from_file_location("ema_reset_example", EXAMPLES / "ema_reset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ema(tmp_path_factory):
    module = _example()
    return module, module.compile_ema(cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("case", ["T1", "N0", "T0", "nan", "seeded"])
def test_example_spec(ema, case):
    module, fn = ema
    g = torch.Generator().manual_seed(9)
    N, T = {"T1": (3, 1), "N0": (0, 6), "T0": (3, 0)}.get(case, (3, 31))
    x, starts = torch.randn(N, T, generator=g), torch.rand(N, T, generator=g) < 0.2
    kw = dict(x=x, starts=starts)
    if case == "seeded":
        kw.update(decay=0.7, seed=torch.randn(N, generator=g))
    if case == "nan":
        x[0, 4] = float("nan")
    got = _run(fn, kw)
    expected = module.ema_loop(**kw)
    rows = slice(1, None) if case == "nan" else slice(None)
    _agree(got, (expected,), "ema_reset", rows)
