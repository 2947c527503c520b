"""MkDocs hooks (loaded from mkdocs.yml; not a page). The pages are written to read well on
GitHub too; these two hooks make the site render them the same way.

``on_files``: serve the repository files that the pages link to. The pages link to files outside
docs/ with relative paths that work when the Markdown is read in the repository, e.g.
``[specs/gae.yaml](../../specs/gae.yaml)`` from ``docs/algorithms/gae.md``. For each such link
whose target is a file inside the repository, the file is added to the site under ``_repo/``
(``_repo/specs/gae.yaml``), so MkDocs resolves the link to that copy and validates it like any
other. A link to a missing file, or to anything outside the repository, is left alone, and MkDocs
reports it (an error under ``--strict``).

``on_page_markdown``: in a table row, GitHub needs a ``|`` inside a code span written ``\\|``
and shows it as ``|``; Python-Markdown keeps the backslash (and needs no escape there, since it
does not split cells inside code spans). So ``\\|`` inside code spans of table rows becomes ``|``.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

# The destination of a Markdown link or image: ](target) or ](target "title"), no URL scheme.
_LINK = re.compile(r"\]\(\s*<?([^)\s>#?]+)")
_PREFIX = "_repo"
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def on_files(files, config):
    docs = Path(config.docs_dir).resolve()
    repo = Path(config.config_file_path).resolve().parent
    for page in list(files.documentation_pages()):
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        for target in _LINK.findall(text):
            if "://" in target or target.startswith(("/", "mailto:")):
                continue
            uri = posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), target))
            if not uri.startswith("../"):
                continue  # inside docs/: MkDocs checks it as usual
            path = (docs / uri).resolve()
            if not path.is_file() or not path.is_relative_to(repo) or path.is_relative_to(docs):
                continue
            if files.get_file_from_path(uri) is None:
                copy = File.generated(config, uri, abs_src_path=str(path),
                                      inclusion=InclusionLevel.NOT_IN_NAV)
                copy.dest_uri = posixpath.join(_PREFIX, path.relative_to(repo).as_posix())
                files.append(copy)
    return files


def _unescape_pipes(match):
    return match.group(1) + match.group(2).replace("\\|", "|") + match.group(1)


def on_page_markdown(markdown, page, config, files):
    lines, fenced = markdown.split("\n"), False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.lstrip().startswith("|") and "\\|" in line:
            lines[i] = _CODE_SPAN.sub(_unescape_pipes, line)
    return "\n".join(lines)
