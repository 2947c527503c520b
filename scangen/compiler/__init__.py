"""The compiler, in pipeline order: :mod:`.spec` (YAML or Python specs) -> :mod:`.validate` ->
:mod:`.lower` (the IR of :mod:`.ir`, updates split into affine maps with :mod:`.expr`) ->
:mod:`.plan` (target-independent code: shifts, reductions, common subexpressions; the backward
from :mod:`.adjoint`) -> :mod:`.render` / :mod:`.render_numba` (Python source through the
templates, with :mod:`.printers` and :mod:`.options`) -> :mod:`.store` (``generated/`` and the
run-time cache). :mod:`.pipeline` chains the stages."""
