"""Where the time of a small call goes: the empty-launch floor, an empty kernel with as many
arguments as a generated kernel, scangen's host path alone (general and fast path), the full
call on either path, and Triton's launcher alone.

Run on the GPU: PYTHONPATH=. python3 bench/probe_launch.py
"""
import statistics
import time
import types

import torch
import triton
import triton.language as tl

import scangen
from scangen import runtime
from scangen.generated import gae
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


def stubbed(fast):
    """A copy of a plan's fast-path function whose launcher does nothing: scangen's host work
    alone on the fast path."""
    return types.FunctionType(fast.__code__, {**fast.__globals__, "_run": lambda *a: None})


def main():
    x = torch.empty(1 << 20, device="cuda")
    ints = list(range(3, 27))
    inputs = make_inputs("gae", 4096, 128, seed=0, device="cuda")
    for _ in range(3):  # compile, first direct launch (builds the fast path), fast path
        scangen.compute_gae(**inputs)
    (plan,) = [p for p in runtime._PLANS.values() if p.op.name == "gae"]
    fast = plan.kernels.get("fast")
    print(f"# GAE 4096x128: family {plan.config.family}, fast path "
          f"{'built' if fast is not None else 'NOT built'}")

    def on_plan(value):  # runs the call with the plan's fast path set to `value`
        def call():
            plan.kernels["fast"] = value
            try:
                scangen.compute_gae(**inputs)
            finally:
                plan.kernels["fast"] = fast
        return call

    noop = gae.OP._replace(launch=lambda c, cfg: None)
    rows = [("empty kernel", lambda: _empty[(1,)]()),
            ("empty kernel, 34 args", lambda: _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25,
                                                               C0=1, C1=0, C2=1, C3=0)),
            ("scangen general path, no launch (GAE 4096x128)",
             lambda: runtime.call(noop, {**{k: None for k in ("truncateds", "bootstrap_values",
                                                              "last_value")}, **inputs,
                                         "gamma": 0.99, "lambda_": 0.95})),
            ("scangen full call, general path (GAE 4096x128)", on_plan(None))]
    if fast is not None:
        rows += [("scangen fast path, launcher stubbed", on_plan(stubbed(fast))),
                 ("scangen full call, fast path (GAE 4096x128)",
                  lambda: scangen.compute_gae(**inputs))]
    # The pieces of a launch: Triton's compiled-kernel entry with the same arguments, without
    # scangen's Python around it (captured from one real call on the general path).
    seen = {}
    real = runtime.launch

    def spy(c, kernel, grid, args, meta, cfg):
        seen.update(compiled=c.kernels.get(kernel), grid=(*grid, 1, 1)[:3], args=(*args, *meta.values()))
        real(c, kernel, grid, args, meta, cfg)
    runtime.launch = spy
    try:
        on_plan(None)()
    finally:
        runtime.launch = real
    if seen.get("compiled") is not None:
        run, function, packed, stream_of, dev, k = seen["compiled"]
        g, a = seen["grid"], seen["args"]
        rows.append((f"GAE compiled kernel, Triton's entry ({len(a)} args)", lambda: k[g](*a)))
        rows.append((f"GAE compiled kernel, launcher alone ({len(a)} args)",
                     lambda: run(*g, stream_of(dev), function, packed, None, None, None, *a)))
    ce = _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25, C0=1, C1=0, C2=1, C3=0)
    rows.append(("empty kernel, 34 args, compiled entry",
                 lambda: ce[(1, 1, 1)](*([x] * 8), *ints, 0.5, 0.25, 1, 0, 1, 0)))
    # five rounds over every row, so that a change of the host's speed during the probe shows
    # as spread in each row rather than as a difference between rows
    times = {name: [] for name, _ in rows}
    for _ in range(5):
        for name, fn in rows:
            times[name].append(host_us(fn, n=1000))
    floor = statistics.median(times["empty kernel"])
    for name, _ in rows:
        t = sorted(times[name])
        print(f"{name:50s} {statistics.median(t):8.2f} us/call (host-timed loop; median of 5, "
              f"{t[0]:.2f}-{t[-1]:.2f}; {statistics.median(t) / floor:.2f}x the empty kernel)")
    for name, fn in rows:
        ms = triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
        print(f"{name:50s} {ms * 1e3:8.2f} us (do_bench median)")


if __name__ == "__main__":
    main()
