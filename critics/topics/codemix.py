"""Code-mixed documents with known answers, built from monolingual documents of two languages.

Paper app. C criticises generations for *code-mixing* (a translation that switches language); to test that
the LDA critic flags it, a code-mixed document is made from a document ``a`` in language A and a document
``b`` in language B:

- ``"sentences"`` (sentence-level switching): the sentences of ``a`` and ``b`` in alternating runs of
  ``run`` sentences (``a``'s first), ``a1 b1 a2 b2 ...`` for ``run=1``, until either runs out.  Sentences
  are split after ``.``, ``!``, ``?`` or ``…`` followed by white space (:func:`split_sentences`); a
  document of one sentence still gives ``a1 b1``.
- ``"words"`` (word-level mixing): ``a``'s white-space separated words, each replaced with probability
  ``rate`` (seeded) by the next word of ``b`` (in ``b``'s order, starting over at its end); at least one
  word is replaced and at least one kept.

Each mixed document has id ``"<idA>+<idB>#<kind>"``, one section (``a``'s first section title) and
``metadata["code_mix"]`` recording the kind, the source ids and languages, the setting (``run`` or
``rate``), the number of word tokens from each source and ``fraction_b`` -- the share of the mixed
document's word tokens (``\\w+``) that come from ``b``: the known answer a critic's topic weights can be
compared with.  :func:`code_mixed_set` pairs documents of two languages at random (seeded) and builds
one mixed document per pair and kind.
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from critic.document import Document, Section

__all__ = ["KINDS", "split_sentences", "code_mix", "code_mixed_set"]

KINDS = ("sentences", "words")

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_WORD = re.compile(r"\w+")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.``, ``!``, ``?`` or ``…`` followed by white space (a simple
    rule: abbreviations split too, which only makes runs shorter)."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text.strip())) if s]


def _n_words(text: str) -> int:
    return len(_WORD.findall(text))


def _language(doc: Document) -> str | None:
    return doc.metadata.get("language")


def code_mix(a: Document, b: Document, kind: str = "sentences", *, run: int = 1, rate: float = 0.5,
             seed: int = 0) -> Document:
    """A code-mixed document from ``a`` (language A) and ``b`` (language B); see the module docstring."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    setting: dict
    if kind == "sentences":
        if not isinstance(run, int) or run < 1:
            raise ValueError(f"run must be a positive integer, got {run!r}")
        sa, sb = split_sentences(a.text), split_sentences(b.text)
        if not sa or not sb:
            raise ValueError(f"{a.id if not sa else b.id}: no sentence to mix")
        parts: list[tuple[str, str]] = []  # (source, sentence)
        for start in range(0, min(len(sa), len(sb)), run):
            parts += [("a", s) for s in sa[start:start + run]] + [("b", s) for s in sb[start:start + run]]
        text = " ".join(s for _, s in parts)
        words_a = sum(_n_words(s) for src, s in parts if src == "a")
        words_b = sum(_n_words(s) for src, s in parts if src == "b")
        setting = {"run": run, "sentences_a": sum(src == "a" for src, _ in parts),
                   "sentences_b": sum(src == "b" for src, _ in parts)}
    else:
        if not 0 < rate < 1:
            raise ValueError(f"rate must be in (0, 1), got {rate!r}")
        wa, wb = a.text.split(), b.text.split()
        if len(wa) < 2 or not wb:
            raise ValueError(f"{a.id if len(wa) < 2 else b.id}: too few words to mix")
        rng = random.Random(f"{seed}:{a.id}+{b.id}")
        replace = [rng.random() < rate for _ in wa]
        if not any(replace):
            replace[rng.randrange(len(wa))] = True
        if all(replace):
            replace[rng.randrange(len(wa))] = False
        out, j, words_a, words_b = [], 0, 0, 0
        for word, swap in zip(wa, replace):
            if swap:
                word = wb[j % len(wb)]
                j += 1
                words_b += _n_words(word)
            else:
                words_a += _n_words(word)
            out.append(word)
        text = " ".join(out)
        setting = {"rate": rate, "replaced": j, "words": len(wa)}
    total = words_a + words_b
    meta = {"code_mix": {"kind": kind, "sources": [a.id, b.id], "languages": [_language(a), _language(b)],
                         **setting, "seed": seed, "words_a": words_a, "words_b": words_b,
                         "fraction_b": words_b / total if total else 0.0}}
    title = a.sections[0].title if a.sections else None
    return Document(id=f"{a.id}+{b.id}#{kind}", sections=(Section(title, text),), title=a.title, metadata=meta)


def code_mixed_set(docs_a: Sequence[Document], docs_b: Sequence[Document], *, n: int | None = None,
                   kinds: Sequence[str] = KINDS, run: int = 1, rate: float = 0.5, seed: int = 0) -> list[Document]:
    """``n`` random pairs (``a`` from ``docs_a``, ``b`` from ``docs_b``, each document used at most once
    per side; default as many as the smaller list), one mixed document per pair and kind (pair-major
    order), seeded.  A pair that cannot be mixed (a document with no sentence or too few words) raises."""
    rng = random.Random(seed)
    n = min(len(docs_a), len(docs_b)) if n is None else n
    if n > min(len(docs_a), len(docs_b)):
        raise ValueError(f"n={n} pairs need {n} documents per language, have {len(docs_a)} and {len(docs_b)}")
    ia, ib = rng.sample(range(len(docs_a)), n), rng.sample(range(len(docs_b)), n)
    out = []
    for i, j in zip(ia, ib):
        out += [code_mix(docs_a[i], docs_b[j], kind, run=run, rate=rate, seed=seed) for kind in kinds]
    return out
