"""The runtime: from a generated function's arguments to a backend target, and back.

``ops.call`` is every generated function's body. It checks the arguments once per signature
(:mod:`.arguments`), keeps the result as a plan (:mod:`.plans`), picks a backend target
(:mod:`.backends`) and a launch configuration (:mod:`.config`), and runs the target:
:mod:`.launch` (Triton, with :mod:`.fastpath` and :mod:`.workspace`), :mod:`.numba` (CPU) or
:mod:`.torchpath` (any device). :mod:`.ops` also registers every op with ``torch.library`` for
autograd and ``torch.compile``.
"""
from .arguments import Call
from .backends import BACKENDS, select_backend
from .env import reload_env
from .ops import call
from .plans import PLANS, call_direct

__all__ = ["BACKENDS", "Call", "PLANS", "call", "call_direct", "reload_env", "select_backend"]
