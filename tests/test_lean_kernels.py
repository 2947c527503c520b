"""The lean entry kernels (scangen.abi.lean_args): which calls take them, and that they compute
exactly what the full kernels compute.

A plan launches a family's lean entry where every tensor of one shape shares one stride set and
every param is a float (scangen.runtime.launch.lean_layout); any other call takes the full
kernel. Both run the same kernel body, so their outputs must be equal bit for bit. These run the
Triton kernels (under TRITON_INTERPRET=1 on a machine without a GPU).
"""
import pytest
import torch

import scangen
from scangen import abi
from scangen.runtime import PLANS, launch
from scangen.testing.helpers import make_inputs, time_major_buffers

from conftest import DEVICE

ALGOS = ["gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
         "eligibility_traces", "episodic_prefix_sum", "masked_gae"]


def _kernels(launch_log):
    """The kernels the calls made inside the test launched, in order (conftest.launch_log)."""
    return [k for k, _ in launch_log]


def _op(name):
    return getattr(scangen.generated, name).OP


def _lean(name):
    ks = abi.triton_kernels(_op(name))
    return {ks.lean_stream, ks.lean_persist, ks.lean_lookback} - {None}


def test_a_call_of_the_common_layout_launches_the_lean_kernel(launch_log):
    kw = make_inputs("gae", 6, 40, seed=0, device=DEVICE)
    scangen.compute_gae(**kw, backend="triton")
    launched = _kernels(launch_log)
    assert launched and all(k in _lean("gae") for k in launched)


def test_a_sliced_input_or_a_tensor_param_takes_the_full_kernel(launch_log):
    kw = make_inputs("gae", 6, 40, seed=1, device=DEVICE)
    buffer = torch.randn(6, 41, device=DEVICE)  # values[:, :-1] of a [N, T + 1] buffer
    sliced = dict(kw, values=buffer[:, :-1])
    scangen.compute_gae(**sliced, backend="triton")
    per_row = dict(kw, gamma=torch.full((6, 1), 0.97, device=DEVICE))
    scangen.compute_gae(**per_row, backend="triton")
    launched = _kernels(launch_log)
    assert len(launched) == 2 and not any(k in _lean("gae") for k in launched)
    # and the answers are the torch path's
    torch.testing.assert_close(scangen.compute_gae(**sliced, backend="triton"),
                               scangen.compute_gae(**sliced, backend="torch"))


@pytest.mark.parametrize("layout", ["rows", "time-major"])
@pytest.mark.parametrize("name", ALGOS)
def test_lean_and_full_kernels_give_the_same_bits(name, layout, monkeypatch, launch_log):
    kw = make_inputs(name, 5, 37, seed=2, device=DEVICE)
    extra = {}
    if layout == "time-major":
        kw = time_major_buffers(kw)
        extra = {"time_dim": 0}
    fn = getattr(scangen, f"compute_{name}")
    op = _op(name)
    outs = {}
    for lean in (True, False):
        monkeypatch.setattr(launch, "LEAN", lean)
        PLANS.clear()
        asked = tuple(o for o in op.outputs if not o.startswith(abi.STATE_PREFIX))
        out = fn(**kw, outputs=asked, backend="triton", **extra)
        outs[lean] = out if isinstance(out, tuple) else (out,)
        launched = _kernels(launch_log)
        assert launched and all((k in _lean(name)) == lean for k in launched)
        launch_log.clear()
    PLANS.clear()
    for a, b in zip(outs[True], outs[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_lean_args_share_one_stride_set_per_shape():
    op = _op("retrace")
    args = abi.op_kernel_args(op, workspace=False, lean=True)
    strides = [a.name for a in args if a.role == "layout"]
    shapes = {i.shape for i in op.inputs}
    assert strides == [n for s in abi.LEAN_STRIDES if s in shapes | {"NT"}
                       for n in abi.LEAN_STRIDES[s]]
    # no param pointers, strides or __TENSOR flags; every param's value
    assert not [a for a in args if a.role == "param" and a.kind != "value"]
    assert not [a for a in args if a.name.endswith("__TENSOR")]
    assert [a.of for a in args if a.kind == "value"] == [p.name for p in op.params]
