"""Hand-written texts of the entity-grid tests, chosen so that en_core_web_sm parses them one way (the tests assert
the parse), with the grids their sentences give."""

from __future__ import annotations

from critic.document import Document, Section

SECTIONS = ("The kernel loads the module. The module was loaded by the kernel. The Justice Department sued the "
            "company.",
            "John and Mary saw the dog and the cat. The cat saw the dog of the cat. It frees memory for the "
            "processes.")
"""Two sections, six sentences: an active and a passive clause, a compound name, coordinated subjects and objects,
an entity in two roles in one sentence, a pronoun and a plural."""

ENTITIES = ("kernel", "module", "department", "company", "john", "mary", "dog", "cat", "memory", "process")
CHAINS = ("SX----", "OS----", "--S---", "--O---", "---S--", "---S--", "---OO-", "---OS-", "-----O", "-----X")
"""The grid of :data:`SECTIONS` by hand: each entity's role in each sentence (B&L: S subject, O object, X other,
- absent), in order of first mention."""

TRAIN = ("The kernel loads the module. The module was loaded by the kernel.",)
"""One training document: the chains ``kernel: S X`` and ``module: O S``."""


def document(doc_id: str, *texts: str) -> Document:
    """A document whose sections (untitled) hold ``texts``."""
    return Document(doc_id, tuple(Section(None, t) for t in texts))
