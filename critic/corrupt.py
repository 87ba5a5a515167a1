"""Seeded structural corruptions of documents: controlled "bad generations".

Each corruption returns a new document with id ``"<id>#<name>"`` and the
corruption recorded in ``metadata["corruption"]``, or ``None`` where the
document cannot carry it (too few sentences to shuffle).  The random choices come
from ``numpy.random.default_rng([seed, crc32(id)])``: the same document and
seed always give the same corruption, whatever else is in the set.

Section order (the section critic): ``permuted``, ``repeated``, ``dropped``.
Loops (the repetition critic; Holtzman et al. 2020): ``looped-paragraph``, one paragraph written again
``times`` times right after itself; ``looped-tail``, the last ``sentences`` sentences written again ``times``
times at the end.  Entity coherence (the entity-grid critic; Barzilay & Lapata 2008): ``shuffled-sentences``,
each section's sentences in another order; ``shuffled-document``, all sentences of the document in another order,
each section keeping its number of sentences.  Sentences are :func:`critic.sentences.sentence_spans`; a shuffle
keeps the text between sentences where it was, so only the order of the sentences changes.  A sentence that ended
at a blank line or at its section's end without a stop (a man page's NAME line) can run into the next when moved
before a single space: split again, the shuffled text may have fewer sentences (a critic that needs the exact
permutation, as the entity-grid discrimination benchmark does, permutes its own sentences instead).
"""

from __future__ import annotations

import re
import zlib
from typing import Callable, Sequence

import numpy as np

from .document import Document, Section
from .sentences import sentence_spans

__all__ = ["permute_sections", "repeat_section", "drop_section", "loop_paragraph", "loop_tail", "shuffle_sentences",
           "shuffle_document", "CORRUPTIONS", "corrupt_all"]


def _rng(doc: Document, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(doc.id.encode("utf-8"))])


def _tag(doc: Document, name: str, sections, detail) -> Document:
    out = doc.replace_sections(sections, id=f"{doc.id}#{name}")
    out.metadata["corruption"] = {"name": name, **detail}
    return out


def permute_sections(doc: Document, seed: int = 0) -> Document:
    """Sections in a uniformly random order other than the original (when one exists)."""
    n = len(doc.sections)
    order = np.arange(n)
    if n > 1:
        rng = _rng(doc, seed)
        while (order == np.arange(n)).all():
            order = rng.permutation(n)
    return _tag(doc, "permuted", [doc.sections[i] for i in order], {"order": order.tolist()})


def repeat_section(doc: Document, seed: int = 0) -> Document:
    """One uniformly chosen section repeated right after itself."""
    k = int(_rng(doc, seed).integers(len(doc.sections)))
    sections = list(doc.sections[: k + 1]) + [doc.sections[k]] + list(doc.sections[k + 1:])
    return _tag(doc, "repeated", sections, {"section": k})


def drop_section(doc: Document, seed: int = 0) -> Document:
    """One uniformly chosen section removed."""
    k = int(_rng(doc, seed).integers(len(doc.sections)))
    sections = list(doc.sections[:k]) + list(doc.sections[k + 1:])
    return _tag(doc, "dropped", sections, {"section": k})




def loop_paragraph(doc: Document, seed: int = 0, times: int = 3) -> Document | None:
    """A loop: one uniformly chosen paragraph (a block of a section's text between blank lines, or the whole text
    of a section without any) written ``times`` more times right after itself, joined by a blank line."""
    paragraphs = [(k, m.start(), m.end()) for k, sec in enumerate(doc.sections)
                  for m in re.finditer(r"\S(?:.*?\S)?(?=\n[ \t]*\n|\s*$)", sec.text, re.S)]
    if not paragraphs:
        return None
    k, start, end = paragraphs[int(_rng(doc, seed).integers(len(paragraphs)))]
    text = doc.sections[k].text
    looped = text[:end] + "".join("\n\n" + text[start:end] for _ in range(times)) + text[end:]
    return _tag(doc, "looped-paragraph", _with_text(doc, {k: looped}),
                {"section": k, "start": start, "end": end, "times": times})


