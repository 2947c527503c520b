"""The shipped example and the documentation's code, run as a user would run them.

* examples/ema_reset.py: the user spec examples/ema_reset.yaml, compiled with scangen.compile into a
  temporary cache, must match the example's float64 loop (torch backend always; the Triton kernels
  too where they can run: on CUDA, or on the CPU under TRITON_INTERPRET=1).
* Every ```python block of README.md and docs/ runs (one namespace per page, in a temporary
  folder, on CPU tensors), so the documentation cannot drift from the code. A
  ```yaml block whose first line is ``# file: NAME`` is written to NAME first, as the reader would.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ema_reset.py"
TRITON_OK = torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _load_example():
    spec = importlib.util.spec_from_file_location("ema_reset_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return _load_example()


@pytest.fixture(scope="module")
def ema(example, tmp_path_factory):
    return example.compile_ema(cache_dir=tmp_path_factory.mktemp("scangen-cache"))


def _inputs(N, T, F, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((N, T) + ((F,) if F else ()), generator=g)
    starts = torch.rand(N, T, generator=g) < 0.15
    return x, starts, torch.randn(N, generator=g)


def _check(example, ema, shape, backend):
    x, starts, seed = _inputs(*shape, seed=sum(shape))
    device = "cpu" if backend == "numba" else DEVICE
    dev = lambda t: t.to(device)  # noqa: E731
    for args in ((x, starts), (x, starts, 0.7, seed)):
        got = ema(*(dev(a) if torch.is_tensor(a) else a for a in args), backend=backend)
        expected = example.ema_loop(*args)
        assert got.dtype == x.dtype and got.shape == x.shape
        err = (got.cpu().double() - expected).abs().max().item()
        assert err < 1e-5, f"{backend} {shape}: max abs error {err:.2e}"


@pytest.mark.parametrize("shape", [(3, 1, 0), (4, 37, 0), (2, 300, 0), (3, 20, 5)],
                         ids=lambda s: f"N{s[0]}-T{s[1]}" + (f"-F{s[2]}" if s[2] else ""))
def test_ema_example_matches_loop_torch(example, ema, shape):
    _check(example, ema, shape, "torch")


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="needs numba")
@pytest.mark.parametrize("shape", [(3, 1, 0), (4, 37, 0), (3, 20, 5)],
                         ids=lambda s: f"N{s[0]}-T{s[1]}" + (f"-F{s[2]}" if s[2] else ""))
def test_ema_example_matches_loop_numba(example, ema, shape):
    _check(example, ema, shape, "numba")


@pytest.mark.skipif(not TRITON_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("shape", [(3, 19, 0), (2, 7, 3)],
                         ids=lambda s: f"N{s[0]}-T{s[1]}" + (f"-F{s[2]}" if s[2] else ""))
def test_ema_example_matches_loop_triton(example, ema, shape):
    _check(example, ema, shape, "triton")


def test_ema_example_script_runs(tmp_path):
    env = dict(os.environ, SCANGEN_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, str(EXAMPLE), "--backend", "torch"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max abs error vs float64 loop" in out.stdout


# --------------------------------------------------------------------------- documentation code

DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
# The integrations' libraries (pyproject.toml's extras): a page that imports one it lacks is skipped.
OPTIONAL = {"stable_baselines3", "gymnasium", "torchrl", "tensordict", "verl", "matplotlib"}
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks(path):
    return [(lang, body) for lang, body in FENCE.findall(path.read_text(encoding="utf-8"))]


def write_file_block(lang, body, folder):
    """Write a ```yaml block whose first line is ``# file: NAME`` to ``folder / NAME``, as the
    reader would (the comment line included); return whether the block was one."""
    first = body.splitlines()[0] if body else ""
    if lang != "yaml" or not first.startswith("# file: "):
        return False
    (Path(folder) / first[len("# file: "):].strip()).write_text(body, encoding="utf-8")
    return True


@pytest.mark.parametrize("page", [p for p in DOCS if any(l == "python" for l, _ in _blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_documentation_code_runs(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path / "cache"))
    namespace = {"__name__": "__doc_example__"}
    for lang, body in _blocks(page):
        if write_file_block(lang, body, tmp_path):
            continue
        if lang == "python":
            try:
                exec(compile(body, f"{page.name} (python block)", "exec"), namespace)
            except ModuleNotFoundError as exc:
                # a page about an integration whose library this machine lacks (CI installs the
                # extras, so there every page runs, as tests/test_integration_*.py do)
                if exc.name and exc.name.split(".")[0] in OPTIONAL:
                    pytest.skip(f"{page.name} needs {exc.name}, not installed here")
                raise
