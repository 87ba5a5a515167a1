"""Conformal outlier p-values against a pool of real documents, and Benjamini-Hochberg q-values for flags.

A document ``x`` is compared with a **pool** of real documents ``Z_1 .. Z_n`` that it is exchangeable with when
it is real too (held-out text: a critic's calibration documents, :mod:`critic.calibration`, and a report's
reference documents).  Each has ``J`` statistics (``T(x)/M(x)`` and the critic's outlier statistics), larger
meaning less typical.

**Ranks.**  In the augmented set ``{Z_1, .., Z_n, x}`` the rank ``r_j(k)`` of a point ``k`` in statistic ``j`` is
the number of *other* points with a larger value; ties are broken by a uniform ``u_kj`` per document and
statistic (``(value, u)`` compared lexicographically; :func:`critic.stats.id_uniforms` of the document's id), so
every rank is distinct.  The **combined score** ``s(k) = min_j r_j(k)`` is small when ``k`` is extreme in some
statistic; it is a symmetric function of the augmented set, so under exchangeability the rank of ``s(x)``
among the ``n + 1`` scores is uniform (full conformal prediction: Vovk, Gammerman & Shafer 2005, ch. 2).  The
**conformal p-value**

    p(x) = (1 + #{i : s(i) < s(x)} + floor(v (1 + #{i : s(i) = s(x)}))) / (n + 1),

with ``v`` a uniform of the document (ties of ``s`` broken at random), is uniform on ``{1, .., n + 1} / (n + 1)``
for a real document: ``P(p <= a) = floor(a (n + 1)) / (n + 1) <= a``.  With ``J = 1`` it is the empirical
p-value ``(1 + r(x)) / (n + 1)``.  Unlike Sidak's ``1 - (1 - min_j p_j)^J`` it keeps the resolution
``1 / (n + 1)`` whatever ``J`` and is exact under any dependence between the statistics.

Adding ``x`` to the pool moves a pool point's rank ``r_j(i)`` by at most one, so ``s(i)`` is its
leave-one-out score ``m_i`` or ``m_i + 1``; only the pool points with ``m_i`` in ``{s(x) - 1, s(x)}`` (at most
``2 J``, since each statistic's leave-one-out ranks are a permutation of ``0 .. n - 1``) need a look.  A
document costs ``O(J log n + J^2)``, the pool ``O(n J log n)`` once (:class:`ConformalPool`).

**Length.**  Within length groups (:func:`length_groups`: the pool's word counts cut at their quantiles) a
document is compared with the pool documents of its own group (Mondrian conformal prediction, Vovk et al.
2005, sec. 4.5), so it is not flagged for being short or long; or, for continuous statistics whose law given
the length is a location-scale family, with the whole pool on residuals (:func:`location_scale_residuals`).

**False discovery rate.**  :func:`bh_q_values`: Benjamini & Hochberg (1995) over a set's p-values.  Conformal
p-values against one pool are positively dependent (PRDS), so flagging ``q <= alpha`` keeps the expected share
of real documents among the flags at most ``alpha`` (Bates, Candes, Lei, Romano & Sesia, Ann. Statist. 2023).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["ConformalPool", "bh_q_values", "length_groups", "location_scale_residuals", "smallest_p_value"]



class _Group:
    """The conformal ranks of one group's pool, ``columns (n, J)`` with tie-breaking uniforms ``ties (n, J)``."""

    def __init__(self, columns: np.ndarray, ties: np.ndarray) -> None:
        n, J = columns.shape
        self.n = n
        self._sorted_values, self._blocks, self._keys = [], [], []
        rank = np.empty((n, J), dtype=np.int64)  # ascending rank of each pool point among the pool, per column
        for j in range(J):
            order = np.lexsort((ties[:, j], columns[:, j]))
            values = columns[order, j]
            block = np.concatenate([[0], np.cumsum(values[1:] != values[:-1])]) if n else np.zeros(0, np.int64)
            self._sorted_values.append(values)
            self._blocks.append(block)
            self._keys.append(2.0 * block + ties[order, j])  # (block, u) as one increasing float
            rank[order, j] = np.arange(n)
        self._rank = rank
        self._loo = (n - 1) - rank  # pool points above each pool point, leave-one-out
        self._m = self._loo.min(axis=1) if n else np.zeros(0, np.int64)
        self._at_most = np.cumsum(np.bincount(self._m, minlength=n + 1))  # #{i: m_i <= k}
        self._level = np.full((n + 2, J), -1, dtype=np.int64)  # pool points with m_i = k (at most J)
        filled = np.zeros(n + 2, dtype=np.int64)
        for i in np.argsort(self._m, kind="stable"):
            self._level[self._m[i], filled[self._m[i]]] = i
            filled[self._m[i]] += 1

    def _below(self, values: np.ndarray, ties: np.ndarray) -> np.ndarray:
        """``(t, J)``: pool points below each value, ``(value, u)`` compared lexicographically: the pool points
        of smaller value, and in a block of equal values those of smaller ``u``."""
        out = np.empty(values.shape, dtype=np.int64)
        for j, (sorted_values, blocks, keys) in enumerate(zip(self._sorted_values, self._blocks, self._keys)):
            lo = np.searchsorted(sorted_values, values[:, j], side="left")
            tied = np.searchsorted(sorted_values, values[:, j], side="right") > lo
            block = blocks[np.minimum(lo, self.n - 1)]
            out[:, j] = np.where(tied, np.searchsorted(keys, 2.0 * block + ties[:, j], side="left"), lo)
        return out

    def p_values(self, values: np.ndarray, ties: np.ndarray, tie: np.ndarray) -> np.ndarray:
        """Conformal p-values of new points ``values (t, J)`` (see the module docstring)."""
        n = self.n
        below = self._below(values, ties)
        score = (n - below).min(axis=1)  # s(x) = min_j r_j(x)
        less = np.where(score >= 2, self._at_most[np.maximum(score - 2, 0)], 0)
        equal = np.zeros(len(values), dtype=np.int64)
        for offset, level in ((1, score - 1), (0, score)):
            cand = self._level[np.clip(level, 0, n + 1)]  # (t, J) pool indices, -1 for none
            cand = np.where((level >= 0)[:, None], cand, -1)
            real = cand >= 0
            safe = np.where(real, cand, 0)
            above = below[:, None, :] > self._rank[safe]  # (t, J candidates, J stats): x above the candidate
            s = (self._loo[safe] + above).min(axis=2)  # the candidate's score with x in the pool
            if offset == 1:  # m_i = s(x) - 1: below s(x) unless x pushed it up to s(x)
                less += np.sum(real & (s < score[:, None]), axis=1)
            equal += np.sum(real & (s == score[:, None]), axis=1)
        return (1.0 + less + np.floor(tie * (1.0 + equal))) / (n + 1.0)

    def own_p_values(self, tie: np.ndarray) -> np.ndarray:
        """Each pool point's conformal p-value against the others (the pool is its own augmented set)."""
        m, n = self._m, self.n
        less = np.where(m >= 1, self._at_most[np.maximum(m - 1, 0)], 0)
        equal = self._at_most[m] - less - 1
        return (1.0 + less + np.floor(tie * (1.0 + equal))) / n


