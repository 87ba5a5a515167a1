"""Documents: the unit every critic projects into its latent space.

A :class:`Document` is an id, an optional title, an ordered list of
:class:`Section` (each with an optional title and its text) and free-form
metadata.  On disk a corpus is JSONL, one document per line::

    {"id": "ls.1", "title": "ls", "sections": [{"title": "name", "text": "..."}], "metadata": {}}

Readers never drop anything silently: a malformed line raises
:class:`DocumentError` naming the file, the line and (where it can be read)
the document id.  Every text input is read by :func:`iter_input_lines` or
:func:`read_input`: gzip decompressed by suffix (``.gz``; other compressions refused by
name), a UTF-8 byte order mark at its start dropped, a named pipe read as it comes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from . import collector
from .spans import Span, read_span

__all__ = ["Section", "Document", "DocumentError", "unique_ids", "UniqueIds", "read_jsonl", "iter_jsonl", "iter_json_lines", "write_jsonl",
           "documents_sha256", "COMPRESSIONS", "compression", "uncompressed_name", "is_pipe", "check_file",
           "iter_input_lines", "read_input"]


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


# ------------------------------------------------------------------ reading an input file
BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some Windows editors and pandas set-ups write first: not part of the text."""

COMPRESSIONS = {".gz": "gzip"}
"""Suffixes of compressed text inputs, read decompressed."""
UNREAD_COMPRESSIONS = {".zst": "zstd", ".zstd": "zstd", ".bz2": "bzip2", ".xz": "xz"}
"""Suffixes of compressed inputs refused by name (decompress them first): a clear error, not garbled text."""


def compression(path: str | Path) -> str | None:
    """``"gzip"`` when ``path``'s suffix says it is gzip-compressed, else ``None``."""
    return COMPRESSIONS.get(Path(path).suffix.lower())


def uncompressed_name(path: str | Path) -> Path:
    """``path``'s file name less a compression suffix (``gens.jsonl.gz`` gives ``gens.jsonl``): what its
    suffix and stem are looked at in."""
    path = Path(path)
    return Path(path.stem if compression(path) else path.name)


def is_pipe(path: str | Path) -> bool:
    """Whether ``path`` is a named pipe (a FIFO, ``<(command)``): readable once, from the start, no seeking."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def check_file(path: str | Path) -> None:
    """:class:`DocumentError` unless ``path`` is something to read as a file: a file or a named pipe."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise DocumentError(f"{path}: no such file") from None
    except OSError as exc:
        raise DocumentError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise DocumentError(f"{path}: a folder, not a file")


def _open_input(path: Path) -> IO[bytes]:
    unread = UNREAD_COMPRESSIONS.get(path.suffix.lower())
    if unread:
        raise DocumentError(f"{path}: {unread}-compressed input is not read here; decompress it first (or gzip it)")
    if compression(path) == "gzip":
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_errors(path: Path) -> tuple[type[BaseException], ...]:
    """What reading ``path`` raises on an unreadable file or damaged compressed data."""
    if compression(path) == "gzip":
        import zlib

        return OSError, EOFError, zlib.error
    return (OSError,)


def _unreadable(path: Path, exc: BaseException, lines_read: int) -> DocumentError:
    """The error for ``exc`` raised reading ``path`` after ``lines_read`` whole lines."""
    kind = compression(path)
    if kind is None or (type(exc) in (PermissionError, IsADirectoryError)):
        return DocumentError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})")
    if not lines_read:
        return DocumentError(f"{path}: cannot be read as {kind}-compressed text ({exc})")
    return DocumentError(f"{path}:{lines_read + 1}: {kind}-compressed data damaged or cut short ({exc})")


