"""Autograd, torch.compile and torch.library integration of every generated op."""
import inspect

import pytest
import torch

import scangen
from conftest import BACKENDS, DEVICE, ON_GPU
from scangen.runtime import ops
from scangen.testing import reference
from scangen.testing import make_inputs

ALGOS = sorted(reference.REFERENCES)


def _float_leaves(inputs):
    return [k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()]


def _to(inputs, device):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}


def _device(backend):
    """Where a backend's inputs live: the Triton backend runs on the GPU when there is one (on a
    CPU-only machine conftest sets TRITON_INTERPRET=1 and it runs on CPU tensors)."""
    return DEVICE if backend == "triton" else "cpu"


def _as_fn(name, inputs, names, **kw):
    fn = getattr(scangen, name)

    def f(*tensors):
        out = fn(**{**inputs, **dict(zip(names, tensors))}, **kw)
        return out if isinstance(out, tuple) else (out,)
    return f


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALGOS)
def test_gradcheck_float64(name, backend, order):
    """Gradients w.r.t. every float input, and w.r.t. gamma-like params given as tensors; and
    second order (create_graph=True: Hessians, gradient penalties), where the gradient is itself
    differentiable through the scan states too: the fused adjoint once read the states as data,
    and a Hessian w.r.t. gamma came out half its value; Retrace's came out zero."""
    inputs = make_inputs(name, 2, 6 if order == 1 else 5, seed=0 if order == 1 else 3,
                         dtype=torch.float64, device=_device(backend))
    signature = inspect.signature(getattr(scangen, name)).parameters
    for p in ("gamma", "lambda_"):
        if p in signature:
            value = float(inputs.get(p, signature[p].default)) * 0.97
            inputs[p] = torch.tensor(value, dtype=torch.float64, device=_device(backend))
    names = _float_leaves(inputs)
    leaves = [inputs[k].clone().requires_grad_(True) for k in names]
    # Triton kernels run interpreted without a GPU, one call per perturbed element: the fast
    # mode checks the Jacobian along random directions instead (a wrong gradient still fails)
    fast = backend == "triton" and not torch.cuda.is_available()
    check = torch.autograd.gradcheck if order == 1 else torch.autograd.gradgradcheck
    assert check(_as_fn(name, inputs, names, backend=backend), leaves, eps=1e-6, atol=1e-5,
                 fast_mode=fast)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_wrt_gamma_matches_reference(backend):
    inputs = make_inputs("gae", 2, 7, seed=5, dtype=torch.float64, device=_device(backend))
    inputs.pop("gamma", None)
    ref_inputs = {k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()}
    g0 = torch.tensor(0.8, dtype=torch.float64)
    h = torch.autograd.functional.hessian(
        lambda g: scangen.compute_gae(**inputs, gamma=g, backend=backend).sum(),
        g0.to(_device(backend)))
    h_ref = torch.autograd.functional.hessian(
        lambda g: reference.compute_gae(**ref_inputs, gamma=g).sum(), g0)
    torch.testing.assert_close(h.cpu(), h_ref, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_modified_in_place_before_backward_is_refused(backend):
    """As for torch's own ops: autograd refuses the backward, not a gradient at other values."""
    inputs = make_inputs("gae", 2, 6, seed=2, dtype=torch.float64, device=_device(backend))
    gamma = torch.tensor(0.9, dtype=torch.float64, device=_device(backend), requires_grad=True)
    adv = scangen.compute_gae(**{**inputs, "gamma": gamma}, backend=backend)
    inputs["values"].add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        adv.sum().backward()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["compute_gae", "compute_vtrace", "compute_retrace"])
