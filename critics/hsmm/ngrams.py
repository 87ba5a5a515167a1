"""N-gram vocabularies and window lookups, vectorised with numpy.

The vocabulary keeps every n-gram's real tokens, and matches windows of a
corpus against it *exactly* for any number of token types: all windows (and
vocabulary entries) of length ``n`` get dense ids by ranking

    id_1 = token,    id_n[t] = rank of the pair (id_{n-1}[t], token[t + n - 1])

(keys ``id_{n-1} * base + token`` in int64; ranks are lexicographic in the
tokens), so two windows share an id exactly when they are the same n-gram.

:func:`window_codes` and :func:`segment_codes` code an n-gram as the
polynomial ``sum_i tok_i * V^(n-1-i)`` in unsigned 64-bit arithmetic: exact
(injective per length) only while ``V^n < 2^64``, a wrap-around hash beyond.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["window_codes", "NgramVocab", "build_vocab", "segment_codes"]


def window_codes(tokens: np.ndarray, lengths: np.ndarray, n: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes of every length-``n`` window: ``(codes (N, T), valid (N, T))``.

    ``tokens`` is ``(N, T)`` padded; window ``t`` covers ``t .. t + n - 1`` and is
    valid when it ends inside the sequence.
    """
    tokens = np.asarray(tokens)
    N, T = tokens.shape
    tok = tokens.astype(np.uint64)
    codes = np.zeros((N, T), dtype=np.uint64)
    b = np.uint64(base)
    for i in range(n):  # loop over the n-gram order, vectorised over all windows
        shifted = np.zeros((N, T), dtype=np.uint64)
        if i < T:
            shifted[:, : T - i] = tok[:, i:]
        codes = codes * b + shifted
    valid = (np.arange(T)[None, :] + n) <= np.asarray(lengths)[:, None]
    return codes, valid


