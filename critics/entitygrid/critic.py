"""Entity-grid coherence critic (Barzilay & Lapata 2005, 2008): how a document's sentences hold on to their
entities.

Latent ``z``: the document's entity grid (:mod:`.grid`), each entity's grammatical role ``S``/``O``/``X``/``-`` in
each sentence, with its salience class.  Prior ``P_c(z)``: an order-``k`` Markov chain over each entity's roles
with a start state, one per salience class, fitted on real text with add-alpha smoothing (:mod:`.prior`).

Posterior: a point mass on the grid the parser reads.  spaCy's parser is deterministic (one parse per sentence,
no distribution over parses is exposed), so the grid is a function of the text; the parser's errors are not
modelled.  Hence ``T(x) = -log P_c(z)`` exactly, and ``M(x)`` = the categorical draws scored, ``E N`` role cells
plus ``E`` class draws when there are two salience classes: the Latent PPL is a per-draw perplexity.

``T/M`` compares a document's grid with real grids, but across documents it mostly measures how dense a grid is
(a grid is mostly ``-`` cells, and their share grows with the sentences).  What sentence order alone does is
measured against the document's own sentences: ``order_rank``, the share of the orders of its sentences that the
prior scores as more likely than the given one (B&L's discrimination task for one document, ties counting half),
is an outlier statistic beside ``T/M`` -- about 1/2 for a shuffled document, near 0 for a coherent one, whatever
its length.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence

import numpy as np
import torch

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document
from critic.latent import ValuePointMass
from critic.lm.encoders import DEFAULT_SPACY
from critic.registry import register_critic
from critic.sentences import sentence_spans

from .grid import EntityGrid, sentence_parser
from .prior import EntityGridPrior, count, sentence_orders

__all__ = ["EntityGridCritic", "DEFAULT_SPACY", "OrderRank"]

TIE = 1e-9
"""Relative tolerance within which two orders' ``T`` count as tied (sums of the same terms in another order)."""


class OrderRank:
    """Where a grid's sentence order stands among other orders of its sentences under a prior.

    ``rank = mean_pi ([T(pi z) < T(z)] + [T(pi z) = T(z)] / 2)`` over the orders ``pi`` of the grid's sentences
    (:func:`.prior.sentence_orders`: all ``N!``, the given one included, when there are at most
    :data:`.prior.EXACT_ORDERS`, else ``samples`` uniform random ones); two ``T`` within :data:`TIE` of each other
    tie.  ``entity_excess (E,)``: each entity's ``-log P`` minus its mean over those orders (positive: the given
    order costs the entity more than a random one); ``orders``: how many orders were compared."""

    def __init__(self, prior: EntityGridPrior, grid: EntityGrid, samples: int):
        orders = sentence_orders(grid.sentences, samples)
        per_order = prior.order_nll(grid, orders)  # (E, P)
        given = prior.chain_nll(grid.roles)
        total, totals = float(given.sum()), per_order.sum(0)
        tie = np.abs(totals - total) <= TIE * max(1.0, abs(total))
        self.rank = float(np.mean((totals < total) & ~tie) + 0.5 * np.mean(tie))
        self.entity_excess = given - per_order.mean(1)
        self.orders = len(orders)