def test_forward_mode_ad_matches_reference(name, backend):
    """torch.autograd.forward_ad: the tangent comes out (it was dropped on the kernel backends),
    with the primal requiring grad or not."""
    import torch.autograd.forward_ad as fwAD
    inputs = make_inputs(name, 3, 6, seed=6, dtype=torch.float64, device=_device(backend))
    ref_inputs = {k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()}
    k = "rewards"
    tangent = torch.randn_like(ref_inputs[k])
    for requires_grad in (False, True):
        with fwAD.dual_level():
            x = fwAD.make_dual(inputs[k].clone().requires_grad_(requires_grad),
                               tangent.to(_device(backend)))
            got = getattr(scangen, name)(**{**inputs, k: x}, backend=backend)
            got = got if isinstance(got, tuple) else (got,)
            xr = fwAD.make_dual(ref_inputs[k], tangent)
            want = reference.REFERENCES[name](**{**ref_inputs, k: xr})
            want = want if isinstance(want, tuple) else (want,)
            for a, b in zip(got, want):
                a, b = fwAD.unpack_dual(a), fwAD.unpack_dual(b)
                assert a.tangent is not None
                torch.testing.assert_close(a.primal.detach().cpu(), b.primal.detach())
                torch.testing.assert_close(a.tangent.detach().cpu(), b.tangent.detach())


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_func_transforms(backend):
    """grad, jacrev, jacfwd, vmap (over inputs, over a param alone, of grad): the values of the
    float64 reference under the same transform (these calls run the generated torch path)."""
    from torch.func import grad, jacfwd, jacrev, vmap
    dev = _device(backend)
    inputs = make_inputs("gae", 2, 5, seed=7, dtype=torch.float64)
    r, v, term = inputs["rewards"], inputs["values"], inputs["terminateds"]
    ours = lambda r, v=v, t=term, g=0.9: scangen.compute_gae(  # noqa: E731
        r.to(dev), v.to(dev), t.to(dev), gamma=g, backend=backend).cpu()
    ref = lambda r, v=v, t=term, g=0.9: reference.compute_gae(r, v, t, gamma=g)  # noqa: E731
    close = torch.testing.assert_close
    close(grad(lambda r: ours(r).pow(2).sum())(r), grad(lambda r: ref(r).pow(2).sum())(r))
    g0 = torch.tensor(0.8, dtype=torch.float64)
    close(jacrev(lambda g: ours(r, g=g.to(dev)))(g0), jacrev(lambda g: ref(r, g=g))(g0))
    close(jacfwd(ours)(r), jacrev(ref)(r))
    rb, vb = torch.randn(3, 2, 5, dtype=torch.float64), torch.randn(3, 2, 5, dtype=torch.float64)
    close(vmap(lambda r, v: ours(r, v))(rb, vb),
          torch.stack([ref(a, b) for a, b in zip(rb, vb)]))
    gb = torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64)
    close(vmap(lambda g: ours(r, g=g.to(dev)))(gb), torch.stack([ref(r, g=g) for g in gb]))
    close(vmap(grad(lambda r: ours(r).pow(2).sum()))(rb),
          torch.stack([grad(lambda r: ref(r).pow(2).sum())(a) for a in rb]))
    # autograd's own batched backward (is_grads_batched) reached the adjoint op, which has no
    # batching rule
    close(torch.autograd.functional.jacobian(ours, r, vectorize=True),
          torch.autograd.functional.jacobian(ref, r))


@pytest.mark.parametrize("name", ["compute_gae", "compute_vtrace", "compute_masked_gae"])
def test_grad_matches_autograd_through_reference(name):
    inputs = make_inputs(name, 3, 40, seed=1, dtype=torch.float64)
    names = [k for k in _float_leaves(inputs) if k != "bootstrap_values"]
    ref_leaves = [inputs[k].clone().requires_grad_(True) for k in names]
    ours = [inputs[k].clone().to(DEVICE).requires_grad_(True) for k in names]
    ref_out = reference.REFERENCES[name](**{**inputs, **dict(zip(names, ref_leaves))})
    dev = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in inputs.items()}
    out = getattr(scangen, name)(**{**dev, **dict(zip(names, ours))})
    ref_out = ref_out if isinstance(ref_out, tuple) else (ref_out,)
    out = out if isinstance(out, tuple) else (out,)
    weights = [torch.randn_like(o, dtype=torch.float64) for o in ref_out]
    g_ref = torch.autograd.grad(sum((o * w).sum() for o, w in zip(ref_out, weights)), ref_leaves)
    g = torch.autograd.grad(sum((o * w.to(DEVICE)).sum() for o, w in zip(out, weights)), ours)
    for a, b, k in zip(g, g_ref, names):
        torch.testing.assert_close(a.cpu(), b, atol=1e-9, rtol=1e-7, msg=f"d/d{k}")


