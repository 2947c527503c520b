"""Template options kept for side-by-side measurement (scangen.render.OPTIONS, used by
bench/sweep.py --variants) generate kernels that match the float64 references too.

Each variant is compiled from a built-in spec under a new name, then run through the Triton
backend (interpreted on CPU) with chunks of 16 steps, so that every chunk edge, where a shifted
read crosses into the neighbouring chunk, is exercised, in both kernel families."""
import os
from unittest import mock

import pytest
import torch

import scangen
from conftest import DEVICE
from scangen import config, reference, render, runtime
from scangen.store import spec_dir
from scangen.testing import assert_close, compile_variant, make_inputs

VARIANTS = [("shift", "gather"), ("input_shift", "gather"), ("input_shift", "split")]
ALGOS = ["gae", "vtrace", "masked_gae", "episodic_prefix_sum", "eligibility_traces", "retrace"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("variants")


@pytest.mark.parametrize("family", ["stream", "lookback"])
@pytest.mark.parametrize("option,value", VARIANTS)
@pytest.mark.parametrize("name", ALGOS)
def test_variant_matches_reference(name, option, value, family, cache):
    fn = compile_variant(name, cache, **{option: value})
    inputs = make_inputs(name, 3, 50, seed=21)
    expected = reference.REFERENCES[f"compute_{name}"](**inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    dev = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in inputs.items()}
    with mock.patch.object(config, "MAX_BLOCK_T", 16), \
            mock.patch.object(config, "LOOKBACK_BLOCK_T", 16), \
            mock.patch.dict(os.environ, {"SCANGEN_FAMILY": family}):
        runtime.reload_env()
        runtime._PLANS.clear()
        try:
            got = fn(**dev, backend="triton")
        finally:
            runtime._PLANS.clear()
    runtime.reload_env()
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e, dtype=g.dtype, name=f"{name} {option}={value} {family}")


def test_variant_source_differs():
    """The options change the generated kernels where they apply (not silently ignored)."""
    ir, default = scangen.pipeline.generate(spec_dir() / "gae.yaml")
    with mock.patch.dict(render.OPTIONS, {"input_shift": "gather"}):
        _, gathered = scangen.pipeline.generate(spec_dir() / "gae.yaml")
    assert "tl.gather(values, _idx_next, 1)" in gathered and "tl.gather" not in default
    with mock.patch.dict(render.OPTIONS, {"shift": "gather"}):
        _, state = scangen.pipeline.generate(spec_dir() / "vtrace.yaml")
    assert "tl.gather(A, _idx_next, 1)" in state
