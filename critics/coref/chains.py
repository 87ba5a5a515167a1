"""Coreference chains (paper sec. 5, fig. 5, app. G) from a :class:`~critics.coref.resolution.Resolution`.

A chain is a list of string tokens, in text order:

- ``.`` at the start of every sentence;
- one token ``TEXT:ID`` per mention root of a **person** entity, where ``ID``
  numbers the entities by first appearance in the chain and ``TEXT`` is the
  root's surface form when it is a pronoun (case kept: ``He`` and ``he``
  differ) and otherwise the entity's gender: ``M``, ``F``, ``P`` (plural) or
  ``N`` (none of these), the majority over the gendered pronouns among the
  entity's mention roots (ties go to the gender seen first).

An entity is a person when one of its mention roots is a person pronoun (a
pronoun other than *it*/*its*: the fixed English list below, or any token
the parser tags ``PRON``), is tagged ``PERSON`` by the named-entity
recogniser, or the resolution lists the cluster in ``persons``.  When several
mentions share a root token (nested mentions), the token is one chain entry,
in the entity with the largest cluster id, as the authors' extraction did;
it counts towards each of its entities' genders.

This follows the authors' extraction script (their ``infer_coreference_chains.py``),
with the genders spelled ``M``/``F``/``P``/``N`` as in the paper's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from .resolution import Resolution

__all__ = ["Chain", "build_chain", "is_person_pronoun", "pronoun_gender", "PERSON_PRONOUNS", "SENTENCE"]

SENTENCE = "."
"""The chain token opening every sentence."""

PERSON_PRONOUNS = frozenset(
    w for base in ("I me my mine myself we us our ours ourselves you your yours yourself yourselves "
                   "he him his himself she her hers herself they them their theirs themselves thee thy").split()
    for w in (base, base.capitalize())
)
"""Personal pronouns (both casings) that make an entity a person."""

_GENDERS = {
    "M": frozenset("he him his himself".split()),
    "F": frozenset("she her hers herself".split()),
    "P": frozenset("we us our ours ourselves you yourselves they them their theirs themselves".split()),
}
_NOT_PERSON = frozenset({"it", "its"})


def pronoun_gender(text: str) -> str | None:
    """``M``, ``F`` or ``P`` for a gendered pronoun (any case), else ``None``."""
    low = text.lower()
    for gender, words in _GENDERS.items():
        if low in words:
            return gender
    return None


def is_person_pronoun(text: str, pos: str = "") -> bool:
    """A pronoun that can refer to a person: in :data:`PERSON_PRONOUNS` or tagged ``PRON``, but not *it*/*its*."""
    if text.lower() in _NOT_PERSON:
        return False
    return text in PERSON_PRONOUNS or pos == "PRON"


@dataclass(frozen=True)
class Chain:
    """A chain's ``tokens`` and, per token, the character span of its mention root (``None`` for ``.``)."""

    tokens: tuple[str, ...]
    spans: tuple[tuple[int, int] | None, ...]

    def __len__(self) -> int:
        return len(self.tokens)


def _spelling(text: str) -> str:
    """A pronoun's surface form as a chain token text: no whitespace, no ``:``."""
    return "".join("_" if ch.isspace() or ch == ":" else ch for ch in text)


def build_chain(resolution: Resolution) -> Chain:
    """The coreference chain of a resolved document (see the module docstring)."""
    roots: dict[tuple[int, int], list] = {}
    for m in resolution.mentions:
        roots.setdefault(m.root, []).append(m)

    person = set(resolution.persons)
    gender_counts: dict[int, dict[str, int]] = {}
    for root, mentions in roots.items():
        for cluster in sorted({m.cluster for m in mentions}):
            m = mentions[0]
            if is_person_pronoun(m.root_text, m.pos) or m.ent_type == "PERSON":
                person.add(cluster)
            g = pronoun_gender(m.root_text)
            counts = gender_counts.setdefault(cluster, {})
            if g is not None:
                counts[g] = counts.get(g, 0) + 1

    def gender(cluster: int) -> str:
        counts = gender_counts.get(cluster, {})
        best, top = "N", 0
        for g, c in counts.items():  # insertion order: ties go to the gender seen first
            if c > top:
                best, top = g, c
        return best

    events = [(s, 0, SENTENCE, None, None) for s, _ in resolution.sentences]
    for root, mentions in roots.items():
        cluster = max(m.cluster for m in mentions)
        if cluster in person:
            events.append((root[0], 1, mentions[0], cluster, root))
    events.sort(key=lambda e: (e[0], e[1]))

    ids: dict[int, int] = {}
    tokens, spans = [], []
    for _, kind, mention, cluster, root in events:
        if kind == 0:
            tokens.append(SENTENCE)
            spans.append(None)
            continue
        entity = ids.setdefault(cluster, len(ids))
        text = (_spelling(mention.root_text) if is_person_pronoun(mention.root_text, mention.pos)
                else gender(cluster))
        tokens.append(f"{text}:{entity}")
        spans.append(root)
    return Chain(tuple(tokens), tuple(spans))
