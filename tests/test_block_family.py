"""The block kernel (the "block" family of scangen/runtime/config.py: time-major buffers of many
rows, a thread per row walking it through time, the loads of a block of steps issued together).

The dispatch rule takes it only at 16384 rows and more on a GPU; here SCANGEN_FAMILY forces it
on small shapes, so that every case it must handle is met at a size the Triton interpreter runs
in seconds: rows and steps that do not fill a tile or a block, one step, absent optional inputs,
tensor params, float64, bfloat16, the rows layout, and gradients. Every result is compared with
the float64 torch path, whose own agreement with the hand-written references the rest of the
suite checks. Outputs are poisoned with NaN before each kernel runs (conftest), so an element
the kernel forgets to write fails.
"""
import importlib
import importlib.util
import inspect

import pytest
import torch

import scangen
from scangen import abi, runtime
from scangen.compiler.tiling import BLOCK_STEPS
from scangen.runtime import PLANS, config, launch
from scangen.testing import ALGORITHMS, as_time_major, assert_close, make_inputs

from conftest import DEVICE

# every built-in with a block kernel: all but Retrace, which sums over the action axis
BLOCK = [n for n in ALGORITHMS if n != "compute_retrace"]


@pytest.fixture(autouse=True)
def _block_family(monkeypatch):
    monkeypatch.setenv("SCANGEN_FAMILY", "block")
    runtime.reload_env()
    yield
    monkeypatch.delenv("SCANGEN_FAMILY", raising=False)
    runtime.reload_env()


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _f64(inputs):
    return {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
            for k, v in inputs.items()}


def _check(name, inputs, **kw):
    """The Triton backend (the block kernel, forced) against the float64 torch path."""
    fn = getattr(scangen, name)
    got = _tuple(fn(**inputs, backend="triton", **kw))
    ref = _tuple(fn(**_f64(inputs), backend="torch", **kw))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert_close(g.double().cpu(), r.cpu(), dtype=g.dtype, name=name)


def _op(name):
    return importlib.import_module(f"scangen.generated.{name.removeprefix('compute_')}").OP


def test_a_forced_call_launches_the_block_kernel(monkeypatch):
    kernels = []
    real = launch.launch

    def spy(c, kernel, *args):
        kernels.append(kernel)
        return real(c, kernel, *args)

    monkeypatch.setattr(launch, "launch", spy)
    PLANS.clear()
    scangen.compute_gae(**as_time_major(make_inputs("compute_gae", 40, 20, seed=0,
                                                    device=DEVICE)), backend="triton")
    PLANS.clear()
    ks = abi.triton_kernels(_op("compute_gae"))
    assert kernels and set(kernels) <= {ks.block, ks.lean_block} and None not in kernels
    assert _op("compute_gae").kernels.block_steps == BLOCK_STEPS


@pytest.mark.parametrize("shape", [(37, 45), (64, 32), (5, 1), (33, 16), (3, 7)],
                         ids=lambda s: f"N{s[0]}-T{s[1]}")
@pytest.mark.parametrize("name", BLOCK)
def test_time_major(name, shape):
    """Rows not a multiple of the 32 rows of a program, T not a multiple of the block's steps
    (a partial block first in a reverse scan, last in a forward one), T shorter than a block."""
    _check(name, as_time_major(make_inputs(name, *shape, seed=1, device=DEVICE)))


@pytest.mark.parametrize("name", BLOCK)
def test_rows_layout(name):
    """Forced on [N, T] rows (the rule never picks it there: loads strided across rows)."""
    _check(name, make_inputs(name, 9, 37, seed=2, device=DEVICE))


