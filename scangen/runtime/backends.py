"""Which backend target runs a call: ``backend=`` or ``SCANGEN_BACKEND``, else by device."""
from __future__ import annotations

import functools
import importlib.util
import sys

import torch

from . import numba as numba_target
from .env import ENV

BACKENDS = ("auto", "triton", "numba", "torch")


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``, on the CPU)."""
    return (ENV["TRITON_INTERPRET"] or "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether the triton package is installed (found, not imported: a process whose calls run
    on the CPU never imports it). Triton's wheels are for Linux; pyproject.toml requires it
    there only, so that a laptop without it runs the numba and torch paths."""
    if "triton" in sys.modules:
        return sys.modules["triton"] is not None
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def select_backend(fn: str, backend: str | None, device: torch.device) -> str:
    """``auto``: Triton for CUDA tensors (the torch path where Triton is not installed), numba
    for CPU tensors (torch where numba is not installed), the torch path on every other
    device."""
    choice = backend if backend is not None else (ENV["SCANGEN_BACKEND"] or "auto")
    if choice not in BACKENDS:
        source = "backend" if backend is not None else "SCANGEN_BACKEND"
        raise ValueError(f"{fn}(): {source} must be one of "
                         f"{', '.join(repr(b) for b in BACKENDS)}, got {choice!r}")
    if choice == "auto":
        if device.type == "cuda":
            return "triton" if triton_available() else "torch"
        return "numba" if device.type == "cpu" and numba_target.available() else "torch"
    if choice == "triton" and not triton_available():
        raise ValueError(f"{fn}(): backend='triton' needs Triton installed (pip install "
                         f"'triton>=3.5'; its wheels are for Linux); backend='numba' or "
                         f"'torch' run without it")
    if choice == "triton" and device.type != "cuda" and not interpreting():
        raise ValueError(f"{fn}(): backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 "
                         f"set before the first Triton call to run the kernels on the CPU "
                         f"(after `import scangen`, then call scangen.runtime.reload_env())")
    if choice == "triton" and device.type not in ("cuda", "cpu"):  # interpreted: CPU only
        raise ValueError(f"{fn}(): backend='triton' needs CUDA tensors, or CPU tensors under "
                         f"TRITON_INTERPRET=1, got {device.type} tensors")
    if choice == "numba":
        if device.type != "cpu":
            raise ValueError(f"{fn}(): backend='numba' needs CPU tensors, got {device.type} "
                             f"tensors")
        if not numba_target.available():
            raise ValueError(f"{fn}(): backend='numba' needs numba installed "
                             f"(pip install numba)")
    return choice
