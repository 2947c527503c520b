"""Test configuration: the device under test and the Triton interpreter on CPU-only machines.

Without a GPU the Triton kernels run under TRITON_INTERPRET=1 (numpy), which must be set before
any kernel module is imported, hence here. Outputs are poisoned with NaN before every kernel
runs, so an element a kernel forgets to write can never pass a comparison.
"""
import importlib.util
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from scangen import runtime  # noqa: E402

# tests/test_properties.py's long run: registered here, before hypothesis's pytest plugin reads
# --hypothesis-profile (a profile registered in the test module is not there yet).
# SCANGEN_HYPOTHESIS_EXAMPLES sets its count (several shorter runs with other seeds, side by side)
settings.register_profile("long", max_examples=int(os.environ.get("SCANGEN_HYPOTHESIS_EXAMPLES", "500")),
                          deadline=None)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
# numba runs on CPU tensors only: on a CUDA machine the tests' inputs live on the GPU.
HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = ("torch", "triton") + (("numba",) if HAS_NUMBA and not ON_GPU else ())


def call_on(fn, backend: str, *args, **kwargs):
    """``fn(*args, backend=backend, **kwargs)`` with the call's tensors on the device the backend
    runs on (Triton: CUDA where there is one, else the interpreter on the CPU tensors as given),
    and its outputs back on the CPU: tests written with CPU tensors run on either machine."""
    if backend != "triton" or not ON_GPU:
        return fn(*args, backend=backend, **kwargs)
    move = lambda v: v.to(DEVICE) if torch.is_tensor(v) else v  # noqa: E731
    out = fn(*map(move, args), backend=backend, **{k: move(v) for k, v in kwargs.items()})
    return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()


def pyproject_extra(name: str) -> list:
    """pyproject.toml's optional dependencies ``name`` (the integrations' install hints name them)."""
    from pathlib import Path
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    return tomllib.loads(text)["project"]["optional-dependencies"][name]


def to_backend(backend: str, values: dict) -> dict:
    """``values`` with its tensors on the device ``backend`` runs on (as :func:`call_on` moves
    them), for tests that keep the tensors themselves (autograd leaves)."""
    if backend != "triton" or not ON_GPU:
        return dict(values)
    return {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in values.items()}


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(runtime.arguments, "POISON_OUTPUTS", True)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, whatever ran before it on its worker
    (pytest-xdist spreads the tests over processes in an order that varies between runs)."""
    torch.manual_seed(0)


@pytest.fixture
def launch_log(monkeypatch):
    """Every Triton launch the calls inside the test made, in order, as ``(kernel, constexprs)``;
    the plan cache is cleared before and after, so each call plans (and launches) afresh."""
    log = []
    real = runtime.launch.launch

    def spy(c, kernel, grid, args, meta, cfg):
        log.append((kernel, dict(meta)))
        return real(c, kernel, grid, args, meta, cfg)

    monkeypatch.setattr(runtime.launch, "launch", spy)
    runtime.PLANS.clear()
    yield log
    runtime.PLANS.clear()


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