class ConformalPool:
    """A pool of real documents' statistics ``columns (n, J)``, its tie-breaking uniforms ``ties (n, J)`` and
    its documents' groups ``groups (n,)`` (length groups; all 0 for none), ready to give conformal p-values
    (module docstring).  A document of a group the pool does not have is compared with the whole pool."""

    def __init__(self, columns: np.ndarray, ties: np.ndarray, groups: np.ndarray | None = None) -> None:
        columns, ties = _rows(columns), _rows(ties)
        if columns.shape != ties.shape or not len(columns):
            raise ValueError(f"a pool needs at least one document and a tie-break per value (columns "
                             f"{columns.shape}, ties {ties.shape})")
        self.groups = np.zeros(len(columns), dtype=np.int64) if groups is None else np.asarray(groups, np.int64)
        self._by_group = {int(g): _Group(columns[self.groups == g], ties[self.groups == g])
                          for g in np.unique(self.groups)}
        self._all = _Group(columns, ties) if len(self._by_group) > 1 else next(iter(self._by_group.values()))

    @property
    def group_sizes(self) -> dict[int, int]:
        return {g: group.n for g, group in self._by_group.items()}

    def p_values(self, values: np.ndarray, ties: np.ndarray, tie: np.ndarray, groups: np.ndarray | None = None
                 ) -> np.ndarray:
        """``(t,)`` conformal p-values of documents ``values (t, J)`` (tie-breaks ``ties (t, J)``, ``tie (t,)``)
        against the pool documents of their group."""
        values, ties, tie = _rows(values), _rows(ties), np.asarray(tie, dtype=np.float64)
        groups = np.zeros(len(values), dtype=np.int64) if groups is None else np.asarray(groups, np.int64)
        out = np.empty(len(values))
        for g in np.unique(groups):
            here = groups == g
            group = self._by_group.get(int(g), self._all)
            out[here] = group.p_values(values[here], ties[here], tie[here])
        return out

    def own_p_values(self, tie: np.ndarray) -> np.ndarray:
        """``(n,)``: each pool document's conformal p-value against the other pool documents of its group."""
        tie = np.asarray(tie, dtype=np.float64)
        out = np.empty(len(self.groups))
        for g, group in self._by_group.items():
            here = self.groups == g
            out[here] = group.own_p_values(tie[here])
        return out


