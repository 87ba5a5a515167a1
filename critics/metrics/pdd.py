"""Positional Discourse Divergence of Liu, Su, Shareghi and Collier (seed 002).

Each document is a sequence of discourse-role labels (ints in ``0..num_classes-1``), one per
sentence.  Sentences are split into N positional bins; in each bin the role distribution of the
prediction set is compared with the reference set's by KL with epsilon smoothing, and the N
divergences are averaged:

    D_pos = (1/N) sum_{n=1}^N KL(p^n + eps || q^n + eps)

Conventions taken from the authors' released code (``calculate_positional_divergence``):

* N is capped: N = min(N_requested, longest prediction, longest reference), so that the longest
  document of each side fills every bin;
* bin edges are those of ``numpy.histogram(range(L), bins=N)`` for a document of L sentences, and
  sentence k falls in the bin ``digitize(k, edges[:-1]) - 1``;
* a set's per-bin distribution pools the counts of all its documents;
* the KL runs from the reference to the prediction, sum_r (q + eps) (ln(q + eps) - ln(p + eps)), with
  q the reference distribution and eps = 1e-8; the normalised score is 1 / (1 + PDD).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["positional_bins", "positional_distribution", "pdd", "pdd_normalized"]


def positional_bins(length: int, num_bins: int) -> np.ndarray:
    """Bin index (0-based) of each of ``length`` sentences among ``num_bins`` positional bins."""
    if length < 1 or num_bins < 1:
        raise ValueError("length and num_bins must be positive")
    edges = np.histogram_bin_edges(np.arange(length), bins=num_bins)
    return np.digitize(np.arange(length), edges[:-1]) - 1


def positional_distribution(docs: Sequence[Sequence[int]], num_classes: int, num_bins: int) -> np.ndarray:
    """(num_bins, num_classes) role distributions per bin, pooled over ``docs``.

    A bin no document reaches has an all-zero row (its KL term is then driven by eps alone).
    """
    counts = np.zeros((num_bins, num_classes))
    for doc in docs:
        doc = [int(x) for x in doc]
        if not doc:
            raise ValueError("empty label sequence")
        if min(doc) < 0 or max(doc) >= num_classes:
            raise ValueError(f"labels must lie in 0..{num_classes - 1}, got {doc}")
        np.add.at(counts, (positional_bins(len(doc), num_bins), doc), 1)
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def _as_set(x) -> list[list[int]]:
    x = list(x)
    if x and np.ndim(x[0]) == 0:  # a single label sequence
        return [list(x)]
    return [list(d) for d in x]


def pdd(pred, ref, num_bins: int = 5, num_classes: int | None = None, eps: float = 1e-8,
        return_num_bins: bool = False):
    """PDD (seed 002) of predictions against references.

    ``pred`` / ``ref``: one label sequence (a document pair) or a list of them (set against set).
    ``num_bins``: requested N, capped at the longest sequence on each side.  ``num_classes`` defaults
    to 1 + the largest label seen.  Returns D_pos (>= 0, 0 for identical distributions), and the
    effective N when ``return_num_bins``.
    """
    preds, refs = _as_set(pred), _as_set(ref)
    if not preds or not refs:
        raise ValueError("empty set")
    if num_classes is None:
        num_classes = 1 + max(max(d) for d in preds + refs if d)
    n = min(int(num_bins), max(len(d) for d in preds), max(len(d) for d in refs))
    p = positional_distribution(preds, num_classes, n)
    q = positional_distribution(refs, num_classes, n)
    kl = np.sum((q + eps) * (np.log(q + eps) - np.log(p + eps)), axis=1)
    value = float(kl.mean())
    return (value, n) if return_num_bins else value


def pdd_normalized(pred, ref, num_bins: int = 5, num_classes: int | None = None, eps: float = 1e-8) -> float:
    """Normalised PDD, 1 / (1 + PDD), in (0, 1] with 1 for identical positional distributions."""
    return 1.0 / (1.0 + pdd(pred, ref, num_bins, num_classes, eps))
