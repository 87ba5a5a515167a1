"""A document's entity grid (Barzilay & Lapata 2008): each entity's grammatical role in each sentence.

Rows of B&L's grid are sentences, columns entities; here an :class:`EntityGrid` holds the transpose, ``roles (E,
N)``, one row per entity (its *role chain* over the ``N`` sentences), since the prior scores chains.

- **Sentences**: :func:`critic.sentences.sentence_spans` of each section's text, sections in order (titles are not
  sentences).  The rule splitter, not spaCy's: the corruptions that shuffle sentences (:mod:`critic.corrupt`) cut
  text with it too.  Each sentence is parsed alone, so its roles depend on its text only, and the same sentences
  in another order give the grid with its columns permuted.
- **Entities**: heads of noun phrases -- tokens tagged ``NOUN`` or ``PROPN`` that are not the ``compound`` modifier
  of another noun ("Justice Department" is the entity *department*, "Alvar Aalto" the entity *aalto*) -- named by
  their lemma, lower-cased; a lemma without a letter (``%``) is no entity.  Two mentions are one entity when their
  names agree (B&L's grid without coreference); pronouns are not entities.
- **Roles**: ``S`` for a subject (``nsubj``, ``nsubjpass``, ``csubj``, ``csubjpass``), ``O`` for an object
  (``dobj``, ``obj``, ``iobj``, ``dative``), ``X`` for any other mention (prepositional objects, possessors,
  appositions, predicate nominals), ``-`` where the entity is absent.  A conjunct takes the role of the phrase it is
  conjoined to ("John and Mary saw ...": both ``S``).  An entity mentioned several times in a sentence keeps its
  highest-ranked role, ``S > O > X`` (B&L).

Parsing is the cost (spaCy's ``en_core_web_sm`` parses about 6,000 words of man pages a second on one core), so a
:class:`SentenceParser` keeps each sentence's roles by its text: a sentence met again -- in a shuffled copy of a
document, a cross-fitting fold, another batch -- is not parsed again.  spaCy is imported on the first parse.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from critic.document import Document
from critic.sentences import sentence_spans

__all__ = ["ABSENT", "OTHER", "OBJECT", "SUBJECT", "ROLE_SYMBOLS", "SUBJECT_DEPENDENCIES", "OBJECT_DEPENDENCIES",
           "EntityGrid", "SentenceRoles", "document_sentences", "role_of", "sentence_roles", "build_grid",
           "SentenceParser", "sentence_parser"]

ABSENT, OTHER, OBJECT, SUBJECT = 0, 1, 2, 3
"""Role codes, ordered by rank: the highest of several mentions in a sentence is kept."""

ROLE_SYMBOLS = "-XOS"
"""``ROLE_SYMBOLS[code]``: how a role is written (B&L's ``-``, ``X``, ``O``, ``S``)."""

SUBJECT_DEPENDENCIES = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass"})
OBJECT_DEPENDENCIES = frozenset({"dobj", "obj", "iobj", "dative"})
ENTITY_TAGS = frozenset({"NOUN", "PROPN"})

SentenceRoles = tuple[tuple[str, int], ...]
"""The entities of one sentence with their roles, in order of first mention: ``(("kernel", SUBJECT), ...)``."""

_MEMO_LIMIT = 1 << 18  # sentences remembered by a parser before its memo starts afresh


@dataclass(frozen=True, eq=False)
class EntityGrid:
    """``roles (E, N)`` int8 role codes of ``E`` entities (``entities``, in order of first mention) in ``N``
    sentences; every entity is mentioned at least once."""

    entities: tuple[str, ...]
    roles: np.ndarray

    @property
    def sentences(self) -> int:
        return self.roles.shape[1]

    @property
    def mentions(self) -> np.ndarray:
        """``(E,)``: the sentences each entity is mentioned in."""
        return (self.roles != ABSENT).sum(1)

    def chain(self, entity: int) -> str:
        """Row ``entity`` written as role symbols, ``"S--OX"``."""
        return "".join(ROLE_SYMBOLS[r] for r in self.roles[entity])

    def __eq__(self, other) -> bool:
        return (isinstance(other, EntityGrid) and self.entities == other.entities
                and np.array_equal(self.roles, other.roles))

    __hash__ = None


def document_sentences(doc: Document) -> list[str]:
    """The document's sentences (:func:`~critic.sentences.sentence_spans` of each section's text, in order)."""
    return [sec.text[start:end] for sec in doc.sections for start, end in sentence_spans(sec.text)]


def role_of(token) -> int:
    """The role of a spaCy token that heads a noun phrase: that of the first conjunct of its coordination, then
    ``SUBJECT`` / ``OBJECT`` by its dependency label, else ``OTHER``."""
    while token.dep_ == "conj" and token.head is not token:
        token = token.head
    if token.dep_ in SUBJECT_DEPENDENCIES:
        return SUBJECT
    return OBJECT if token.dep_ in OBJECT_DEPENDENCIES else OTHER


def sentence_roles(parsed: Iterable) -> SentenceRoles:
    """The entities of a parsed sentence (spaCy tokens) with their highest-ranked role (module docstring)."""
    roles: dict[str, int] = {}
    for token in parsed:
        if token.pos_ not in ENTITY_TAGS or token.dep_ == "compound":
            continue
        name = token.lemma_.lower()
        if any(c.isalpha() for c in name):
            roles[name] = max(roles.get(name, ABSENT), role_of(token))
    return tuple(roles.items())


def build_grid(sentences: Sequence[SentenceRoles]) -> EntityGrid:
    """The grid of a document from its sentences' roles, entities in order of first mention."""
    index: dict[str, int] = {}
    for found in sentences:
        for name, _ in found:
            index.setdefault(name, len(index))
    roles = np.zeros((len(index), len(sentences)), dtype=np.int8)
    for n, found in enumerate(sentences):
        for name, role in found:
            roles[index[name], n] = role
    return EntityGrid(tuple(index), roles)


class SentenceParser:
    """A spaCy pipeline (``name``: an installed package or a folder) that reads sentences' roles, each distinct
    sentence once.  The pipeline is loaded on first use without its named-entity recogniser (the lemmatiser stays:
    entities are named by lemma); ``nlp.pipe`` parses the sentences not yet seen in batches of ``batch_size``."""

    def __init__(self, name: str, batch_size: int = 256):
        self.name = name
        self.batch_size = batch_size
        self.seen: dict[str, SentenceRoles] = {}
        self._nlp = None

    @property
    def nlp(self):
        if self._nlp is None:
            import spacy

            self._nlp = spacy.load(self.name, exclude=["ner"])
        return self._nlp

    def roles(self, sentences: Sequence[str]) -> list[SentenceRoles]:
        """Each sentence's entities and roles (:func:`sentence_roles`), parsing only those not seen before.  A
        sentence longer than the pipeline's ``max_length`` characters is cut there."""
        distinct = dict.fromkeys(sentences)
        found = {s: self.seen[s] for s in distinct if s in self.seen}
        new = [s for s in distinct if s not in found]
        if new:
            limit = self.nlp.max_length
            for text, parsed in zip(new, self.nlp.pipe((s[:limit] for s in new), batch_size=self.batch_size)):
                found[text] = sentence_roles(parsed)
            if len(self.seen) + len(new) > _MEMO_LIMIT:
                self.seen.clear()
            self.seen.update((s, found[s]) for s in new)
        return [found[s] for s in sentences]

    def grids(self, docs: Sequence[Document]) -> list[EntityGrid]:
        """The entity grid of each document, the sentences of all of them parsed in one pass."""
        per_doc = [document_sentences(d) for d in docs]
        found = iter(self.roles([s for sentences in per_doc for s in sentences]))
        return [build_grid([next(found) for _ in sentences]) for sentences in per_doc]


@functools.lru_cache(maxsize=4)
def sentence_parser(name: str) -> SentenceParser:
    """The process's one :class:`SentenceParser` of the pipeline ``name``, shared by every critic that uses it."""
    return SentenceParser(name)
