"""The ONE_CHUNK constexpr (scangen.runtime.launch.one_chunk): a launch whose rows each fit one
chunk (T <= BLOCK_T) compiles its kernels without the chunk loop and the carry between chunks.

It must be set exactly when T <= BLOCK_T, for every family that streams rows in chunks, and the
kernels must compute the same bits with it on and off (it only removes code that a one-chunk
row never runs). These run the Triton kernels (under TRITON_INTERPRET=1 without a GPU).
"""
import pytest
import torch

import scangen
from scangen import abi
from scangen.runtime import config, launch
from scangen.testing.helpers import assert_close, make_inputs
from scangen.testing.reference import REFERENCES

from conftest import DEVICE

ALGOS = ["gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
         "eligibility_traces", "episodic_prefix_sum", "masked_gae"]


def _op(name):
    import importlib
    return importlib.import_module(f"scangen.generated.{name}").OP


def test_every_kernel_takes_one_chunk_after_even():
    for name in ALGOS:
        names = [a.name for a in abi.op_kernel_args(_op(name),
                                                    workspace=False)]
        assert names[names.index("EVEN") + 1] == "ONE_CHUNK", name


@pytest.mark.parametrize("family", ["stream", "persist"])
@pytest.mark.parametrize("T,block_t", [(16, 16), (13, 16), (16, 32), (40, 16), (33, 32)])
@pytest.mark.parametrize("name", ALGOS)
def test_one_chunk_is_set_when_a_row_fits_a_chunk_and_changes_no_bit(name, T, block_t, family,
                                                                     launch_log, monkeypatch):
    if name == "retrace" and family == "persist":
        pytest.skip("Retrace (a trailing axis) has no persist kernel")
    kw = make_inputs(name, 6, T, seed=T + block_t, device=DEVICE)
    fn = getattr(scangen, f"compute_{name}")
    op = _op(name)
    asked = tuple(o for o in op.outputs if not o.startswith(abi.STATE_PREFIX))
    kk = 8 if name == "retrace" else 1
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(launch, "ONE_CHUNK_ON", on)
        with config.override(lambda c: config.Config(2, block_t, kk, 4, family)):
            out = fn(**kw, outputs=asked, backend="triton")
        outs[on] = out if isinstance(out, tuple) else (out,)
        assert launch_log and all(m["ONE_CHUNK"] == (on and T <= block_t) for _, m in launch_log)
        launch_log.clear()
    for a, b in zip(outs[True], outs[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    # and the answer is the float64 reference's (SEMANTICS.md), for the outputs it returns
    ref = REFERENCES[f"compute_{name}"](**kw)
    for k, (a, b) in enumerate(zip(outs[True], ref if isinstance(ref, tuple) else (ref,))):
        assert_close(a, b, dtype=a.dtype, name=f"{name} output {k}")
