"""The authors' smoothing: interpolated absolute discounting over relabelled windows, in numpy.

Counts.  Every position of every training chain gives one relabelled window
``w = (w_1..w_n)`` (left-padded, :mod:`critics.coref.windows`) and, for each order
m = 1..n, its suffix ``(w_{n-m+1}..w_n) = (h, v)``: context h (m-1 tokens) and target v.
``c_m(h v)`` counts positions, ``c_m(h) = sum_v c_m(h v)`` and
``N1+_m(h) = |{v : c_m(h v) > 0}|``.  Raw counts at every order (no continuation counts).

Probabilities (the paper calls them Kneser-Ney; this is what the authors' code does)::

    D_m = n1_m / (n1_m + 2 n2_m)   (n1_m, n2_m: distinct order-m n-grams seen once / twice; D_1 = 0)
    P_1(v)   = c_1(v) / sum_v' c_1(v'),   or unk_prob (1e-20) for a target never seen (flagged unknown)
    P_m(v|h) = max(c_m(h v) - D_m, 0) / c_m(h) + D_m N1+_m(h) / c_m(h) * P_{m-1}(v | h[1:])

A window is scored from the longest order m whose context ``h`` was seen as a context at
order m (``c_m(h) > 0``; order 1 always is).  Over the seen vocabulary V (the distinct order-1
targets) ``sum_v P_m(v|h) = 1`` at every order as long as D_m > 0 or the context has seen every
target; an unseen target's ``unk_prob`` (times the back-off weights) is *outside* V, so
:meth:`AuthorsChainPrior.next_logprobs` rows sum to 1 over V.  If some order has no n-gram seen
once or twice, ``D_m = 0`` and targets unseen after a seen context get probability 0 (-inf).

Implementation: per order, sorted unique n-gram keys with counts and sorted unique contexts with
``c(h)`` and ``N1+(h)`` (``np.unique`` / ``np.add.reduceat``).  :meth:`AuthorsChainPrior._probs`
evaluates the recursion for packed windows (``np.searchsorted`` into each order's tables).  Since
P(v | context) depends on the context only through its longest seen suffix h (the seen contexts
are closed under suffixes, so orders 1..|h|+1 apply) and on v only through its column (a target of
V, or any other target: ``unk_prob`` carried up the same recursion with zero counts), the same
recursion is run once at construction on the dense ``(contexts of every order, |V| + 1)`` matrix,
order by order from the parent (one shorter) suffix's row, with the same floating-point operations
in the same order; its log is the score table of :class:`~critics.coref.prior.ChainPrior`, so
scoring is two index lookups and a gather per position.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .prior import FORMAT_VERSION, ChainPrior
from .windows import KindTable, key_base

__all__ = ["AuthorsChainPrior", "OrderCounts"]

_FORMAT = "critic.coref.authors_prior"


class OrderCounts:
    """Counts of one order m: ``keys``/``counts`` of the n-grams, ``contexts`` with ``context_count``
    (c(h)) and ``context_types`` (N1+(h)), and the discount ``D``."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray, base: int, order: int):
        self.keys, self.counts = keys, counts
        ctx = keys // base  # keys are sorted, so equal contexts are contiguous
        self.contexts, start = np.unique(ctx, return_index=True)
        self.context_count = np.add.reduceat(counts, start) if len(keys) else counts[:0]
        self.context_types = np.diff(np.append(start, len(keys)))
        n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
        self.n1, self.n2 = n1, n2
        self.D = 0.0 if order == 1 or n1 + 2 * n2 == 0 else n1 / (n1 + 2 * n2)

    @staticmethod
    def lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(index, found)`` of ``values`` in the sorted array ``table``."""
        if len(table) == 0:
            return np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
        idx = np.minimum(np.searchsorted(table, values), len(table) - 1)
        return idx, table[idx] == values


class AuthorsChainPrior(ChainPrior):
    """n-gram chain prior with the authors' interpolated absolute discounting (module docstring).

    ``vocabulary``: the distinct relabelled order-1 targets seen in training (sorted by key);
    ``discounts``: ``{m: D_m}``; ``unk_prob``: P_1 of an unseen target.
    """

    def __init__(self, order: int, table: KindTable, orders: dict[int, OrderCounts], unk_prob: float):
        self.order, self._table, self.orders, self.unk_prob = order, table, orders, float(unk_prob)
        self.total = int(orders[1].counts.sum())
        self.vocabulary = self._decode_targets(orders[1].keys)
        suffixes = {m - 1: orders[m].contexts for m in range(1, order + 1)}
        with np.errstate(divide="ignore"):
            table = np.log(np.concatenate(self._prob_rows(), axis=0))
        self._set_score_table(suffixes, orders[1].keys, table,
                              counts={m - 1: orders[m].context_count for m in range(1, order + 1)})

    def _prob_rows(self) -> list[np.ndarray]:
        """Per order m, ``(contexts of order m, |V| + 1)``: P(v | context) where the context is the
        longest seen suffix (the recursion of :meth:`_probs`, elementwise the same operations)."""
        base, one = self.base, self.orders[1]
        targets = one.keys
        width = len(targets) + 1
        row = np.empty((1, width))
        row[0, :-1] = one.counts / self.total
        row[0, -1] = self.unk_prob
        rows = [row]
        for m in range(2, self.order + 1):
            cm = self.orders[m]
            # the row of each context's suffix one slot shorter (seen: the seen contexts are suffix-closed)
            parent = np.searchsorted(self.orders[m - 1].contexts, cm.contexts % base ** (m - 2))
            c_hw = np.zeros((len(cm.contexts), width), dtype=np.int64)
            c_hw[np.searchsorted(cm.contexts, cm.keys // base), np.searchsorted(targets, cm.keys % base)] = cm.counts
            c_h, types = cm.context_count[:, None], cm.context_types[:, None]
            rows.append(np.maximum(c_hw - cm.D, 0.0) / c_h + cm.D * types / c_h * rows[-1][parent])
        return rows

    @property
    def discounts(self) -> dict[int, float]:
        return {m: c.D for m, c in self.orders.items()}

    @classmethod
    def fit(cls, chains: Sequence[Sequence[str]], order: int = 5, *, unk_prob: float = 1e-20) -> "AuthorsChainPrior":
        """Count the relabelled windows of every position of ``chains`` (and their suffixes)."""
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        self, keys = cls._start_fit(chains, order)
        table = self._table
        base = self.base
        orders = {}
        for m in range(1, order + 1):
            uniq, counts = np.unique(keys % base**m, return_counts=True)
            orders[m] = OrderCounts(uniq, counts.astype(np.int64), base, m)
        return cls(order, table, orders, unk_prob)

    # ------------------------------------------------------------------ scoring
    def _probs(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(P (U,), unknown (U,))`` of packed windows ``keys``: the recursion of the module doc,
        bottom-up; order m replaces P only where its context was seen at order m (the direct path:
        scoring reads the same numbers from the score table)."""
        base = self.base
        one = self.orders[1]
        idx, seen = one.lookup(one.keys, keys % base)
        prob = np.where(seen, one.counts[idx] / self.total, self.unk_prob)
        for m in range(2, self.order + 1):
            cm = self.orders[m]
            ngram = keys % base**m
            ci, found = cm.lookup(cm.contexts, ngram // base)
            gi, hit = cm.lookup(cm.keys, ngram)
            c_hw = np.where(hit, cm.counts[gi], 0)
            c_h = np.where(found, cm.context_count[ci], 1)
            mixed = np.maximum(c_hw - cm.D, 0.0) / c_h + cm.D * cm.context_types[ci] / c_h * prob
            prob = np.where(found, mixed, prob)
        return prob, ~seen

    def direct_log_probs(self, keys: np.ndarray) -> np.ndarray:
        """ln P of packed windows by :meth:`_probs`, not the table: a check."""
        with np.errstate(divide="ignore"):
            return np.log(self._probs(keys)[0])

    def _score_unique(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._score_positions(keys // self.base, keys % self.base)

    def _unknown_unique(self, keys: np.ndarray) -> np.ndarray:
        one = self.orders[1]
        return ~one.lookup(one.keys, keys % self.base)[1]

    def _next_unique(self, contexts: np.ndarray) -> np.ndarray:
        """Rows over the seen vocabulary V (the unknown-token mass is not part of V)."""
        return self._score_table[self._context_rows(contexts), :-1]

    # ------------------------------------------------------------------ persistence
    def save(self, directory) -> None:
        """``prior.json`` (format, version, order, unk_prob, kinds, discounts) + ``counts.npz``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for m, c in self.orders.items():
            arrays[f"keys_{m}"], arrays[f"counts_{m}"] = c.keys, c.counts
        np.savez(directory / "counts.npz", **arrays)
        self._write_json(directory / "prior.json", {
            "format": _FORMAT, "version": FORMAT_VERSION, "order": self.order, "unk_prob": self.unk_prob,
            "kinds": self._table.kinds[1:], "discounts": {str(m): d for m, d in self.discounts.items()},
            "positions": self.total})

    @classmethod
    def load(cls, directory) -> "AuthorsChainPrior":
        directory = Path(directory)
        meta = cls._read_json(directory / "prior.json", _FORMAT)
        order = int(meta["order"])
        with np.load(directory / "counts.npz") as z:
            orders = {m: OrderCounts(z[f"keys_{m}"], z[f"counts_{m}"], key_base(order), m)
                      for m in range(1, order + 1)}
        return cls(order, KindTable(meta["kinds"]), orders, meta["unk_prob"])