def segment_codes(flat: np.ndarray, seg_id: np.ndarray, n_segments: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes and lengths of contiguous segments of a flat token array.

    ``seg_id`` (non-decreasing) gives each token's segment.  Returns ``(codes, lengths)``.
    """
    flat = np.asarray(flat).astype(np.uint64)
    lengths = np.bincount(seg_id, minlength=n_segments)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pos_from_end = (first[seg_id] + lengths[seg_id] - 1 - np.arange(flat.size)).astype(np.uint64)
    with np.errstate(over="ignore"):
        powers = np.power(np.uint64(base), pos_from_end, dtype=np.uint64)
        contrib = flat * powers
    codes = np.zeros(n_segments, dtype=np.uint64)
    np.add.at(codes, seg_id, contrib)
    return codes, lengths


def _window_ids(groups, max_len: int, base: int):
    """Exact ids of all windows of lengths ``n = 1 .. max_len`` in several padded token arrays.

    ``groups`` is a list of ``(tokens (N_g, T_g), lengths (N_g,))``.  Yields,
    for ``n = 1 .. max_len``, ``(ids, count)``: ``ids[g]`` ``(N_g, T_g)`` int64 is
    the id of the n-gram ``tokens[b, t : t + n]`` -- equal ids across all groups
    exactly for equal n-grams, ordered lexicographically -- or ``-1`` where the
    window runs past ``lengths[b]`` or holds a token outside ``0 .. base - 1``;
    ids lie below ``count``.
    """
    toks = []
    for tokens, lengths in groups:
        tok = np.asarray(tokens, dtype=np.int64)
        live = (np.arange(tok.shape[1])[None, :] < np.asarray(lengths)[:, None]) & (tok >= 0) & (tok < base)
        toks.append(np.where(live, tok, -1))
    ids, count = toks, base
    yield ids, count
    for n in range(2, max_len + 1):
        if count * base >= 2**63:
            raise OverflowError(f"{count} distinct {n - 1}-grams times {base} types do not fit int64 keys")
        keys = []
        for tok, prev in zip(toks, ids):
            nxt = np.full_like(tok, -1)
            nxt[:, : max(tok.shape[1] - n + 1, 0)] = tok[:, n - 1 :]
            keys.append(np.where((prev >= 0) & (nxt >= 0), prev * base + nxt, -1))
        flat = np.concatenate([k.ravel() for k in keys])
        valid = flat >= 0
        uniq, inv = np.unique(flat[valid], return_inverse=True)
        flat[valid] = inv
        bounds = np.cumsum([0] + [k.size for k in keys])
        ids, count = [flat[a:b].reshape(k.shape) for a, b, k in zip(bounds[:-1], bounds[1:], keys)], uniq.size
        yield ids, count


def _window_tokens(tokens: np.ndarray, rows: np.ndarray, cols: np.ndarray, lens: np.ndarray, max_len: int) -> np.ndarray:
    """``(M, max_len)`` tokens of the windows ``tokens[rows, cols : cols + lens]``, ``-1`` padded."""
    tok = np.pad(np.asarray(tokens, dtype=np.int64), ((0, 0), (0, max_len)), constant_values=-1)
    i = np.arange(max_len)
    out = tok[rows[:, None], cols[:, None] + i[None, :]]
    return np.where(i[None, :] < lens[:, None], out, -1)


@dataclass
class NgramVocab:
    """Emission vocabulary: n-grams grouped by length, ids contiguous per length.

    ``tokens`` ``(V, max_len)`` holds each n-gram's tokens (``-1`` padded) and
    ``lengths`` ``(V,)`` its length, sorted by (length, tokens); the n-grams of
    length ``l + 1`` have global ids ``offsets[l] .. offsets[l + 1] - 1``.
    """

    base: int
    offsets: np.ndarray
    tokens: np.ndarray
    lengths: np.ndarray

    @property
    def max_len(self) -> int:
        return len(self.offsets) - 1

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def lookup(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Global n-gram id of every window: ``(N, T, max_len)`` int32 (half the memory of int64 for a
        training set's table; ids lie below the vocabulary size), ``-1`` if absent or past the end.

        Exact: data windows and vocabulary entries are ranked together
        (:func:`_window_ids`), and a window gets an entry's id when their ranks agree.
        """
        tokens = np.asarray(tokens)
        N, T = tokens.shape
        out = np.full((N, T, self.max_len), -1, dtype=np.int32)
        groups = [(self.tokens, self.lengths), (tokens, lengths)]
        for l, ((vocab_ids, data_ids), count) in enumerate(_window_ids(groups, self.max_len, self.base)):
            a, b = self.offsets[l], self.offsets[l + 1]
            table = np.full(count + 1, -1, dtype=np.int32)  # the last slot, read for id -1, stays -1
            table[vocab_ids[a:b, 0]] = np.arange(a, b)
            out[:, :, l] = table[data_ids]
        return out

    def to_dict(self) -> dict[str, np.ndarray]:
        return {"base": np.array(self.base), "tokens": self.tokens, "lengths": self.lengths}

    @classmethod
    def from_tokens(cls, base: int, tokens: np.ndarray, lengths: np.ndarray, max_len: int) -> "NgramVocab":
        """Rebuild from each n-gram's tokens (the saved form), sorted by (length, tokens)."""
        tokens = np.asarray(tokens, dtype=np.int64)[:, :max_len]
        lengths = np.asarray(lengths, dtype=np.int64)
        live = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        if (lengths < 1).any() or (lengths > max_len).any() or ((tokens < 0) | (tokens >= base))[live].any():
            raise ValueError(f"n-grams must have lengths 1..{max_len} and tokens in 0..{base - 1}")
        tokens = np.where(live, tokens, -1)
        order = np.lexsort((*tokens.T[::-1], lengths))
        offsets = np.searchsorted(lengths[order], np.arange(1, max_len + 2), side="left")
        return cls(base, offsets, tokens[order], lengths[order])


def build_vocab(
    tokens: np.ndarray,
    lengths: np.ndarray,
    *,
    max_len: int,
    top_k: int,
    base: int,
    final_only: int | None = None,
) -> NgramVocab:
    """The ``top_k`` most frequent n-grams (``n = 1 .. max_len``) of a corpus.

    Every unigram seen is kept whatever ``top_k`` says, so any sequence over the
    seen tokens can be segmented.  ``final_only``, when given, is a token that
    may appear only as the *last* token of an n-gram (a segment-end symbol):
    n-grams running across it are not counted.  Ties are broken by (length,
    tokens) for determinism.  Each kept n-gram's tokens are read from its first
    occurrence, so they are always real n-grams of the corpus.
    """
    tokens = np.asarray(tokens)
    if final_only is not None:  # ends[b, t] = end symbols among tokens[b, :t]
        ends = np.pad(np.cumsum(tokens == final_only, axis=1), ((0, 0), (1, max_len)))
    rank, counts, lens, rows, cols = [], [], [], [], []
    for n, ((ids,), _) in enumerate(_window_ids([(tokens, lengths)], max_len, base), start=1):
        valid = ids >= 0
        if final_only is not None and n > 1:  # no end symbol among the first n - 1 tokens
            T = tokens.shape[1]
            valid &= ends[:, n - 1 : n - 1 + T] == ends[:, :T]
        r, c = np.nonzero(valid)
        u, first, cnt = np.unique(ids[r, c], return_index=True, return_counts=True)
        rank.append(u)
        counts.append(cnt)
        lens.append(np.full(u.size, n))
        rows.append(r[first])
        cols.append(c[first])
    rank, counts, lens, rows, cols = map(np.concatenate, (rank, counts, lens, rows, cols))
    keep = np.zeros(rank.size, dtype=bool)
    keep[np.lexsort((rank, lens, -counts))[:top_k]] = True
    keep |= lens == 1
    tok = _window_tokens(tokens, rows[keep], cols[keep], lens[keep], max_len)
    return NgramVocab.from_tokens(base, tok, lens[keep], max_len)
