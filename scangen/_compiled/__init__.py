"""The modules :func:`scangen.compile` generates, as ``scangen._compiled.<name>_<key>``.

``scangen.compile`` loads each from its cache entry. A process that never compiled the spec
(a ``spawn`` worker unpickling a compiled op, which pickles by reference like any function)
imports it through the finder below, which looks the entry up in the cache by the module's
key (:func:`scangen.compiler.store.compiled_module_path`): ``$SCANGEN_CACHE_DIR``, else
``$XDG_CACHE_HOME/scangen`` or ``~/.cache/scangen``, as ``scangen.compile`` does. An op compiled
into another ``cache_dir=`` is found only by a process that compiles the spec into it too.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class _CacheFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        from ..compiler.store import compiled_module_path
        module = compiled_module_path(fullname)
        return importlib.util.spec_from_file_location(fullname, module) if module else None


if not any(isinstance(f, _CacheFinder) for f in sys.meta_path):
    sys.meta_path.append(_CacheFinder())
