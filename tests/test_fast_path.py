"""Implementation tests of an invariant: the plan's fast path (scangen.runtime.fastpath) passes
the kernel exactly what the general path passes. After a plan's first direct launch, calls
with the same signature go from the arguments straight to the compiled kernel's launcher.

Triton's launcher is not available under the interpreter, so these tests stand a recorder in
for it (as runtime.launch.launch would find a compiled kernel after a first launch on a GPU) and check
that the fast path passes exactly the arguments the general path passes for the same call. The
GPU suite (tests/test_gpu.py) checks the fast path's results against the references."""
import contextlib
import inspect
from unittest import mock

import pytest
import torch

import scangen
from conftest import DEVICE
from scangen import runtime
from scangen.testing import as_time_major, make_inputs


class Recorder:
    """Stands in for a compiled kernel's launcher: records each launch's arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, gx, gy, gz, stream, function, packed, *args):
        self.calls.append(((gx, gy, gz), stream, function, packed, args))


def _plan_with_recorder(fn, x, **kw):
    """Runs one call (Triton's own launch path), then gives its plan a recorder as compiled
    kernel: the plan's next calls take the direct launch. Returns (plan, recorder)."""
    runtime.PLANS.clear()
    kernels = []
    real = runtime.launch.launch

    def spy(c, kernel, *rest):
        kernels.append(kernel)
        real(c, kernel, *rest)

    with mock.patch.object(runtime.launch, "launch", spy):
        fn(**x, backend="triton", **kw)
    (plan,) = runtime.PLANS.values()
    rec = Recorder()
    (kernel,) = kernels
    plan.lp.compiled[kernel] = (rec, "function", "packed", lambda device: "stream", 0)
    plan.lp.direct = True
    return plan, rec


def _same_launch(a, b):
    """Two recorded launches with equal arguments: the same input tensors, equal floats, outputs
    of the same shape, strides and dtype (each call allocates its own)."""
    assert a[:4] == b[:4]
    assert len(a[4]) == len(b[4])
    for k, (u, v) in enumerate(zip(a[4], b[4])):
        if isinstance(u, torch.Tensor):
            assert isinstance(v, torch.Tensor), k
            if u is not v:  # an output of each call
                assert (u.shape, u.stride(), u.dtype) == (v.shape, v.stride(), v.dtype), k
        else:
            assert type(u) is type(v) and u == v, (k, u, v)


def _same_addresses(guarded, outs_g, general, outs_n):
    """A launch of the guarded fast path, which passes addresses as integers, against one of the
    general path, which passes tensors: the kernel gets the same addresses (each call's own
    outputs in the same slots) and equal other arguments."""
    assert guarded[:4] == general[:4]
    assert len(guarded[4]) == len(general[4])
    mine = {o.data_ptr(): f"output {k}" for k, o in enumerate(outs_g)}
    theirs = {o.data_ptr(): f"output {k}" for k, o in enumerate(outs_n)}
    for k, (u, v) in enumerate(zip(guarded[4], general[4])):
        if isinstance(v, torch.Tensor):
            u = u.data_ptr() if isinstance(u, torch.Tensor) else u
            assert type(u) is int, (k, u)
            assert mine.get(u, u) == theirs.get(v.data_ptr(), v.data_ptr()), k
        else:
            assert type(u) is type(v) and u == v, (k, u, v)
    assert sum(type(a) is int and a in mine for a in guarded[4]) == len(outs_g)


@contextlib.contextmanager
def path(plan, which):
    """Calls of ``plan`` take ``which`` of its paths: "general", or "fast" (the fast path
    without the guarded one, as after a signature lookup)."""
    kept, recent = (plan.lp.fast, plan.lp.guarded), dict(runtime.plans.RECENT)
    plan.lp.guarded = None
    if which == "general":
        plan.lp.fast = None
    runtime.plans.RECENT.clear()
    try:
        yield
    finally:
        plan.lp.fast, plan.lp.guarded = kept
        runtime.plans.RECENT.clear()
        runtime.plans.RECENT.update(recent)


CASES = [
    ("compute_gae", {}, {}),
    ("compute_gae", {"drop": ("truncateds",)}, {"outputs": ("advantages", "returns")}),
    ("compute_vtrace", {"drop": ("truncateds",)}, {"outputs": "pg_advantages"}),
    ("compute_vtrace", {}, {"rho_bar": 0.9}),  # pg_rho_bar follows rho_bar, call by call
    ("compute_retrace", {}, {}),
    ("compute_lambda_returns", {}, {}),
    ("compute_discounted_returns", {}, {}),
    ("compute_eligibility_traces", {}, {}),
    ("compute_episodic_prefix_sum", {}, {}),
    ("compute_masked_gae", {}, {"outputs": ("advantages", "returns")}),
]


@pytest.mark.parametrize("name,prep,kw", CASES, ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("layout", ["rows", "time-major"])
def test_fast_path_passes_the_general_paths_arguments(name, prep, kw, layout):
    fn = getattr(scangen, name)

    def inputs(seed):
        x = make_inputs(name, 3, 40, seed=seed)
        for k in prep.get("drop", ()):
            del x[k]
        x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
        return as_time_major(x) if layout == "time-major" else x

    plan, rec = _plan_with_recorder(fn, inputs(0), **kw)
    assert plan.config.family != "lookback"
    fn(**inputs(1), backend="triton", **kw)  # direct launch: builds the fast paths
    assert plan.lp.fast is not None, "the plan did not get a fast path"
    assert plan.lp.guarded is not None, "the plan did not get a guarded fast path"
    fn(**inputs(1), backend="triton", **kw)  # through the signature: the op's recent plan
    for seed, scale in ((2, 0.5), (3, 0.25)):
        x = inputs(seed)
        if "gamma" in inspect.signature(fn).parameters:
            x["gamma"] = scale  # a new float param value reaches the kernel
        n = len(rec.calls)
        out = fn(**x, backend="triton", **kw)  # the guarded fast path
        assert len(rec.calls) == n + 1
        guarded_launch = rec.calls[-1]
        with path(plan, "fast"):
            fast_out = fn(**x, backend="triton", **kw)
        fast_launch = rec.calls[-1]
        with path(plan, "general"):
            again = fn(**x, backend="triton", **kw)
        _same_launch(fast_launch, rec.calls[-1])
        outs, fasts, agains = ((o if isinstance(o, tuple) else (o,))
                               for o in (out, fast_out, again))
        _same_addresses(guarded_launch, outs, rec.calls[-1], agains)
        assert isinstance(out, tuple) == isinstance(again, tuple) == isinstance(fast_out, tuple)
        for o, f, a in zip(outs, fasts, agains):
            assert (o.shape, o.stride(), o.dtype) == (a.shape, a.stride(), a.dtype)
            assert (f.shape, f.stride(), f.dtype) == (a.shape, a.stride(), a.dtype)
            assert torch.isnan(o).all() and torch.isnan(f).all(), \
                "tests poison outputs: the fast paths must too"
        assert sum(a is o for a in fast_launch[4] for o in fasts) == len(fasts)
    runtime.PLANS.clear()


@pytest.mark.parametrize("name", ["compute_gae", "compute_masked_gae", "compute_retrace"])
def test_fast_path_of_lookback_plans_passes_the_workspace(name):
    """Look-back plans pass the plan's workspace for the current stream, as the general path
    does (one kept per stream; single, joint and trailing-axis look-backs)."""
    x = make_inputs(name, 2, 300, seed=0)
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
    fn = getattr(scangen, name)
    with mock.patch.dict(runtime.env.ENV, {"SCANGEN_FAMILY": "lookback"}):
        plan, rec = _plan_with_recorder(fn, x)
        fn(**x, backend="triton")
        assert plan.config.family == "lookback"
        assert plan.lp.fast is not None and plan.lp.guarded is not None
        (ws,) = plan.lp.workspaces.values()
        fn(**x, backend="triton")  # through the signature: the op's recent plan
        out = fn(**x, backend="triton")  # the guarded fast path
        guarded_launch = rec.calls[-1]
        with path(plan, "fast"):
            fn(**x, backend="triton")
        fast_launch = rec.calls[-1]
        with path(plan, "general"):
            again = fn(**x, backend="triton")
    _same_launch(fast_launch, rec.calls[-1])
    _same_addresses(guarded_launch, out if isinstance(out, tuple) else (out,), rec.calls[-1],
                    again if isinstance(again, tuple) else (again,))
    assert sum(a is ws for a in fast_launch[4]) == 1
    assert sum(a is ws for a in guarded_launch[4]) == 1
    runtime.PLANS.clear()


@pytest.mark.parametrize("shape", [(), (3, 1), (3, 40)], ids=["0-dim", "per-row", "per-step"])
def test_fast_path_expands_tensor_params(shape):
    """Tensor params (0-dim, as the custom op passes floats; per row; per step) are expanded
    per call on the fast path, to the same view the general path passes; a new tensor's
    values reach the kernel."""
    x = make_inputs("compute_gae", 3, 40, seed=0)
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}

    def gamma(value):
        return torch.full(shape, value, device=DEVICE)

    plan, rec = _plan_with_recorder(scangen.compute_gae, {**x, "gamma": gamma(0.9)})
    scangen.compute_gae(**x, gamma=gamma(0.8), backend="triton")
    fast = plan.lp.fast
    assert fast is not None
    assert plan.lp.guarded is not None
    scangen.compute_gae(**x, gamma=gamma(0.75), backend="triton")  # the op's recent plan
    g = gamma(0.7)
    out = scangen.compute_gae(**x, gamma=g, backend="triton")  # the guarded fast path
    guarded_launch = rec.calls[-1]
    with path(plan, "fast"):
        scangen.compute_gae(**x, gamma=g, backend="triton")
    fast_launch = rec.calls[-1]
    with path(plan, "general"):
        again = scangen.compute_gae(**x, gamma=g, backend="triton")
    _same_launch(fast_launch, rec.calls[-1])
    _same_addresses(guarded_launch, (out,), rec.calls[-1], (again,))
    for launch in (fast_launch, guarded_launch):
        (ptr,) = [a for a in launch[4] if isinstance(a, torch.Tensor)
                  and a.data_ptr() == g.data_ptr()]
        assert (ptr == 0.7).all() and ptr.shape == (3, 40)
    runtime.PLANS.clear()


def test_fast_path_is_not_taken_where_a_call_rebinds_more():
    """Params that must be copied (strides that do not merge) and float64 (float params travel
    as new tensors) stay on the general path."""
    x = make_inputs("compute_gae", 6, 40, seed=0)  # [B, N, T] = [2, 3, 40]
    x = {k: v.to(DEVICE).reshape(2, 3, *v.shape[1:]) if torch.is_tensor(v) else v
         for k, v in x.items()}
    g = torch.full((3, 2, 40), 0.9, device=DEVICE).permute(1, 0, 2)  # B and N do not merge
    plan, rec = _plan_with_recorder(scangen.compute_gae, {**x, "gamma": g})
    scangen.compute_gae(**{**x, "gamma": g}, backend="triton")
    assert "gamma" in plan.copied
    assert plan.lp.fast is None and len(rec.calls) == 1
    x = {k: v.reshape(6, *v.shape[2:]) if torch.is_tensor(v) else v for k, v in x.items()}
    x64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
           for k, v in x.items()}
    plan, rec = _plan_with_recorder(scangen.compute_gae, x64)
    scangen.compute_gae(**x64, backend="triton")
    assert plan.lp.fast is None and len(rec.calls) == 1
    runtime.PLANS.clear()


