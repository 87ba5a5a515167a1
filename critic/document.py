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

import contextlib
import gc
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["Section", "Document", "DocumentError", "unique_ids", "read_jsonl", "iter_jsonl", "iter_json_lines", "write_jsonl",
           "documents_sha256"]


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
        """Build a document from its JSON object, raising :class:`DocumentError` on bad shape.

        Every field is checked, none is guessed or dropped: ``id`` a non-empty
        string (an integer is read as its digits), ``sections`` a list of
        objects with a string ``text`` and an optional string ``title``,
        ``title`` a string or absent, ``metadata`` an object; any other key is
        an error (extra fields belong under ``metadata``).
        """
        if not isinstance(obj, dict):
            raise DocumentError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        doc_id = obj.get("id")
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id) == "":
            raise DocumentError(f"{where}: document has no 'id' (a non-empty string)")
        doc_id = str(doc_id)
        if not obj.keys() <= _DOCUMENT_KEY_SET:
            _no_unknown_keys(obj, _DOCUMENT_KEYS, f"{where}: document {doc_id!r}")
        sections = obj.get("sections")
        if not isinstance(sections, list):
            raise DocumentError(f"{where}: document {doc_id!r} has no 'sections' list"
                                + (f" ('sections' is a {_json_type(sections)})" if "sections" in obj else ""))
        parsed = [Section(sec.get("title"), sec["text"]) if _plain_section(sec)
                  else _section(sec, f"{where}: document {doc_id!r} section {k}") for k, sec in enumerate(sections)]
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise DocumentError(f"{where}: document {doc_id!r} has a non-string title ({_json_type(title)})")
        metadata = obj.get("metadata")
        metadata = {} if metadata is None else metadata
        if not isinstance(metadata, dict):
            raise DocumentError(f"{where}: document {doc_id!r} has non-object 'metadata'")
        return cls(id=doc_id, sections=tuple(parsed), title=title, metadata=metadata)


_DOCUMENT_KEYS = ("id", "title", "sections", "metadata")
_SECTION_KEYS = ("title", "text")
_DOCUMENT_KEY_SET, _SECTION_KEY_SET = frozenset(_DOCUMENT_KEYS), frozenset(_SECTION_KEYS)


def _plain_section(sec: Any) -> bool:
    """A well-formed section object (the common case, checked without building error context)."""
    return (isinstance(sec, dict) and sec.keys() <= _SECTION_KEY_SET and isinstance(sec.get("text"), str)
            and isinstance(sec.get("title", ""), (str, type(None))))


def _json_type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _no_unknown_keys(obj: dict, known: tuple[str, ...], where: str) -> None:
    import difflib

    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "extra fields belong under 'metadata'"
            raise DocumentError(f"{where} has an unknown key {key!r} ({hint}); known keys: {', '.join(known)}")


def _section(sec: Any, where: str) -> Section:
    if not isinstance(sec, dict):
        raise DocumentError(f"{where} must be an object with a string 'text', got a {_json_type(sec)}")
    _no_unknown_keys(sec, _SECTION_KEYS, where)
    text, title = sec.get("text"), sec.get("title")
    if not isinstance(text, str):
        raise DocumentError(f"{where} must have a string 'text', got "
                            + (f"a {_json_type(text)}" if "text" in sec else "none"))
    if title is not None and not isinstance(title, str):
        raise DocumentError(f"{where} has a non-string title ({_json_type(title)})")
    return Section(title=title, text=text)


def iter_json_lines(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` per non-blank line of a JSON-lines file, ``where = "FILE:LINE"``.

    Raises :class:`DocumentError` naming the file and line for a missing file,
    bytes that are not UTF-8 and invalid JSON.
    """
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    name = str(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{name}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{where}: line is not valid UTF-8 ({exc.reason} at byte "
                                    f"{exc.start})") from None
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DocumentError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a whole file is read into memory.

    Parsed documents hold no reference cycles, yet every few hundred new containers trigger a collection,
    and the older generations' collections walk every document read so far: reading a large file into a
    list takes about twice as long with the collector on.  Streamed reading does not need this (its
    documents die young).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def iter_jsonl(path: str | Path) -> Iterator[Document]:
    """Yield documents from a JSONL file; raise :class:`DocumentError` naming file, line and id."""
    seen: set[str] = set()
    for where, obj in iter_json_lines(path):
        doc = Document.from_dict(obj, where=where)
        if doc.id in seen:
            raise DocumentError(f"{where}: duplicate document id {doc.id!r}")
        seen.add(doc.id)
        yield doc


def read_jsonl(path: str | Path) -> list[Document]:
    """Read every document of a JSONL file; an empty file is an error (nothing to criticise)."""
    with collector_paused():
        docs = list(iter_jsonl(path))
    if not docs:
        raise DocumentError(f"{path}: file holds no documents")
    return docs


def write_jsonl(docs: Iterable[Document], path: str | Path) -> Path:
    """Write documents as JSONL (UTF-8, one object per line); returns the path."""
    from .io import atomic_open

    path = Path(path)
    with atomic_open(path) as fh:
        for doc in docs:
            fh.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")
    return path


def documents_sha256(docs: Iterable[Document]) -> str:
    """SHA-256 of documents as the JSONL :func:`write_jsonl` writes (their provenance in results)."""
    digest = hashlib.sha256()
    for doc in docs:
        digest.update((json.dumps(doc.to_dict(), ensure_ascii=False) + "\n").encode("utf-8"))
    return digest.hexdigest()


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
