"""The modules :func:`scangen.compile` generates, as ``scangen._compiled.<name>_<key>``.

``scangen.compile`` loads each from its cache entry. A process that never compiled the spec
(a ``spawn`` worker unpickling a compiled op, which pickles by reference like any function)
imports it through the finder below, which looks the entry up in the cache by the module's
key: ``$SCANGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/scangen`` or ``~/.cache/scangen``, as
``scangen.compile`` does. An op compiled into another ``cache_dir=`` is found only by a process
that compiles the spec into it too.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys

PREFIX = __name__ + "."


class _CacheFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PREFIX) or "." in fullname[len(PREFIX):]:
            return None
        stem, _, key = fullname[len(PREFIX):].rpartition("_")
        if len(key) != 16 or not stem:
            return None
        from ..compiler.store import cache_root
        root = cache_root()
        for meta_path in sorted(root.glob(f"*-{key}*/meta.json")):
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            name = meta.get("spec") if isinstance(meta, dict) else None
            if (isinstance(name, str) and stem.startswith(name)
                    and str(meta.get("key", "")).startswith(key)):
                module = meta_path.parent / f"{name}.py"
                if module.is_file():
                    return importlib.util.spec_from_file_location(fullname, module)
        return None


if not any(isinstance(f, _CacheFinder) for f in sys.meta_path):
    sys.meta_path.append(_CacheFinder())