def test_a_launch_hook_sends_calls_back_to_tritons_path():
    """While a Triton launch hook is registered (a profiler), calls take Triton's own launch
    path, which calls the hook, even where the plan has a fast path."""
    x = make_inputs("compute_gae", 3, 40, seed=0)
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
    plan, rec = _plan_with_recorder(scangen.compute_gae, x)
    scangen.compute_gae(**x, backend="triton")
    assert plan.lp.fast is not None and len(rec.calls) == 1
    with mock.patch.object(runtime.launch, "hooked", lambda: True):
        out = scangen.compute_gae(**x, backend="triton")  # the interpreter runs the kernel
    assert len(rec.calls) == 1 and not torch.isnan(out).any()
    scangen.compute_gae(**x, backend="triton")
    assert len(rec.calls) == 2
    runtime.PLANS.clear()


def test_calls_through_the_custom_op_take_the_fast_path():
    """Calls that need autograd go through the torch.library op, which passes float params as
    0-dim tensors: their plan gets a fast path too, with the general path's arguments."""
    x = make_inputs("compute_gae", 3, 40, seed=0)
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
    x["rewards"].requires_grad_(True)
    plan, rec = _plan_with_recorder(scangen.compute_gae, x)
    assert plan.ptargets, "the custom op passes its params as tensors"
    scangen.compute_gae(**x, gamma=0.5, backend="triton")
    fast = plan.lp.fast
    assert fast is not None
    scangen.compute_gae(**x, gamma=0.25, backend="triton")
    fast_launch = rec.calls[-1]
    with path(plan, "general"):
        scangen.compute_gae(**x, gamma=0.25, backend="triton")
    _same_launch(fast_launch, rec.calls[-1])
    gammas = [a for a in fast_launch[4] if isinstance(a, torch.Tensor) and a.dim() == 2
              and a.stride() == (0, 0)]
    assert any((g == 0.25).all() for g in gammas)
    runtime.PLANS.clear()


