"""What README.md and docs/ name in the code must exist: a page cannot keep a renamed symbol,
a moved file or a deleted test.

Checked on every page (README.md and docs/**/*.md), with the page and line of each miss:

* **Dotted ``scangen.`` names**, anywhere on the page (prose, code spans, code blocks,
  mkdocstrings' ``::: scangen.X``): the longest importable module prefix is imported and the
  rest looked up with getattr (``scangen.runtime.PLANS.clear`` is the ``clear`` of ``PLANS``).
  ``scangen.compute_*`` (a wildcard) is not a name.
* **Names relative to the package**, in code spans that hold nothing else: ``runtime.launch.X`` is
  ``scangen.runtime.launch.X``; the prefixes are RELATIVE's, the subpackages and the few runtime
  modules the pages name by their own name (``timemajor.lookback_lanes``).
* **Repository paths** in code spans (``bench/dev/layout_ab.py``, ``specs/gae.yaml``) and the
  scripts a code span runs (``python bench/cpu.py --quick``): the file or folder exists
  (``__pycache__`` folders, made at run time, are not checked).
  ``results/NAME`` and a bare results file (``h200-2026-12-04-bs-layout-ab.md``) are
  bench/results/'s; a shorthand that repeats only a suffix (``-bu-layout-ab.md``) must end the
  name of some file there.
* **Tests**: ``tests/test_x.py::test_y`` (the file, and ``test_y`` defined in it; ``::Class::test``
  too) and a bare ``test_y`` in a code span (defined in some tests/ file).
* **Links** ``[text](target)`` with a relative target: the file exists beside the page, and a
  ``#anchor`` on a Markdown target is one of its headings under MkDocs' rule (Python-Markdown's
  toc slugify: lower case, punctuation dropped, runs of spaces and dashes one ``-``) or an
  explicit ``<a id="...">``. ``mkdocs build --strict`` checks docs/'s links too; this covers
  README.md, which the site does not build.

Only these unambiguous forms are read; other prose is left alone.
"""
import ast
import importlib
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
RESULTS = ROOT / "bench" / "results"

# Code spans that name a module relative to the package: the subpackages, and the runtime
# modules the pages call by their own name (``_nk`` is numba_kernels as the generated numba
# modules import it). ``config``, ``launch`` and the like are left out: other libraries' names
# (verl's ``config``) read the same.
RELATIVE = {
    "runtime": "scangen.runtime",
    "compiler": "scangen.compiler",
    "kernels": "scangen.kernels",
    "testing": "scangen.testing",
    "benchmark": "scangen.benchmark",
    "launch_params": "scangen.runtime.launch_params",
    "timemajor": "scangen.runtime.timemajor",
    "fastpath": "scangen.runtime.fastpath",
    "_nk": "scangen.runtime.numba_kernels",
}
# The folders of the repository a path in a code span may start with (third_party/ is
# git-ignored and fetched by hand, so it is not checked).
REPO_DIRS = ("bench", "docs", "tests", "specs", "scangen", "examples", "templates", "generated",
             ".ci")

_FENCE = re.compile(r"^\s*(```|~~~)")
# A code span: a run of backticks, then text up to the same run, within one paragraph.
_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
# A dotted scangen name, not part of a path, URL or longer word, and not a wildcard (compute_*).
_SCANGEN = re.compile(r"(?<![\w/.:-])scangen(?:\.[A-Za-z_]\w*)+(?![\w*])")
_FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "toml", "txt", "csv", "log", "png"}
_DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
_PATH = re.compile(r"(?:{})/[\w./-]*".format("|".join(map(re.escape, REPO_DIRS))))
_RESULT = re.compile(r"(?:h100|h200|cpu)-\d{4}-\d\d-\d\d-[\w.-]+\.(?:md|txt|csv|log)")
_RESULT_SUFFIX = re.compile(r"-[a-z0-9][\w.-]*\.(?:md|txt|csv|log)")
_TEST_REF = re.compile(r"(tests/[\w/]+\.py)((?:::\w+)+)")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


@cache
def _page(path: Path):
    """(text, prose): the page, and the page with its fenced blocks blanked (lines kept)."""
    text = path.read_text(encoding="utf-8")
    lines, fenced = text.split("\n"), False
    prose = []
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
        else:
            prose.append("" if fenced else line)
    return text, "\n".join(prose)


def _spans(path: Path):
    """(line, content) of every inline code span outside fenced blocks, whitespace collapsed."""
    _, prose = _page(path)
    for m in _SPAN.finditer(prose):
        yield _line(prose, m.start()), " ".join(m.group(2).split())


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


# ------------------------------------------------------------------------------------ checkers


def _module_file(parts: list):
    """The source file of the module ``parts`` names in this checkout (scangen's modules are
    files under scangen/: found without importing them or their dependencies), or None."""
    path = ROOT.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


