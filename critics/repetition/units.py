"""A document as the sequence of units its copies are made of: sentences (:func:`critic.sentences.sentence_spans`)
or words, every section's in order, each kept with where it is in the text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from critic.document import Document
from critic.sentences import sentence_spans

__all__ = ["Unit", "UNIT_NAMES", "Units", "document_units", "has_units", "span_text"]

Unit = Literal["sentence", "token"]

UNIT_NAMES = {"sentence": ("sentence", "sentences"), "token": ("word", "words")}
"""How a unit is called in reasons and views: (singular, plural)."""

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Units:
    """The ``n`` units of a document: ``keys`` (what is matched: lower-cased, white space collapsed),
    ``sections (n,)`` (the section each is in) and ``spans (n, 2)`` (its characters in that section's text)."""

    keys: list[str]
    sections: np.ndarray
    spans: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)


def _units(text: str, unit: Unit) -> tuple[list[str], list[tuple[int, int]]]:
    """The keys and character spans of one text's units."""
    if unit == "sentence":
        spans = sentence_spans(text)
        return [" ".join(text[s:e].lower().split()) for s, e in spans], spans
    words = list(_WORD.finditer(text))
    return [w.group().lower() for w in words], [w.span() for w in words]


def document_units(doc: Document, unit: Unit) -> Units:
    """The document's ``\\w+`` words (``unit="token"``) or sentences (``"sentence"``), section after section."""
    keys, sections, spans = [], [], []
    for k, section in enumerate(doc.sections):
        found, where = _units(section.text, unit)
        keys += found
        sections += [k] * len(found)
        spans += where
    return Units(keys, np.asarray(sections, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2))


def has_units(doc: Document, unit: Unit) -> bool:
    """Whether the document has a unit, without splitting it: a sentence wherever a section has a non-space
    character (:func:`~critic.sentences.sentence_spans` keeps every non-blank stretch), a word wherever ``\\w``
    matches."""
    if unit == "sentence":
        return any(section.text.strip() for section in doc.sections)
    return any(_WORD.search(section.text) for section in doc.sections)


def span_text(doc: Document, units: Units, first: int, count: int) -> str:
    """The text of units ``first .. first + count - 1`` of ``doc``, from the first one's start to the end of the
    last one in the same section (a span that runs into the next section is cut at the section's end)."""
    section = units.sections[first]
    last = first + int((units.sections[first:first + count] == section).sum()) - 1
    return doc.sections[section].text[units.spans[first, 0]:units.spans[last, 1]]
