"""``scangen verify``: every built-in, on random inputs, against its float64 reference.

Runs on the GPU when there is one (the Triton kernels and the torch path), else on the CPU (the
numba kernels where numba is installed, the torch path, and the Triton kernels when
``TRITON_INTERPRET=1`` is set).
"""
from __future__ import annotations

import time

import torch

from ..runtime import numba as numbapath
from ..runtime.backends import interpreting
from . import reference
from .helpers import assert_close, make_inputs

SIZES = {
    "small": [(4, 1), (3, 7), (17, 333), (2, 4100)],
    "large": [(4096, 128), (32768, 16), (64, 65536), (2, 1 << 20)],
}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def verify_all(device: str | None = None, sizes: str = "small", seed: int = 0) -> bool:
    import scangen
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    backends = ["torch"] + (["triton"] if device == "cuda" or interpreting() else [])
    backends += ["numba"] if device == "cpu" and numbapath.available() else []
    if sizes == "small" and device == "cpu" and interpreting():
        shapes = SIZES["small"][:3]  # the interpreter runs kernels in numpy: keep it short
    else:
        shapes = SIZES[sizes]
    print(f"scangen verify on {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'CPU'});"
          f" backends: {', '.join(backends)}")
    ok = True
    for name in sorted(reference.REFERENCES):
        fn, ref = getattr(scangen, name), reference.REFERENCES[name]
        for N, T in shapes:
            inputs = make_inputs(name, N, T, seed=seed)
            expected = _as_tuple(ref(**inputs))
            dev_inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                          for k, v in inputs.items()}
            for backend in backends:
                t0 = time.perf_counter()
                try:
                    got = _as_tuple(fn(**dev_inputs, backend=backend))
                    for g, e in zip(got, expected, strict=True):
                        assert_close(g.cpu(), e, dtype=g.dtype, name=name)
                    status = "ok"
                except AssertionError as exc:
                    ok, status = False, "MISMATCH " + str(exc).splitlines()[0]
                dt = time.perf_counter() - t0
                print(f"  {name:30s} N={N:<6d} T={T:<8d} {backend:6s} {status} ({dt:.2f}s)")
    print("all kernels match their references" if ok else "SOME KERNELS DO NOT MATCH")
    return ok
