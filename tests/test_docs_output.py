"""The output README.md and docs/ show, checked against what the code prints.

tests/test_examples.py runs every ```python block; this file checks what the pages say those
blocks and the ``scangen`` command print.

**Python blocks.** A print's shown output is the run of comment lines directly below the print
statement, one ``# `` line per printed line::

    print(G)
    # tensor([[3.5200, 2.8000, 1.9810, 1.0900]])

Each page's blocks run in order in one namespace, in a temporary folder (``# file:`` yaml blocks
written first, as in test_examples.py), with ``print`` recording what each print statement
printed. Shown and printed lines are compared with runs of whitespace read as one space, and
numbers compared to the precision shown: two numbers with decimals match when the intervals
their printed digits stand for overlap (``2.8`` matches ``2.8000`` and ``2.8499``; ``1.2920``
matches ``1.2919``, a last-digit difference that float32 rounding can make on another backend);
numbers without decimals match exactly. Every print statement must show its output, and a
comment on the print's own line is refused, so no output hides in a form this test does not
read: a comment that explains an output goes above the print, or below its output after a blank
line.

**Command transcripts.** In a ```text, ```console or ```bash block, a line ``$ COMMAND`` is
followed by the command's output, up to the next ``$`` line or the block's end. The commands
run in page order, in the page's temporary folder, once the ``# file:`` blocks above them are
written (and after the page's entry in PAGE_SETUP or COMMAND_SETUP, where the page's text asks
for more), as a subprocess: ``scangen ARGS`` is ``python -m scangen.cli ARGS``, ``python`` this
interpreter. Their stdout and stderr together
are compared with the shown output line by line, trailing spaces and trailing blank lines
ignored, after these normalisations of volatile fields and no others:

* a duration in parentheses, ``(1.78s)``, reads ``(<duration>)`` on both sides;
* this checkout's absolute path in the output reads ``/path/to/scangen``.

The pages show a plain CPU machine's shell, so commands run with ``CUDA_VISIBLE_DEVICES=`` (no
GPU, on a GPU host too) and without ``TRITON_INTERPRET`` unless the command line sets it
(``$ TRITON_INTERPRET=1 scangen verify``: the pages show both cases), ``COLUMNS=80`` (argparse's
line width) and ``SCANGEN_CACHE_DIR`` in the temporary folder.

**Both.** ``...`` marks output that is machine-dependent or too long to show, as doctest's
ELLIPSIS does: a line that is only ``...`` matches any number of lines, ``...`` inside a line any
text. A command that cannot run here is listed in SKIPPED_COMMANDS with the reason; a transcript
running any other program fails.
"""
import ast
import builtins
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tokenize

import numpy as np
import triton
from functools import cache

import pytest
from test_examples import DOCS, FENCE, OPTIONAL, ROOT, write_file_block

SHELL_LANGS = {"text", "console", "bash"}
# Commands shown with their output but not run, and why. Kept exact: an entry no page shows fails.
SKIPPED_COMMANDS = {
    "scangen bench --device cpu --threads 1 --csv bench/results/cpu-bench-cli.csv "
    "--plot docs/img/cpu-bench.png":
        "times the default grid (77 s on the 2-core VM) and prints that machine's timings, "
        "versions and commit; tests/test_bench_cli.py runs `scangen bench --quick` on a tiny grid",
}

# Triton 3.6's interpreter turns a scalar kernel argument into a 1-element array whose __index__
# NumPy 2.5 refuses ("only 0-dimensional arrays can be converted"): `range(0, n)` of a value
# computed from one then fails in every kernel (the GPU machine: Triton 3.6, NumPy 2.5). 3.9's
# interpreter squeezes the array first. Not scangen's to fix; the transcripts show CPU machines.
INTERPRETER_OK = not (tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 5)
                      and tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 9))


def _cli_page(folder):
    """docs/cli.md runs from the repository root (a copy of generated/, so that the bare `scangen
    build` cannot write into the checkout) on spec-guide.md's my_ema.yaml, as its text says."""
    shutil.copytree(ROOT / "generated", folder / "generated",
                    ignore=lambda _, names: [n for n in names if not n.endswith(".py")])
    for lang, body, _ in _blocks(ROOT / "docs" / "spec-guide.md"):
        write_file_block(lang, body, folder)


def _change_decay(folder):
    """cli.md: "After changing `decay`'s default in `my_ema.yaml`"."""
    spec = folder / "my_ema.yaml"
    text = spec.read_text(encoding="utf-8")
    assert "decay: {default: 0.9," in text
    text = text.replace("decay: {default: 0.9,", "decay: {default: 0.95,")
    spec.write_text(text, encoding="utf-8")


PAGE_SETUP = {"docs/cli.md": _cli_page}
COMMAND_SETUP = {("docs/cli.md", "scangen build my_ema.yaml --out mydir --check"): _change_decay}


# --------------------------------------------------------------------------- parsing the pages

