"""N-gram vocabularies and window lookups, vectorised with numpy.

An n-gram of token ids is coded as the polynomial ``sum_i tok_i * V^(n-1-i)``
in unsigned 64-bit arithmetic.  This is exact (injective per length) while
``V^n < 2^64`` -- 53 tokens up to length 11 -- and a wrap-around hash beyond.
Codes are compared within one length only.
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


@dataclass
class NgramVocab:
    """Emission vocabulary: n-grams grouped by length, ids contiguous per length.

    ``codes[l]`` are the sorted codes of the length-``l + 1`` n-grams, with global
    ids ``offsets[l] .. offsets[l + 1] - 1``; ``tokens`` ``(V, max_len)`` holds each
    n-gram's tokens (``-1`` padded) and ``lengths`` ``(V,)`` its length.
    """

    base: int
    codes: list[np.ndarray]
    offsets: np.ndarray
    tokens: np.ndarray
    lengths: np.ndarray

    @property
    def max_len(self) -> int:
        return len(self.codes)

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def lookup(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Global n-gram id of every window: ``(N, T, max_len)`` int64, ``-1`` if absent or past the end."""
        tokens = np.asarray(tokens)
        N, T = tokens.shape
        out = np.full((N, T, self.max_len), -1, dtype=np.int64)
        for l, table in enumerate(self.codes):
            if table.size == 0:
                continue
            codes, valid = window_codes(tokens, lengths, l + 1, self.base)
            pos = np.searchsorted(table, codes).clip(max=table.size - 1)
            hit = valid & (table[pos] == codes)
            out[:, :, l] = np.where(hit, pos + self.offsets[l], -1)
        return out

    def to_dict(self) -> dict[str, np.ndarray]:
        return {"base": np.array(self.base), "tokens": self.tokens, "lengths": self.lengths}

    @classmethod
    def from_tokens(cls, base: int, tokens: np.ndarray, lengths: np.ndarray, max_len: int) -> "NgramVocab":
        """Rebuild from each n-gram's tokens (the saved form)."""
        tokens, lengths = np.asarray(tokens), np.asarray(lengths)
        order = np.lexsort((_codes_of(tokens, lengths, base), lengths))
        tokens, lengths = tokens[order], lengths[order]
        codes_all = _codes_of(tokens, lengths, base)
        codes, offsets = [], [0]
        for l in range(1, max_len + 1):
            sel = lengths == l
            codes.append(codes_all[sel])
            offsets.append(offsets[-1] + int(sel.sum()))
        return cls(base, codes, np.array(offsets), tokens, lengths)


def _codes_of(tokens: np.ndarray, lengths: np.ndarray, base: int) -> np.ndarray:
    codes = np.zeros(len(tokens), dtype=np.uint64)
    b = np.uint64(base)
    for i in range(tokens.shape[1]):
        live = i < lengths
        codes = np.where(live, codes * b + np.where(live, tokens[:, i], 0).astype(np.uint64), codes)
    return codes


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
    code) for determinism.
    """
    tokens = np.asarray(tokens)
    all_codes, all_counts, all_lens = [], [], []
    for n in range(1, max_len + 1):
        codes, valid = window_codes(tokens, lengths, n, base)
        if final_only is not None and n > 1:
            inner, _ = window_codes((tokens == final_only).astype(np.int64), lengths, n - 1, 2)
            valid &= inner == 0  # no end symbol among the first n - 1 tokens
        u, c = np.unique(codes[valid], return_counts=True)
        all_codes.append(u)
        all_counts.append(c)
        all_lens.append(np.full(u.size, n))
    codes = np.concatenate(all_codes)
    counts = np.concatenate(all_counts)
    lens = np.concatenate(all_lens)
    order = np.lexsort((codes, lens, -counts))
    keep = np.zeros(codes.size, dtype=bool)
    keep[order[:top_k]] = True
    keep |= lens == 1
    codes, lens = codes[keep], lens[keep]
    # decode tokens from codes (exact while V^n < 2^64)
    tok = np.full((codes.size, max_len), -1, dtype=np.int64)
    rem = codes.copy()
    b = np.uint64(base)
    for i in range(max_len - 1, -1, -1):
        live = i < lens
        tok[live, i] = (rem[live] % b).astype(np.int64)
        rem[live] //= b
    return NgramVocab.from_tokens(base, tok, lens, max_len)
