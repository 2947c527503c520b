"""Implementation tests of the package's structure (docs/architecture.md): the import graph reads
in pipeline order, and the compiler and the runtime meet only in scangen.abi.

Read from the source with ``ast``, imports inside functions included (they still make one module
depend on another), so a violation fails here before it shows up as an import-order bug."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "scangen"


def _modules():
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path, top_level_only: bool = False):
    """``(module imported, names taken from it, at module level)`` for every import in
    ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, (), id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = tuple(a.name for a in node.names)
            subs = [n for n in names if f"{base}.{n}" in MODULES]
            if len(subs) < len(names):  # names defined in ``base`` itself
                found.append((base, tuple(n for n in names if n not in subs), id(node) in top))
            # ``from . import x`` imports the submodule x (its package is being imported)
            found += [(f"{base}.{n}", (), id(node) in top) for n in subs]
    return [f for f in found if not top_level_only or f[2]]


def _internal(target: str) -> str | None:
    """The scangen module ``target`` names (a module, or a package's ``__init__``)."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def test_no_import_circle_at_module_level():
    graph = {m: {t for t, _, _ in _imports(m, p, top_level_only=True)
                 if _internal(t) and _internal(t) != m} for m, p in MODULES.items()}
    graph = {m: {_internal(t) for t in ts} for m, ts in graph.items()}
    # A package's __init__ may import its own submodules (re-exports); a submodule importing
    # its package's __init__ is what would close a loop, so the edge child -> parent stays.
    state: dict = {}

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                cycle = stack[stack.index(t):] + [t]
                if not (len(cycle) == 3 and cycle[1].startswith(cycle[0] + ".")):
                    pytest.fail("import circle: " + " -> ".join(cycle))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("layer,forbidden", [
    ("scangen.compiler", ("scangen.runtime", "scangen.testing", "scangen.benchmark",
                          "scangen.integrations", "scangen.generated")),
    ("scangen.runtime", ("scangen.compiler", "scangen.testing", "scangen.benchmark",
                         "scangen.integrations", "scangen.generated")),
    ("scangen.kernels", ("scangen.compiler", "scangen.runtime")),
    ("scangen.abi", ("scangen.compiler", "scangen.runtime", "scangen.kernels")),
])
def test_layers_meet_only_in_the_contract(layer, forbidden):
    """The compiler and the runtime import scangen.abi, never each other; the contract and the
    shared kernels depend on neither."""
    bad = [(m, t) for m, p in MODULES.items() if m == layer or m.startswith(layer + ".")
           for t, _, _ in _imports(m, p) if t.startswith(forbidden)]
    assert not bad, f"{layer} imports {bad}"


def test_no_module_takes_another_modules_private_names():
    bad = [(m, t, n) for m, p in MODULES.items() for t, names, _ in _imports(m, p)
           if _internal(t) and _internal(t) != m for n in names
           if n.startswith("_") and not n.startswith("__")]
    assert not bad, bad


def test_modules_stay_readable():
    """No module over about 400 lines (the architecture's rule; generated code aside)."""
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 420}
    assert not long, long
