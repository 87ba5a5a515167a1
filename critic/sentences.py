"""Sentences of plain text by rule, one splitter for every critic and corruption that reads sentences.

``sentence_spans(text)`` gives ``[(start, end)]`` character spans; ``sentences(text)`` their strings.  A rule, not a
parser: deterministic, fast and language-light, so the same text always splits the same way (a critic's latent and
the corruptions that target it agree on what a sentence is).
"""

from __future__ import annotations

import re

__all__ = ["sentence_spans", "sentences"]

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s+[\"'(\[]?[A-Z0-9])|\n\s*\n")
_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Mt|No|vs|etc|e\.g|i\.e)|\b[A-Z])\.$")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Rule-based sentences ``[(start, end)]``: a break after ``.``/``!``/``?`` (and closing quotes)
    followed by space and a capital or digit -- not after a title or an initial (``Dr.``, ``J.``) --
    or at a blank line; spans exclude surrounding space."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if _ABBREVIATION.search(text, max(0, match.start() - 5), match.start() + 1):
            continue
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            out.append((s, e))
    return out


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`), without surrounding space."""
    return [text[start:end] for start, end in sentence_spans(text)]
