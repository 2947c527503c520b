"""sigmoid() and tanh() in a spec: values and gradients finite and right for arguments of any size,
on every backend, against torch's own functions in float64 (spec-guide.md, Expressions)."""
import pytest
import torch

import scangen
from conftest import BACKENDS, call_on

GATES = [-1000.0, -100.0, -50.0, -5.0, -1e-3, 0.0, 1e-3, 5.0, 50.0, 100.0, 1000.0]


@pytest.fixture(scope="module", params=["sigmoid", "tanh"])
def gated(request, tmp_path_factory):
    fn = request.param
    op = scangen.compile(f"""
name: gated_{fn}
direction: forward
inputs: {{x: float, gate: float}}
scans:
  h: {{update: "{fn}(gate) * h + x"}}
outputs: {{h: h}}
""", cache_dir=tmp_path_factory.mktemp("cache"))
    return fn, op


def _reference(fn, x, gate):
    """The recurrence with torch's own function, float64, and d(sum of h)/d(gate)."""
    g = gate.double().clone().requires_grad_()
    h, total, hs = torch.zeros(x.shape[0], dtype=torch.float64), 0, []
    for t in range(x.shape[1]):
        h = getattr(torch, fn)(g[:, t]) * h + x[:, t].double()
        hs.append(h)
        total = total + h.sum()
    total.backward()
    return torch.stack(hs, 1).detach(), g.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gates_of_any_size_have_finite_right_gradients(gated, backend, dtype):
    """d/dgate through sigmoid(gate) was exp(-gate) / (1 + exp(-gate))**2: inf / inf = NaN below
    about -89 in float32 (-710 in float64), while the value itself stayed finite."""
    fn, op = gated
    gate = torch.tensor([GATES, GATES[::-1]], dtype=dtype)
    x = torch.linspace(0.5, 1.5, gate.numel(), dtype=dtype).reshape(gate.shape)
    want_h, want_grad = _reference(fn, x, gate)
    g = gate.clone().requires_grad_()
    h = call_on(op, backend, x, g)
    h.sum().backward()
    assert torch.isfinite(h).all() and torch.isfinite(g.grad).all(), g.grad
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h.double(), want_h, **tol)
    torch.testing.assert_close(g.grad.double(), want_grad, **tol)
