"""scangen: a code-generating compiler for segmented affine scans (RL credit assignment).

The built-in algorithms are plain functions (``scangen.compute_gae`` and friends), generated
from the specs in ``specs/`` into ``generated/``. ``scangen.compile(spec)`` builds a user spec
the same way at run time.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

from .errors import SpecError  # noqa: E402
from .compiler.spec import Input, Output, Param, Scan, Spec  # noqa: E402


def _generated():
    """The generated package: ``scangen/generated`` in a wheel, ``generated/`` in a checkout."""
    name = __name__ + ".generated"
    if name in sys.modules:
        return sys.modules[name]
    here = Path(__file__).resolve().parent
    for path in (here / "generated", here.parent / "generated"):
        init = path / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(
                name, init, submodule_search_locations=[str(path)])
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            globals()["generated"] = module
            return module
    raise ImportError("scangen's generated modules are missing: run `scangen build`")


try:  # expose ``scangen.generated`` for ``from scangen.generated import gae``
    _generated()
except ImportError:  # a checkout before its first `scangen build`
    pass


def __getattr__(attr: str):
    functions = _generated().FUNCTIONS
    if attr in functions:
        module = importlib.import_module(f"{__name__}.generated.{functions[attr]}")
        fn = getattr(module, attr)
        globals()[attr] = fn
        return fn
    raise AttributeError(f"module 'scangen' has no attribute {attr!r}")


def __dir__():
    return sorted(set(globals()) | set(_generated().FUNCTIONS))


def compile(spec_or_path, *, cache_dir=None):  # noqa: A001 - mirrors torch.compile's naming
    """Compile a user spec (a :class:`Spec`, a ``.yaml`` path or YAML text) into an op.

    The generated module is cached on disk, keyed by the canonical IR, the templates, the
    compiler source, the template options and the scangen, Triton and torch versions; a spec
    found there again loads without SymPy (scangen.compiler.store.compile_spec's spec index).

    Args:
        spec_or_path: a :class:`Spec`, the path of a ``.yaml`` / ``.yml`` file, or YAML text of
            a mapping.
        cache_dir: the cache folder for this call; default ``$SCANGEN_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/scangen``, else ``~/.cache/scangen``.

    Returns:
        The op's public function, with the built-ins' conventions (``backend=``, ``outputs=``,
        ``time_dim=``); it pickles by reference, also into spawned processes.

    Raises:
        SpecError: the spec breaks a rule of the spec guide (the message names the field, and
            the YAML line where there is one).
        OSError: the cache folder cannot be written (the message names ``SCANGEN_CACHE_DIR``).
    """
    from .compiler.store import compile_spec
    return compile_spec(spec_or_path, cache_dir)


__all__ = ["SpecError", "Spec", "Input", "Param", "Scan", "Output", "compile", "__version__"]
