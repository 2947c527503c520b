"""Griffe extensions for the API reference (loaded by mkdocstrings from mkdocs.yml; not a page).

``GeneratedOps`` gives griffe the package layout that ``pip install`` gives Python: the top-level
``generated/`` folder becomes ``scangen.generated``, and each public function named in
``generated/__init__.py``'s ``FUNCTIONS`` becomes an alias ``scangen.<function>`` (at run time
the module ``__getattr__`` in ``scangen/__init__.py`` does this lazily, which static analysis
cannot see). So ``::: scangen.compute_gae`` renders the generated function under its public name.

``RequireDocstrings`` logs a warning (an error under ``mkdocs build --strict``) for every object
in ``paths`` that has no docstring, and for every function, class and method that those export
(a module's ``__all__``, else its public names; a class's public methods) that has none.
No mkdocstrings or griffe option does that: griffe only warns about the sections of docstrings
that exist (unknown parameters, missing types), and mkdocstrings just hides undocumented objects.
"""
from __future__ import annotations

import ast
from pathlib import Path

import griffe

_REPO = Path(__file__).resolve().parents[2]
_logger = griffe.logger


class GeneratedOps(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.name != "scangen" or "generated" in pkg.members:
            return
        folder = _REPO / "generated"
        if not (folder / "__init__.py").is_file():
            _logger.warning("generated/ is missing: run `scangen build`")
            return
        generated = loader.load(folder)
        pkg.set_member("generated", generated)  # now at the path scangen.generated
        functions = ast.literal_eval(str(generated["FUNCTIONS"].value))
        for function, module in sorted(functions.items()):
            target = f"scangen.generated.{module}.{function}"
            pkg.set_member(function, griffe.Alias(function, target, parent=pkg))


class RequireDocstrings(griffe.Extension):
    def __init__(self, paths: list[str] = ()) -> None:
        self.paths = list(paths)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for path in self.paths:
            if path != pkg.path and not path.startswith(pkg.path + "."):
                continue
            try:
                obj = loader.modules_collection[path]
            except KeyError:
                _logger.warning(f"RequireDocstrings: {path} not found")
                continue
            self._check(obj)

    def _check(self, obj) -> None:
        target = obj.final_target if obj.is_alias else obj
        if not target.docstring or not target.docstring.value.strip():
            where = Path(target.filepath).resolve()
            where = where.relative_to(_REPO) if where.is_relative_to(_REPO) else where
            _logger.warning(f"{where}:{target.lineno}: {obj.path} has no docstring")
        if target.is_module:  # what it exports: __all__, else its public functions and classes
            exported = target.members.get("__all__")
            if exported is not None:
                names = ast.literal_eval(str(exported.value))
            else:
                names = [n for n, m in target.members.items()
                         if not n.startswith("_") and not m.is_alias]
        elif target.is_class:  # its own public methods and nested classes
            names = [n for n, m in target.members.items()
                     if not n.startswith("_") and not m.is_alias]
        else:
            return
        for name in names:
            member = target.members.get(name)
            if member is None:
                _logger.warning(f"{target.path}.__all__ names {name!r}, which it does not define")
            elif not member.is_attribute:
                self._check(member)
