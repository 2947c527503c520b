"""The compiler, stage by stage: spec -> validated spec -> IR -> plan -> Python source."""
from __future__ import annotations

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
    spec: Spec = as_spec(spec_or_path)
    ir = lower(validate(spec))
    return ir, render(plan(ir), source or spec.source)
