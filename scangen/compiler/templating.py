"""The Jinja environment over ``templates/``, and text made safe for generated source."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import jinja2

PACKAGE = Path(__file__).resolve().parent.parent  # scangen/


def package_data(name: str, marker: str) -> Path:
    """``scangen/<name>`` in a wheel, ``<checkout>/<name>`` in a checkout: the first that holds
    ``marker`` (a file name or a glob)."""
    for cand in (PACKAGE / name, PACKAGE.parent / name):
        if cand.is_dir() and any(cand.glob(marker)):
            return cand
    raise FileNotFoundError(f"scangen's {name}/ not found next to the package")


def template_dir() -> Path:
    return package_data("templates", "module.py.j2")


@functools.lru_cache(maxsize=None)
def _environment(path: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(path),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              autoescape=False)


def render_template(name: str, **context) -> str:
    return _environment(str(template_dir())).get_template(name).render(**context)


def templates_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(template_dir().glob("*.j2")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def pylit(text: str) -> str:
    """Text safe inside a triple-quoted docstring: backslashes escaped, quotes escaped where they
    touch another quote or end the text (so no run of three and no merge with the closing
    quotes), and characters Python source cannot hold (NUL, lone surrogates) as escapes."""
    out = []
    for i, ch in enumerate(text):
        touching = text[i + 1:i + 2] in ('"', "") or text[i - 1:i] == '"'
        if ch == "\\" or (ch == '"' and touching):
            out.append("\\" + ch)
        elif ch == "\n" or (ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF):
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


def comment(text: str) -> str:
    """Text safe on one comment line: printable ASCII only."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in str(text))
