"""Seeded structural corruptions of documents: controlled "bad generations".

Each corruption returns a new document with id ``"<id>#<name>"`` and the
corruption recorded in ``metadata["corruption"]``.  The random choices come
from ``numpy.random.default_rng([seed, crc32(id)])``: the same document and
seed always give the same corruption, whatever else is in the set.
"""

from __future__ import annotations

import zlib
from typing import Callable, Sequence

import numpy as np

from .document import Document

__all__ = ["permute_sections", "repeat_section", "drop_section", "CORRUPTIONS", "corrupt_all"]


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


CORRUPTIONS: dict[str, Callable[[Document, int], Document]] = {
    "permuted": permute_sections,
    "repeated": repeat_section,
    "dropped": drop_section,
}


def corrupt_all(docs: Sequence[Document], name: str, seed: int = 0) -> list[Document]:
    """Apply the corruption ``name`` to every document that has a section."""
    fn = CORRUPTIONS[name]
    return [fn(d, seed) for d in docs if d.sections]
