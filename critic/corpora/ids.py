"""Unique document ids for converted corpora: a repeated id is renamed, never dropped or written twice."""

from __future__ import annotations

from typing import Iterable

from ..document import Document

__all__ = ["unique_ids"]


def unique_ids(docs: Iterable[Document]) -> tuple[list[Document], dict[str, str]]:
    """Give every document a distinct id, deterministically.

    The first document with an id keeps it; the k-th repeat becomes
    ``"<id>#<k>"`` (skipping ids already in use), with the original id kept in
    ``metadata["original_id"]``.  Returns the documents, in order, and the
    renamings (new id -> original id) for the caller to report.
    """
    docs = list(docs)
    taken = {d.id for d in docs}
    seen: dict[str, int] = {}
    renamed: dict[str, str] = {}
    out = []
    for doc in docs:
        count = seen.get(doc.id, 0) + 1
        seen[doc.id] = count
        if count == 1:
            out.append(doc)
            continue
        k = count
        while f"{doc.id}#{k}" in taken:
            k += 1
        new_id = f"{doc.id}#{k}"
        taken.add(new_id)
        renamed[new_id] = doc.id
        copy = doc.replace_sections(doc.sections, id=new_id)
        copy.metadata["original_id"] = doc.id
        out.append(copy)
    return out, renamed