@cache
def _blocks(page):
    """(lang, body, line of the body's first line in the page) of every fenced block."""
    text = page.read_text(encoding="utf-8")
    return tuple((m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1)
                 for m in FENCE.finditer(text))


def _commands(body):
    """[(offset of the $ line in the block, command, shown output lines)] of a transcript block."""
    lines, out = body.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("$ "):
            out.append((i, line[2:].strip(), []))
        elif out:
            out[-1][2].append(line)
    for _, _, shown in out:
        while shown and not shown[-1].strip():
            shown.pop()
    return out


def _prints(body):
    """The print statements of a python block: [(first line, last line, shown output lines)]."""
    lines, found = body.splitlines(), []
    for node in ast.walk(ast.parse(body)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"):
            shown = []
            for line in lines[node.end_lineno:]:
                if not line.lstrip().startswith("#"):
                    break
                shown.append(line.lstrip()[1:].removeprefix(" "))
            found.append((node.lineno, node.end_lineno, shown))
    return sorted(found)


def _comment_rows(body):
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(body).readline)
            if tok.type == tokenize.COMMENT}


def _pages_with(kind):
    has = {"print": lambda lang, body: lang == "python" and _prints(body),
           "command": lambda lang, body: lang in SHELL_LANGS and _commands(body)}[kind]
    return [p for p in DOCS if any(has(lang, body) for lang, body, _ in _blocks(p))]


# --------------------------------------------------------------------------- comparing

NUMBER = r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?"
_TOKENS = re.compile(rf"(\.\.\.)|(?<![\w.])({NUMBER})(?![\w.]?\d)|(\s+)")


def _half_unit(number):
    mantissa, _, exponent = number.lower().partition("e")
    if "." not in mantissa or not mantissa.split(".")[1]:
        return 0.0
    return 0.5 * 10.0 ** (int(exponent or 0) - len(mantissa.split(".")[1]))


def _line_matches(shown, printed, numbers):
    """Whether one printed line matches one shown line (``...`` is any text; with ``numbers``,
    whitespace runs are one space and numbers match to the precision shown)."""
    if numbers:
        shown, printed = " ".join(shown.split()), " ".join(printed.split())
    pattern, expected, pos = [], [], 0
    for m in _TOKENS.finditer(shown):
        if m.group(2) and not numbers:
            continue
        pattern.append(re.escape(shown[pos:m.start()]))
        if m.group(1):
            pattern.append(".*?")
        elif m.group(2):
            pattern.append(f"({NUMBER})")
            expected.append(m.group(2))
        else:
            pattern.append(re.escape(m.group(3)))
        pos = m.end()
    pattern.append(re.escape(shown[pos:]))
    m = re.fullmatch("".join(pattern), printed)
    return m is not None and all(
        abs(float(got) - float(want))
        <= _half_unit(got) + _half_unit(want) + 1e-12 * abs(float(got))
        for got, want in zip(m.groups(), expected, strict=True))


def _matches(shown, printed, numbers=False):
    """Whether the printed lines match the shown ones (a shown ``...`` line: any lines)."""
    @cache
    def match(i, j):
        if i == len(shown):
            return j == len(printed)
        if shown[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(printed) + 1))
        return (j < len(printed) and _line_matches(shown[i], printed[j], numbers)
                and match(i + 1, j + 1))
    return match(0, 0)


def _report(where, shown, printed):
    width = max(len(s) for s in shown + printed + ["shown"])
    rows = [f"  {'shown':<{width}} | printed"]
    for k in range(max(len(shown), len(printed))):
        a = shown[k] if k < len(shown) else ""
        b = printed[k] if k < len(printed) else ""
        rows.append(f"{'  ' if a == b else '! '}{a:<{width}} | {b}")
    return f"{where}: the shown output differs from what it prints\n" + "\n".join(rows)


# --------------------------------------------------------------------------- command transcripts

DURATION = re.compile(r"\(\d+(?:\.\d+)?s\)")


def _normalise(line):
    return DURATION.sub("(<duration>)", line.replace(str(ROOT), "/path/to/scangen")).rstrip()


def _run(command, folder):
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDA_VISIBLE_DEVICES="", COLUMNS="80", SCANGEN_CACHE_DIR=str(folder / "cache"),
               # the checkout first: scangen is found from the page's folder also where it is
               # reached through a relative PYTHONPATH (the GPU machine's PYTHONPATH=.)
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    program = {"scangen": [sys.executable, "-m", "scangen.cli"], "python": [sys.executable]}
    assert words and words[0] in program, (
        f"`{command}` is neither scangen nor python: list it in SKIPPED_COMMANDS, with why")
    done = subprocess.run(program[words[0]] + words[1:], cwd=folder, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                          check=False)  # the shown output says how it failed, if it did
    lines = done.stdout.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