def test_no_grad_path_skips_the_dispatcher():
    inputs = make_inputs("gae", 2, 5, seed=2)
    with torch.no_grad():
        inputs["rewards"].requires_grad_(False)
        out = scangen.compute_gae(**inputs)
    assert out.grad_fn is None


class _CountingBackend:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@pytest.mark.parametrize("name", ["compute_gae", "compute_retrace", "compute_eligibility_traces"])
def test_torch_compile_fullgraph_and_new_gamma(name):
    """fullgraph=True proves there is no graph break; a new gamma tensor does not recompile."""
    torch._dynamo.reset()
    inputs = make_inputs(name, 3, 17, seed=3, device=DEVICE)
    counting = _CountingBackend()
    fn = getattr(scangen, name)

    @torch.compile(fullgraph=True, backend=counting)
    def step(gamma, **kw):
        out = fn(**kw, gamma=gamma)
        return out if isinstance(out, tuple) else (out,)

    for g in (0.9, 0.8, 0.7):
        gamma = torch.tensor(g, device=DEVICE)
        got = step(gamma, **{k: v for k, v in inputs.items() if k != "gamma"})
        expected = fn(**{**inputs, "gamma": g})
        expected = expected if isinstance(expected, tuple) else (expected,)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
    assert counting.graphs == 1



@pytest.mark.parametrize("gamma", ["float", "0-dim tensor"])
def test_inductor_backward_of_the_torch_path_with_a_scalar_gamma(gamma):
    """Retrace's backward differentiates the torch path; inductor (CPU) compiles that graph.
    A 0-dim gamma there was broadcast by as_strided, whose backward inductor's CPU codegen
    failed on (an AssertionError from cpp.py)."""
    torch._dynamo.reset()
    inputs = make_inputs("retrace", 3, 5, seed=0)
    q = inputs.pop("q_values")
    g = 0.9 if gamma == "float" else torch.tensor(0.9, requires_grad=True)

    def loss(q):
        return scangen.compute_retrace(**inputs, q_values=q, gamma=g)[1].pow(2).sum()

    q1, q2 = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    # compiled afresh: a cached kernel from an earlier run would hide a codegen failure
    with torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(loss, fullgraph=True)(q1).backward()
    loss(q2).backward()
    torch.testing.assert_close(q1.grad, q2.grad)


