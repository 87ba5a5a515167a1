"""The chain-prior API shared by the KenLM prior and the authors' smoothing (a base class).

A chain prior scores every position of a chain by its relabelled window
(:mod:`critics.coref.windows`):

    log P_c(z) = sum_i ln P(w_i[-1] | w_i[:-1]),   w_i = relabel(z_{i-n+1..i}) (left-padded),

so a chain of M tokens has M scored positions (no end token).  Subclasses give
:meth:`ChainPrior._score_unique` (ln P and unknown flags of distinct packed windows),
:meth:`ChainPrior._next_unique` (ln P over the vocabulary after distinct packed contexts),
``fit`` / ``save`` / ``load``.  Everything else -- encoding, ``np.unique`` over the
packed windows, gathering back, per-chain sums -- is here:

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

from .windows import PAD, KindTable, build_windows, decode_codes, encode, key_base, pack, relabel, unpack

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

    # ------------------------------------------------------------------ windows
    def _windows(self, chains: Sequence[Sequence[str]], table: KindTable | None = None):
        """``(keys (P,), lengths (B,), table)``: packed relabelled windows of every position."""
        table = self._table.copy() if table is None else table
        enc = encode(chains, table)
        kinds, ids = build_windows(enc, self.order)
        return pack(kinds, relabel(ids), self.order), enc.lengths, table

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
        keys, lengths, _ = self._windows(chains)
        uniq, inverse = np.unique(keys, return_inverse=True)
        logp, unknown = self._score_unique(uniq)
        return self._split(logp[inverse], lengths), self._split(unknown[inverse], lengths)

    def position_logprobs(self, chains: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per chain, ``(M,)`` float64: ln P of each token given its relabelled window."""
        return self.score(chains)[0]

    def unknown(self, chains: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per chain, ``(M,)`` bool: the token's relabelled form was never a training target."""
        keys, lengths, _ = self._windows(chains)
        uniq, inverse = np.unique(keys, return_inverse=True)
        return self._split(self._unknown_unique(uniq)[inverse], lengths)

    def log_prob(self, chains: Sequence[Sequence[str]]) -> torch.Tensor:
        """``(B,)`` float64: ``log P_c(z) = sum_i ln P(z_i | window)`` per chain (0 for an empty chain)."""
        keys, lengths, _ = self._windows(chains)
        uniq, inverse = np.unique(keys, return_inverse=True)
        logp = self._score_unique(uniq)[0][inverse]
        owner = np.repeat(np.arange(len(lengths)), lengths)
        return torch.from_numpy(np.bincount(owner, weights=logp, minlength=len(lengths)).astype(np.float64))

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
