"""Where the time of a small call goes: the empty-launch floor, an empty kernel with as many
arguments as a generated kernel, scangen's host path alone, and the full call.

Run on the GPU: PYTHONPATH=. python3 bench/probe_launch.py
"""
import time

import torch
import triton
import triton.language as tl

import scangen
from scangen import runtime
from scangen.testing import make_inputs


@triton.jit
def _empty():
    pass


@triton.jit
def _empty_many(p0, p1, p2, p3, p4, p5, p6, p7, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10,
                i11, i12, i13, i14, i15, i16, i17, i18, i19, i20, i21, i22, i23, f0, f1,
                C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr):
    pass


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    x = torch.empty(1 << 20, device="cuda")
    ints = list(range(3, 27))
    rows = [("empty kernel", lambda: _empty[(1,)]()),
            ("empty kernel, 34 args", lambda: _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25,
                                                               C0=1, C1=0, C2=1, C3=0))]
    inputs = make_inputs("gae", 4096, 128, seed=0, device="cuda")
    from scangen.generated import gae
    noop = gae.OP._replace(launch=lambda c, cfg: None)
    rows.append(("scangen host path only (GAE 4096x128)",
                 lambda: runtime.call(noop, {**{k: None for k in ("truncateds", "bootstrap_values",
                                                                  "last_value")}, **inputs,
                                             "gamma": 0.99, "lambda_": 0.95})))
    rows.append(("scangen full call (GAE 4096x128)", lambda: scangen.compute_gae(**inputs)))
    # The pieces of a launch: Triton's compiled-kernel entry with the same arguments, without
    # scangen's Python around it (captured from one real call).
    seen = {}
    real = runtime.launch

    def spy(c, kernel, grid, args, meta, cfg):
        seen.update(compiled=c.kernels.get(kernel), grid=(*grid, 1, 1)[:3], args=(*args, *meta.values()))
        real(c, kernel, grid, args, meta, cfg)
    runtime.launch = spy
    try:
        scangen.compute_gae(**inputs)
        scangen.compute_gae(**inputs)
    finally:
        runtime.launch = real
    if seen.get("compiled") is not None:
        run, function, packed, stream_of, dev, k = seen["compiled"]
        g, a = seen["grid"], seen["args"]
        rows.append((f"GAE compiled kernel, Triton's entry ({len(a)} args)", lambda: k[g](*a)))
        rows.append((f"GAE compiled kernel, launcher alone ({len(a)} args)",
                     lambda: run(*g, stream_of(dev), function, packed, None, None, None, *a)))
        # the same launch with every tensor passed as its address: Triton's launcher then skips
        # the per-tensor data_ptr() call and cuPointerGetAttribute (bench/NOTES.md, next steps)
        def addresses():
            return tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in a)

        addr = addresses()
        rows.append(("GAE compiled kernel, launcher alone, pointers as ints",
                     lambda: run(*g, stream_of(dev), function, packed, None, None, None, *addr)))
        rows.append(("the ints built per call, then the launcher",
                     lambda: run(*g, stream_of(dev), function, packed, None, None, None,
                                 *addresses())))
    ce = _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25, C0=1, C1=0, C2=1, C3=0)
    rows.append(("empty kernel, 34 args, compiled entry",
                 lambda: ce[(1, 1, 1)](*([x] * 8), *ints, 0.5, 0.25, 1, 0, 1, 0)))
    for name, fn in rows:
        print(f"{name:45s} {host_us(fn):8.2f} us/call (host-timed loop)")
    for name, fn in rows:
        ms = triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
        print(f"{name:45s} {ms * 1e3:8.2f} us (do_bench median)")


if __name__ == "__main__":
    main()
