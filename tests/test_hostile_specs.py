"""Hostile specs: every one is refused with a clear SpecError (a ValueError), fast, and nothing
it contains ever runs; text that is only documentation is accepted and stays inert.

Expressions are parsed through a whitelist (never eval'd), names must be plain identifiers, YAML
is safe-composed (no tags, no aliases), sizes are capped, and docs are escaped into the
generated module. The cases below attack each of those layers, and the seams between them
(names the generated code itself uses, numbers the printers cannot write, file names).
"""
from __future__ import annotations

import contextlib
import inspect
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import BACKENDS, call_on
import scangen
from scangen.compiler.expr import MAX_EXPR_CHARS, MAX_EXPR_NODES
from scangen.compiler.pipeline import to_ir
from scangen.compiler.spec import MAX_SPEC_BYTES, as_spec, replace

REPO = Path(__file__).resolve().parent.parent
FAST_S = 5.0  # every refusal below must take less than this (most take milliseconds)



def q(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (JSON string syntax), exactly: non-ASCII stays
    literal (PyYAML does not pair JSON's surrogate escapes), YAML's extra line breaks escaped."""
    out = json.dumps(text, ensure_ascii=False)
    for ch in ("\u2028", "\u2029", "\x85", "\ufeff"):
        out = out.replace(ch, f"\\u{ord(ch):04x}")
    return out


# Line numbers of BASE, used in the exact messages below:
#  1 name  2 direction  3 inputs:  4 x  5 f  6 b  7 params:  8 g  9 scans:  10 A:  11 update
#  12 outputs:  13 y
BASE = """\
name: {name}
direction: reverse
inputs:
  {x}: float
  f: flag
  b: {{kind: float, shape: [N]}}
params:
  {g}: 0.5
scans:
  {A}:
    update: {update}
outputs:
  {y}: {out}
"""


def spec(name="hostile", x="x", g="g", A="A", y="y", update=None, out=None) -> str:
    return BASE.format(name=name, x=x, g=g, A=A, y=y,
                       update=q(update if update is not None else f"{x} + {g} * {A}"),
                       out=q(out if out is not None else A))


@contextlib.contextmanager
def time_limit(seconds=FAST_S):
    """Fail (instead of hanging the suite) when the body runs longer than ``seconds``; works for
    pure-Python work such as PyYAML's scanner (not for one long C call: see the subprocess
    test of ``9**9**9``)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    timed_out = False
    try:
        yield
    except TimeoutError:
        timed_out = True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if timed_out or time.perf_counter() - start >= seconds:
        pytest.fail(f"took longer than {seconds} s", pytrace=False)


def refused(spec_or_path, *phrases, exact=None):
    """The spec is refused by the front end with a SpecError containing every phrase (or equal
    to ``exact``); returns the message."""
    with time_limit():
        with pytest.raises(scangen.SpecError) as info:
            to_ir(spec_or_path)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    if exact is not None:
        assert msg == exact
    for phrase in phrases:
        assert phrase in msg, msg
    return msg


def compile_refused(text, cache_dir, *phrases):
    """``scangen.compile`` refuses the spec before writing anything to the cache."""
    with time_limit():
        with pytest.raises(scangen.SpecError) as info:
            scangen.compile(text, cache_dir=cache_dir)
    for phrase in phrases:
        assert phrase in str(info.value), str(info.value)
    assert not Path(cache_dir).exists() or not any(Path(cache_dir).iterdir())
    return str(info.value)


def compiles_or_refused(text, cache_dir):
    """A spec the compiler cannot handle must be a SpecError, never another exception: returns
    the op, or None when refused."""
    try:
        return scangen.compile(text, cache_dir=cache_dir)
    except scangen.SpecError:
        return None


def _reverse_loop(x, g=0.5):
    out = torch.zeros_like(x, dtype=torch.float64)
    a = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in reversed(range(x.shape[1])):
        a = x[:, t].double() + g * a
        out[:, t] = a
    return out


# ============================================================================ expressions

ALLOWED = ("abs, clip, exp, gather, log, max, min, next, present, prev, sigmoid, sqrt, sum, "
           "tanh, where")

# expression -> the message after "output 'y': " (the expression itself follows, repr'd)
EXPRESSIONS = {
    "().__class__.__bases__": "unsupported syntax (Attribute)",
    "x.__class__.__mro__[1].__subclasses__()":
        f"unsupported syntax (a call of Attribute): only the functions {ALLOWED} can be called",
    "(lambda: 0)()":
        f"unsupported syntax (a call of Lambda): only the functions {ALLOWED} can be called",
    "lambda: x": "unsupported syntax (Lambda)",
    "[i for i in x]": "unsupported syntax (ListComp)",
    "{i: 1 for i in x}": "unsupported syntax (DictComp)",
    "exp(i for i in x)": "unsupported syntax (GeneratorExp)",
    "f'{x}'": "unsupported syntax (JoinedStr)",
    "f'{__import__(\"os\").system(\"id\")}'": "unsupported syntax (JoinedStr)",
    "open('x')": f"unknown function 'open' (allowed: {ALLOWED})",
    "eval('1')": f"unknown function 'eval' (allowed: {ALLOWED})",
    "exec('import os')": f"unknown function 'exec' (allowed: {ALLOWED})",
    "__import__('os')": f"unknown function '__import__' (allowed: {ALLOWED})",
    "getattr(x, 'y')": f"unknown function 'getattr' (allowed: {ALLOWED})",
    "globals()": f"unknown function 'globals' (allowed: {ALLOWED})",
    "exp(x=1)": "exp() takes no keyword arguments",
    "exp(**x)": "exp() takes no keyword arguments",
    "max(x, *x)": "unsupported syntax (Starred)",
    "where(*x, x, x)": "unsupported syntax (Starred)",
    "x[0]": "unsupported syntax (Subscript)",
    "x if f else 0": "unsupported syntax (IfExp)",
    "(y := x)": "unsupported syntax (NamedExpr)",
    "x and f": "unsupported syntax (BoolOp)",
    "not x": "unsupported syntax (UnaryOp)",
    "~x": "unsupported syntax (UnaryOp)",
    "x @ x": "unsupported syntax (BinOp)",
    "x // 2": "unsupported syntax (BinOp)",
    "x % 2": "unsupported syntax (BinOp)",
    "await x": "unsupported syntax (Await)",
    "(yield x)": "unsupported syntax (Yield)",
    "'abc'": "unsupported constant 'abc'",
    "b'x'": "unsupported constant b'x'",
    "1j": "unsupported constant 1j",
    "True": "unsupported constant True",
    "None": "unsupported constant None",
    "...": "unsupported constant Ellipsis",
    "__builtins__": "undeclared name '__builtins__'",
    "__name__": "undeclared name '__name__'",
    "x < 1": "a comparison may only be the first argument of where()",
    "where(0 < x < 1, x, 0)": "only a single comparison (<, <=, >, >=, ==, !=) is supported",
    "where(x in b, x, 0)": "only a single comparison (<, <=, >, >=, ==, !=) is supported",
    "where(x is b, x, 0)": "only a single comparison (<, <=, >, >=, ==, !=) is supported",
}


@pytest.mark.parametrize("expr", sorted(EXPRESSIONS))
def test_hostile_expression_is_refused(expr):
    refused(spec(out=expr), exact=f"<string>:13: output 'y': {EXPRESSIONS[expr]}: {expr!r}")


@pytest.mark.parametrize("expr", [
    "x; import os", "x\nimport os", "import os", "x = 1", "def f(): pass", "x +", "exp(x",
    "\\x", "x\x00",
])
def test_statements_and_broken_syntax_are_refused(expr):
    msg = refused(spec(out=expr))
    assert msg.startswith("<string>:13: output 'y': not a valid expression ("), msg


@pytest.mark.parametrize("where", ["update", "alpha", "out", "init", "let"])
def test_import_os_system_never_runs(tmp_path, where):
    mark = tmp_path / "MARK"
    attack = f"__import__('os').system('touch {mark}')"
    if where == "update":
        text = spec(update=f"x + g * A + {attack}")
    elif where == "alpha":
        text = spec().replace(f"    update: {q('x + g * A')}",
                              f"    alpha: {q(attack)}\n    beta: g")
    elif where == "init":
        text = spec().replace(f"    update: {q('x + g * A')}",
                              f"    update: {q('x + g * A')}\n    init: {q(attack)}")
    elif where == "let":
        text = spec().replace("scans:", f"let:\n  z: {q(attack)}\nscans:")
    else:
        text = spec(out=attack)
    msg = compile_refused(text, tmp_path / "cache", "unsupported syntax (a call of Attribute)")
    assert "__import__" in msg
    assert not mark.exists()


def test_unicode_look_alike_names_in_expressions_are_refused():
    """Python folds identifiers to NFKC, so 'ｘ' (fullwidth) and 'ℯxp' would silently mean
    the declared 'x' and the function 'exp': text a reviewer reads as something else. Names in
    expressions must be the declared ASCII names, exactly."""
    for expr in ("\uff58 + A", "\u212fxp(x) + A", "A + \U0001d431"):  # ｘ, ℯxp, 𝐱
        refused(spec(out=expr))


def test_unicode_call_of_import_is_refused():
    refused(spec(out="__\uff49mport__('os')"), "expressions must be ASCII")


# ---------------------------------------------------------------------- sizes and nesting

def test_expression_longer_than_the_limit():
    expr = "x" + " + x" * (MAX_EXPR_CHARS // 4)
    assert len(expr) > MAX_EXPR_CHARS == 4000
    refused(spec(out=expr), exact=f"<string>:13: output 'y': expression is longer than "
                                  f"4000 characters: {expr!r}")


def test_expression_with_too_many_nodes():
    expr = "+".join(["x"] * 300)  # 599 nodes of BinOp/Add plus 300 Names and their contexts
    assert len(expr) < MAX_EXPR_CHARS
    refused(spec(out=expr), exact=f"<string>:13: output 'y': expression has more than "
                                  f"{MAX_EXPR_NODES} syntax nodes: {expr!r}")


@pytest.mark.parametrize("expr", [
    "(" * 300 + "x" + ")" * 300,
    "exp(" * 300 + "x" + ")" * 300,
    "-" * 3000 + "x",
    "where(f, " * 300 + "x" + ", 0)" * 300,
    "[" * 1000 + "x" + "]" * 1000,
])
def test_deeply_nested_expression(expr):
    msg = refused(spec(out=expr))
    if msg == "<string>: malformed YAML (nested too deeply)":  # brackets count as YAML nesting
        return
    assert msg.startswith("<string>:13: output 'y': "), msg
    assert any(p in msg for p in ("not a valid expression", "syntax nodes", "nested too deeply",
                                  "longer than")), msg


def test_deep_but_legal_expression_compiles_and_runs(tmp_path):
    """Just under the node limit: no RecursionError anywhere in lower/plan/printers."""
    expr = "where(f, " * 100 + "x" + ", 0)" * 100
    fn = scangen.compile(spec(out=f"A + {expr}"), cache_dir=tmp_path)
    x = torch.randn(2, 5)
    out = fn(x, torch.ones(2, 5), torch.zeros(2), backend="torch")
    torch.testing.assert_close(out.double(), _reverse_loop(x) + x.double())


def test_huge_constant_power_is_refused_quickly():
    """``9**9**9`` is 7 characters; SymPy folds it exactly (a 370-million-digit integer), which
    takes minutes and gigabytes. It must be refused (or folded to a float) at once. Run in a
    child process: the fold is one C call that no signal interrupts."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from scangen.compiler.pipeline import to_ir\n"
            "from scangen import SpecError\n"
            "try:\n    to_ir(sys.argv[2])\nexcept SpecError as e:\n    print('SpecError', e)\n"
            "else:\n    print('accepted')\n")
    for expr in ("9**9**9", "A + 10**10**10"):
        try:
            proc = subprocess.run([sys.executable, "-c", code, str(REPO), spec(out=expr)],
                                  capture_output=True, text=True, timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"to_ir() of an output {expr!r} ran for more than 15 s")
        assert proc.returncode == 0, proc.stderr[-2000:]


# ============================================================================ names

BAD_NAMES = [
    "x; import os", "a\nimport os", "a\rimport os", "__init__", "__class__", "def", "lambda",
    "None", "True", "A__next", "x__ptr", "_x", "_", "x.y", "x y", "1x", "x-y", "", "x\u00a0",
    "\u0445",            # Cyrillic 'х', looks like x
    "\uff58",            # fullwidth 'ｘ'
    "x\u200b",           # zero-width space
    "tl", "torch", "triton", "math", "exp", "where", "is_first", "time_dim", "outputs",
    "backend",
]


NAME_RULE = ("letter followed by up to 63 letters, digits or single underscores, not a Python "
             "keyword or builtin, nor a reserved name")


@pytest.mark.parametrize("role", ["x", "g", "A", "y"])
@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_declared_names_are_refused(role, name):
    what = {"x": "input", "g": "param", "A": "scan", "y": "output"}[role]
    line = {"x": 4, "g": 8, "A": 10, "y": 13}[role]
    kwargs = {role: q(name)}
    if role == "A":  # keep the update parseable: only the declaration is under test
        kwargs["update"] = "x + g"
        kwargs["out"] = "x"
    refused(spec(**kwargs), exact=f"<string>:{line}: {what} name {name!r} is not allowed: use a "
                                  f"{NAME_RULE}")


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_spec_and_function_names_are_refused(name):
    refused(spec(name=q(name)), exact=f"<string>:1: spec name {name!r} is not allowed: use a "
                                      f"{NAME_RULE}")
    text = spec().replace("name: hostile", f"name: hostile\nfunction: {q(name)}")
    refused(text, f"function name {name!r} is not allowed")


def test_bad_let_name_is_refused():
    text = spec().replace("scans:", f"let:\n  {q('z; import os')}: x\nscans:")
    refused(text, exact=f"<string>:10: let name 'z; import os' is not allowed: use a "
                        f"{NAME_RULE}")


def test_very_long_spec_name_is_refused(tmp_path):
    """The spec name becomes a directory and a file name in the cache: 300 characters used to
    end in OSError (File name too long) instead of a SpecError."""
    name = "n" * 300
    compile_refused(spec(name=name), tmp_path / "cache", "name")


def test_very_long_input_name_is_refused():
    """A name is an identifier for people; 1000 characters is an attack on tooling (paths,
    error messages, generated code), not a name."""
    refused(spec(x="x" * 1000), "not allowed")


# Names the generated code itself uses for its own variables, arguments and globals. A spec
# that declares one must be refused, or the op must still compute the right numbers. The second
# group were the numba kernels' locals and arguments (an input named t, np or F crashed the
# process before they took a leading underscore).
COLLISIONS = [
    ("x", "c"), ("x", "OP"), ("x", "T"), ("x", "ACC"), ("x", "BLOCK_T"),
    ("g", "T"), ("g", "R1"), ("g", "BLOCK_N"), ("g", "HAS_o"), ("g", "STORE_y"),
    ("A", "c"), ("name", "OP"),
    ("x", "t"), ("x", "r"), ("x", "F"), ("x", "S"), ("x", "n"), ("x", "np"), ("x", "j"),
    ("x", "hi"), ("x", "tile"), ("g", "lo"), ("g", "G"), ("A", "r1"), ("A", "G"), ("A", "C"),
    ("A", "TB"),
]


@pytest.mark.parametrize("role,name", COLLISIONS, ids=lambda v: str(v))
def test_names_used_by_the_generated_code(tmp_path, monkeypatch, role, name):
    from scangen.runtime import config
    if hasattr(config, "MAX_BLOCK_T"):  # 16-step chunks: T = 40 crosses two chunk boundaries
        monkeypatch.setattr(config, "MAX_BLOCK_T", 16)
    kwargs = {"name": f"coll_{role}_{name}".lower()}
    kwargs[role] = name
    text = spec(**{k: v for k, v in kwargs.items()}).replace(
        "  b: {kind: float, shape: [N]}", "  b: {kind: float, shape: [N]}\n"
        "  o: {kind: float, default: 0}")
    fn = compiles_or_refused(text, tmp_path)
    if fn is None:
        return
    x = torch.randn(6, 40)  # 6 rows: the numba row kernel's group of 4 and 2 rows left over
    args = {kwargs.get("x", "x"): x, "f": torch.zeros(6, 40), "b": torch.zeros(6)}
    for backend in BACKENDS:
        out = call_on(fn, backend, **args)
        torch.testing.assert_close(out.double(), _reverse_loop(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,use", [("float", "gather(k, i)"), ("range", "sum(k)")])
def test_builtin_names_used_by_the_kernel(tmp_path, name, use):
    text = (f"name: builtin_{name}\ndirection: reverse\ninputs:\n  {name}: float\n"
            f"  k: {{kind: float, shape: [N, T, K]}}\n  i: {{kind: index}}\nscans:\n  A:\n"
            f"    update: {q(f'{name} + {use} + 0.5 * A')}\noutputs:\n  y: A\n")
    fn = compiles_or_refused(text, tmp_path)
    if fn is None:
        return
    x, k, i = torch.randn(2, 6), torch.rand(2, 6, 3), torch.randint(0, 3, (2, 6))
    want = fn(**{name: x}, k=k, i=i, backend="torch")
    got = call_on(fn, "triton", **{name: x}, k=k, i=i)
    torch.testing.assert_close(got, want)


def test_present_is_not_an_input_named_like_its_flag(tmp_path):
    """present(o) is compiled to a variable HAS_o; an input really named HAS_o must not be
    mistaken for it (or must be refused)."""
    text = ("name: has_clash\ndirection: reverse\ninputs:\n  x: float\n  HAS_o: float\n"
            "  o: {kind: float, default: 0}\nscans:\n  A:\n    update: x + 0.5 * A\noutputs:\n"
            "  y: A + where(present(o), 100, 0) + 0 * HAS_o\n")
    fn = compiles_or_refused(text, tmp_path)
    if fn is None:
        return
    x = torch.randn(2, 5)
    for backend in BACKENDS:
        out = call_on(fn, backend, x, torch.ones(2, 5))  # o not passed: present(o) == 0
        torch.testing.assert_close(out.double(), _reverse_loop(x), atol=1e-5, rtol=1e-5)


# ============================================================================ docs

PAYLOADS = [
    '"""\nimport os; open("MARK", "w").close()\n"""',
    "'''\nimport os; open('MARK', 'w').close()\n'''",
    'ends with a backslash \\',
    'backslashes \\n \\x00 \\N{BULLET} \\u1234 \\"""',
    "\n import os\n",
    "\\\n\"\"\"\nopen('MARK', 'w').close()\n#",
    '{{ jinja }} {% raw %} {# comment #}',
    "unicode \u00e9\u2028\u00a0 \U0001f600",
]


FIELDS = ("doc", "idoc", "pdoc", "sdoc", "odoc")


def _doc_spec(name, payload, fields=FIELDS):
    """A spec with ``payload`` as the doc of the spec, the input, the param, the scan and the
    output (the last line of the generated docstring is the output's doc)."""
    d = {k: (payload if k in fields else "") for k in FIELDS}
    return (f"name: {name}\ndoc: {q(d['doc'] or 'Title')}\ndirection: reverse\ninputs:\n"
            f"  x: {{kind: float, doc: {q(d['idoc'])}}}\n"
            f"params:\n  g: {{default: 0.5, doc: {q(d['pdoc'])}}}\n"
            f"scans:\n  A:\n    update: x + g * A\n    doc: {q(d['sdoc'])}\n"
            f"outputs:\n  y: {{expr: A, doc: {q(d['odoc'])}}}\n")


def _norm(text):
    return [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]


def _check_inert_doc(fn, payload, mark):
    assert not mark.exists(), "text from a doc ran"
    doc = inspect.getdoc(fn)
    flat = _norm(doc)
    for line in _norm(payload):  # every line of the doc, verbatim
        assert sum(line in got for got in flat) >= 4, (line, doc)  # doc, input, param, output
    module_doc = sys.modules[fn.__module__].__doc__
    assert _norm(payload)[0] in module_doc  # the title: the spec doc's first line
    x = torch.randn(1, 4)
    torch.testing.assert_close(fn(x, backend="torch").double(), _reverse_loop(x))


@pytest.mark.parametrize("k", range(len(PAYLOADS)))
def test_docs_are_inert_in_the_generated_module(tmp_path, monkeypatch, k):
    monkeypatch.chdir(tmp_path)
    payload = PAYLOADS[k]
    fn = scangen.compile(_doc_spec(f"doc_{k}", payload), cache_dir=tmp_path / "cache")
    _check_inert_doc(fn, payload, tmp_path / "MARK")


@pytest.mark.parametrize("payload", ['say "hi"', 'two quotes ""', "\"'\"", 'x\\"'],
                         ids=["one-quote", "two-quotes", "mixed", "escaped"])
def test_doc_ending_in_quotes(tmp_path, monkeypatch, payload):
    """The last line of the generated docstring is the last output's doc: a trailing '"' there
    runs into the closing triple quote (SyntaxError on import, or quotes silently dropped)."""
    monkeypatch.chdir(tmp_path)
    fn = scangen.compile(_doc_spec("quotes", payload), cache_dir=tmp_path / "c")
    _check_inert_doc(fn, payload, tmp_path / "MARK")


@pytest.mark.parametrize("payload", ["a\x00b", "\ud800"], ids=["nul", "lone-surrogate"])
def test_doc_with_characters_python_source_cannot_hold(tmp_path, payload):
    """A NUL (YAML "\\0") or a lone surrogate ("\\ud800") in a doc: a SpecError, or an op whose
    docstring holds the text -- not a SyntaxError / UnicodeEncodeError from deep inside."""
    text = _doc_spec("bad_chars", "x", ("doc",)).replace('doc: "x"', 'doc: "' + (
        "a\\0b" if payload == "a\x00b" else "\\ud800") + '"')
    fn = compiles_or_refused(text, tmp_path)
    if fn is not None:
        assert payload in fn.__doc__


def test_spec_file_name_cannot_inject_code(tmp_path, monkeypatch):
    """The spec's file name is written into the generated module's header comment; a newline
    in it used to end the comment and run the rest as code on import."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil\nopen('MARK', 'w').close()\n#.yaml"
    path.write_text(spec(name="evil_path"))
    compiles_or_refused(path, tmp_path / "cache")
    assert not (tmp_path / "MARK").exists(), "code from the spec's file name ran"


def test_python_spec_source_cannot_inject_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = replace(as_spec(spec(name="evil_source")),
                source="x\nopen('MARK', 'w').close()\n#")
    compiles_or_refused(s, tmp_path / "cache")
    assert not (tmp_path / "MARK").exists(), "code from Spec.source ran"


# ============================================================================ YAML

def test_spec_file_larger_than_the_limit(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(spec() + "#" + "x" * MAX_SPEC_BYTES + "\n")
    refused(path, exact=f"{path}: spec is larger than 262144 bytes")
    refused(spec(out="A").replace("y: ", "y: " + " " * MAX_SPEC_BYTES),
            exact="<string>: spec is larger than 262144 bytes")
    multibyte = spec() + "#" + "\u00e9" * (MAX_SPEC_BYTES // 2) + "\n"  # < limit in characters
    refused(multibyte, exact="<string>: spec is larger than 262144 bytes")


def test_many_deeply_nested_yaml_lists_are_refused_fast():
    """PyYAML's pure-Python scanner is quadratic in flow nesting: about 30 KB of nested '['
    took over 10 s and a 256 KiB spec of them minutes (libyaml's C scanner: ~0.2 s)."""
    item = "- " + "[" * 300 + "]" * 300 + "\n"
    text = item * ((MAX_SPEC_BYTES - 1000) // len(item))
    refused(text, "<string>: malformed YAML (nested too deeply)")


@pytest.mark.parametrize("text,exact", [
    ("[" * 1000 + "]" * 1000, "<string>: malformed YAML (nested too deeply)"),
    ("a: " + "{b: " * 3000 + "1" + "}" * 3000, "<string>: malformed YAML (nested too deeply)"),
], ids=["lists", "mappings"])
def test_yaml_nested_past_the_recursion_limit(text, exact):
    refused(text, exact=exact)


MALFORMED = {
    "tab": (spec().replace("  x: float", "\tx: float"),
            "<string>:4: malformed YAML (found character '\\t' that cannot start any token)"),
    "unclosed_flow_mapping": (spec().replace("{kind: float, shape: [N]}", "{kind: float"),
                              "<string>:7: malformed YAML (expected ',' or '}', but got ':')"),
    "unclosed_list": (spec() + "returns: [y\n",
                      "<string>:15: malformed YAML (expected ',' or ']', but got '<stream end>')"),
    "unclosed_quote": (spec().replace('update: "x + g * A"', 'update: "x + g * A'),
                       None),
    "control_chars": ("\x01\x02\x03garbage",
                      "<string>: malformed YAML (unacceptable character #x0001: special "
                      "characters are not allowed)"),
    "nul": ("name: \x00", "<string>: malformed YAML (unacceptable character #x0000: special "
                          "characters are not allowed)"),
    "two_documents": (spec() + "---\n" + spec(), "<string>:14: malformed YAML (but found "
                                                 "another document)"),
    "empty": ("", "<string>: the spec is empty"),
    "comment_only": ("# nothing\n", "<string>: the spec is empty"),
    "scalar": ("hello\n", "<string>:1: the spec must be a mapping, got a string"),
    "number": ("5\n", "<string>:1: the spec must be a mapping, got a number"),
    "list": ("- a\n- b\n", "<string>:1: the spec must be a mapping, got a list"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_yaml(case):
    text, exact = MALFORMED[case]
    msg = refused(text, "malformed YAML" if exact is None else "", exact=exact)
    assert msg.startswith("<string>")


SPEC_IS = "(a spec is a path to a .yaml or .yml file, or YAML text of a mapping)"


@pytest.mark.parametrize("arg,exact", [
    ("my_ema", f"my_ema: no such spec file, and as YAML text it is a string, not a mapping "
               f"{SPEC_IS}"),
    ("specs/my_ema", f"specs/my_ema: no such spec file, and as YAML text it is a string, not a "
                     f"mapping {SPEC_IS}"),
    ("42", f"42: no such spec file, and as YAML text it is a number, not a mapping {SPEC_IS}"),
    ("[a, b]", f"[a, b]: no such spec file, and as YAML text it is a list, not a mapping "
               f"{SPEC_IS}"),
    ("my_ema.yaml", f"my_ema.yaml: no such spec file {SPEC_IS}"),
    ("my_ema.yml", f"my_ema.yml: no such spec file {SPEC_IS}"),
    (Path("my_ema.yaml"), f"my_ema.yaml: no such spec file {SPEC_IS}"),
], ids=["name", "relative", "number", "list", "yaml", "yml", "Path"])
def test_a_mistyped_path_says_no_such_file(tmp_path, monkeypatch, arg, exact):
    """``scangen.compile("my_ema")``: one line of text that is no mapping was meant as a path."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(scangen.SpecError) as info:
        scangen.compile(arg, cache_dir=tmp_path)
    assert str(info.value) == exact


def test_a_spec_file_of_any_name_is_read(tmp_path, monkeypatch):
    """One line naming a file that exists is a path whatever its suffix, as ``scangen check``
    reads it (both front ends agree); a name that is no file stays refused above."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_ema").write_text(spec(), encoding="utf-8")
    (tmp_path / "my_ema.txt").write_text(spec(), encoding="utf-8")
    (tmp_path / "my_ema.yaml").write_text(spec(), encoding="utf-8")
    for name in ("my_ema", "my_ema.txt", "my_ema.yaml", str(tmp_path / "my_ema.txt")):
        assert to_ir(name).name == "hostile"
    assert scangen.compile("my_ema.txt", cache_dir=tmp_path).__name__ == \
        scangen.compile("my_ema.yaml", cache_dir=tmp_path).__name__


@pytest.mark.parametrize("data", [
    bytes(range(256)) * 4,
    b"name: caf\xe9\n",                              # latin-1, not UTF-8
    b"\xff\xfe" + "name: x\n".encode("utf-16-le"),   # UTF-16 with a BOM
    b"name: ok\n\x80\x81\x82",
], ids=["all-bytes", "latin-1", "utf-16", "trailing-garbage"])
def test_binary_and_non_utf8_files(tmp_path, data):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(data)
    refused(path, exact=f"{path}: spec file is not UTF-8 text")


def test_random_printable_garbage(tmp_path):
    import random
    rnd = random.Random(0)
    for i in range(50):
        text = "".join(rnd.choice("abc:{}[]-,&*!|>'\"%@`#\n \t?") for _ in range(200))
        with time_limit():
            try:
                to_ir(text)
            except scangen.SpecError:
                pass


BILLION_LAUGHS = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
                  + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9)
                            + "]\n" for i in range(8)))


@pytest.mark.parametrize("text,line", [
    (BILLION_LAUGHS, 1),
    (spec() + "returns: &r [y]\nsignature: *r\n", 14),   # the line of the anchored node
    (spec().replace("  f: flag", "  f: &k flag\n  e: *k"), 5),
    (spec().replace("params:\n  g: 0.5", "params: &p\n  g: 0.5").replace(
        "outputs:", "more: *p\noutputs:"), 7),
], ids=["billion-laughs", "alias-list", "alias-scalar", "alias-mapping"])
def test_yaml_aliases_are_refused(text, line):
    refused(text, exact=f"<string>:{line}: YAML aliases and anchors are not supported")


@pytest.mark.parametrize("text", [
    spec().replace("  f: flag", "  f: &k {kind: flag}\n  e: {<<: *k}"),
    spec().replace("  f: flag", "  f: {<<: {kind: flag}}"),
], ids=["merge-alias", "merge-inline"])
def test_yaml_merge_keys_are_refused(text):
    refused(text, "YAML tags are not supported (got tag:yaml.org,2002:merge)")


PYTHON_TAGS = {
    "scalar_name": spec().replace("name: hostile", "name: !!python/name:os.system hostile"),
    "scalar_apply": spec().replace("name: hostile", "name: !!python/object/apply:os.system x"),
    "custom_scalar": spec().replace("name: hostile", "name: !foo hostile"),
    "int_tag_on_text": spec().replace("  g: 0.5", "  g: !!int abc"),
    "sequence_apply": spec() + "returns: !!python/object/apply:os.system [y]\n",
    "mapping_apply": spec().replace("outputs:\n", "outputs: !!python/object/apply:os.system\n"),
    "document_apply": "--- !!python/object/apply:os.system\n" + spec(),
    "mapping_object": spec().replace("params:\n", "params: !!python/object:os.Popen\n"),
    "custom_mapping": spec().replace("scans:\n", "scans: !foo\n"),
}


@pytest.mark.parametrize("case", sorted(PYTHON_TAGS))
def test_yaml_tags_are_refused(tmp_path, case):
    """No YAML tag is followed; a tag naming Python code must be refused, not crash with a
    ConstructorError and not be silently dropped (the spec would then compile)."""
    mark = tmp_path / "MARK"
    text = PYTHON_TAGS[case].replace("os.system x", f"os.system touch {mark}")
    refused(text, "<string>:")
    assert not mark.exists()


# line numbers below refer to GOOD
GOOD = """\
name: ok
direction: reverse
inputs:
  x: {kind: float, doc: "x"}
  f: flag
params:
  g: {default: a, choices: {a: 0.5, b: 0.25}}
let:
  z: x * 2
scans:
  A:
    update: z + g * A
    init: 0
outputs:
  y: {expr: A, doc: "y"}
"""


def test_good_spec_is_accepted():
    to_ir(GOOD)


DUPLICATES = {
    "top": ("direction: reverse\n", "direction: reverse\ndirection: forward\n", 3, "direction"),
    "inputs": ("  f: flag\n", "  f: flag\n  f: float\n", 6, "f"),
    "input_field": ('{kind: float, doc: "x"}', "{kind: float, kind: flag}", 4, "kind"),
    "params": ("params:\n", "params:\n  g: 1\n", 8, "g"),
    "param_field": ("{default: a, choices", "{default: a, default: b, choices", 7, "default"),
    "choices": ("{a: 0.5, b: 0.25}", "{a: 0.5, a: 0.25}", 7, "a"),
    "let": ("  z: x * 2\n", "  z: x * 2\n  z: x\n", 10, "z"),
    "scans": ("scans:\n", "scans:\n  A:\n    update: x\n", 13, "A"),
    "scan_field": ("    init: 0\n", "    init: 0\n    init: 1\n", 14, "init"),
    "outputs": ("  y: {expr", "  y: A\n  y: {expr", 16, "y"),
    "output_field": ('{expr: A, doc: "y"}', "{expr: A, expr: x}", 15, "expr"),
}


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_duplicate_keys_at_every_level(case):
    old, new, line, key = DUPLICATES[case]
    assert old in GOOD
    refused(GOOD.replace(old, new, 1), exact=f"<string>:{line}: duplicate key '{key}'")


UNKNOWN = {
    "top": ("direction: reverse\n", "direction: reverse\nbogus: 1\n",
            "<string>:3: the spec: unknown key 'bogus' (expected one of: name, function, doc, "
            "direction, signature, inputs, exclusive, params, let, scans, outputs, returns)"),
    "input": ('{kind: float, doc: "x"}', "{kind: float, bogus: 1}",
              "<string>:4: input 'x': unknown key 'bogus' (expected one of: kind, shape, default, "
              "doc)"),
    "param": ("{default: a, choices", "{bogus: a, choices",
              "<string>:7: param 'g': unknown key 'bogus' (expected one of: default, doc, "
              "choices)"),
    "scan": ("    init: 0\n", "    init: 0\n    bogus: 1\n",
             "<string>:14: scan 'A': unknown key 'bogus' (expected one of: alpha, beta, update, "
             "init, doc)"),
    "output": ('{expr: A, doc: "y"}', "{expr: A, bogus: x}",
               "<string>:15: output 'y': unknown key 'bogus' (expected one of: expr, doc)"),
    "misspelt_section": ("params:", "paramz:",
                         "<string>:6: the spec: unknown key 'paramz' (expected one of: name, "
                         "function, doc, direction, signature, inputs, exclusive, params, let, "
                         "scans, outputs, returns)"),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_unknown_keys_at_every_level(case):
    old, new, exact = UNKNOWN[case]
    assert old in GOOD
    refused(GOOD.replace(old, new, 1), exact=exact)


WRONG_TYPES = {
    "inputs_list": ('inputs:\n  x: {kind: float, doc: "x"}\n  f: flag\n', "inputs: [x, f]\n",
                    "<string>: 'inputs' must be a mapping, got a list"),
    "inputs_number": ('inputs:\n  x: {kind: float, doc: "x"}\n  f: flag\n', "inputs: 5\n",
                      "<string>: 'inputs' must be a mapping, got a number"),
    "inputs_null": ('inputs:\n  x: {kind: float, doc: "x"}\n  f: flag\n', "inputs:\n",
                    "<string>: 'inputs' must be a mapping, got nothing (an empty value)"),
    "input_null": ("  f: flag\n", "  f:\n", "<string>:5: input 'f' must be a mapping, got nothing (an empty value)"),
    "input_number": ("  f: flag\n", "  f: 5\n", "<string>:5: input 'f' must be a mapping, got a number"),
    "input_list": ("  f: flag\n", "  f: [flag]\n",
                   "<string>:5: input 'f' must be a mapping, got a list"),
    "kind_list": ("  f: flag\n", "  f: {kind: [flag]}\n",
                  "<string>:5: input 'f': kind must be one of float, flag, index, got ['flag']"),
    "shape_number": ("  f: flag\n", "  f: {kind: flag, shape: 5}\n",
                     "<string>:5: input 'f': shape must be one of [N, T], [N], [N, T, K], got 5"),
    "default_text": ("  f: flag\n", "  f: {kind: flag, default: abc}\n",
                     "<string>:5: input 'f': default must be a finite number, got 'abc'"),
    "default_bool": ("  f: flag\n", "  f: {kind: flag, default: true}\n",
                     "<string>:5: input 'f': default must be a finite number, got True"),
    "param_list": ("{default: a, choices: {a: 0.5, b: 0.25}}", "[1, 2]",
                   "<string>:7: param 'g': default must be a finite number, got [1, 2]"),
    "choices_list": ("{a: 0.5, b: 0.25}", "[a, b]",
                     "<string>:7: param 'g': choices must be a mapping, got a list"),
    "choice_text": ("{a: 0.5, b: 0.25}", "{a: 0.5, b: x}",
                    "<string>:7: param 'g': choice 'b' must be a finite number, got 'x'"),
    "scan_null": ("    update: z + g * A\n    init: 0\n", "\n",
                  "<string>:11: scan 'A' must be a mapping, got nothing (an empty value)"),
    "scan_text": ("  A:\n    update: z + g * A\n    init: 0\n", "  A: z + g * A\n",
                  "<string>:11: scan 'A' must be a mapping, got a string"),
    "update_list": ("update: z + g * A", "update: [z, g]",
                    "<string>:11: scan 'A' update: unsupported syntax (List): \"['z', 'g']\""),
    "update_bool": ("update: z + g * A", "update: true",
                    "<string>:11: scan 'A' update: unsupported constant True: 'True'"),
    "update_null": ("update: z + g * A", "update: null",
                    "<string>:11: scan 'A': needs either update, or both alpha and beta: '0'"),
    "outputs_list": ('outputs:\n  y: {expr: A, doc: "y"}\n', "outputs: [A]\n",
                     "<string>: 'outputs' must be a mapping, got a list"),
    "output_null": ('{expr: A, doc: "y"}', "null",
                    "<string>:15: output 'y': unsupported constant None: 'None'"),
    "output_no_expr": ('{expr: A, doc: "y"}', '{doc: "y"}',
                       "<string>:15: output 'y': missing key 'expr'"),
    "let_null": ("  z: x * 2\n", "  z:\n", "<string>:9: let 'z': unsupported constant None: 'None'"),
    "name_number": ("name: ok", "name: 5", "<string>:1: spec name '5' is not allowed: use a "
                    + NAME_RULE),
    "name_null": ("name: ok", "name:", "<string>:1: spec name 'None' is not allowed: use a "
                  + NAME_RULE),
    "direction_list": ("direction: reverse", "direction: [reverse]",
                       "<string>:1: direction must be 'reverse' or 'forward', got ['reverse']"),
    "key_number": ("  f: flag\n", "  1: flag\n", "<string>:5: keys must be names, got 1"),
    "key_null": ("  f: flag\n", "  null: flag\n", "<string>:5: keys must be names, got None"),
    "key_list": ("  f: flag\n", "  ? [a, b]\n  : flag\n",
                 "<string>:5: keys must be names, got ['a', 'b']"),
    "binary_value": ("name: ok", "name: !!binary aGVsbG8=",
                     "<string>:1: YAML tags are not supported (got tag:yaml.org,2002:binary)"),
    "date_value": ("name: ok", "name: 2020-01-01",
                   "<string>:1: YAML tags are not supported (got tag:yaml.org,2002:timestamp)"),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_wrong_types(case):
    old, new, exact = WRONG_TYPES[case]
    assert old in GOOD
    refused(GOOD.replace(old, new, 1), exact=exact)


# The list-valued top-level keys: a wrong type must be a SpecError, never a TypeError from a
# dataclass constructor, and a structurally wrong value must not slip through to generated code.
LIST_KEYS = {
    "signature_number": "signature: 5",
    "signature_nested": "signature: [[x], f, g]",
    "signature_two_stars": "signature: [x, f, '*', '*', g]",
    "signature_mapping": "signature: {x: 1, f: 1, g: 1}",
    "returns_number": "returns: 5",
    "returns_nested": "returns: [[y]]",
    "returns_unknown": "returns: [nope]",
    "exclusive_number": "exclusive: 5",
    "exclusive_flat": "exclusive: [5]",
    "exclusive_text": "exclusive: [ab]",
    "function_mapping": "function: {a: 1}",
}


@pytest.mark.parametrize("case", sorted(LIST_KEYS))
def test_wrong_types_of_list_keys(case):
    text = GOOD.replace("name: ok", f"name: ok\n{LIST_KEYS[case]}")
    refused(text, "<string>:")


def test_returns_as_a_bare_string(tmp_path):
    """``returns: adv`` (a string, not a list) became the tuple of its letters, and without a
    signature nothing checked it: the op returned uninitialised outputs 'a', 'd', 'v'."""
    text = ("name: bare_returns\ndirection: reverse\ninputs:\n  x: float\nscans:\n  A:\n"
            "    update: x + 0.5 * A\noutputs:\n  adv: A\n  other: 2 * A\nreturns: adv\n")
    fn = compiles_or_refused(text, tmp_path)
    if fn is not None:
        x = torch.randn(2, 5)
        out = fn(x, backend="torch")
        assert isinstance(out, torch.Tensor), f"returned {len(out)} outputs, expected 'adv'"
        torch.testing.assert_close(out.double(), _reverse_loop(x))


def test_optional_input_before_required_input_without_signature(tmp_path):
    """Without a signature the arguments follow the declaration order; an optional input
    declared before a required one made ``def op(x, o=None, z, ...)`` (SyntaxError on import)."""
    text = ("name: opt_order\ndirection: reverse\ninputs:\n  o: {kind: float, default: 0}\n"
            "  x: float\nscans:\n  A:\n    update: x + o + 0.5 * A\noutputs:\n  y: A\n")
    fn = compiles_or_refused(text, tmp_path)
    if fn is not None:
        x = torch.randn(2, 5)
        torch.testing.assert_close(fn(x=x, backend="torch").double(), _reverse_loop(x))


# ============================================================================ numbers

@pytest.mark.parametrize("case,text", [
    ("yaml_inf_default", spec().replace("  b: {kind: float, shape: [N]}",
                                        "  b: {kind: float, shape: [N]}\n"
                                        "  o: {kind: float, default: .inf}")),
    ("yaml_nan_default", spec().replace("  b: {kind: float, shape: [N]}",
                                        "  b: {kind: float, shape: [N]}\n"
                                        "  o: {kind: float, default: .nan}")),
    ("yaml_inf_param", spec().replace("  g: 0.5", "  g: .inf")),
    ("yaml_inf_choice", spec().replace("  g: 0.5", "  g: {default: a, choices: {a: .inf}}")),
    ("literal_1e400", spec(out="A + 1e400")),
    ("literal_1e400_init", spec().replace(f"    update: {q('x + g * A')}",
                                          f"    update: {q('x + g * A')}\n    init: 1e400")),
    ("division_by_zero", spec(out="A + 1/0")),
    ("log_zero", spec(out="A + log(0)")),
    ("sqrt_minus_one", spec(out="A + sqrt(-1)")),
    ("huge_integer", spec(out="A + 10**400")),
    ("exp_one", spec(out="A * exp(1)")),
])
def test_numbers_the_printers_cannot_write(tmp_path, case, text):
    """Non-finite or non-real constants must be refused with a SpecError, and constants SymPy
    turns into named objects (E = exp(1)) must be written as numbers: never a NameError
    ('inf', 'oo', 'zoo', 'I', 'E'), OverflowError or wrong number from the generated module."""
    fn = compiles_or_refused(text.replace("name: hostile", f"name: num_{case}"), tmp_path)
    if fn is None:
        return
    x = torch.randn(2, 5)
    args = dict(x=x, f=torch.zeros(2, 5), b=torch.zeros(2))
    for backend in BACKENDS:
        out = call_on(fn, backend, **args)
        assert case == "exp_one", f"{case}: compiled and ran, expected a SpecError"
        # float32 outputs against the float64 loop rounded to float32 (float32's tolerances):
        # a constant written wrong (E as a name, exp(1) truncated) is off by far more
        torch.testing.assert_close(out, (_reverse_loop(x) * 2.718281828459045).float())
