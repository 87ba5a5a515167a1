"""Coreference resolutions: what any resolver hands the chain builder.

A :class:`Resolution` is a document's text with its sentences and its
mentions, each mention a character span in a cluster (an entity) with the
span and attributes of its root token.  Two resolvers produce them:

- neuralcoref (the paper's resolver), through the Python 3.7 worker of
  :mod:`critics.coref.neuralcoref`, which fills the root token's spaCy
  ``pos``, ``tag`` and ``ent_type``;
- precomputed clusters (:func:`from_clusters`), for users with a resolver of
  their own: lists of character spans per cluster, optionally sentences and
  which clusters are people.  The root of a precomputed mention is its last
  word (the head of a simple English noun phrase), and its attributes are
  unknown (empty strings).

The JSON form (:meth:`Resolution.to_dict`) is what the worker writes and what
``Document.metadata["coref"]`` holds::

    {"sentences": [[start, end], ...],
     "mentions": [{"start": s, "end": e, "cluster": k, "root": [rs, re],
                   "root_text": "...", "pos": "PRON", "tag": "PRP", "ent_type": ""}, ...],
     "persons": [k, ...] (optional: clusters known to be people),
     "text_sha256": "..."}

Offsets index the document's text (``Document.text``: sections joined by a
blank line).  Every field is validated; an error names the document and the
field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from critic.sentences import sentence_spans as split_sentences

__all__ = ["Mention", "Resolution", "ResolutionError", "from_clusters", "split_sentences", "text_sha256"]


class ResolutionError(ValueError):
    """A resolution that does not fit its document: the message names the document and field."""


def text_sha256(text: str) -> str:
    """SHA-256 of the text's UTF-8 (a lone surrogate, which is no Unicode, is encoded as is)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Mention:
    """One mention: characters ``[start, end)``, its cluster, and its root token's span and attributes."""

    start: int
    end: int
    cluster: int
    root: tuple[int, int]
    root_text: str
    pos: str = ""
    tag: str = ""
    ent_type: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "cluster": self.cluster, "root": list(self.root),
                "root_text": self.root_text, "pos": self.pos, "tag": self.tag, "ent_type": self.ent_type}


@dataclass
class Resolution:
    """A document's text, its sentences ``[(start, end)]`` and mentions (sorted by position)."""

    text: str
    sentences: list[tuple[int, int]]
    mentions: list[Mention]
    persons: frozenset[int] = field(default_factory=frozenset)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sentences": [list(s) for s in self.sentences],
                               "mentions": [m.to_dict() for m in self.mentions],
                               "text_sha256": text_sha256(self.text)}
        if self.persons:
            out["persons"] = sorted(self.persons)
        return out

    @classmethod
    def from_dict(cls, obj: Any, text: str, *, where: str = "resolution") -> "Resolution":
        """Read and validate the JSON form against ``text`` (raises :class:`ResolutionError`)."""
        if not isinstance(obj, dict):
            raise ResolutionError(f"{where}: expected an object, got {type(obj).__name__}")
        digest = obj.get("text_sha256")
        if digest is not None and digest != text_sha256(text):
            raise ResolutionError(f"{where}: was computed on another text (text_sha256 differs)")
        sentences = [_span(s, len(text), f"{where}: sentences[{k}]") for k, s in enumerate(obj.get("sentences", []))]
        mentions = []
        for k, m in enumerate(obj.get("mentions", [])):
            at = f"{where}: mentions[{k}]"
            if not isinstance(m, dict):
                raise ResolutionError(f"{at}: expected an object")
            start, end = _span([m.get("start"), m.get("end")], len(text), at)
            root = _span(m.get("root", [start, end]), len(text), f"{at}.root")
            cluster = m.get("cluster")
            if not isinstance(cluster, int) or isinstance(cluster, bool) or cluster < 0:
                raise ResolutionError(f"{at}: 'cluster' must be a non-negative integer, got {cluster!r}")
            fields = {}
            for name in ("root_text", "pos", "tag", "ent_type"):
                value = m.get(name, text[root[0]:root[1]] if name == "root_text" else "")
                if not isinstance(value, str):
                    raise ResolutionError(f"{at}: {name!r} must be a string")
                fields[name] = value
            mentions.append(Mention(start, end, cluster, root, **fields))
        persons = obj.get("persons", [])
        if not isinstance(persons, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in persons):
            raise ResolutionError(f"{where}: 'persons' must be a list of cluster ids")
        if not sentences and text.strip():
            sentences = split_sentences(text)
        mentions.sort(key=lambda m: (m.start, m.end, m.cluster))
        return cls(text, sentences, mentions, frozenset(persons))


def _span(value: Any, length: int, where: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ResolutionError(f"{where}: expected [start, end] integers, got {value!r}")
    start, end = value
    if not 0 <= start < end <= length:
        raise ResolutionError(f"{where}: span [{start}, {end}) is not inside the text (length {length})")
    return start, end


_WORD = re.compile(r"\w+(?:'\w+)?")


def from_clusters(text: str, clusters: Sequence[Sequence[Sequence[int]]], *,
                  sentences: Sequence[Sequence[int]] | None = None, persons: Sequence[int] = (),
                  where: str = "clusters") -> Resolution:
    """A resolution from precomputed clusters: ``clusters[k]`` lists the ``[start, end)`` spans of
    entity ``k``.  The root of a mention is its last word; sentences default to :func:`split_sentences`."""
    mentions = []
    for k, cluster in enumerate(clusters):
        for j, span in enumerate(cluster):
            start, end = _span(span, len(text), f"{where}[{k}][{j}]")
            words = list(_WORD.finditer(text, start, end))
            root = (words[-1].start(), words[-1].end()) if words else (start, end)
            mentions.append(Mention(start, end, k, root, text[root[0]:root[1]]))
    mentions.sort(key=lambda m: (m.start, m.end, m.cluster))
    sents = ([_span(s, len(text), f"{where}: sentences[{k}]") for k, s in enumerate(sentences)]
             if sentences is not None else split_sentences(text))
    return Resolution(text, sents, mentions, frozenset(persons))
