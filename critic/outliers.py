"""The real documents a critic's outlier p-values compare with, and the p-values.

The pool (:func:`outlier_pool`) is the critic's calibration documents (:mod:`critic.calibration`) and the
reference's; :class:`OutlierPool` gives each document its conformal p-values against it (:mod:`critic.conformal`):
length-matched or plain, the critic's statistics combined by rank, each statistic's own beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from . import conformal, stats
from .calibration import document_digest, outlier_columns, word_counts
from .critic import Critic, Scores
from .document import Document

__all__ = ["OutlierPool", "OutlierPValues", "outlier_pool", "outlier_p_values", "OUTLIER_SCORES", "SIZE_MODELS"]

OUTLIER_SCORES = ("length", "plain")
"""What outlier p-values compare a document with: reference documents of similar length, or all of them."""

SIZE_MODELS = ("bins", "location-scale")
"""How a length-matched p-value takes the length into account, by :attr:`~critic.critic.Critic.size_model`:
length groups (:func:`critic.conformal.length_groups`) or residuals (:func:`critic.conformal.location_scale_residuals`)."""

@dataclass
class OutlierPValues:
    """Outlier p-values of ``n`` documents: ``p (n,)`` under the outlier score (the combination of the
    statistics), ``plain (n,)`` the same against the whole pool, ``components (n, J)`` each statistic's own under
    the outlier score."""

    p: np.ndarray
    plain: np.ndarray
    components: np.ndarray


class OutlierPool:
    """The real documents outlier p-values compare with (:mod:`critic.conformal`): their statistics ``columns
    (n, J)`` (column 0 ``T/M``, the others the critic's :attr:`~critic.critic.Critic.outlier_statistics`, named
    ``names``; larger is less typical), word counts ``words (n,)`` and ids.

    ``outlier_score="length"`` compares a document with pool documents of similar length: within length groups
    (``size_model="bins"``) or on the residuals of a location-scale model on log length fitted on the pool
    (``"location-scale"``); ``"plain"`` with the whole pool.  Tie-breaking uniforms come from each document's id
    and ``seed`` (:func:`critic.stats.id_uniforms`), so a document's p-value does not depend on the order of
    the documents or on which documents share its set.  ``sources`` says where the pool's documents came from."""

    def __init__(self, columns: np.ndarray, words: np.ndarray | None, ids: Sequence[str], *,
                 names: Sequence[str] = ("latent_nll_per_step",), outlier_score: str = "length",
                 size_model: str = "bins", seed: int = 0, sources: Mapping[str, int] | None = None) -> None:
        if outlier_score not in OUTLIER_SCORES:
            raise ValueError(f"outlier_score must be one of {', '.join(OUTLIER_SCORES)}, got {outlier_score!r}")
        if size_model not in SIZE_MODELS:
            raise ValueError(f"size_model must be one of {', '.join(SIZE_MODELS)}, got {size_model!r}")
        self.columns = np.asarray(columns, dtype=np.float64).reshape(len(ids), -1)
        self.words = None if words is None else np.asarray(words, dtype=np.float64)
        self.ids, self.names, self.seed = list(ids), tuple(names), seed
        self.outlier_score, self.size_model = outlier_score, size_model
        self.sources = dict(sources or {"reference": len(self.ids)})
        self._length = outlier_score == "length" and self.words is not None
        self._pool_ties = self._ties(self.ids)

    def _ties(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each statistic's tie-breaking uniforms ``(n, J)`` and the combined score's ``(n,)``."""
        return (np.column_stack([stats.id_uniforms(ids, f"{self.seed}:{name}") for name in self.names]),
                stats.id_uniforms(ids, f"{self.seed}:outlier"))

    def _prepared(self, columns: np.ndarray, words: np.ndarray | None, length: bool):
        """``(pool columns, columns, pool groups, groups)`` as the outlier score compares them."""
        if not length or words is None:
            return self.columns, columns, None, None
        if self.size_model == "bins":
            return (self.columns, columns, *conformal.length_groups(self.words, words))
        pairs = [conformal.location_scale_residuals(self.columns[:, j], self.words, columns[:, j], words)
                 for j in range(columns.shape[1])]
        return np.column_stack([a for a, _ in pairs]), np.column_stack([b for _, b in pairs]), None, None

    def _p_values(self, columns: np.ndarray, words: np.ndarray | None, ids: Sequence[str] | None, length: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Combined ``(n,)`` and per-statistic ``(n, J)`` p-values of documents (``ids None``: the pool's own)."""
        pool_columns, values, pool_groups, groups = self._prepared(columns, words, length)
        pool_ties, pool_tie = self._pool_ties
        J = pool_columns.shape[1]

        def p_of(keep: list[int]) -> np.ndarray:
            pool = conformal.ConformalPool(pool_columns[:, keep], pool_ties[:, keep], pool_groups)
            if ids is None:
                return pool.own_p_values(pool_tie)
            ties, tie = self._ties(ids)
            return pool.p_values(values[:, keep], ties[:, keep], tie, groups)

        combined = p_of(list(range(J)))
        each = combined[:, None] if J == 1 else np.column_stack([p_of([j]) for j in range(J)])
        return combined, each

    def p_values(self, columns: np.ndarray, words: np.ndarray | None, ids: Sequence[str]) -> OutlierPValues:
        """The outlier p-values of documents outside the pool: ``columns (n, J)``, ``words (n,)``, ``ids``."""
        if not len(ids):
            return OutlierPValues(np.zeros(0), np.zeros(0), np.zeros((0, self.columns.shape[1])))
        columns = np.asarray(columns, dtype=np.float64).reshape(len(ids), -1)
        p, each = self._p_values(columns, words, ids, self._length)
        plain = self._p_values(columns, words, ids, False)[0] if self._length else p
        return OutlierPValues(p, plain, each)

    def own_p_values(self) -> OutlierPValues:
        """Each pool document's outlier p-values against the other pool documents."""
        p, each = self._p_values(self.columns, self.words, None, self._length)
        plain = self._p_values(self.columns, self.words, None, False)[0] if self._length else p
        return OutlierPValues(p, plain, each)

    def describe(self) -> dict[str, Any]:
        """The pool's size, sources, length groups and the smallest p-value it allows any document (that of its
        smallest group): what bounds the flags (results.json ``config.calibration``)."""
        groups = (conformal.length_groups(self.words, self.words)[0] if self._length and self.size_model == "bins"
                  else np.zeros(len(self.ids), dtype=np.int64))
        sizes = np.bincount(groups)
        sizes = sizes[sizes > 0]
        return {"n": len(self.ids), "sources": self.sources, "groups": int(len(sizes)),
                "smallest_group": int(sizes.min()), "largest_group": int(sizes.max()),
                "smallest_p": conformal.smallest_p_value(sizes)}


def outlier_p_values(pool: np.ndarray, values: np.ndarray, *, pool_words: np.ndarray | None = None,
                     words: np.ndarray | None = None, outlier_score: str = "length", size_model: str = "bins",
                     seed: int = 0) -> OutlierPValues:
    """Outlier p-values of documents ``values (n, J)`` against a pool of real documents' ``pool (n_pool, J)``
    (:class:`OutlierPool`, with ids ``pool:i`` and ``doc:i``): for simulations and benchmarks."""
    pool, values = (np.asarray(a, dtype=np.float64) for a in (pool, values))
    pool, values = (a[:, None] if a.ndim == 1 else a for a in (pool, values))
    names = [f"s{j}" for j in range(pool.shape[1])]
    scorer = OutlierPool(pool, pool_words, [f"pool:{i}" for i in range(len(pool))], names=names,
                         outlier_score=outlier_score, size_model=size_model, seed=seed)
    return scorer.p_values(values, words, [f"doc:{i}" for i in range(len(values))])


def outlier_pool(critic: Critic, reference: Sequence[Document], ref_scores: Scores, *, outlier_score: str = "length",
                 seed: int = 0) -> tuple[OutlierPool, list[str]]:
    """The real documents a critic's outlier p-values compare with: its calibration documents
    (:attr:`~critic.critic.Critic.calibration`, :mod:`critic.calibration`) and the reference's scored documents
    (``ref_scores``), last; a calibration document that is also a reference document counts once (as the
    reference's).  Returns the pool and notes on what was left out and why."""
    statistics = tuple(critic.outlier_statistics)
    columns, words = outlier_columns(ref_scores, statistics), word_counts(reference, ref_scores.doc_ids)
    ids, sources, notes = list(ref_scores.doc_ids), {"reference": ref_scores.n}, []
    calibration = critic.calibration
    if calibration is not None and tuple(calibration.statistics) != statistics:
        notes.append(f"the critic's calibration has the statistics {list(calibration.statistics)}, the critic "
                     f"{list(statistics)}: left out (refit the critic)")
        calibration = None
    if calibration is not None and len(calibration):
        scored = set(ref_scores.doc_ids)
        kept = calibration.without({document_digest(d) for d in reference if d.id in scored})
        if len(kept) < len(calibration):
            notes.append(f"{len(calibration) - len(kept)} calibration documents are also reference documents: "
                         "counted once")
        columns, words = np.vstack([kept.columns, columns]), np.concatenate([kept.words, words])
        ids = kept.ids + ids
        sources = {**{k: v for k, v in kept.sources.items() if v}, **sources}
    return OutlierPool(columns, words, ids, names=["latent_nll_per_step", *statistics], outlier_score=outlier_score,
                       size_model=critic.size_model, seed=seed, sources=sources), notes
