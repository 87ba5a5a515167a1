"""Pure statistics over per-document values: no critic-specific code.

A set of documents is an array of **rows**, ``(n, k)``: one row per document (``(T(x), M(x))`` for the Latent
NLL and PPL).  Every set statistic here depends on its rows only through their column sums and their number,
``s = sum_x row(x)`` and ``n`` (a :class:`SetStatistic`): the mean Latent NLL is ``s_T / n`` and the Latent PPL
``exp(s_T / s_M)``.  So a resample or a permutation costs its column sums, nothing of size ``R x n x k``, and
one draw of resamples serves every statistic asked for at once.

All resampling is seeded (``numpy.random.default_rng(seed)``) and runs in blocks of rows that keep the
working arrays under :data:`BLOCK_BYTES` however many resamples and documents there are: a block draws the
next rows of the same random stream, so the numbers do not depend on the block size (a test checks one block
against many).  What stays is one column-sum row per resample.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "id_uniforms",
    "SetStatistic",
    "MEAN",
    "LATENT_PPL",
    "LOG_LATENT_PPL",
    "latent_ppl",
    "document_rows",
    "bootstrap_cis",
    "bootstrap_difference_cis",
    "permutation_tests",
    "PermutationTest",
    "BLOCK_BYTES",
]

BLOCK_BYTES = 64 * 2**20
"""Working memory of one block of resamples (indices, or membership masks, of one block)."""


@dataclass(frozen=True)
class SetStatistic:
    """A statistic of a set of documents given by the column sums of its rows and their number:
    ``of_sums(sums (..., k), n) -> (...)``."""

    name: str
    of_sums: Callable[[np.ndarray, int], np.ndarray]

    def __call__(self, rows: np.ndarray) -> float:
        """The statistic of one set's rows ``(n, k)``."""
        rows = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        return float(self.of_sums(rows.sum(axis=0), rows.shape[0]))


MEAN = SetStatistic("mean", lambda sums, n: sums[..., 0] / n)
"""The mean of the rows' first column (the mean Latent NLL of ``(T, M)`` rows)."""

LATENT_PPL = SetStatistic("latent_ppl", lambda sums, n: np.exp(sums[..., 0] / sums[..., 1]))
"""``exp(sum T / sum M)`` of ``(T, M)`` rows."""

LOG_LATENT_PPL = SetStatistic("log_latent_ppl", lambda sums, n: sums[..., 0] / sums[..., 1])
"""``sum T / sum M`` of ``(T, M)`` rows: what the PPL's permutation test compares."""


def latent_ppl(nll: np.ndarray, steps: np.ndarray) -> float:
    """Latent PPL of a set: ``exp(sum_x T(x) / sum_x M(x))`` (NaN for no document)."""
    nll = np.asarray(nll, dtype=np.float64)
    if nll.size == 0:
        return float("nan")
    return LATENT_PPL(document_rows(nll, steps))


def document_rows(*columns: np.ndarray) -> np.ndarray:
    """Per-document values side by side as float64 rows, ``(n, len(columns))``."""
    return np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=1)


