"""Which backend target runs a call: ``backend=`` or ``SCANGEN_BACKEND``, else by device."""
from __future__ import annotations

import torch

from . import numba as numba_target
from .env import ENV

BACKENDS = ("auto", "triton", "numba", "torch")


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``, on the CPU)."""
    return (ENV["TRITON_INTERPRET"] or "0") not in ("", "0")


def select_backend(fn: str, backend: str | None, device: torch.device) -> str:
    """``auto``: Triton for CUDA tensors, numba for CPU tensors (torch where numba is not
    installed), the torch path on every other device."""
    choice = backend if backend is not None else (ENV["SCANGEN_BACKEND"] or "auto")
    if choice not in BACKENDS:
        source = "backend" if backend is not None else "SCANGEN_BACKEND"
        raise ValueError(f"{fn}(): {source} must be one of "
                         f"{', '.join(repr(b) for b in BACKENDS)}, got {choice!r}")
    if choice == "auto":
        if device.type == "cuda":
            return "triton"
        return "numba" if device.type == "cpu" and numba_target.available() else "torch"
    if choice == "triton" and device.type != "cuda" and not interpreting():
        raise ValueError(f"{fn}(): backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 "
                         f"set before scangen is imported to run the kernels on the CPU")
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
