"""How a sectioned document becomes the text a causal LM is trained on, and back.

The paper (sec. 4, "W/ Title" and "W/O Title"; app. E) trains LMs on articles whose sections are
separated by a special marker and which end with a special end-of-sequence symbol.  A
:class:`DocumentFormat` fixes that text:

* W/ Title (``with_titles=True``): each section is ``title + "\\n" + text``;
* W/O Title: each section is its ``text`` alone;

sections are joined by ``"\\n" + section_marker + "\\n"`` and the document ends with
``end_of_document`` (right after the last section's text)::

    NAME\\nls - list directory contents\\n<|section|>\\nSYNOPSIS\\nls [OPTION]...<|endofdoc|>

Every document follows an end token (the one that ends the document before it, or the one a generation
starts from) and, when the format has a ``start_of_document`` token, that token: given, never predicted
(:mod:`critic.lm.windows`, :mod:`critic.lm.sampler`).  A pretrained model's state at a lone end token at
position 0 barely moves in fine-tuning, so its first tokens keep the pretraining's spread; the first token
predicted at a start token after it is learnt like any other (docs/lm.md).

:meth:`DocumentFormat.parse` inverts :meth:`DocumentFormat.render` for generated text; anything a
critic cannot use raises :class:`GenerationParseError` with a short ``reason`` key that sampling
counts (nothing is dropped silently).  Generated titles are removed from the sections
(``Section.title = None``) and kept in ``metadata["generated_titles"]``: the paper discards them
before criticism.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..document import Document, DocumentError, Section

__all__ = ["DocumentFormat", "GenerationParseError", "PARSE_REASONS", "WITH_TITLES", "WITHOUT_TITLES"]

WITH_TITLES = "with-titles"
WITHOUT_TITLES = "without-titles"

PARSE_REASONS = ("no end-of-document", "text after end-of-document", "empty document", "empty section",
                 "missing title line")
"""Every ``GenerationParseError.reason``: the keys failures are counted under."""


class GenerationParseError(ValueError):
    """Generated text that is not a document of the format; ``reason`` is one of :data:`PARSE_REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason + (f": {detail}" if detail else ""))
        self.reason = reason


@dataclass(frozen=True)
class DocumentFormat:
    """The training text of a document: W/ or W/O section titles, a section marker, an end token, and
    optionally a start token given before each document (after the end token)."""

    with_titles: bool
    section_marker: str = "<|section|>"
    end_of_document: str = "<|endofdoc|>"
    start_of_document: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.with_titles, bool):
            raise ValueError(f"with_titles must be true or false, got {self.with_titles!r}")
        names = ("section_marker", "end_of_document") + (() if self.start_of_document is None else
                                                          ("start_of_document",))
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or value != value.strip():
                raise ValueError(f"{name} must be a non-empty string without surrounding spaces, got {value!r}")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                x, y = getattr(self, a), getattr(self, b)
                if x in y or y in x:
                    raise ValueError(f"{a} {x!r} and {b} {y!r} must not contain one another")

    @property
    def name(self) -> str:
        """``"with-titles"`` or ``"without-titles"`` (the CLI's ``--format``)."""
        return WITH_TITLES if self.with_titles else WITHOUT_TITLES

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tokens the LM's vocabulary needs: (section marker, end of document[, start of document])."""
        return (self.section_marker, self.end_of_document) + ((self.start_of_document,) if self.start_of_document
                                                              else ())

    @property
    def prompt_tokens(self) -> tuple[str, ...]:
        """What every document follows: the end token, then the start token if the format has one."""
        return (self.end_of_document,) + ((self.start_of_document,) if self.start_of_document else ())

    @property
    def separator(self) -> str:
        return f"\n{self.section_marker}\n"

    # ------------------------------------------------------------ render
    def render(self, doc: Document) -> str:
        """The training text of ``doc`` (see the module docstring); raises :class:`DocumentError` when
        it could not be parsed back (a title with a newline, a marker inside a text, W/ Title without
        a title)."""
        pieces = []
        for k, sec in enumerate(doc.sections):
            where = f"document {doc.id!r} section {k}"
            self._check_free_of_markers(sec.text, f"{where} text")
            if self.with_titles:
                if sec.title is None or not sec.title.strip():
                    raise DocumentError(f"{where} has no title; the with-titles format needs one per section")
                if "\n" in sec.title or "\r" in sec.title:
                    raise DocumentError(f"{where} title {sec.title!r} spans lines; the with-titles format "
                                        "needs one line")
                self._check_free_of_markers(sec.title, f"{where} title")
                pieces.append(f"{sec.title}\n{sec.text}")
            else:
                pieces.append(sec.text)
        if not pieces:
            raise DocumentError(f"document {doc.id!r} has no sections to render")
        return self.separator.join(pieces) + self.end_of_document

    def _check_free_of_markers(self, text: str, where: str) -> None:
        for token in self.special_tokens:
            if token in text:
                raise DocumentError(f"{where} contains the special token {token!r}")

    # ------------------------------------------------------------ parse
    def parse(self, text: str, *, doc_id: str, metadata: dict | None = None) -> Document:
        """The document a generation stands for: the inverse of :meth:`render`.

        The text must end with ``end_of_document`` (a generation cut by its token budget does not:
        reason ``"no end-of-document"``) and hold nothing after its first one; it is split at the
        section markers, dropping one newline on each side of a marker where there is one.  W/
        Title: a section's first line is its title (``"missing title line"`` when there is no line
        break or the line is blank); the titles go to ``metadata["generated_titles"]`` and the
        sections keep ``title=None``.  A section whose text is blank is ``"empty section"``; no
        text at all before the end token is ``"empty document"``.
        """
        end = text.find(self.end_of_document)
        if end < 0:
            raise GenerationParseError("no end-of-document")
        if text[end + len(self.end_of_document):]:
            raise GenerationParseError("text after end-of-document")
        body = text[:end]
        if not body.strip():
            raise GenerationParseError("empty document")
        pieces = body.split(self.section_marker)
        pieces = [p[1:] if k > 0 and p.startswith("\n") else p for k, p in enumerate(pieces)]
        pieces = [p[:-1] if k < len(pieces) - 1 and p.endswith("\n") else p for k, p in enumerate(pieces)]
        titles: list[str] = []
        sections = []
        for k, piece in enumerate(pieces):
            if self.with_titles:
                title, newline, piece = piece.partition("\n")
                if not newline or not title.strip():
                    raise GenerationParseError("missing title line", f"section {k}")
                titles.append(title)
            if not piece.strip():
                raise GenerationParseError("empty section", f"section {k}")
            sections.append(Section(title=None, text=piece))
        meta = dict(metadata or {})
        if self.with_titles:
            meta["generated_titles"] = titles
        return Document(id=doc_id, sections=tuple(sections), metadata=meta)

    # ------------------------------------------------------------ words
    def count_words(self, text: str) -> int:
        """Whitespace-separated words of ``text``, each section marker and end token one word even
        when glued to a neighbour (``"a<|section|>b"`` is three words)."""
        pattern = "|".join(re.escape(t) for t in self.special_tokens)
        pieces = re.split(pattern, text)
        return sum(len(p.split()) for p in pieces) + len(pieces) - 1

    # ------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format": self.name, **asdict(self)}

    @classmethod
    def from_dict(cls, obj: Any, *, where: str = "<format>") -> "DocumentFormat":
        """Inverse of :meth:`to_dict`; raises ``ValueError`` naming ``where`` on a bad object."""
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        known = {"format", "with_titles", "section_marker", "end_of_document", "start_of_document"}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(known))}")
        if "with_titles" not in obj:
            raise ValueError(f"{where}: no 'with_titles'")
        kwargs = {k: obj[k] for k in ("with_titles", "section_marker", "end_of_document", "start_of_document")
                  if k in obj}
        try:
            fmt = cls(**kwargs)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if "format" in obj and obj["format"] != fmt.name:
            raise ValueError(f"{where}: 'format' is {obj['format']!r} but with_titles is {fmt.with_titles}")
        return fmt

    @classmethod
    def named(cls, name: str, **tokens: str) -> "DocumentFormat":
        """``"with-titles"`` or ``"without-titles"``, with the default tokens unless ``tokens``
        (``section_marker``, ``end_of_document``, ``start_of_document``) says otherwise."""
        if name not in (WITH_TITLES, WITHOUT_TITLES):
            raise ValueError(f"format must be {WITH_TITLES!r} or {WITHOUT_TITLES!r}, got {name!r}")
        return cls(with_titles=name == WITH_TITLES, **tokens)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"