def test_guarded_fast_path_misses_whatever_the_signature_holds():
    """The guarded fast path, tried on an op's next call before any signature is built, takes
    exactly the calls whose signature matches its plan's (runtime.plans.signature): another shape,
    strides, dtype, alignment, presence of an optional input, param type, time_dim, outputs,
    backend, environment switch, or a tensor that needs a gradient each go elsewhere."""
    x = make_inputs("compute_gae", 3, 40, seed=0)
    x = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()}
    plan, rec = _plan_with_recorder(scangen.compute_gae, x)
    scangen.compute_gae(**x, backend="triton")  # builds the fast paths
    guarded = plan.lp.guarded
    assert guarded is not None
    scangen.compute_gae(**x, backend="triton")  # through the signature: the op's recent plan
    op = plan.op
    assert runtime.plans.RECENT[id(op)] == (op, guarded)
    hits = []

    def spy(*args):
        out = guarded(*args)
        hits.append(out is not runtime.fastpath.MISS)
        return out

    def took(**change):
        """Whether a call with ``change`` applied to ``x`` took the guarded path."""
        runtime.plans.RECENT[id(op)] = (op, spy)
        kw = {k: change.pop(k) for k in ("time_dim", "outputs") if k in change}
        backend = change.pop("backend", "triton")
        y = {k: v for k, v in {**x, **change}.items() if v is not _DROP}
        n = len(hits)
        scangen.compute_gae(**y, backend=backend, **kw)
        assert len(hits) == n + 1, "the guarded path was not tried"
        return hits[-1]

    r = x["rewards"]
    assert took()
    assert took(rewards=r.clone(), gamma=0.5)  # new tensors and float values: the same plan
    offset = torch.empty(r.numel() + 1, device=DEVICE)[1:].view(r.shape)  # 4 bytes off
    offset.copy_(r)
    for change in [dict(rewards=torch.cat([r, r[:1]])[:3, :39]),  # another shape
                   dict(rewards=r.t().contiguous().t()),  # other strides
                   dict(rewards=r.double()),
                   dict(rewards=offset),  # the same sizes and strides, misaligned
                   dict(truncateds=_DROP),
                   dict(gamma=torch.tensor(0.99, device=DEVICE)),
                   dict(gamma=1),
                   dict(time_dim=1),  # the same axis, named differently: another signature
                   dict(outputs="returns"),
                   dict(backend=None)]:
        if "rewards" in change and change["rewards"].shape != r.shape:
            for k in ("values", "terminateds", "truncateds", "bootstrap_values"):
                change[k] = x[k][:3, :39]
        assert not took(**change), change
    with mock.patch.dict(runtime.env.ENV, {"SCANGEN_FAMILY": "stream"}):
        assert not took()
    with torch.no_grad():
        assert not took(rewards=r.clone().requires_grad_(True))
    runtime.PLANS.clear()
    assert not runtime.plans.RECENT, "clearing the plans forgets the guarded paths"


_DROP = object()  # took(): leave this argument out
