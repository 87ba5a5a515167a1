"""Seeded coreference corruptions of resolved documents: controlled "bad generations".

Each corruption replaces ONE pronoun of a person entity in the text and keeps the
resolution as it was (the same clusters, offsets shifted), as if a writer had used
the wrong pronoun for someone the reader still tracks:

- ``gender``: a gendered singular pronoun takes the other gender (``he`` -> ``she``,
  ``his`` -> ``her``, ``her`` -> ``his`` when tagged possessive ``PRP$`` else ``him``, ...);
- ``number``: a pronoun takes the other number (``he``/``she`` -> ``they``, ``his`` ->
  ``their``, ``them`` -> ``him``/``her``, ...; plural to singular picks the gender at random).

Case is kept (``He`` -> ``She``).  The pronoun is drawn uniformly among the
eligible ones with ``numpy.random.default_rng([seed, crc32(id)])``: a pronoun
is eligible when the swap changes that one chain token and nothing else (the
entity keeps its majority gender, so the chain holds an inconsistency rather
than a relabelled person).  A document without an eligible pronoun is returned
as ``None`` and counted by :func:`corrupt_resolved`.  The new document has id ``"<id>#<name>"`` and
``metadata["corruption"]`` says what changed.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Callable, Sequence

import numpy as np

from critic.document import Document, Section

from .chains import build_chain
from .resolution import Mention, Resolution
from .resolvers import METADATA_KEY

__all__ = ["swap_gender", "swap_number", "CORRUPTIONS", "corrupt_resolved"]

_GENDER_SWAP = {"he": "she", "she": "he", "him": "her", "his": "her", "hers": "his",
                "himself": "herself", "herself": "himself"}
_TO_PLURAL = {"he": "they", "she": "they", "him": "them", "his": "their", "hers": "theirs",
              "himself": "themselves", "herself": "themselves"}
_TO_SINGULAR = {"they": ("he", "she"), "them": ("him", "her"), "their": ("his", "her"),
                "theirs": ("his", "hers"), "themselves": ("himself", "herself")}


def _case_like(word: str, model: str) -> str:
    if model.isupper() and len(model) > 1:
        return word.upper()
    return word.capitalize() if model[:1].isupper() else word


def _gender_target(m: Mention, rng: np.random.Generator) -> str | None:
    low = m.root_text.lower()
    if low == "her":
        return "his" if m.tag == "PRP$" else "him"
    return _GENDER_SWAP.get(low)


def _number_target(m: Mention, rng: np.random.Generator) -> str | None:
    low = m.root_text.lower()
    if low == "her":
        return "their" if m.tag == "PRP$" else "them"
    if low in _TO_PLURAL:
        return _TO_PLURAL[low]
    if low in _TO_SINGULAR:
        return _TO_SINGULAR[low][int(rng.integers(2))]
    return None


def _person_roots(res: Resolution) -> list[Mention]:
    """One mention per root token that the chain keeps (a person entity's mention), in text order."""
    chain = build_chain(res)
    kept = {s for s in chain.spans if s is not None}
    seen, out = set(), []
    for m in res.mentions:
        if m.root in kept and m.root not in seen:
            seen.add(m.root)
            out.append(m)
    return out


def _replace(doc: Document, res: Resolution, root: tuple[int, int], word: str, name: str, detail: dict
             ) -> Document:
    start, end = root
    delta = len(word) - (end - start)

    def shift(x: int) -> int:
        return x + delta if x >= end else x

    text = res.text[:start] + word + res.text[end:]
    mentions = [Mention(shift(m.start), shift(m.end), m.cluster, (shift(m.root[0]), shift(m.root[1])),
                        word if m.root == root else m.root_text, m.pos, m.tag, m.ent_type) for m in res.mentions]
    sentences = [(shift(s), shift(e)) for s, e in res.sentences]
    new = Resolution(text, sentences, mentions, res.persons)
    # The edit lies inside one section: sections are joined by a blank line in Document.text.
    sections, at = [], 0
    for sec in doc.sections:
        lo, hi = at, at + len(sec.text)
        if lo <= start and end <= hi:
            sec = Section(sec.title, sec.text[:start - lo] + word + sec.text[end - lo:])
        sections.append(sec)
        at = hi + 2
    out = Document(f"{doc.id}#{name}", tuple(sections), doc.title,
                   {**doc.metadata, METADATA_KEY: new.to_dict(), "corruption": {"name": name, **detail}})
    if out.text != text:
        raise AssertionError(f"document {doc.id!r}: corrupted sections do not rebuild the corrupted text")
    return out


def _corruption(name: str, target: Callable[[Mention, np.random.Generator], str | None]):
    def corrupt(doc: Document, seed: int = 0) -> Document | None:
        res = Resolution.from_dict(doc.metadata[METADATA_KEY], doc.text, where=f"document {doc.id!r}")
        rng = np.random.default_rng([seed, zlib.crc32(doc.id.encode("utf-8"))])
        before = build_chain(res).tokens
        candidates = [m for m in _person_roots(res) if target(m, np.random.default_rng(0)) is not None]
        for k in rng.permutation(len(candidates)):
            m = candidates[k]
            word = _case_like(target(m, rng), m.root_text)
            out = _replace(doc, res, m.root, word, name,
                           {"start": m.root[0], "from": m.root_text, "to": word, "cluster": m.cluster})
            after = build_chain(Resolution.from_dict(out.metadata[METADATA_KEY], out.text)).tokens
            if sum(a != b for a, b in zip(before, after)) == 1:
                return out
        return None

    corrupt.__name__ = f"swap_{name}"
    return corrupt


swap_gender = _corruption("gender", _gender_target)
swap_number = _corruption("number", _number_target)

CORRUPTIONS: dict[str, Callable[[Document, int], Document | None]] = {"gender": swap_gender, "number": swap_number}


def corrupt_resolved(docs: Sequence[Document], name: str, seed: int = 0) -> tuple[list[Document], Counter]:
    """Apply corruption ``name`` to every resolved document; ``(corrupted, counts)`` where counts has
    ``corrupted`` and ``no eligible pronoun``."""
    fn = CORRUPTIONS[name]
    out, counts = [], Counter()
    for doc in docs:
        new = fn(doc, seed)
        if new is None:
            counts["no eligible pronoun"] += 1
        else:
            out.append(new)
            counts["corrupted"] += 1
    return out, counts
