"""The compiler, stage by stage: spec -> validated spec -> IR -> plan -> Python source."""
from __future__ import annotations

from .adjoint import adjoint_ir, with_states
from .errors import SpecError
from .ir import IR
from .lower import lower
from .plan import plan
from .render import render
from .spec import Spec, as_spec
from .validate import validate


def to_ir(spec_or_path) -> IR:
    return lower(validate(as_spec(spec_or_path)))


def generate(spec_or_path, source: str | None = None) -> tuple[IR, str]:
    """Compile a spec to ``(ir, module source)``. ``source`` names the spec in the header."""
    ir, text, _ = generate_with_grad(spec_or_path, source)
    return ir, text


def generate_with_grad(spec_or_path, source: str | None = None):
    """``(ir, forward module, backward module or None)``: the forward can also store its scan
    states; the backward is the spec's adjoint (scangen.adjoint), compiled the same way."""
    spec: Spec = as_spec(spec_or_path)
    ir = lower(validate(spec))
    source = source or spec.source
    forward = render(plan(with_states(ir)), source)
    backward = adjoint_ir(ir)
    try:
        grad = render(plan(backward), f"{source} (adjoint)") if backward is not None else None
    except SpecError:  # a derivative the printers cannot write: autograd differentiates the
        grad = None    # generated torch path instead (scangen.ops)
    return ir, forward, grad
