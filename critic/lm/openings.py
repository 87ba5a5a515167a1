"""Do samples begin as documents begin?  The share of texts that open as the training documents do.

Sampling starts every generation from one end token at position 0, so whether a fine-tuned model starts a
document there, rather than mid-sentence, is a property of its training windows (docs/lm.md, document-aligned
windows).  A text *begins as a document* when, W/O Title, its first character is an upper-case letter, a digit
or a quote (``str.isupper``, ``str.isdigit``, one of :data:`QUOTES`); W/ Title, when its first line is the title
of a training document's first section and a line break follows.  :func:`opening_shares` compares the share of
an LM's generations that begin so with the share of its training documents (rendered in its format) that do:
their ratio is 1 when samples open as the data does.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..document import Document
from .format import DocumentFormat

__all__ = ["QUOTES", "begins_as_document", "opening_shares"]

QUOTES = "\"'\u201c\u2018\u00ab\u201e"
"""Quotes a document may begin with: straight, curly (double, single), guillemet, low double."""


def begins_as_document(text: str, first_titles: frozenset[str] | None) -> bool:
    """Whether ``text`` begins as a document does: W/O Title (``first_titles=None``) its first character is
    an upper-case letter, a digit or one of :data:`QUOTES`; W/ Title its first line, followed by a line
    break, is one of ``first_titles``."""
    if first_titles is not None:
        title, newline, _ = text.partition("\n")
        return bool(newline) and title in first_titles
    first = text[:1]
    return first.isupper() or first.isdigit() or (first != "" and first in QUOTES)


def opening_shares(fmt: DocumentFormat, train: Sequence[Document], texts: Iterable[str]) -> dict:
    """``{"samples": [hits, n], "data": [hits, n], "share", "data_share", "ratio"}``: how many of ``texts``
    (generations, parsed or not) and of the training documents rendered in ``fmt`` begin as a document, and
    the samples' share over the data's (``None`` where a share has no texts)."""
    titles = frozenset(d.sections[0].title for d in train if d.sections) if fmt.with_titles else None
    texts = list(texts)
    hits = sum(begins_as_document(t, titles) for t in texts)
    data_hits = sum(begins_as_document(fmt.render(d), titles) for d in train)
    share = hits / len(texts) if texts else None
    data_share = data_hits / len(train) if train else None
    return {"samples": [hits, len(texts)], "data": [data_hits, len(train)], "share": share, "data_share": data_share,
            "ratio": share / data_share if share is not None and data_share else None}
