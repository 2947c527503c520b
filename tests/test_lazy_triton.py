"""Triton is imported on an op's first Triton launch only (issue 19): a process whose calls all
take the numba or the torch path never imports it.

Each generated op module keeps its Triton kernels in a companion ``<module>_triton.py``
(scangen.abi.triton_kernels), loaded on the first launch. Checked in fresh processes (this one
has imported Triton long ago): a CPU process that calls a built-in forward and backward and
compiles and calls a user spec ends without ``triton`` in ``sys.modules``; one that launches a
kernel (the interpreter, on CPU) imports it then, and loads the op's companion then.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent

CPU_CHILD = r"""
import json, sys
import torch
import scangen
from scangen import abi
from scangen.runtime.backends import select_backend

def triton_modules():
    return sorted(m for m in sys.modules if m == "triton" or m.startswith("triton."))

x = torch.randn(64, 40)
d = torch.rand(64, 40) < 0.1
out = {"auto": select_backend("compute_gae", None, x.device)}
scangen.compute_gae(x, x, d)  # numba where installed, else torch
scangen.compute_gae(x, x, d, backend="torch")
r = x.clone().requires_grad_()
scangen.compute_gae(r, x, d)[0].sum().backward()  # the generated backward op
SPEC = '''\
name: lazy_ema
direction: forward
inputs:
  x: float
  starts: flag
params:
  decay: 0.9
scans:
  m:
    update: where(starts, x, decay * m + (1 - decay) * x)
outputs:
  ema: m
'''
fn = scangen.compile(SPEC, cache_dir=sys.argv[1])
fn(x, d)  # numba where installed (its kernels compiled now), else torch
fn(x, d, backend="torch")
out["triton"] = triton_modules()
out["companions"] = sorted(m for m in sys.modules if m.endswith(abi.TRITON_SUFFIX))
print("RESULTS " + json.dumps(out))
"""

TRITON_CHILD = r"""
import json, sys
import torch
import scangen
from scangen import abi

dev = "cuda" if torch.cuda.is_available() else "cpu"  # else the interpreter (TRITON_INTERPRET=1)
x = torch.randn(4, 40, device=dev)
d = torch.rand(4, 40, device=dev) < 0.1
out = {"before": "triton" in sys.modules}
got = scangen.compute_gae(x, x, d, backend="triton")
ref = scangen.compute_gae(x, x, d, backend="torch")
out["after"] = "triton" in sys.modules
out["companion"] = "scangen.generated.gae" + abi.TRITON_SUFFIX in sys.modules
out["kernels"] = abi.triton_kernels(scangen.generated.gae.OP).stream.__class__.__name__
out["err"] = max((a - b).abs().max().item() for a, b in zip(got, ref))
print("RESULTS " + json.dumps(out))
"""


def _child(code: str, *args: str, interpret: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET",
                                                            "SCANGEN_BACKEND")}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, proc.stderr[-4000:]
    return json.loads(line[len("RESULTS "):])


def test_cpu_calls_never_import_triton(tmp_path):
    """Built-in forward and backward on CPU tensors (``auto``: numba where installed, and the
    torch path) and a user spec compiled at run time: no Triton module imported, no Triton
    companion loaded."""
    out = _child(CPU_CHILD, str(tmp_path / "cache"), interpret=False)
    assert out["auto"] in ("numba", "torch")
    assert out["triton"] == [], out["triton"]
    assert out["companions"] == []


def test_first_triton_launch_imports_triton():
    """The op's first Triton launch loads its ``_triton`` companion, and Triton with it, and
    computes what the torch path does."""
    out = _child(TRITON_CHILD, interpret=not torch.cuda.is_available())
    assert out["before"] is False
    assert out["after"] is True and out["companion"] is True
    assert out["kernels"] in ("JITFunction", "InterpretedFunction"), out["kernels"]
    assert out["err"] < 1e-4


NO_TRITON_CHILD = r"""
import json, sys
sys.modules["triton"] = None  # as on a machine without Triton (pyproject: Linux only)
import torch
import scangen
from scangen.runtime.backends import select_backend, triton_available

out = {"available": triton_available(),
       "auto_cuda": select_backend("compute_gae", None, torch.device("cuda"))}
try:
    select_backend("compute_gae", "triton", torch.device("cuda"))
except ValueError as exc:
    out["explicit"] = str(exc)
x = torch.randn(8, 30, dtype=torch.float64)
d = torch.rand(8, 30) < 0.1
a = scangen.compute_gae(x, x, d)
b = scangen.compute_gae(x, x, d, backend="torch")
fn = scangen.compile(sys.argv[1].replace("|", "\n"), cache_dir=sys.argv[2])
out["err"] = max(max((p - q).abs().max().item() for p, q in zip(a, b)),
                 (fn(x, d) - fn(x, d, backend="torch")).abs().max().item())
print("RESULTS " + json.dumps(out))
"""


def test_without_triton_the_cpu_paths_run(tmp_path):
    """Triton is a Linux-only requirement (its wheels are): without it, CPU calls of built-ins
    and user specs run, ``auto`` takes the torch path for CUDA tensors, and backend='triton'
    says what is missing instead of a ModuleNotFoundError from inside a generated module."""
    spec = ("name: notriton_ema|direction: forward|inputs: {x: float, starts: flag}|"
            "scans:|  m: {update: 'where(starts, x, 0.9 * m + 0.1 * x)'}|outputs: {ema: m}")
    out = _child(NO_TRITON_CHILD, spec, str(tmp_path / "cache"), interpret=False)
    assert out["available"] is False
    assert out["auto_cuda"] == "torch"
    assert out["explicit"] == ("compute_gae(): backend='triton' needs Triton installed (pip "
                               "install 'triton>=3.5'; its wheels are for Linux); "
                               "backend='numba' or 'torch' run without it")
    assert out["err"] < 1e-12
