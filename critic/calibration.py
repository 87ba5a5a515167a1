"""A critic's calibration documents: real text it was not fitted on, scored, kept with the fitted critic.

Outlier p-values compare a document with real documents (:mod:`critic.conformal`); their resolution is
``1 / (n + 1)`` for ``n`` real documents of its length group, so a report's reference set alone (often about a
hundred documents) cannot give a p-value below a few percent.  At fit time a critic therefore keeps the scores
of real documents that it was not fitted on (:meth:`critic.critic.Critic.calibrate`):

- **cross-fitted** training documents: the training set is cut into ``K`` folds by a hash of each document's id
  (so the folds do not depend on the documents' order); each fold is scored by a critic of the same settings
  fitted on the other ``K - 1`` (with the same validation set).  A fold's critic saw ``(K - 1) / K`` of the data,
  so it is a little *less* familiar with real text than the critic fitted on all of it: calibration scores are,
  if anything, a little larger than a real document's under the full critic, which makes the p-values
  conservative (the cross-conformal / CV+ argument of Barber, Candes, Ramdas & Tibshirani, Ann. Statist. 2021);
- the **validation** documents, scored by the fitted critic.  Exchangeable with new real documents as long as the
  fit only *selects* on them (a smoothing constant, an early stop): a small optimism, measured in
  docs/outliers.md.

Each calibration document keeps its statistics (``T/M`` and the critic's outlier statistics), its word count (for
length-matched p-values), its id (for tie-breaks) and a digest of its content, so that a report's reference
document that is also a calibration document counts once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .document import Document
from .stats import id_uniforms

__all__ = ["Calibration", "cross_fit_calibration", "outlier_columns", "word_counts", "document_digest"]


def outlier_columns(scores, statistics: Sequence[str]) -> np.ndarray:
    """``(n, 1 + len(statistics))``: each scored document's ``T/M`` and its values of the named extras (which every
    projection carries, :meth:`critic.critic.Critic._validate_projection`), from a :class:`critic.critic.Scores`."""
    return np.column_stack([np.asarray(scores.latent_nll / scores.latent_steps, dtype=np.float64)]
                           + [np.asarray(scores.extras.get(s, []), dtype=np.float64) for s in statistics])


def word_counts(docs: Sequence[Document], ids: Sequence[str]) -> np.ndarray:
    """Each scored document's word count (whitespace tokens of its text), in the order of ``ids``."""
    count = {d.id: len(d.text.split()) for d in docs}
    return np.array([count[i] for i in ids], dtype=np.int64)


def document_digest(doc: Document) -> str:
    """The first 16 hex digits of the SHA-256 of a document's JSON (its content, id included)."""
    return hashlib.sha256(json.dumps(doc.to_dict(), ensure_ascii=False, sort_keys=True).encode("utf-8")
                          ).hexdigest()[:16]