def _as_rows(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(len(values), -1)


def _blocks(n_resamples: int, row_bytes: int, block_bytes: int | None = None) -> list[int]:
    """Row counts of consecutive blocks covering ``n_resamples`` rows of ``row_bytes`` each."""
    per = max(1, (BLOCK_BYTES if block_bytes is None else block_bytes) // max(1, row_bytes))
    return [min(per, n_resamples - start) for start in range(0, n_resamples, per)]


def _resampled_sums(rows: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Column sums of ``n_resamples`` bootstrap resamples of ``rows``, ``(R, k)``, block by block: the resamples
    ``rng.integers(0, n, size=(R, n))`` would give in one call."""
    n, k = rows.shape
    columns = [np.ascontiguousarray(rows[:, j]) for j in range(k)]
    sums = np.empty((n_resamples, k))
    start = 0
    for size in _blocks(n_resamples, n * (8 + 8 * k)):
        index = rng.integers(0, n, size=(size, n))
        for j, column in enumerate(columns):
            sums[start:start + size, j] = column[index].sum(axis=1)
        start += size
    return sums


def _percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_cis(values: np.ndarray, statistics: Sequence[SetStatistic], *, n_resamples: int = 1000,
                  level: float = 0.95, seed: int = 0) -> list[tuple[float, float]]:
    """Percentile bootstrap CI of each statistic, resampling documents (whole rows) from one draw.

    ``values``: ``(n,)`` or rows ``(n, k)``; NaN pairs for an empty set.
    """
    rows = _as_rows(values)
    if rows.shape[0] == 0:
        return [(float("nan"), float("nan"))] * len(statistics)
    sums = _resampled_sums(rows, n_resamples, np.random.default_rng(seed))
    return [_percentile_interval(s.of_sums(sums, rows.shape[0]), level) for s in statistics]


def bootstrap_difference_cis(a: np.ndarray, b: np.ndarray, statistics: Sequence[SetStatistic], *,
                             n_resamples: int = 1000, level: float = 0.95, seed: int = 0
                             ) -> list[tuple[float, float]]:
    """Percentile bootstrap CI of ``s(b) - s(a)`` for each statistic, each set resampled on its own (all of
    ``a``'s resamples first, then ``b``'s: one stream)."""
    a, b = _as_rows(a), _as_rows(b)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return [(float("nan"), float("nan"))] * len(statistics)
    rng = np.random.default_rng(seed)
    on_a = _resampled_sums(a, n_resamples, rng)
    on_b = _resampled_sums(b, n_resamples, rng)
    return [_percentile_interval(s.of_sums(on_b, b.shape[0]) - s.of_sums(on_a, a.shape[0]), level)
            for s in statistics]


@dataclass(frozen=True)
class PermutationTest:
    """``difference = s(b) - s(a)`` and its two-sided permutation p-value; ``exact`` when every split of the
    pooled documents was enumerated (``p = #{|d| >= |d_obs|} / #splits``), else Monte Carlo over
    ``n_permutations`` random splits (``p = (1 + #{|d| >= |d_obs|}) / (1 + n_permutations)``)."""

    difference: float
    p_value: float
    exact: bool


def _splits_at_most(n: int, size: int, limit: int) -> int | None:
    """``C(n, size)`` when it is at most ``limit``, else None (without computing a huge binomial)."""
    count = 1
    for i in range(min(size, n - size)):
        count = count * (n - i) // (i + 1)  # C(n, i + 1), exact at every step
        if count > limit:
            return None
    return count


def _split_masks(n: int, size: int, splits: int | None, n_permutations: int, rng: np.random.Generator):
    """Blocks of membership masks ``(rows, n)`` of the smaller group: all ``splits`` ``size``-subsets of ``n`` when
    they were counted (in :func:`itertools.combinations` order), else ``n_permutations`` drawn uniformly
    (``rng.choice(n, size, replace=False)`` each)."""
    subsets = itertools.combinations(range(n), size) if splits is not None else None
    blocks = _blocks(n_permutations if splits is None else splits, 8 * n + 8 * size)
    buffer = np.empty((max(blocks, default=0), n))  # one buffer, written again for each block
    for rows in blocks:
        mask = buffer[:rows]
        mask.fill(0.0)
        for r in range(rows):
            mask[r, rng.choice(n, size=size, replace=False) if subsets is None else list(next(subsets))] = 1.0
        yield mask


def permutation_tests(a: np.ndarray, b: np.ndarray, statistics: Sequence[SetStatistic], *,
                      n_permutations: int = 2000, seed: int = 0) -> list[PermutationTest]:
    """Two-sided permutation tests of equal set statistics, all from one draw of splits (see
    :class:`PermutationTest`).

    ``a`` and ``b`` hold one row per document (``(n,)`` values or ``(n, k)`` rows).  A split puts ``min(n_a,
    n_b)`` of the pooled documents in the smaller set's place and the rest in the other's; its column sums are
    one masked product ``mask @ rows``, the other side's the pooled total minus them.  Exact when the number of
    splits, ``C(n_a + n_b, min(n_a, n_b))``, is at most ``n_permutations``.  Ties count as extreme (relative
    tolerance 1e-12), so integer-valued statistics are not understated.
    """
    a, b = _as_rows(a), _as_rows(b)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return [PermutationTest(float("nan"), float("nan"), False)] * len(statistics)
    pooled = np.concatenate([a, b])
    n, n_a, n_b = pooled.shape[0], a.shape[0], b.shape[0]
    size = min(n_a, n_b)
    total = pooled.sum(axis=0)

    def differences(group_sums: np.ndarray) -> list[np.ndarray]:
        """``s(b) - s(a)`` per split and statistic, given the smaller group's column sums ``(rows, k)``."""
        rest = total - group_sums
        sums_a, sums_b = (group_sums, rest) if n_a == size else (rest, group_sums)
        return [s.of_sums(sums_b, n_b) - s.of_sums(sums_a, n_a) for s in statistics]

    observed = [float(d[0]) for d in differences((a if n_a == size else b).sum(axis=0)[None])]
    thresholds = [abs(d) - 1e-12 * max(1.0, abs(d)) for d in observed]
    extreme = np.zeros(len(statistics), dtype=np.int64)
    splits = _splits_at_most(n, size, n_permutations)
    exact = splits is not None
    for mask in _split_masks(n, size, splits, n_permutations, np.random.default_rng(seed)):
        for i, d in enumerate(differences(mask @ pooled)):
            extreme[i] += int(np.sum(np.abs(d) >= thresholds[i]))
    p_values = extreme / splits if exact else (1 + extreme) / (1 + n_permutations)
    return [PermutationTest(d, float(p), exact) for d, p in zip(observed, p_values)]


def id_uniforms(ids: Sequence[str], key: str) -> np.ndarray:
    """``(n,)`` numbers in ``[0, 1)``, one per id: the first 8 bytes of SHA-256 of ``"key:id"`` over ``2^64``.
    The same id and key always give the same number; across ids (or keys) they behave as independent uniforms."""
    return np.array([int.from_bytes(hashlib.sha256(f"{key}:{i}".encode("utf-8")).digest()[:8], "big") / 2.0 ** 64
                     for i in ids], dtype=np.float64)
