"""Do samples begin as documents begin?  The share of texts that open as the training documents do.

Sampling starts every generation from one end token at position 0, so whether a fine-tuned model starts a
document there, rather than mid-sentence, is a property of its training windows (docs/lm.md, document-aligned
windows).  A text *begins as a document*:

* W/ Title, when its first line is the title of a training document's first section and a line break follows;
* W/O Title, when its start matches the corpus's ``opening`` pattern (``re.match``), e.g. the start of a man
  page's NAME line, ``ls - list directory contents`` (:data:`MAN_NAME_START`); without one, the prose rule: its
  first character is an upper-case letter, a digit or a quote (``str.isupper``, ``str.isdigit``, :data:`QUOTES`).

Each rule reads how a text *opens*, the first tokens sampling draws after the end token, not whether what
follows is well written: that is what the critics and the other statistics judge.

:func:`opening_shares` compares the share of an LM's generations that begin so with the share of its training
documents (rendered in its format) that do: their ratio is 1 when samples open as the data does.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from ..document import Document
from .format import DocumentFormat

__all__ = ["QUOTES", "MAN_NAME_START", "begins_as_document", "opening_shares"]

QUOTES = "\"'\u201c\u2018\u00ab\u201e"
"""Quotes a document may begin with: straight, curly (double, single), guillemet, low double."""

MAN_NAME_START = r"[^\s,]+(,|\s+-)"
"""How a man page's NAME line opens: its first name (no space or comma in it), then a comma (more names
follow) or a dash after a space (the description follows): ``_exit, _Exit - terminate the calling process``,
``ls - list directory contents``.  The first name and its separator, as the prose rule reads the first
character; the rest of the line (well-formed names, a dash, a description) is the LM's writing."""


def begins_as_document(text: str, first_titles: frozenset[str] | None, opening: str | None = None) -> bool:
    """Whether ``text`` begins as a document does: W/ Title (``first_titles`` given) its first line, followed by
    a line break, is one of ``first_titles``; W/O Title its start matches the regular expression ``opening``,
    or, without one, its first character is an upper-case letter, a digit or one of :data:`QUOTES`."""
    if first_titles is not None:
        title, newline, _ = text.partition("\n")
        return bool(newline) and title in first_titles
    if opening is not None:
        return re.match(opening, text) is not None
    first = text[:1]
    return first.isupper() or first.isdigit() or (first != "" and first in QUOTES)


def opening_shares(fmt: DocumentFormat, train: Sequence[Document], texts: Iterable[str],
                   opening: str | None = None) -> dict:
    """``{"samples": [hits, n], "data": [hits, n], "share", "data_share", "ratio"}``: how many of ``texts``
    (generations, parsed or not) and of the training documents rendered in ``fmt`` begin as a document
    (:func:`begins_as_document`, ``opening`` for W/O Title), and the samples' share over the data's (``None``
    where a share has no texts)."""
    titles = frozenset(d.sections[0].title for d in train if d.sections) if fmt.with_titles else None
    texts = list(texts)
    hits = sum(begins_as_document(t, titles, opening) for t in texts)
    data_hits = sum(begins_as_document(fmt.render(d), titles, opening) for d in train)
    share = hits / len(texts) if texts else None
    data_share = data_hits / len(train) if train else None
    return {"samples": [hits, len(texts)], "data": [data_hits, len(train)], "share": share, "data_share": data_share,
            "ratio": share / data_share if share is not None and data_share else None}