def iter_input_lines(source: str | Path | Span) -> Iterator[tuple[int, bytes]]:
    """``(LINE, bytes)`` per line of a text input (line numbers from 1), decompressed when its suffix says
    (:data:`COMPRESSIONS`), a UTF-8 byte order mark at its start dropped.  A named pipe is read as it comes.
    ``source`` a :class:`~critic.spans.Span`: its lines alone, numbered from its first.

    Raises :class:`DocumentError` naming the file for a missing file or folder, an unreadable file, a file
    changed since its span was planned and damaged compressed data (with the line it stopped at).
    """
    if isinstance(source, Span):
        yield from _span_lines(source)
        return
    path = Path(source)
    check_file(path)
    errors, lineno = _read_errors(path), 0
    try:
        with _open_input(path) as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                yield lineno, raw
    except errors as exc:
        raise _unreadable(path, exc, lineno) from None


def _span_lines(span: Span) -> Iterator[tuple[int, bytes]]:
    """``(LINE, bytes)`` per line of ``span`` (a byte order mark dropped when it starts the file)."""
    try:
        data = read_span(span)
    except ValueError as exc:
        raise DocumentError(str(exc)) from None
    except OSError as exc:
        raise _unreadable(Path(span.path), exc, 0) from None
    if span.start == 0:
        data = data.removeprefix(BOM)
    yield from enumerate(io.BytesIO(data), start=span.first_line)


def read_input(path: str | Path) -> bytes:
    """All the bytes of a text input, decompressed and without a byte order mark (see :func:`iter_input_lines`)."""
    path = Path(path)
    check_file(path)
    errors = _read_errors(path)
    try:
        with _open_input(path) as fh:
            data = fh.read()
    except errors as exc:
        raise _unreadable(path, exc, 0) from None
    return data.removeprefix(BOM)


def iter_json_lines(path: str | Path | Span) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` per non-blank line of a JSON-lines file (or a span of one), ``where = "FILE:LINE"``.

    The file is read by :func:`iter_input_lines` (decompressed by suffix, a byte order mark dropped).
    Raises :class:`DocumentError` naming the file and line for a missing file, bytes that are not
    UTF-8, invalid JSON and JSON nested too deep to parse.
    """
    name = str(path)
    for lineno, raw in iter_input_lines(path):
        where = f"{name}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"{where}: line is not valid UTF-8 ({exc.reason} at byte "
                                f"{exc.start})") from None
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise DocumentError(f"{where}: JSON nested deeper than Python's JSON parser allows") from None
        yield where, value


class UniqueIds:
    """The document ids of an input read so far, each with where it was read: the one check that ids are unique
    (every reader's, and a stream's across chunks read apart: :meth:`claim_all`)."""

    def __init__(self) -> None:
        self.where: dict[str, str] = {}

    def claim(self, doc_id: str, where: str) -> None:
        """Take ``doc_id``, read at ``where``; :class:`DocumentError` naming both places when it was taken."""
        first = self.where.get(doc_id)
        if first is not None:
            raise DocumentError(f"{where}: duplicate document id {doc_id!r} (first at {first})")
        self.where[doc_id] = where

    def claim_all(self, other: "UniqueIds") -> None:
        """Take every id of ``other`` (read after these, its own unique): the first of them taken already is named
        (the ids are compared as sets, then merged, at C speed)."""
        if not self.where.keys().isdisjoint(other.where):
            taken = self.where.keys() & other.where.keys()
            doc_id = next(i for i in other.where if i in taken)
            self.claim(doc_id, other.where[doc_id])
        self.where.update(other.where)


def iter_jsonl(path: str | Path | Span, ids: UniqueIds | None = None) -> Iterator[Document]:
    """Yield documents from a JSONL file (or a span of one); raise :class:`DocumentError` naming file, line and id.
    ``ids``: where the ids are claimed (a fresh :class:`UniqueIds` when not given)."""
    ids = UniqueIds() if ids is None else ids
    for where, obj in iter_json_lines(path):
        doc = Document.from_dict(obj, where=where)
        ids.claim(doc.id, where)
        yield doc


def read_jsonl(path: str | Path) -> list[Document]:
    """Read every document of a JSONL file; an empty file is an error (nothing to criticise)."""
    with collector.paused():
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