@cache
def _top_level(source: Path) -> dict:
    """The names a module's source binds at top level, each with its node (classes: their body's
    names too, under ``Class.name``)."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    out = {}

    def bind(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[prefix + node.name] = node
                if isinstance(node, ast.ClassDef) and not prefix:
                    bind(node.body, node.name + ".")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            out[prefix + n.id] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and not prefix:
                for alias in node.names:
                    out[(alias.asname or alias.name).split(".")[0]] = node

    bind(tree.body, "")
    return out


def resolve(name: str):
    """None if the dotted ``name`` exists (a module, or a name in one), else why not.

    The module's source is read first (what it defines at top level, and a class's members), so
    that checking a name imports nothing heavy; a name the source does not show (made at import
    time, or an attribute of a value: ``scangen.compute_gae``, ``scangen.runtime.PLANS.clear``)
    is looked up with getattr on the imported module."""
    parts = name.split(".")
    i = next((i for i in range(len(parts), 0, -1) if _module_file(parts[:i])), 0)
    if i == 0:
        return f"no module {parts[0]}"
    module, rest = ".".join(parts[:i]), parts[i:]
    if not rest or (len(rest) <= 2 and ".".join(rest) in _top_level(_module_file(parts[:i]))):
        return None
    obj = importlib.import_module(module)
    for j, part in enumerate(rest):
        if not hasattr(obj, part):
            return f"{module} has no {'.'.join(rest[:j + 1])}"
        obj = getattr(obj, part)
    return None


@cache
def _defs(path: Path) -> dict:
    """The functions and classes of a Python file, by qualified name (``Class.method``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[prefix + child.name] = child
                if isinstance(child, ast.ClassDef):
                    walk(child, prefix + child.name + ".")

    walk(tree, "")
    return out


def check_path(path: str):
    """None if the repository path (optionally ``file.py::test``) exists, else why not."""
    m = _TEST_REF.fullmatch(path)
    if m:
        file, names = ROOT / m.group(1), m.group(2).strip(":").split("::")
        if not file.is_file():
            return f"no file {m.group(1)}"
        if ".".join(names) not in _defs(file):
            return f"{m.group(1)} defines no {'::'.join(names)}"
        return None
    return None if (ROOT / path.rstrip("/")).exists() else f"no file or folder {path}"


@cache
def _all_tests() -> frozenset:
    names = set()
    for file in (ROOT / "tests").rglob("test_*.py"):
        names.update(n.rsplit(".", 1)[-1] for n in _defs(file))
    return frozenset(names)


def check_result(name: str):
    """A bench/results file by its name, or by a suffix of its name (``-bu-layout-ab.md``)."""
    if name.startswith("-"):
        found = any(p.name.endswith(name) for p in RESULTS.iterdir())
    else:
        found = (RESULTS / name).is_file()
    return None if found else f"no bench/results file {'ending in ' * name.startswith('-')}{name}"


def _slug(heading: str) -> str:
    """Python-Markdown's toc slugify (what MkDocs uses), after inline Markdown is stripped."""
    text = re.sub(r"`+([^`]*)`+", r"\1", heading)                 # code spans: their text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)        # links: their text
    text = re.sub(r"<[^>]+>", "", text)                           # inline HTML
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def _anchors(path: Path) -> frozenset:
    text, prose = _page(path)
    out = set(re.findall(r"""<a\s+(?:id|name)=["']([^"']+)["']""", text))
    seen = {}
    for line in prose.split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        heading = m.group(1)
        explicit = re.search(r"\{[^}]*#([\w-]+)[^}]*\}\s*$", heading)  # attr_list's {#id}
        if explicit:
            out.add(explicit.group(1))
            continue
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}_{n}")
    return frozenset(out)


def check_link(page: Path, target: str):
    if "://" in target or target.startswith(("mailto:", "/")):
        return None
    file, _, anchor = target.partition("#")
    dest = (page.parent / file).resolve() if file else page
    if not dest.exists():
        return f"links to {file}, which does not exist"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"links to #{anchor}, which is no heading of {dest.relative_to(ROOT)}"
    return None


# --------------------------------------------------------------------------------- collection


def scangen_names(page: Path):
    text, _ = _page(page)
    for m in _SCANGEN.finditer(text):
        name = m.group(0)
        if name.rsplit(".", 1)[-1] not in _FILE_SUFFIXES:
            yield _line(text, m.start()), name


def relative_names(page: Path):
    for line, span in _spans(page):
        m = _DOTTED.fullmatch(span)
        if m and m.group(1).split(".")[0] in RELATIVE \
                and m.group(1).rsplit(".", 1)[-1] not in _FILE_SUFFIXES:  # timemajor.py: a file
            head, _, rest = m.group(1).partition(".")
            yield line, f"{RELATIVE[head]}.{rest}"