def loop_tail(doc: Document, seed: int = 0, sentences: int = 3, times: int = 3) -> Document | None:
    """A loop at the end: the last ``sentences`` sentences of the last section with text (fewer where it has
    fewer) written ``times`` more times after it, each copy after the space that preceded the first of them."""
    last = max((k for k, sec in enumerate(doc.sections) if sentence_spans(sec.text)), default=None)
    if last is None:
        return None
    text = doc.sections[last].text
    spans = sentence_spans(text)
    first = max(0, len(spans) - sentences)
    start, end = spans[first][0], spans[-1][1]
    gap = text[spans[first - 1][1]:start] if first > 0 else " "
    looped = text[:end] + (gap + text[start:end]) * times + text[end:]
    return _tag(doc, "looped-tail", _with_text(doc, {last: looped}),
                {"section": last, "sentences": len(spans) - first, "times": times})


def _shuffled(order: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``order`` other than the identity (``order`` has >= 2 entries)."""
    while True:
        perm = rng.permutation(order)
        if (perm != order).any():
            return perm


def _reordered(text: str, spans: list[tuple[int, int]], pieces: Sequence[str]) -> str:
    """``text`` with its sentences ``spans`` replaced, in order, by ``pieces``; the text between them kept."""
    out, pos = [], 0
    for (start, end), piece in zip(spans, pieces):
        out += [text[pos:start], piece]
        pos = end
    return "".join(out) + text[pos:]


def shuffle_sentences(doc: Document, seed: int = 0) -> Document | None:
    """Each section's sentences in a uniformly random order other than the original (sections with one
    sentence kept); ``None`` when no section has two sentences."""
    rng, texts, orders = _rng(doc, seed), {}, {}
    for k, sec in enumerate(doc.sections):
        spans = sentence_spans(sec.text)
        if len(spans) > 1:
            order = _shuffled(np.arange(len(spans)), rng)
            texts[k] = _reordered(sec.text, spans, [sec.text[spans[i][0]:spans[i][1]] for i in order])
            orders[str(k)] = order.tolist()  # JSON object keys
    if not texts:
        return None
    return _tag(doc, "shuffled-sentences", _with_text(doc, texts), {"orders": orders})


def shuffle_document(doc: Document, seed: int = 0) -> Document | None:
    """All sentences of the document in a uniformly random order other than the original, each section keeping
    its number of sentences (sentence ``i`` of the document takes the ``i``-th slot); ``None`` with fewer than 2."""
    spans = [sentence_spans(sec.text) for sec in doc.sections]
    pieces = [sec.text[s:e] for sec, sec_spans in zip(doc.sections, spans) for s, e in sec_spans]
    if len(pieces) < 2:
        return None
    order = _shuffled(np.arange(len(pieces)), _rng(doc, seed))
    texts, taken = {}, 0
    for k, sec_spans in enumerate(spans):
        if sec_spans:
            chosen = [pieces[i] for i in order[taken:taken + len(sec_spans)]]
            texts[k] = _reordered(doc.sections[k].text, sec_spans, chosen)
            taken += len(sec_spans)
    return _tag(doc, "shuffled-document", _with_text(doc, texts), {"order": order.tolist()})


def _with_text(doc: Document, texts: dict[int, str]) -> list[Section]:
    """``doc``'s sections, section ``k``'s text replaced by ``texts[k]``."""
    return [Section(sec.title, texts[k]) if k in texts else sec for k, sec in enumerate(doc.sections)]


CORRUPTIONS: dict[str, Callable[[Document, int], Document | None]] = {
    "permuted": permute_sections,
    "repeated": repeat_section,
    "dropped": drop_section,
    "looped-paragraph": loop_paragraph,
    "looped-tail": loop_tail,
    "shuffled-sentences": shuffle_sentences,
    "shuffled-document": shuffle_document,
}


def corrupt_all(docs: Sequence[Document], name: str, seed: int = 0) -> list[Document]:
    """Apply the corruption ``name`` to every document that has a section and can carry it."""
    fn = CORRUPTIONS[name]
    return [bad for d in docs if d.sections and (bad := fn(d, seed)) is not None]
