"""Where the time of a small call goes: the empty-launch floor, an empty kernel with as many
arguments as a generated kernel, scangen's host path alone (general and fast path) and its
pieces (the signature, the outputs' allocation), the full call on either path, and Triton's
launcher alone.

Run on the GPU: python3 bench/dev/probe_launch.py [--algos gae,vtrace] [--shape 4096x128]

The plan of a call is ``scangen.runtime.PLANS``' entry (a bound-call template); its fast paths
(``scangen.runtime.fastpath.build``) and compiled launchers sit in its launch plan (``plan.lp``).
"""
import argparse
import statistics
import sys
import time
import types
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # the checkout, for scangen

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import scangen  # noqa: E402
from scangen import runtime  # noqa: E402
from scangen.runtime import launch as rt_launch, ops as rt_ops  # noqa: E402
from scangen.testing import make_inputs  # noqa: E402


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
    """A copy of a plan's fast-path function (either) whose launcher does nothing: scangen's
    host work alone on that path."""
    return types.FunctionType(fast.__code__, {**fast.__globals__, "_run": lambda *a: None})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--algos", default="gae", help="comma-separated built-ins")
    ap.add_argument("--shape", default="4096x128", help="N x T")
    args = ap.parse_args()
    n, t = (int(v) for v in args.shape.split("x"))
    x = torch.empty(1 << 20, device="cuda")
    ints = list(range(3, 27))
    rows = [("empty kernel", lambda: _empty[(1,)]()),
            ("empty kernel, 34 args", lambda: _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25,
                                                               C0=1, C1=0, C2=1, C3=0))]
    ce = _empty_many[(1,)](*([x] * 8), *ints, 0.5, 0.25, C0=1, C1=0, C2=1, C3=0)
    rows.append(("empty kernel, 34 args, compiled entry",
                 lambda: ce[(1, 1, 1)](*([x] * 8), *ints, 0.5, 0.25, 1, 0, 1, 0)))
    for algo in args.algos.split(","):
        rows += algo_rows(algo, n, t)
    # five rounds over every row, so that a change of the host's speed during the probe shows
    # as spread in each row rather than as a difference between rows
    times = {name: [] for name, _ in rows}
    for _ in range(5):
        for name, fn in rows:
            times[name].append(host_us(fn, n=1000))
    floor = statistics.median(times["empty kernel"])
    for name, _ in rows:
        t = sorted(times[name])
        print(f"{name:58s} {statistics.median(t):8.2f} us/call (host-timed loop; median of 5, "
              f"{t[0]:.2f}-{t[-1]:.2f}; {statistics.median(t) / floor:.2f}x the empty kernel)")
    for name, fn in rows:
        ms = triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
        print(f"{name:58s} {ms * 1e3:8.2f} us (do_bench median)")


def algo_rows(algo, n, t):
    """The rows of one built-in at N x T: its host path on either path, the pieces of the fast
    path, and its compiled kernel launched by Triton's entry and by the launcher alone."""
    fn = getattr(scangen, f"compute_{algo}")
    inputs = make_inputs(algo, n, t, seed=0, device="cuda")
    for _ in range(3):  # compile, first direct launch (builds the fast path), fast path
        fn(**inputs)
    (plan,) = [p for p in runtime.PLANS.values() if p.op.name == algo]
    lp = plan.lp
    fast, guarded = lp.fast, lp.guarded
    tag = f"{algo} {n}x{t}"
    print(f"# {tag}: family {plan.config.family}, fast path "
          f"{'built' if fast is not None else 'NOT built'}, guarded fast path "
          f"{'built' if guarded is not None else 'NOT built'}, "
          f"{len(plan.requested)} outputs")

    def on_plan(value, guard=None):  # the call with the plan's fast paths set to these
        def call():
            lp.fast, lp.guarded = value, guard
            runtime.plans.RECENT[id(plan.op)] = (plan.op, guard)  # what the signature path sets
            try:
                fn(**inputs)
            finally:
                lp.fast, lp.guarded = fast, guarded
        return call

    got = {}
    real_call = rt_ops.call

    def grab(op, values, **kw):  # the arguments the generated function passes to ops.call
        got.update(values=values, kw=kw)
        return real_call(op, values, **kw)
    rt_ops.call = grab
    try:
        fn(**inputs)
    finally:
        rt_ops.call = real_call
    rows = [(f"{tag}: full call, general path", on_plan(None))]
    if fast is not None:
        values, kw = got["values"], got["kw"]
        like = [values[plan.proto]] * len(plan.requested) if plan.proto is not None else []
        dt = plan.out_dtype
        rows += [(f"{tag}: fast path, launcher stubbed", on_plan(stubbed(fast))),
                 (f"{tag}: signature alone", lambda: runtime.plans.signature(
                     plan.op, values, kw["time_dim"], kw["outputs"], kw["backend"])),
                 (f"{tag}: outputs' allocation alone",
                  lambda: [torch.empty_like(v, dtype=dt) for v in like]),
                 (f"{tag}: full call, fast path", on_plan(fast))]
        if guarded is not None:
            rows += [(f"{tag}: guarded fast path, launcher stubbed",
                      on_plan(fast, stubbed(guarded))),
                     (f"{tag}: full call, guarded fast path", on_plan(fast, guarded))]
        tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
        rows.append((f"{tag}: data_ptr() of its {len(tensors)} tensors",
                     lambda: [v.data_ptr() for v in tensors]))
        try:  # torch's C check of sizes, strides, dtype, device, requires_grad (dynamo's old guard)
            from torch._C._dynamo.guards import TensorGuards
            guard = TensorGuards(*tensors, dynamic_dims_sizes=[list(v.shape) for v in tensors],
                                 dynamic_dims_strides=[list(v.stride()) for v in tensors])
            assert guard.check(*tensors)
            rows.append((f"{tag}: TensorGuards.check of its {len(tensors)} tensors",
                         lambda: guard.check(*tensors)))
        except (ImportError, TypeError, AssertionError) as exc:
            print(f"# no TensorGuards: {exc!r}")
    # The pieces of a launch: Triton's compiled-kernel entry with the same arguments, without
    # scangen's Python around it (captured from one real call on the general path).
    seen = {}
    real = rt_launch.launch

    def spy(c, kernel, grid, args, meta, cfg):
        seen.update(kernel=kernel, compiled=c.lp.compiled.get(kernel), grid=(*grid, 1, 1)[:3],
                    args=(*args, *meta.values()))
        real(c, kernel, grid, args, meta, cfg)
    rt_launch.launch = spy
    try:
        on_plan(None)()
    finally:
        rt_launch.launch = real
    if seen.get("compiled") is not None:
        run, function, packed, stream_of, dev = seen["compiled"]
        g, a = seen["grid"], seen["args"]
        k = compiled_kernel(seen["kernel"], function)
        if k is not None:
            rows.append((f"{tag}: compiled kernel, Triton's entry ({len(a)} args)",
                         lambda: k[g](*a)))
        rows.append((f"{tag}: compiled kernel, launcher alone ({len(a)} args)",
                     lambda: run(*g, stream_of(dev), function, packed, None, None, None, *a)))
    return rows


def compiled_kernel(jit, function):
    """Triton's compiled kernel of ``jit`` whose function handle is ``function`` (what the plan
    launches), from the JIT function's caches; None if not found."""
    for caches in getattr(jit, "device_caches", {}).values():
        for k in caches[0].values():
            if getattr(k, "function", None) == function:
                return k
    return None


if __name__ == "__main__":
    main()