def repo_paths(page: Path):
    """(line, kind, ref): kind "path" (a repository path, maybe ``::test``) or "result"."""
    for line, span in _spans(page):
        if "__pycache__" in span:
            continue  # Python's and numba's caches are made at run time, never checked in
        if " " not in span:
            if _PATH.fullmatch(span) or _TEST_REF.fullmatch(span):
                yield line, "path", span
            elif span.startswith("results/") and _RESULT.fullmatch(span[len("results/"):]):
                yield line, "result", span[len("results/"):]
            elif _RESULT.fullmatch(span) or _RESULT_SUFFIX.fullmatch(span):
                yield line, "result", span
        else:  # a command: the scripts it runs
            for token in span.split():
                if _PATH.fullmatch(token) and token.endswith((".py", ".sh")):
                    yield line, "path", token


def bare_tests(page: Path):
    for line, span in _spans(page):
        if re.fullmatch(r"test_\w+", span):
            yield line, span


def links(page: Path):
    _, prose = _page(page)
    for m in _LINK.finditer(prose):
        yield _line(prose, m.start()), m.group(1)


# ---------------------------------------------------------------------------------- the tests


def _problems(collect, check):
    out = []
    for page in PAGES:
        for line, *ref in collect(page):
            why = check(page, *ref)
            if why:
                out.append(f"{_where(page, line)}: {ref[-1]}: {why}")
    return out


def test_scangen_names_exist():
    problems = _problems(scangen_names, lambda page, name: resolve(name))
    assert not problems, "pages name scangen symbols that do not exist:\n" + "\n".join(problems)


def test_relative_names_exist():
    problems = _problems(relative_names, lambda page, name: resolve(name))
    assert not problems, "pages name scangen symbols that do not exist:\n" + "\n".join(problems)


def test_repository_paths_exist():
    def check(page, kind, ref):
        return check_path(ref) if kind == "path" else check_result(ref)

    problems = _problems(repo_paths, check)
    assert not problems, "pages name files that do not exist:\n" + "\n".join(problems)


def test_named_tests_exist():
    def check(page, name):
        return None if name in _all_tests() else "no such test in tests/"

    problems = _problems(bare_tests, check)
    assert not problems, "pages name tests that do not exist:\n" + "\n".join(problems)


def test_links_resolve():
    problems = _problems(links, check_link)
    assert not problems, "pages link to files or anchors that do not exist:\n" + "\n".join(problems)


def test_the_collectors_find_the_references():
    """The checks above pass vacuously if a pattern stops matching; the pages' known references
    must be among what they collect."""
    readme, runtime = ROOT / "README.md", ROOT / "docs" / "runtime.md"
    assert "scangen.compute_gae" in {n for _, n in scangen_names(runtime)}
    assert "scangen.runtime.launch.lanes" in {n for _, n in relative_names(runtime)}
    paths = {r for p in PAGES for _, _, r in repo_paths(p)}
    assert {"specs/gae.yaml", "bench/dev/layout_ab.py", "bench/cpu.py",
            "tests/test_ops.py::test_nan_and_inf_stay_in_their_row",
            "h200-2026-12-04-bs-layout-ab.md", "-bu-layout-ab.md"} <= paths
    assert "test_sb3_timeout_is_a_truncation_with_its_bootstrap" in {
        n for p in PAGES for _, n in bare_tests(p)}
    assert "docs/runtime.md#gradients-and-torchcompile" in {t for _, t in links(readme)}


@pytest.mark.parametrize("check, ref", [
    (resolve, "scangen.no_such_name"),
    (resolve, "scangen.runtime.launch.NO_SUCH_CONSTANT"),
    (resolve, "scangen.runtime.no_such_module.x"),
    (check_path, "bench/dev/no_such_script.py"),
    (check_path, "tests/test_ops.py::test_no_such_test"),
    (check_path, "tests/test_no_such_file.py::test_x"),
    (check_result, "h200-2099-01-01-a-no-such-run.md"),
    (check_result, "-zz-no-such-run.md"),
    (lambda ref: check_link(ROOT / "README.md", ref), "docs/no_such_page.md"),
    (lambda ref: check_link(ROOT / "README.md", ref), "docs/runtime.md#no-such-heading"),
])
def test_a_made_up_reference_fails(check, ref):
    assert check(ref)


@pytest.mark.parametrize("heading, slug", [
    ("Gradients and torch.compile", "gradients-and-torchcompile"),
    ("Small calls, the host and CUDA graphs", "small-calls-the-host-and-cuda-graphs"),
    ("The contract: `scangen/abi.py`", "the-contract-scangenabipy"),
    ("`scangen build [SPEC ...] [--out DIR] [--check]`", "scangen-build-spec-out-dir-check"),
])
def test_slug_follows_mkdocs(heading, slug):
    assert _slug(heading) == slug
