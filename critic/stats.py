"""Pure statistics over per-document values: no critic-specific code.

All resampling is seeded (``numpy.random.default_rng(seed)``) and vectorised
over resamples.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = [
    "latent_ppl",
    "bootstrap_ci",
    "bootstrap_latent_ppl_ci",
    "permutation_test",
    "log_ppl_statistic",
    "bootstrap_difference_ci",
    "empirical_p_values",
]


def latent_ppl(nll: np.ndarray, steps: np.ndarray) -> float:
    """Latent PPL of a set: ``exp(sum_x T(x) / sum_x M(x))``."""
    nll, steps = np.asarray(nll, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if nll.size == 0:
        return float("nan")
    return float(np.exp(nll.sum() / steps.sum()))


def _resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def _percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(
    values: np.ndarray,
    *,
    statistic: Callable[[np.ndarray], np.ndarray] = lambda v: v.mean(axis=-1),
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over documents.

    ``statistic`` maps an array ``(R, n)`` of resampled values to ``(R,)``
    (the default is the mean along the last axis).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return float("nan"), float("nan")
    idx = _resample_indices(values.size, n_resamples, seed)
    return _percentile_interval(statistic(values[idx]), level)


def bootstrap_latent_ppl_ci(
    nll: np.ndarray, steps: np.ndarray, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the Latent PPL, resampling documents (T and M together)."""
    nll, steps = np.asarray(nll, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if nll.size == 0:
        return float("nan"), float("nan")
    idx = _resample_indices(nll.size, n_resamples, seed)
    ppl = np.exp(nll[idx].sum(-1) / steps[idx].sum(-1))
    return _percentile_interval(ppl, level)


def _mean_statistic(values: np.ndarray) -> np.ndarray:
    return values.mean(axis=1)


def log_ppl_statistic(rows: np.ndarray) -> np.ndarray:
    """log Latent PPL of resampled sets: ``rows`` is ``(R, n, 2)`` with ``(T(x), M(x))`` per document;
    returns ``sum T / sum M`` per resample, shape ``(R,)``."""
    return rows[..., 0].sum(axis=1) / rows[..., 1].sum(axis=1)


def permutation_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    statistic: Callable[[np.ndarray], np.ndarray] = _mean_statistic,
    n_permutations: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Two-sided permutation test of an equal set statistic (by default the mean).

    ``a`` and ``b`` hold one row per document (``(n,)`` values, or ``(n, k)`` such as ``(T, M)`` pairs);
    ``statistic`` maps ``(R, n, ...)`` resampled sets to ``(R,)``.  Documents are permuted between the
    sets; returns ``(difference, p_value)`` with ``difference = s(b) - s(a)`` and
    ``p = (1 + #{|d_perm| >= |d_obs|}) / (1 + n_permutations)``.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return float("nan"), float("nan")
    observed = float(statistic(b[None])[0] - statistic(a[None])[0])
    pooled = np.concatenate([a, b])
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_permutations, pooled.shape[0])), axis=1)
    shuffled = pooled[perms]
    diffs = statistic(shuffled[:, a.shape[0]:]) - statistic(shuffled[:, :a.shape[0]])
    extreme = np.sum(np.abs(diffs) >= np.abs(observed) - 1e-12)
    return observed, float((1 + extreme) / (1 + n_permutations))


def bootstrap_difference_ci(
    a: np.ndarray,
    b: np.ndarray,
    *,
    statistic: Callable[[np.ndarray], np.ndarray] = _mean_statistic,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic(b) - statistic(a)``, each set resampled on its own (rows as in
    :func:`permutation_test`)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.shape[0], size=(n_resamples, a.shape[0]))
    ib = rng.integers(0, b.shape[0], size=(n_resamples, b.shape[0]))
    return _percentile_interval(statistic(b[ib]) - statistic(a[ia]), level)


def empirical_p_values(reference: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Right-tail empirical p-value of each value against a reference sample.

    ``p(v) = (1 + #{r in reference : r >= v}) / (1 + |reference|)``: small
    when ``v`` is larger than almost all reference values (an outlier).
    """
    ref = np.sort(np.asarray(reference, dtype=np.float64))
    values = np.asarray(values, dtype=np.float64)
    at_least = ref.size - np.searchsorted(ref, values, side="left")
    return (1.0 + at_least) / (1.0 + ref.size)