@pytest.mark.parametrize("name", ["compute_gae", "compute_retrace", "compute_masked_gae"])
def test_torch_compile_dynamic_shapes(name):
    """dynamic=True: N, T and Retrace's K symbolic in the fake implementation. Retrace's check
    that its [N, T, K] inputs share K hashed the sizes (a set), which a SymInt is not:
    'unhashable type: non-nested SymInt' under dynamic shapes, or at the second call whose K
    differs from the first."""
    torch._dynamo.reset()
    fn = getattr(scangen, name)

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def step(**kw):
        out = fn(**kw)
        return out if isinstance(out, tuple) else (out,)

    for n, t, a in ((3, 8, 4), (2, 11, 5)):
        inputs = make_inputs(name, n, t, seed=n, device=DEVICE, A=a)
        expected = fn(**inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for x, y in zip(step(**inputs), expected):
            torch.testing.assert_close(x, y)

def test_meta_gradient_wrt_gamma_and_lambda():
    inputs = make_inputs("gae", 4, 30, seed=4, dtype=torch.float64)
    gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    lam = torch.full((4, 1), 0.8, dtype=torch.float64, requires_grad=True)
    adv = scangen.compute_gae(**{**inputs, "gamma": gamma, "lambda_": lam})
    adv.sum().backward()
    eps = 1e-6
    up = scangen.compute_gae(**{**inputs, "gamma": 0.9 + eps, "lambda_": lam.detach()}).sum()
    down = scangen.compute_gae(**{**inputs, "gamma": 0.9 - eps, "lambda_": lam.detach()}).sum()
    torch.testing.assert_close(gamma.grad, (up - down) / (2 * eps), atol=1e-6, rtol=1e-6)
    assert lam.grad.shape == (4, 1)


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA device")
def test_torch_compile_inductor_on_gpu():
    torch._dynamo.reset()
    inputs = make_inputs("gae", 64, 128, seed=5, device="cuda")

    @torch.compile(fullgraph=True)
    def loss(r, v, t, tr, b):
        adv, ret = scangen.compute_gae(r, v, t, tr, bootstrap_values=b,
                                       outputs=("advantages", "returns"))
        return (adv * adv).mean() + ret.mean()

    args = [inputs[k] for k in ("rewards", "values", "terminateds", "truncateds",
                                "bootstrap_values")]
    torch.testing.assert_close(loss(*args), loss.__wrapped__(*args) if hasattr(loss, "__wrapped__")
                               else loss(*args))


def _grads(fn, inputs, names, **kw):
    leaves = {k: inputs[k].clone().requires_grad_(True) for k in names}
    out = fn(**{**inputs, **leaves}, **kw)
    out = out if isinstance(out, tuple) else (out,)
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i),
                           dtype=o.dtype) for i, o in enumerate(out)]  # drawn on CPU: same on any device
    total = sum((o * w.to(o.device)).sum() for o, w in zip(out, weights))
    return torch.autograd.grad(total, [leaves[k] for k in names])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["gae-time-major", "traces-features", "masked-gae", "vtrace"])
def test_generated_backward_matches_differentiated_torch_path(case, backend, monkeypatch):
    """The fused adjoint kernel against autograd through the generated torch path, on layouts
    where gradients must be summed back: time-major, trailing features, [N] inputs, per-row
    params."""
    if case == "gae-time-major":
        inputs = make_inputs("gae", 3, 11, seed=5, dtype=torch.float64)
        inputs.pop("bootstrap_values")
        inputs["last_value"] = torch.randn(3, dtype=torch.float64)
        inputs = {k: (v.T.contiguous() if torch.is_tensor(v) and v.dim() == 2 else v)
                  for k, v in inputs.items()}
        name, kw, names = "compute_gae", {"time_dim": 0}, ["rewards", "values", "last_value"]
    elif case == "traces-features":
        inputs = make_inputs("eligibility_traces", 3, 9, seed=6, dtype=torch.float64, F=(2,))
        inputs["gamma"] = torch.full((3, 1), 0.9, dtype=torch.float64)
        inputs["seed_values"] = torch.randn(3, dtype=torch.float64)
        name, kw, names = "compute_eligibility_traces", {}, ["gradients", "seed_values", "gamma"]
    elif case == "masked-gae":
        inputs = make_inputs("masked_gae", 2, 13, seed=7, dtype=torch.float64)
        name, kw, names = "compute_masked_gae", {}, ["token_level_rewards", "values"]
    else:
        inputs = make_inputs("vtrace", 2, 13, seed=8, dtype=torch.float64)
        name, kw, names = "compute_vtrace", {}, ["log_pi_target", "values", "bootstrap_values"]
    inputs = _to(inputs, _device(backend))
    fn = getattr(scangen, name)
    assert ops.grad_op_of(getattr(scangen.generated, name.removeprefix("compute_")).OP)
    fused = _grads(fn, inputs, names, backend=backend, **kw)
    monkeypatch.setattr(ops, "grad_op_of", lambda op: None)
    reference_grads = _grads(fn, inputs, names, backend=backend, **kw)
    for a, b, k in zip(fused, reference_grads, names):
        assert a.shape == inputs[k].shape and a.device == inputs[k].device
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9, msg=f"d/d{k}")
