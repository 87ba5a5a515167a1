"""The chain-prior API shared by the KenLM prior and the authors' smoothing (a base class).

A chain prior scores every position of a chain by its relabelled window
(:mod:`critics.coref.windows`):

    log P_c(z) = sum_i ln P(w_i[-1] | w_i[:-1]),   w_i = relabel(z_{i-n+1..i}) (left-padded),

so a chain of M tokens has M scored positions (no end token).  Subclasses give
:meth:`ChainPrior._score_unique` (ln P and unknown flags of distinct packed windows),
:meth:`ChainPrior._next_unique` (ln P over the vocabulary after distinct packed contexts),
``fit`` / ``save`` / ``load``.  Everything else -- encoding, packing, gathering back,
per-chain sums -- is here.

The score table.  Both priors are back-off models in which ln P(v | context) depends on the
context only through its longest suffix seen in training, and on v only through its column:
one of the training targets V, or "outside V" (one shared column).  A prior that calls
:meth:`ChainPrior._set_score_table` with the ``(S, |V| + 1)`` table of those numbers (S: all
training context suffixes, every length) scores each position by two lookups and a gather --
the longest seen suffix of its context (a :class:`~critics.coref.windows.KeyIndex` per suffix
length, longest first, only the misses going on to shorter ones) and the column of its target
(an array over slot codes) -- with no ``np.unique`` and no per-window Python call.  The table
holds the very numbers the prior's own formula gives (the tests compare them bit for bit); it
costs 8 (|V| + 1) bytes a suffix (float64), its rows kept in decreasing order of training
positions so that the rows most looked up share cache lines and pages.  Without a table, the
distinct windows are scored by :meth:`ChainPrior._score_unique`.

The API:

- ``log_prob(chains) -> torch.float64 (B,)``: a :class:`critic.latent.Prior` for
  :class:`critic.latent.ValuePointMass` posteriors;
- ``position_logprobs(chains)`` / ``unknown(chains)``: per chain, ``(M,)`` float64 / bool;
- ``windows(chains)``: per chain, the M relabelled windows as token tuples;
- ``next_logprobs(contexts) -> (C, |V|)``: ln P(v | context) over ``vocabulary``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .windows import (PAD, KeyIndex, KindTable, decode_codes, encode, key_base, pack, relabel, unpack, window_keys,
                      window_parts)

__all__ = ["ChainPrior", "FORMAT_VERSION"]

FORMAT_VERSION = 1


class ChainPrior:
    """Base class of the n-gram chain priors (see the module docstring).

    Attributes: ``order`` (n), ``vocabulary`` (the relabelled target tokens, the columns of
    :meth:`next_logprobs`), ``pad`` (the padding token of :meth:`windows` and contexts).
    """

    pad = PAD
    order: int
    vocabulary: list[str]
    _table: KindTable
    _score_table: np.ndarray | None = None

    # ------------------------------------------------------------------ subclass hooks
    def _score_unique(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ln P (U,), unknown (U,))`` of distinct packed windows ``keys (U,)``."""
        raise NotImplementedError

    def _unknown_unique(self, keys: np.ndarray) -> np.ndarray:
        """``(U,)`` bool: the target of each packed window is not in the vocabulary."""
        raise NotImplementedError

    def _next_unique(self, contexts: np.ndarray) -> np.ndarray:
        """``(C, |V|)`` ln P(v | context) for distinct packed contexts ``(C,)`` of order-1 slots."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the score table
    def _set_score_table(self, suffixes: dict[int, np.ndarray], targets: np.ndarray, table: np.ndarray,
                         counts: dict[int, np.ndarray] | None = None) -> None:
        """Score positions by ``table`` (module doc).  ``suffixes[k]`` (k = 0..order-1): the sorted
        packed context suffixes of k slots seen in training (``suffixes[0] = [0]``, the empty one);
        their rows in ``table``, in that order (k, then key).  ``targets``: the sorted slot codes
        of V, its first ``|V|`` columns; the last column scores every other target.  ``counts[k]``
        (optional): training positions per suffix, the lookup priority of :class:`KeyIndex`."""
        n = self.order
        offsets = np.cumsum([0] + [len(suffixes[k]) for k in range(n)])
        table = np.ascontiguousarray(table, dtype=np.float64)
        if table.shape != (offsets[-1], len(targets) + 1) or len(suffixes[0]) != 1:
            raise ValueError(f"a score table is (suffixes, |V| + 1) = ({offsets[-1]}, {len(targets) + 1}) "
                             f"with one empty suffix, got {table.shape}")
        # The table is kept with its rows in decreasing order of training positions (when counts
        # are given): the rows most looked up then share pages and cache lines.  ``_row_slot``
        # maps a row back to its suffix (k, then key) order, ``_context_slots``'s numbering.
        order = np.argsort(-np.concatenate([counts[k] for k in range(n)]), kind="stable") \
            if counts is not None else np.arange(offsets[-1])
        row_of = np.empty_like(order)
        row_of[order] = np.arange(len(order))
        self._row_slot, self._empty_row = order, int(row_of[0])
        self._suffix_index = {k: KeyIndex(suffixes[k], row_of[offsets[k]:offsets[k + 1]],
                                          priority=None if counts is None else counts[k])
                              for k in range(1, n)}
        # column of each slot code of the training kinds, and one more entry for all larger codes
        # (kinds first seen after training): ``np.take(..., mode="clip")`` reads it for those
        targets = np.asarray(targets, dtype=np.int64)
        self._column = np.full(len(self._table) * (n + 1) + 1, len(targets), dtype=np.int64)
        self._column[targets] = np.arange(len(targets))
        self._score_table = table[order]  # rows in row order, not suffix order
        self._score_flat = self._score_table.reshape(-1)

    def _context_rows(self, contexts: np.ndarray) -> np.ndarray:
        """Row (of ``_score_flat``) of each packed full context ``(C,)``: its longest suffix seen in
        training (the empty suffix when none is)."""
        n, base = self.order, self.base
        if n == 1 or len(contexts) == 0:
            return np.full(len(contexts), self._empty_row, dtype=np.int64)
        rows, miss = self._suffix_index[n - 1].find(contexts)
        rest = contexts[miss]
        for k in range(n - 2, 0, -1):
            if not len(miss):
                break
            got, lost = self._suffix_index[k].find(rest % base**k)
            rows[miss] = got
            miss, rest = miss[lost], rest[lost]
        rows[miss] = self._empty_row
        return rows

    def _context_slots(self, contexts: np.ndarray) -> np.ndarray:
        """Suffix (k, then key order) of each packed full context ``(C,)``: its longest suffix seen
        in training (0, the empty suffix, when none is)."""
        return self._row_slot[self._context_rows(contexts)]

    def _score_positions(self, contexts: np.ndarray, targets: np.ndarray,
                         unknown: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``(ln P (P,), unknown (P,))`` of windows given as packed contexts and target slot codes
        (``unknown=False``: ``None`` for the flags)."""
        if self._score_table is None:
            keys = contexts * self.base + targets
            uniq, inverse = np.unique(keys, return_inverse=True)
            logp, flags = self._score_unique(uniq)
            return logp[inverse], flags[inverse] if unknown else None
        columns = np.take(self._column, targets, mode="clip")
        width = self._score_table.shape[1]
        cell = self._context_rows(contexts)
        cell *= width
        cell += columns
        return self._score_flat[cell], (columns == width - 1) if unknown else None

    # ------------------------------------------------------------------ fitting
    @classmethod
    def _start_fit(cls, chains: Sequence[Sequence[str]], order: int):
        """``(prior, keys)``: an empty prior of ``order`` with a fresh token table, and the packed relabelled
        windows of every training position (an error when there are none)."""
        self = cls.__new__(cls)
        self.order = order
        table = KindTable()
        keys, _, _ = self._windows(chains, table)
        if len(keys) == 0:
            raise ValueError("no chain positions to fit on")
        self._table = table
        return self, keys

    # ------------------------------------------------------------------ windows
    def _windows(self, chains: Sequence[Sequence[str]], table: KindTable | None = None):
        """``(keys (P,), lengths (B,), table)``: packed relabelled windows of every position."""
        table = self._table.copy() if table is None else table
        enc = encode(chains, table)
        return window_keys(enc, self.order), enc.lengths, table

    def _window_parts(self, chains: Sequence[Sequence[str]]):
        """``(contexts (P,), targets (P,), encoded)`` of every position (:func:`window_parts`)."""
        enc = encode(chains, self._table.copy())
        return (*window_parts(enc, self.order), enc)

    def _split(self, values: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []

    def windows(self, chains: Sequence[Sequence[str]]) -> list[list[tuple[str, ...]]]:
        """Per chain, its relabelled windows as token tuples (``pad`` before the start)."""
        keys, lengths, table = self._windows(chains)
        uniq, inverse = np.unique(keys, return_inverse=True)
        decoded = decode_codes(*unpack(uniq, self.order), table)
        flat = [decoded[i] for i in inverse.tolist()]
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    # ------------------------------------------------------------------ scores
    def score(self, chains: Sequence[Sequence[str]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``(ln P per position, unknown per position)``, per chain, in one pass."""
        contexts, targets, enc = self._window_parts(chains)
        logp, unknown = self._score_positions(contexts, targets)
        return self._split(logp, enc.lengths), self._split(unknown, enc.lengths)

    def position_logprobs(self, chains: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per chain, ``(M,)`` float64: ln P of each token given its relabelled window."""
        return self.score(chains)[0]

    def unknown(self, chains: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per chain, ``(M,)`` bool: the token's relabelled form was never a training target."""
        return self.score(chains)[1]

    def log_prob(self, chains: Sequence[Sequence[str]]) -> torch.Tensor:
        """``(B,)`` float64: ``log P_c(z) = sum_i ln P(z_i | window)`` per chain (0 for an empty chain)."""
        contexts, targets, enc = self._window_parts(chains)
        logp = self._score_positions(contexts, targets, unknown=False)[0]
        total = np.bincount(enc.chain_index, weights=logp, minlength=len(enc.lengths))
        return torch.from_numpy(total.astype(np.float64))

    def num_positions(self, chains: Sequence[Sequence[str]]) -> np.ndarray:
        """``(B,)`` number of scored positions per chain (its length: no end token)."""
        return np.array([len(c.split()) if isinstance(c, str) else len(c) for c in chains], dtype=np.int64)

    # ------------------------------------------------------------------ contexts
    def _context_keys(self, contexts: Sequence[Sequence[str]]) -> np.ndarray:
        """Pack relabelled contexts (tuples of ``order - 1`` tokens, ``pad`` allowed) into keys."""
        width = self.order - 1
        table = self._table.copy()
        kinds = np.zeros((len(contexts), width), dtype=np.int64)
        ids = np.full((len(contexts), width), -1, dtype=np.int64)
        for r, ctx in enumerate(contexts):
            ctx = tuple(ctx.split()) if isinstance(ctx, str) else tuple(ctx)
            if len(ctx) != width:
                raise ValueError(f"a context has order - 1 = {width} tokens, got {ctx!r}")
            real = [t for t in ctx if t != PAD]
            if real:
                enc = encode([real], table)
                kinds[r, width - len(real):], ids[r, width - len(real):] = enc.kinds, enc.ids
            if any(t == PAD for t in ctx[width - len(real):]):
                raise ValueError(f"padding comes before the first token only, got {ctx!r}")
        if width and not np.array_equal(relabel(ids), ids):
            raise ValueError("contexts must be relabelled (entity ids numbered by first appearance from 0)")
        return pack(kinds, ids, self.order) if width else np.zeros(len(contexts), dtype=np.int64)

    def next_logprobs(self, contexts: Sequence[Sequence[str]]) -> np.ndarray:
        """``(C, |V|)`` ln P(v | context) over :attr:`vocabulary` for relabelled contexts of
        ``order - 1`` tokens each; every row logsumexps to 0 (see the subclass for what V holds)."""
        keys = self._context_keys(contexts)
        uniq, inverse = np.unique(keys, return_inverse=True)
        return self._next_unique(uniq)[inverse]

    # ------------------------------------------------------------------ helpers
    @property
    def base(self) -> int:
        return key_base(self.order)

    def _decode_targets(self, codes: np.ndarray) -> list[str]:
        """Token strings of slot codes (the last slot of a window)."""
        return [w[0] for w in decode_codes(*unpack(codes, self.order, width=1), self._table)]

    @staticmethod
    def _write_json(path: Path, payload: dict) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @staticmethod
    def _read_json(path: Path, kind: str) -> dict:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
        if meta.get("format") != kind:
            raise ValueError(f"{path} holds {meta.get('format')!r}, not {kind!r}")
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: format version {meta.get('version')} is not {FORMAT_VERSION}")
        return meta