@pytest.mark.parametrize("name", BLOCK)
def test_optional_inputs_absent_and_tensor_params(name):
    inputs = as_time_major(make_inputs(name, 35, 21, seed=3, device=DEVICE))
    for k in ("truncateds", "bootstrap_values", "seed_values", "last_value"):
        inputs.pop(k, None)
    signature = inspect.signature(getattr(scangen, name)).parameters
    for p in ("gamma", "lambda_"):
        if p in signature:  # a tensor param per row and step, itself stored time-major
            base = float(inputs.get(p, signature[p].default))
            inputs[p] = as_time_major(base * (0.9 + 0.1 * torch.rand(35, 21, device=DEVICE)))
    _check(name, inputs)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["compute_gae", "compute_vtrace", "compute_masked_gae",
                                  "compute_episodic_prefix_sum"])
def test_dtypes(name, dtype):
    _check(name, as_time_major(make_inputs(name, 33, 19, seed=4, dtype=dtype, device=DEVICE)))


@pytest.mark.parametrize("name", ["compute_gae", "compute_vtrace", "compute_masked_gae"])
def test_each_output_alone(name):
    inputs = as_time_major(make_inputs(name, 34, 18, seed=5, device=DEVICE))
    fn = getattr(scangen, name)
    for out in _op(name).returns:
        _check(name, inputs, outputs=out)


@pytest.mark.parametrize("name", BLOCK)
def test_gradients_float64(name):
    """Gradients through the block kernel's outputs (the backward modules have no block kernel
    of their own: a forced "block" runs their stream kernel) against the torch path's, float64,
    every float input a leaf and every output weighted, over a time-major buffer whose T spans
    a partial block (the torch path's gradients are gradchecked elsewhere)."""
    inputs = as_time_major(make_inputs(name, 3, 19, seed=6, dtype=torch.float64, device=DEVICE))
    names = [k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()]
    fn = getattr(scangen, name)
    outputs = _op(name).returns
    grads = []
    for backend in ("triton", "torch"):
        leaves = [inputs[k].detach().clone().requires_grad_(True) for k in names]
        out = _tuple(fn(**{**inputs, **dict(zip(names, leaves))}, backend=backend,
                        outputs=outputs))
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype, device=DEVICE)).sum()
                   for o in out)
        grads.append(torch.autograd.grad(loss, leaves))
    for k, g, r in zip(names, *grads):
        torch.testing.assert_close(g, r, atol=1e-9, rtol=1e-7, msg=f"{name}: d/d{k}")


def test_which_modules_have_a_block_kernel():
    """Every forward module without a trailing axis; no backward module (compiler.render)."""
    for name in ALGORITHMS:
        op = _op(name)
        ntk = any(i.shape == "NTK" for i in op.inputs)
        assert op.kernels.block_steps == (0 if ntk else BLOCK_STEPS), name
        if importlib.util.find_spec(f"{op.module}_grad") is not None:  # (Retrace has none)
            grad = importlib.import_module(f"{op.module}_grad").OP
            assert grad.kernels.block_steps == 0, name


def test_config_forced_without_a_block_kernel_is_the_stream_family():
    """Retrace sums over its action axis: its module has no block kernel, and a forced "block"
    runs its stream kernel."""
    inputs = as_time_major(make_inputs("compute_retrace", 6, 9, seed=7, device=DEVICE))
    assert _op("compute_retrace").kernels.block_steps == 0
    _check("compute_retrace", inputs)
    assert config.FAMILIES[-1] == "block"


@pytest.mark.gpu
@pytest.mark.parametrize("name", BLOCK)
def test_the_rule_takes_it_for_many_time_major_rows_on_a_gpu(name, monkeypatch):
    """Unforced: 16384 time-major rows (BLOCK_ROWS_PER_SM on an H200) take the block kernel."""
    monkeypatch.delenv("SCANGEN_FAMILY", raising=False)
    runtime.reload_env()
    families = []
    real = launch.launch

    def spy(c, kernel, grid, args, meta, cfg):
        families.append(cfg.family)
        return real(c, kernel, grid, args, meta, cfg)

    monkeypatch.setattr(launch, "launch", spy)
    rows = config.BLOCK_ROWS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    _check(name, as_time_major(make_inputs(name, rows + 5, 37, seed=8, device=DEVICE)))
    assert families == ["block"]
