"""Documents: the unit every critic projects into its latent space.

A :class:`Document` is an id, an optional title, an ordered list of
:class:`Section` (each with an optional title and its text) and free-form
metadata.  On disk a corpus is JSONL, one document per line::

    {"id": "ls.1", "title": "ls", "sections": [{"title": "name", "text": "..."}], "metadata": {}}

Readers never drop anything silently: a malformed line raises
:class:`DocumentError` naming the file, the line and (where it can be read)
the document id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["Section", "Document", "DocumentError", "read_jsonl", "iter_jsonl", "write_jsonl"]


class DocumentError(ValueError):
    """A document that cannot be read or used, with where and why."""


@dataclass(frozen=True)
class Section:
    """One section of a document: an optional title and its text."""

    title: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "text": self.text}


@dataclass(frozen=True)
class Document:
    """A document: ``id``, ordered ``sections``, optional ``title`` and ``metadata``."""

    id: str
    sections: tuple[Section, ...]
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", tuple(self.sections))

    @property
    def section_titles(self) -> list[str | None]:
        return [s.title for s in self.sections]

    @property
    def text(self) -> str:
        """All section texts joined by blank lines."""
        return "\n\n".join(s.text for s in self.sections)

    def replace_sections(self, sections: Iterable[Section], *, id: str | None = None) -> "Document":
        """A copy with other sections (and optionally another id)."""
        return Document(id=self.id if id is None else id, sections=tuple(sections),
                        title=self.title, metadata=dict(self.metadata))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "sections": [s.to_dict() for s in self.sections],
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, obj: Any, *, where: str = "<dict>") -> "Document":
        """Build a document from its JSON object, raising :class:`DocumentError` on bad shape."""
        if not isinstance(obj, dict):
            raise DocumentError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        doc_id = obj.get("id")
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id) == "":
            raise DocumentError(f"{where}: document has no 'id' (a non-empty string)")
        doc_id = str(doc_id)
        sections = obj.get("sections")
        if not isinstance(sections, list):
            raise DocumentError(f"{where}: document {doc_id!r} has no 'sections' list")
        parsed = []
        for k, sec in enumerate(sections):
            if not isinstance(sec, dict) or not isinstance(sec.get("text", ""), str):
                raise DocumentError(f"{where}: document {doc_id!r} section {k} must be an object "
                                    "with a string 'text'")
            title = sec.get("title")
            if title is not None and not isinstance(title, str):
                raise DocumentError(f"{where}: document {doc_id!r} section {k} has a non-string title")
            parsed.append(Section(title=title, text=sec.get("text", "")))
        title = obj.get("title")
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DocumentError(f"{where}: document {doc_id!r} has non-object 'metadata'")
        return cls(id=doc_id, sections=tuple(parsed), title=title if isinstance(title, str) else None,
                   metadata=metadata)


def iter_jsonl(path: str | Path) -> Iterator[Document]:
    """Yield documents from a JSONL file; raise :class:`DocumentError` naming file, line and id."""
    path = Path(path)
    if not path.exists():
        raise DocumentError(f"{path}: no such file")
    seen: set[str] = set()
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{where}: line is not valid UTF-8 ({exc.reason} at byte "
                                    f"{exc.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DocumentError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            doc = Document.from_dict(obj, where=where)
            if doc.id in seen:
                raise DocumentError(f"{where}: duplicate document id {doc.id!r}")
            seen.add(doc.id)
            yield doc


def read_jsonl(path: str | Path) -> list[Document]:
    """Read every document of a JSONL file; an empty file is an error (nothing to criticise)."""
    docs = list(iter_jsonl(path))
    if not docs:
        raise DocumentError(f"{path}: file holds no documents")
    return docs


def write_jsonl(docs: Iterable[Document], path: str | Path) -> Path:
    """Write documents as JSONL (UTF-8, one object per line); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
