"""The compiler, stage by stage: spec -> validated spec -> IR -> plan -> Python source."""
from __future__ import annotations

from ..abi import GRAD_SUFFIX, NUMBA_SUFFIX
from ..errors import SpecError
from .adjoint import adjoint_ir, with_states
from .ir import IR
from .lower import lower
from .options import Options
from .plan import plan
from .render import render
from .render_numba import render_numba
from .spec import Spec, as_spec
from .validate import validate


def to_ir(spec_or_path) -> IR:
    return lower(validate(as_spec(spec_or_path)))


def generate(spec_or_path, source: str | None = None,
             options: Options | None = None) -> tuple[IR, str]:
    """Compile a spec to ``(ir, op module source)`` (its companions: :func:`generate_modules`).
    ``source`` names the spec in the header."""
    ir, text, _ = generate_with_grad(spec_or_path, source, options)
    return ir, text


def generate_with_grad(spec_or_path, source: str | None = None, options: Options | None = None):
    """``(ir, forward module, backward module or None)``: the forward can also store its scan
    states; the backward is the spec's adjoint (scangen.compiler.adjoint), compiled the same
    way."""
    ir, files = generate_modules(spec_or_path, source, options)
    return ir, files[""], files.get("_grad")


def generate_modules(spec_or_path, source: str | None = None,
                     options: Options | None = None) -> tuple[IR, dict[str, str]]:
    """``(ir, {suffix: module source})``: ``""`` the forward module (torch path, ``OP``, public
    function), ``"_triton"`` its Triton kernels, ``"_numba"`` its CPU kernels, and where the
    adjoint could be generated ``"_grad"`` / ``"_grad_triton"`` / ``"_grad_numba"`` the backward
    op's. The forward can also store its scan states; the backward is the spec's adjoint
    (scangen.compiler.adjoint), compiled the same way. ``options``: the template options of the
    Triton kernels (the defaults where None)."""
    spec: Spec = as_spec(spec_or_path)
    ir = lower(validate(spec))
    source = source or spec.source
    forward = plan(with_states(ir))
    files = {**render(forward, source, options), NUMBA_SUFFIX: render_numba(forward, source)}
    backward = adjoint_ir(ir)
    if backward is not None:
        try:
            grad = plan(backward)
            grad_files = {**render(grad, f"{source} (adjoint)", options),
                          NUMBA_SUFFIX: render_numba(grad, f"{source} (adjoint)",
                                                     grouped=False)}
        except SpecError:  # a derivative the printers cannot write: no _grad files; autograd
            grad_files = {}  # differentiates the generated torch path instead (runtime.ops)
        files.update({GRAD_SUFFIX + suffix: text for suffix, text in grad_files.items()})
    return ir, files
