"""Docstrings as plain help text: what ``--help`` and ``critic list`` print.

The package's docstrings are written for Sphinx (``:func:`~critics.topics.ctm.fit_ctm```, ````None````); a
terminal shows them as typed.  :func:`plain_help` turns a cross-reference into the name it shows (the last
dotted part under ``~``, the title of ``title <target>``), literal markup into the text, and drops
"(see the module docstring)", which points at nothing a command-line user can open.
"""

from __future__ import annotations

import re

__all__ = ["plain_help"]

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?P<tilde>~?)(?P<body>[^`]+)`")
_TITLED = re.compile(r"(?P<title>.+?)\s*<[^<>]+>")
_LITERAL = re.compile(r"``(?P<text>[^`]+)``")
_MODULE_NOTE = re.compile(r"\s*\(see the module docstring\)")


def _reference(match: re.Match) -> str:
    body = match["body"]
    titled = _TITLED.fullmatch(body)
    if titled:
        return titled["title"]
    return body.rsplit(".", 1)[-1] if match["tilde"] else body


def plain_help(doc: str) -> str:
    """``doc`` with Sphinx roles and literal markup as plain text (see the module docstring of this module)."""
    return _MODULE_NOTE.sub("", _LITERAL.sub(lambda m: m["text"], _ROLE.sub(_reference, doc)))
