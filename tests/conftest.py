"""Test configuration: the device under test and the Triton interpreter on CPU-only machines.

Without a GPU the Triton kernels run under TRITON_INTERPRET=1 (numpy), which must be set before
any kernel module is imported, hence here. Outputs are poisoned with NaN before every kernel
runs, so an element a kernel forgets to write can never pass a comparison.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from scangen import runtime  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
BACKENDS = ("torch", "triton")


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(runtime, "POISON_OUTPUTS", True)


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