@register_critic("entity-grid")
class EntityGridCritic(Critic):
    """Entity-grid coherence (Barzilay & Lapata 2008): each entity's roles sentence by sentence under a Markov
    chain; point-mass posterior on the parsed grid.

    Parameters
    ----------
    order: the chain's order k (1: B&L's role bigrams, 2: trigrams).
    salience: an entity mentioned in at least this many sentences is salient, with a chain of its own (1: one
        chain for all entities).
    smoothing: add-alpha pseudo-count of every role after every context, and of every salience class.
    spacy_model: the spaCy pipeline that parses sentences (an installed package name or a folder).
    order_samples: random orders of its sentences the order rank compares a document of 7 or more sentences with
        (a shorter one is compared with all of its orders).

    Fitted attributes: ``class_counts_ (C,)``, ``role_counts_ (C, 5^k, 4)`` (:func:`.prior.count`), ``prior_``,
    ``training_skipped_`` (id -> why: training documents without sentences or entities) and ``training_grids_``.
    """

    extra = "entity-grid"  # pip install 'critic[entity-grid]': spaCy and its en_core_web_sm pipeline
    batch_size = 64  # parsing is the cost: a batch is a few seconds of spaCy
    chunk_documents = 256
    needs = "English free text with sentences (parsed by spaCy's en_core_web_sm)"
    outlier_statistics = ("order_rank",)  # sentence order measured against the document's own sentences

    reason_entities: int = 4
    """How many of a document's least likely entities :meth:`reasons` names (after the line on its order)."""

    def __init__(
        self,
        order: Literal[1, 2] = 2,
        salience: Annotated[int, Range(min=1)] = 2,
        smoothing: Annotated[float, Range(gt=0, max=1e12)] = 0.1,
        spacy_model: str = DEFAULT_SPACY,
        order_samples: Annotated[int, Range(min=2, max=100_000)] = 100,
    ):
        self.order = order
        self.salience = salience
        self.smoothing = smoothing
        self.spacy_model = spacy_model
        self.order_samples = order_samples

    # ------------------------------------------------------------ grids
    def grids(self, docs: Sequence[Document]) -> list[EntityGrid]:
        """The entity grid of each document (:mod:`.grid`), sentences parsed once per process."""
        return sentence_parser(self.spacy_model).grids(docs)

    def check(self, doc: Document) -> str | None:
        if not any(sentence_spans(sec.text) for sec in doc.sections):
            return "document has no sentences"
        return None

    @staticmethod
    def grid_problem(grid: EntityGrid) -> str | None:
        """Why a parsed grid cannot be scored (no entity in any sentence), or ``None``."""
        if not grid.entities:
            return f"no entities (noun-phrase heads) in its {grid.sentences} sentence(s)"
        return None

    def _usable(self, docs: Sequence[Document]) -> tuple[list[tuple[Document, EntityGrid]], dict[str, str]]:
        """(``(document, grid)`` of the documents with a scorable grid, id -> why for the others)."""
        failures = {d.id: why for d in docs if (why := self.check(d)) is not None}
        checked = [d for d in docs if d.id not in failures]
        usable = []
        for doc, grid in zip(checked, self.grids(checked)):
            why = self.grid_problem(grid)
            if why is None:
                usable.append((doc, grid))
            else:
                failures[doc.id] = why
        return usable, failures

    # ------------------------------------------------------------ fitting
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "EntityGridCritic":
        """Count the role transitions and salience classes of the training grids; documents without sentences or
        entities are kept in ``training_skipped_``.  ``validation`` is not needed (no setting is chosen on it)."""
        self.check_params()
        usable, failures = self._usable(docs)
        if not usable:
            raise ValueError(f"no training document has entities to fit an entity grid on ({len(failures)} failed"
                             + (f", e.g. {next(iter(failures.items()))}" if failures else "") + ")")
        self.class_counts_, self.role_counts_ = count([g for _, g in usable], self.order, self.salience)
        self.training_grids_ = len(usable)
        self.training_skipped_ = dict(sorted(failures.items()))
        self._set_prior()
        return self

    def _set_prior(self) -> None:
        self.prior_ = EntityGridPrior.from_counts(self.class_counts_, self.role_counts_, smoothing=self.smoothing,
                                                  order=self.order, salience=self.salience, device=self.device)

    def fold_params(self, share: float) -> dict[str, Any]:
        """A fold fitted on ``share`` of the documents smooths with ``share`` times the pseudo-count, so that its
        estimates ``(share n + share alpha) / (share N + 4 share alpha)`` are the full fit's."""
        return {**self.get_params(), "smoothing": share * self.smoothing}

    def training_used(self) -> int:
        return self.training_grids_

    def _move(self, device: torch.device) -> None:
        self._set_prior()

    # ------------------------------------------------------------ projection
    def prior(self) -> EntityGridPrior:
        self._require_fitted()
        return self.prior_

    def latent_steps(self, grid: EntityGrid) -> float:
        """``M(x)``: the categorical draws ``P_c(z)`` scores, ``E N`` roles and, with two salience classes, ``E``
        classes."""
        entities = len(grid.entities)
        return float(entities * grid.sentences + (entities if self.salience > 1 else 0))

    def project(self, docs: Sequence[Document]) -> Projection:
        """Point mass on each document's grid; ``M(x)`` = :meth:`latent_steps`.  Extras per document:
        ``entities`` (E), ``sentences`` (N), ``singleton_share`` (share of entities mentioned in one sentence),
        ``order_rank`` (:class:`OrderRank`, an outlier statistic) and ``least_likely_entities``: ``[name, roles,
        -log P, excess over random orders]`` of the :attr:`reason_entities` entities with the largest ``-log P``
        (ties: the first mentioned), what :meth:`reasons` reads."""
        self._require_fitted()
        usable, failures = self._usable(docs)
        grids = [g for _, g in usable]
        ranks = [self.order_rank(g) for g in grids]
        return Projection(
            doc_ids=[d.id for d, _ in usable],
            posterior=ValuePointMass(grids),
            latent_steps=torch.tensor([self.latent_steps(g) for g in grids], dtype=torch.float64),
            failures=failures,
            extras={"entities": [len(g.entities) for g in grids],
                    "sentences": [g.sentences for g in grids],
                    "singleton_share": [float(np.mean(g.mentions == 1)) for g in grids],
                    "order_rank": [r.rank for r in ranks],
                    "orders": [r.orders for r in ranks],
                    "least_likely_entities": [self.least_likely(g, r) for g, r in zip(grids, ranks)]},
        )

    def order_rank(self, grid: EntityGrid) -> OrderRank:
        """Where the grid's sentence order stands among the orders of its sentences (:class:`OrderRank`)."""
        return OrderRank(self.prior(), grid, self.order_samples)

    def entity_nll(self, grid: EntityGrid) -> np.ndarray:
        """``(E,)``: ``-log P(c_e) - sum_t log P(r_et | c_e, h_et)``, each entity's share of ``T(x)``."""
        return self.prior().chain_nll(grid.roles)

    def least_likely_first(self, grid: EntityGrid) -> tuple[np.ndarray, np.ndarray]:
        """``(-log P (E,), the entities by -log P, largest first (E,))``, ties in order of first mention."""
        nll = self.entity_nll(grid)
        return nll, np.lexsort((np.arange(len(nll)), -nll))

    def least_likely(self, grid: EntityGrid, rank: OrderRank) -> list[list]:
        """``[name, roles, -log P, excess]`` of the :attr:`reason_entities` entities with the largest ``-log P``,
        largest first (:meth:`least_likely_first`); ``excess`` from ``rank`` (:class:`OrderRank`)."""
        nll, order = self.least_likely_first(grid)
        order = order[:self.reason_entities]
        return [[grid.entities[e], grid.chain(e), float(nll[e]), float(rank.entity_excess[e])] for e in order]

    # ------------------------------------------------------------ report
    def reasons(self, result, document: Document | None) -> list[str]:
        """Where the document's sentence order stands among the orders of its sentences (:meth:`order_reason`) and
        its least likely entities, ``entity 'kernel': S - - O X, -log P = 7.3 nats (1st of 12), 2.1 above random
        orders`` (the excess: its ``-log P`` minus its mean over the orders).  The order line comes first unless
        ``T/M``'s own p-value is the smaller one.  Read from the extras (``order_rank``, ``least_likely_entities``),
        else from the document parsed again."""
        self._require_fitted()
        extras = getattr(result, "extras", None) or {}
        if "least_likely_entities" in extras and "order_rank" in extras:
            rank, entities, orders = extras["order_rank"], extras["entities"], extras["orders"]
            least = extras["least_likely_entities"]
        elif document is None:
            raise ValueError(f"the result of {result.id!r} has no 'least_likely_entities' extra and no document "
                             "was given")
        else:
            why = self.check(document) or self.grid_problem(grid := self.grids([document])[0])
            if why is not None:
                raise ValueError(f"document {document.id!r} cannot be projected by this critic: {why}")
            found = self.order_rank(grid)
            rank, entities, orders = found.rank, len(grid.entities), found.orders
            least = self.least_likely(grid, found)
        lines = [f"entity '{name}': {readable_chain(chain)}, -log P = {nll:.1f} nats ({ordinal(k + 1)} of "
                 f"{entities}), {abs(excess):.1f} {'above' if excess >= 0 else 'below'} random orders"
                 for k, (name, chain, nll, excess) in enumerate(least)]
        p_values = getattr(result, "p_values", None) or {}
        order_first = p_values.get("order_rank", 0.0) <= p_values.get("latent_nll_per_step", 1.0)
        order = self.order_reason(rank, orders)
        return [order, *lines] if order_first else [*lines, order]

    def order_reason(self, rank: float, orders: int) -> str:
        """``"sentence order: 62% of 120 orders of its sentences are more likely under the prior (order rank 0.62,
        ties counting half)"``, ``orders`` the number compared (:class:`OrderRank`)."""
        if orders == 1:
            return "sentence order: a single sentence, no other order to compare with (order rank 0.50)"
        return (f"sentence order: {rank:.0%} of {orders} orders of its sentences are more likely under the prior "
                f"(order rank {rank:.2f}, ties counting half)")

    def fit_warnings(self) -> list[str]:
        """A prior fitted on grids with no salient entity has never seen an entity mentioned twice."""
        self._require_fitted()
        warnings = super().fit_warnings()
        if self.salience > 1 and self.class_counts_[1] == 0:
            warnings.append(f"no training entity is mentioned in {self.salience} or more sentences: the salient "
                            "entities' chain is the smoothing's uniform one")
        return warnings

    # ------------------------------------------------------------ persistence
    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        return ({"training_grids": self.training_grids_, "training_skipped": self.training_skipped_},
                {"class_counts": torch.from_numpy(self.class_counts_),
                 "role_counts": torch.from_numpy(self.role_counts_)})

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        self.training_grids_ = int(state["training_grids"])
        self.training_skipped_ = {str(k): str(v) for k, v in state["training_skipped"].items()}
        self.class_counts_ = tensors["class_counts"].to(torch.float64).numpy()
        self.role_counts_ = tensors["role_counts"].to(torch.float64).numpy()
        if (self.class_counts_ < 0).any() or (self.role_counts_ < 0).any():
            raise ValueError("saved counts must be non-negative")
        self._set_prior()


def readable_chain(chain: str, limit: int = 20) -> str:
    """Role symbols spaced, ``"S - - O X"``; a chain longer than ``limit`` as its mentions, ``"S in 1, O in 4 of 40
    sentences"``."""
    if len(chain) <= limit:
        return " ".join(chain)
    mentions = [f"{role} in {t + 1}" for t, role in enumerate(chain) if role != "-"]
    shown = mentions[:6] + (["..."] if len(mentions) > 6 else [])
    return ", ".join(shown) + f" of {len(chain)} sentences"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
