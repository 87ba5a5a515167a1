"""Pure statistics over per-document values: no critic-specific code.

All resampling is seeded (``numpy.random.default_rng(seed)``) and vectorised over resamples, in blocks of
rows that keep the working arrays under :data:`BLOCK_BYTES` however many resamples and documents there
are: a block draws the next rows of the same random stream, so the numbers do not depend on the block
size (a test checks one block against many).  What stays is one statistic per resample.
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


BLOCK_BYTES = 64 * 2**20
"""Working memory of one block of resamples (indices and the values they gather)."""


def _blocks(n_resamples: int, row_bytes: int, block_bytes: int | None = None) -> list[int]:
    """Row counts of consecutive blocks covering ``n_resamples`` rows of ``row_bytes`` each."""
    per = max(1, (BLOCK_BYTES if block_bytes is None else block_bytes) // max(1, row_bytes))
    return [min(per, n_resamples - start) for start in range(0, n_resamples, per)]


def _resampled(values: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], n_resamples: int,
               rng: np.random.Generator) -> np.ndarray:
    """``statistic`` of ``n_resamples`` bootstrap resamples of ``values``' rows, ``(R,)``, block by block: the
    rows ``rng.integers(0, n, size=(R, n))`` would give in one call."""
    n = values.shape[0]
    row_bytes = n * (8 + 8 * int(np.prod(values.shape[1:], dtype=np.int64)))
    return np.concatenate([statistic(values[rng.integers(0, n, size=(rows, n))])
                           for rows in _blocks(n_resamples, row_bytes)] or [np.zeros(0)])


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
    return _percentile_interval(_resampled(values, statistic, n_resamples, np.random.default_rng(seed)), level)


def bootstrap_latent_ppl_ci(
    nll: np.ndarray, steps: np.ndarray, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the Latent PPL, resampling documents (T and M together)."""
    nll, steps = np.asarray(nll, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if nll.size == 0:
        return float("nan"), float("nan")
    rows = np.stack([nll, steps], axis=1)
    ppl = _resampled(rows, lambda r: np.exp(log_ppl_statistic(r)), n_resamples, np.random.default_rng(seed))
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
    n = pooled.shape[0]
    extreme = 0
    for rows in _blocks(n_permutations, n * (24 + 8 * int(np.prod(pooled.shape[1:], dtype=np.int64)))):
        shuffled = pooled[np.argsort(rng.random((rows, n)), axis=1)]
        diffs = statistic(shuffled[:, a.shape[0]:]) - statistic(shuffled[:, :a.shape[0]])
        extreme += int(np.sum(np.abs(diffs) >= np.abs(observed) - 1e-12))
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
    on_a = _resampled(a, statistic, n_resamples, rng)  # all of a's resamples first, then b's: one stream
    on_b = _resampled(b, statistic, n_resamples, rng)
    return _percentile_interval(on_b - on_a, level)


def empirical_p_values(reference: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Right-tail empirical p-value of each value against a reference sample.

    ``p(v) = (1 + #{r in reference : r >= v}) / (1 + |reference|)``: small
    when ``v`` is larger than almost all reference values (an outlier).
    """
    ref = np.sort(np.asarray(reference, dtype=np.float64))
    values = np.asarray(values, dtype=np.float64)
    at_least = ref.size - np.searchsorted(ref, values, side="left")
    return (1.0 + at_least) / (1.0 + ref.size)