def _rows(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[:, None] if values.ndim == 1 else values


def bh_q_values(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg q-values: ``q_(i) = min_{k >= i} min(1, m p_(k) / k)`` over the ``m`` p-values sorted
    ascending; flagging ``q <= alpha`` is the BH procedure at level ``alpha``."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(q, 1.0)
    return out


def length_groups(pool_sizes: np.ndarray, sizes: np.ndarray, *, min_per_group: int = 30, max_groups: int = 10
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Length groups of the pool's documents and of other documents: the pool's sizes (word counts) cut at
    their quantiles into ``B = clip(n // min_per_group, 1, max_groups)`` groups of about equal counts; a
    document's group is the one its own size falls in.  Returns ``(pool_groups (n,), groups (t,))``."""
    pool_sizes, sizes = np.asarray(pool_sizes, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    count = int(np.clip(len(pool_sizes) // min_per_group, 1, max_groups))
    edges = np.unique(np.quantile(pool_sizes, np.linspace(0.0, 1.0, count + 1)[1:-1])) if count > 1 else []
    return np.searchsorted(edges, pool_sizes, side="right"), np.searchsorted(edges, sizes, side="right")


def location_scale_residuals(pool: np.ndarray, pool_sizes: np.ndarray, values: np.ndarray, sizes: np.ndarray, *,
                             location_degree: int = 3, scale_degree: int = 2, min_pool: int = 30
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Standardised residuals of a statistic under a location-scale model on log size fitted on the pool: with
    ``x = log max(size, 1)``,

        value = m(x) + s(x) e,   m a polynomial of degree ``location_degree`` (least squares),
                                 log s a polynomial of degree ``scale_degree`` fitted to log |value - m(x)|,

    ``z = (value - m(x)) / s(x)`` (``x`` clipped to the pool's range).  Where the statistic's law given the size
    is a location-scale family, ``e`` does not depend on length, so one pool serves every length (resolution
    ``1 / (n + 1)``, against one length group's).  For a continuous statistic (the CTM's ``T(x)``).  Degrees are
    lowered to what the pool's distinct sizes allow; with fewer than ``min_pool`` values or one distinct size
    the values are returned as they are.  Returns ``(z_pool (n,), z (t,))``."""
    pool, values = np.asarray(pool, dtype=np.float64), np.asarray(values, dtype=np.float64)
    x_pool = np.log(np.maximum(np.asarray(pool_sizes, dtype=np.float64), 1.0))
    distinct = len(np.unique(x_pool))
    if len(pool) < min_pool or distinct < 2:
        return pool, values
    x = np.clip(np.log(np.maximum(np.asarray(sizes, dtype=np.float64), 1.0)), x_pool.min(), x_pool.max())
    location = np.polynomial.Polynomial.fit(x_pool, pool, min(location_degree, distinct - 1))
    residual = pool - location(x_pool)
    floor = 1e-12 * max(float(np.abs(residual).mean()), 1e-300)
    log_scale = np.polynomial.Polynomial.fit(x_pool, np.log(np.abs(residual) + floor), min(scale_degree, distinct - 1))
    return residual / np.exp(log_scale(x_pool)), (values - location(x)) / np.exp(log_scale(x))


def smallest_p_value(group_sizes: Sequence[int]) -> float:
    """The smallest p-value a pool allows a document of its smallest group: ``1 / (n_min + 1)``."""
    return 1.0 / (min(group_sizes) + 1.0)
