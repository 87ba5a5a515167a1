"""Do a critic's fits reproduce across seeds?  Fit it once per seed, score the same documents with each fit and
compare (issue 21: which generations get flagged must not depend on the seed).

Over every pair of fits ``a, b`` scored on the same documents:

* ``corr``: the Pearson correlation of the per-document Latent NLLs ``T_a(x), T_b(x)``;
* ``top_overlap``: how many of the ``top`` documents with the highest ``T(x)`` (the ones outlier flags rank
  first) both fits put there;
* ``component_cosine``: for critics whose latent states have parameters that two fits can learn in any order
  (topics), the median cosine of those rows matched one to one (the Hungarian algorithm on cosine,
  ``scipy.optimize.linear_sum_assignment``); absent otherwise (:meth:`critic.critic.Critic.latent_components`).

:func:`check_seeds` fits and scores; ``critic fit NAME ... --out DIR --check-seeds N`` runs it and writes
``DIR.seed_check.json``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["SeedCheck", "check_seeds", "matched_cosines", "seed_agreement", "TOP"]

TOP = 20
"""Outliers compared: the documents with the highest Latent NLL."""


def matched_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosines of the rows of ``a (K, V)`` and ``b (K, V)`` matched one to one, maximising their sum (``(K,)``)."""
    from scipy.optimize import linear_sum_assignment

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"components of shapes {a.shape} and {b.shape} cannot be matched")
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    cos = a @ b.T
    rows, cols = linear_sum_assignment(-cos)
    return cos[rows, cols]


def seed_agreement(scores: Sequence[np.ndarray], components: Sequence[np.ndarray | None] | None = None, *,
                   top: int = TOP) -> dict[str, dict[str, Any]]:
    """Agreement of fits over every pair: ``{"corr", "top_overlap"[, "component_cosine"]}``, each
    ``{"mean", "min", "pairs"}`` (pairs in ``itertools.combinations`` order).  ``scores``: per fit, the
    Latent NLLs ``(N,)`` of the same documents in the same order; ``components``: per fit ``(K, V)`` or
    ``None`` (then no cosine)."""
    if len(scores) < 2:
        raise ValueError(f"seed agreement needs at least two fits, got {len(scores)}")
    arrays = [np.asarray(s, dtype=np.float64) for s in scores]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1 or len(arrays[0]) < 2:
        raise ValueError(f"every fit must score the same documents (at least two): shapes {[a.shape for a in arrays]}")
    rows: dict[str, list[float]] = {"corr": [], "top_overlap": []}
    pairs = list(itertools.combinations(range(len(arrays)), 2))
    for i, j in pairs:
        rows["corr"].append(float(np.corrcoef(arrays[i], arrays[j])[0, 1]))
        k = min(top, len(arrays[i]))
        rows["top_overlap"].append(float(len(set(np.argsort(-arrays[i], kind="stable")[:k])
                                             & set(np.argsort(-arrays[j], kind="stable")[:k]))))
    if components is not None and all(c is not None for c in components):
        rows["component_cosine"] = [float(np.median(matched_cosines(components[i], components[j]))) for i, j in pairs]
    return {name: {"mean": float(np.mean(v)), "min": float(np.min(v)), "pairs": v} for name, v in rows.items()}


@dataclass
class SeedCheck:
    """What :func:`check_seeds` found: the seeds, the fitted critics (in seed order), the ids of the documents
    every fit scored, each fit's Latent NLLs of them, the agreement (:func:`seed_agreement`) and the documents
    some fit could not score (id -> why, from the first fit that skipped it)."""

    seeds: list[int]
    critics: list[Any]
    doc_ids: list[str]
    latent_nll: list[np.ndarray]
    agreement: dict[str, dict[str, Any]]
    skipped: dict[str, str]

    def lines(self) -> list[str]:
        """The agreement as printable lines."""
        words = {"corr": "Latent NLL correlation", "top_overlap": f"top-{TOP} outliers shared",
                 "component_cosine": "matched-component cosine (median)"}
        out = [f"seeds {', '.join(map(str, self.seeds))} on {len(self.doc_ids)} documents"
               + (f" ({len(self.skipped)} not scored by every fit)" if self.skipped else "") + ":"]
        for name, value in self.agreement.items():
            out.append(f"  {words[name]:36s} mean {value['mean']:.3f}  worst pair {value['min']:.3f}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "documents": len(self.doc_ids), "skipped": self.skipped,
                "agreement": self.agreement,
                "fits": [{"seed": s, "summary": c.fit_summary(c.training_used() or 0),
                          "warnings": c.fit_warnings()} for s, c in zip(self.seeds, self.critics)]}


def check_seeds(make: Callable[[int], Any], train: Sequence, docs: Sequence, seeds: Sequence[int], *,
                validation: Sequence | None = None, top: int = TOP) -> SeedCheck:
    """Fit ``make(seed)`` (an unfitted critic) on ``train`` for every seed, score ``docs`` with each fit and
    compare them (:func:`seed_agreement`) on the documents every fit scored."""
    seeds = [int(s) for s in seeds]
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"check_seeds needs at least two distinct seeds, got {seeds}")
    critics, scored, skipped = [], [], {}
    for seed in seeds:
        critic = make(seed).fit(train, validation=validation)
        scores = critic.score(docs, seed=seed)
        critics.append(critic)
        scored.append(dict(zip(scores.doc_ids, scores.latent_nll)))
        for doc_id, why in scores.skipped.items():
            skipped.setdefault(doc_id, why)
    ids = [d.id for d in docs if all(d.id in s for s in scored)]
    nll = [np.array([s[i] for i in ids]) for s in scored]
    components = [c.latent_components() for c in critics]
    return SeedCheck(seeds, critics, ids, nll, seed_agreement(nll, components, top=top), skipped)