@pytest.mark.parametrize("page", _pages_with("command"), ids=lambda p: str(p.relative_to(ROOT)))
def test_shown_command_output(page, tmp_path):
    name, problems = str(page.relative_to(ROOT)), []
    if name in PAGE_SETUP:
        PAGE_SETUP[name](tmp_path)
    for lang, body, line in _blocks(page):
        if write_file_block(lang, body, tmp_path) or lang not in SHELL_LANGS:
            continue
        for offset, command, shown in _commands(body):
            if command in SKIPPED_COMMANDS or (
                    command.startswith("TRITON_INTERPRET=1") and not INTERPRETER_OK):
                continue
            if (name, command) in COMMAND_SETUP:
                COMMAND_SETUP[name, command](tmp_path)
            printed = [_normalise(s) for s in _run(command, tmp_path)]
            shown = [DURATION.sub("(<duration>)", s).rstrip() for s in shown]
            if not _matches(shown, printed):
                problems.append(_report(f"{name}:{line + offset}: $ {command}", shown, printed))
    assert not problems, "\n\n".join(problems)


def test_skipped_commands_are_shown():
    shown = {command for page in DOCS for lang, body, _ in _blocks(page) if lang in SHELL_LANGS
             for _, command, _ in _commands(body)}
    assert not set(SKIPPED_COMMANDS) - shown, "SKIPPED_COMMANDS lists commands no page shows"
    stale = {cmd for _, cmd in COMMAND_SETUP} - shown
    assert not stale, f"COMMAND_SETUP names commands no page shows: {stale}"


# --------------------------------------------------------------------------- python blocks

class _Recorder:
    """``print`` for one block: what each print statement of the block printed, by statement."""

    def __init__(self, filename, statements):
        self.filename = filename
        self.by_row = {row: first for first, last, _ in statements
                       for row in range(first, last + 1)}
        self.output = {first: io.StringIO() for first, _, _ in statements}

    def __call__(self, *args, **kwargs):
        caller = sys._getframe(1)
        row = caller.f_lineno
        if (caller.f_code.co_filename == self.filename and row in self.by_row
                and kwargs.get("file") is None):
            kwargs["file"] = self.output[self.by_row[row]]
        builtins.print(*args, **kwargs)


@pytest.mark.parametrize("page", _pages_with("print"), ids=lambda p: str(p.relative_to(ROOT)))
def test_shown_print_output(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path / "cache"))
    namespace, problems = {"__name__": "__doc_example__"}, []
    for lang, body, line in _blocks(page):
        if write_file_block(lang, body, tmp_path) or lang != "python":
            continue
        statements = _prints(body)
        filename = f"{page.name}:{line} (python block)"
        namespace["print"] = recorder = _Recorder(filename, statements)
        try:
            exec(compile(body, filename, "exec"), namespace)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in OPTIONAL:  # as test_examples.py does
                pytest.skip(f"{page.name} needs {exc.name}, not installed here")
            raise
        comments = _comment_rows(body)
        for first, last, shown in statements:
            where = f"{page.relative_to(ROOT)}:{line + first - 1}"
            if comments & set(range(first, last + 1)):
                problems.append(f"{where}: a comment on a print's line; shown output goes on "
                                "'# ' lines below the print, other comments above it")
            elif not shown:
                problems.append(f"{where}: a print without its output shown below it as '# ' "
                                "lines ('# ...' where the output is machine-dependent)")
            else:
                printed = recorder.output[first].getvalue().splitlines()
                if not _matches(shown, printed, numbers=True):
                    problems.append(_report(where, shown, printed))
    assert not problems, "\n\n".join(problems)


# --------------------------------------------------------------------------- the comparison itself

@pytest.mark.parametrize("shown, printed, numbers, ok", [
    (["tensor([[2.8000, 1.0900]])"], ["tensor([[2.8000, 1.0900]])"], True, True),
    (["tensor([[2.8, 1.09]])"], ["tensor([[2.8000, 1.0900]])"], True, True),
    (["tensor([[1.2920]])"], ["tensor([[1.2919]])"], True, True),      # the last digit's rounding
    (["tensor([[1.2920]])"], ["tensor([[1.2917]])"], True, False),
    (["tensor([[ 1.,  3.]])"], ["tensor([[ 1.,  4.]])"], True, False),
    (["torch.Size([4, 16, 1])"], ["torch.Size([4, 16, 2])"], True, False),
    (["tensor([[1.,   3.]])"], ["tensor([[1., 3.]])"], True, True),      # whitespace runs
    (["tensor([[1.0]])", "..."], ["tensor([[1.0]])", "a", "b"], True, True),
    (["took ... s"], ["took 3.2 s"], True, True),
    (["wrote 2 file(s)"], ["wrote 7 file(s)"], False, False),
    (["a", "...", "z"], ["a", "b", "c", "z"], False, True),
    (["a", "...", "z"], ["a", "b", "c"], False, False),
    (["  compute_gae  ok"], ["  compute_gae ok"], False, False),        # columns, in transcripts
])
def test_matching(shown, printed, numbers, ok):
    assert _matches(shown, printed, numbers) is ok