@dataclass
class Calibration:
    """Scores of real documents a critic was not fitted on (module docstring), ``n`` of them.

    ``columns (n, 1 + len(statistics))``: ``T/M`` and the critic's outlier statistics; ``words (n,)`` word counts;
    ``ids`` and ``digests`` (:func:`document_digest`); ``sources``: how many came from each source
    (``"cross-fitted"``, ``"validation"``), the documents of each source together, in that order; ``folds``: ``K``
    of the cross-fitting (0: none)."""

    ids: list[str]
    digests: list[str]
    columns: np.ndarray
    words: np.ndarray
    statistics: tuple[str, ...] = ()
    sources: dict[str, int] = field(default_factory=dict)
    folds: int = 0

    def __len__(self) -> int:
        return len(self.ids)

    def to_state(self) -> dict[str, Any]:
        """A JSON object (saved in ``critic.json``)."""
        return {"ids": list(self.ids), "digests": list(self.digests), "columns": self.columns.tolist(),
                "words": self.words.tolist(), "statistics": list(self.statistics), "sources": dict(self.sources),
                "folds": int(self.folds)}

    @classmethod
    def from_state(cls, state: Any) -> "Calibration":
        """Back from :meth:`to_state`; a malformed object is a ``ValueError`` saying what is wrong."""
        if not isinstance(state, dict):
            raise ValueError(f"calibration must be an object, got {type(state).__name__}")
        missing = sorted({"ids", "digests", "columns", "words", "statistics", "sources", "folds"} - set(state))
        if missing:
            raise ValueError(f"calibration lacks {', '.join(missing)}")
        n, width = len(state["ids"]), 1 + len(state["statistics"])
        columns = np.asarray(state["columns"], dtype=np.float64) if n else np.zeros((0, width))
        words = np.asarray(state["words"], dtype=np.int64)
        if columns.shape != (n, width) or words.shape != (n,) or len(state["digests"]) != n:
            raise ValueError(f"calibration of {n} documents with {width} statistics has columns {columns.shape}, "
                             f"words {words.shape} and {len(state['digests'])} digests")
        if not np.all(np.isfinite(columns)):
            raise ValueError("calibration statistics must be finite numbers")
        return cls([str(i) for i in state["ids"]], [str(d) for d in state["digests"]], columns, words,
                   tuple(state["statistics"]), {str(k): int(v) for k, v in state["sources"].items()},
                   int(state["folds"]))

    def without(self, digests: set[str]) -> "Calibration":
        """The calibration minus the documents whose digest is in ``digests`` (documents counted elsewhere)."""
        keep = np.array([d not in digests for d in self.digests], dtype=bool)
        labels = [name for name, k in self.sources.items() for _ in range(k)]  # the sources in order, one a document
        sources = {name: int(sum(k for label, k in zip(labels, keep) if label == name)) for name in self.sources}
        return Calibration([i for i, k in zip(self.ids, keep) if k], [d for d, k in zip(self.digests, keep) if k],
                           self.columns[keep], self.words[keep], self.statistics, sources, self.folds)

    def summary(self) -> str:
        """``"812 documents (712 cross-fitted in 5 folds, 100 validation)"``, or what to give when it has none."""
        if not len(self):
            return ("none (no cross-fitting and no validation documents: outlier p-values will compare with the "
                    "reference alone; give --valid or --calibration-folds K)")
        parts = [f"{k} {name}" + (f" in {self.folds} folds" if name == "cross-fitted" else "")
                 for name, k in self.sources.items() if k]
        return f"{len(self)} documents" + (f" ({', '.join(parts)})" if parts else "")


def _scored(critic, docs: Sequence[Document], seed: int) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    scores = critic.score(docs, seed=seed)
    by_id = {d.id: d for d in docs}
    return (list(scores.doc_ids), [document_digest(by_id[i]) for i in scores.doc_ids],
            outlier_columns(scores, critic.outlier_statistics), word_counts(docs, scores.doc_ids))


def fold_of(ids: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """Each document's fold in ``0 .. folds - 1``, from a hash of its id and the seed (order-free)."""
    return np.minimum((id_uniforms(ids, f"{seed}:fold") * folds).astype(np.int64), folds - 1)


def cross_fit_calibration(critic, train: Sequence[Document], validation: Sequence[Document] | None = None, *,
                          folds: int, seed: int = 0, log=None) -> Calibration:
    """The calibration of a fitted ``critic`` (module docstring): ``folds`` cross-fitted folds of ``train``
    (``folds = 0``: none; a fold whose complement is empty is left out) and ``validation`` scored by ``critic``.
    Each fold's critic is ``type(critic)(**critic.fold_params(share))`` (``share``: the fold's complement's share of
    ``train``) on ``critic``'s device; ``log(message)`` is
    told as each fold starts."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 0 or folds == 1:
        raise ValueError(f"calibration folds must be 0 (no cross-fitting) or an integer >= 2, got {folds!r}")
    parts: list[tuple[str, tuple]] = []
    if folds:
        fold = fold_of([d.id for d in train], folds, seed)
        for k in range(folds):
            held = [d for d, f in zip(train, fold) if f == k]
            rest = [d for d, f in zip(train, fold) if f != k]
            if not held or not rest:
                continue
            if log is not None:
                log(f"cross-fitting fold {k + 1} of {folds}: fit on {len(rest)}, score {len(held)}")
            settings = critic.fold_params(len(rest) / len(train))
            fitted = type(critic)(**settings).to(critic.device).fit(rest, validation=validation)
            parts.append(("cross-fitted", _scored(fitted, held, seed)))
    if validation:
        parts.append(("validation", _scored(critic, validation, seed)))
    width = 1 + len(critic.outlier_statistics)
    sources: dict[str, int] = {}
    for source, (ids, _, _, _) in parts:
        sources[source] = sources.get(source, 0) + len(ids)
    return Calibration(ids=[i for _, p in parts for i in p[0]], digests=[d for _, p in parts for d in p[1]],
                       columns=np.vstack([p[2] for _, p in parts]) if parts else np.zeros((0, width)),
                       words=np.concatenate([p[3] for _, p in parts]) if parts else np.zeros(0, np.int64),
                       statistics=tuple(critic.outlier_statistics), sources=sources, folds=int(folds))
