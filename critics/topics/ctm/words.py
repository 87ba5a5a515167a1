"""The counts a CTM sees: a CSR bag of words (:class:`BagOfWords`) and the batches cut from it (:class:`WordBatch`):
a dense ``(B, V)`` count matrix when ``V`` is at most four times a batch's largest number of distinct words per
document, else padded ``(B, L)`` word ids and counts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

__all__ = ["BagOfWords", "WordBatch"]


_TINY = 1e-30
_PHI_FLOOR = 1e-30
"""Topic-word probabilities are floored here in products: below ~1.2e-38 float32 numbers are
denormal and make a CPU matrix product several times slower, for no difference in the likelihood."""
_LOG_2PI = math.log(2 * math.pi)


@dataclass
class WordBatch:
    """The counts of ``B`` documents: ``dense (B, V)``, or padded ``ids (B, L)`` with ``counts (B, L)``
    (padding: id 0 with count 0).  ``columns (B, L, K)``: ``phi``'s columns of the ids, gathered once
    when ``phi`` is frozen (:meth:`with_columns`)."""

    dense: torch.Tensor | None = None
    ids: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    columns: torch.Tensor | None = None

    def to(self, device) -> "WordBatch":
        move = (lambda t: None if t is None else t.to(device))
        return WordBatch(move(self.dense), move(self.ids), move(self.counts), move(self.columns))

    def rows(self, keep: torch.Tensor) -> "WordBatch":
        """The documents ``keep`` (a boolean ``(B,)`` mask) of this batch."""
        pick = (lambda t: None if t is None else t[keep])
        return WordBatch(pick(self.dense), pick(self.ids), pick(self.counts), pick(self.columns))

    def with_columns(self, phi: torch.Tensor) -> "WordBatch":
        """This batch with the columns of a fixed ``phi (K, V)`` gathered (a no-op for dense counts)."""
        if self.dense is not None:
            return self
        return WordBatch(None, self.ids, self.counts.to(phi.dtype), phi.clamp_min(_PHI_FLOOR).T[self.ids])


@dataclass
class BagOfWords:
    """Word counts of ``N`` documents over ``V`` word types, in CSR form.

    Document ``d`` has word ids ``indices[indptr[d]:indptr[d+1]]`` (distinct)
    with positive ``counts`` at the same positions.
    """

    indptr: np.ndarray
    indices: np.ndarray
    counts: np.ndarray
    num_words: int

    def __post_init__(self) -> None:
        self.indptr = np.asarray(self.indptr, dtype=np.int64)
        self.indices = np.asarray(self.indices, dtype=np.int64)
        self.counts = np.asarray(self.counts, dtype=np.float32)
        if self.indptr.ndim != 1 or self.indptr[0] != 0 or self.indptr[-1] != len(self.indices) \
                or len(self.counts) != len(self.indices) or np.any(np.diff(self.indptr) < 0):
            raise ValueError("BagOfWords: indptr, indices and counts do not form a CSR matrix")
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= self.num_words):
            raise ValueError(f"BagOfWords: word ids must lie in [0, {self.num_words})")

    @classmethod
    def from_dense(cls, counts) -> "BagOfWords":
        """From an ``(N, V)`` array of non-negative counts."""
        counts = np.asarray(counts)
        rows, cols = np.nonzero(counts)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=counts.shape[0]))])
        return cls(indptr, cols, counts[rows, cols], counts.shape[1])

    @classmethod
    def from_ids(cls, docs: Sequence[Sequence[int]], num_words: int) -> "BagOfWords":
        """From one sequence of word ids per document (tokens, repeats counted)."""
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        flat = np.fromiter((w for d in docs for w in d), dtype=np.int64, count=int(lengths.sum()))
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        keys, counts = np.unique(doc_of * num_words + flat, return_counts=True)  # sorted by doc, then word
        rows = keys // num_words
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(docs)))])
        return cls(indptr, keys % num_words, counts, num_words)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_tokens(self) -> np.ndarray:
        """Tokens per document ``(N,)``."""
        return np.add.reduceat(np.append(self.counts, 0), self.indptr[:-1]) * (np.diff(self.indptr) > 0)

    @property
    def num_distinct(self) -> np.ndarray:
        return np.diff(self.indptr)

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Row indices, ``batch_size`` at a time, documents of similar width (distinct words) together, each batch
        in row order: a batch padded to its widest document (``(B, L)`` with ``L`` its widest) is mostly words,
        where batches in row order are padded to the widest of any ``batch_size`` neighbours."""
        by_width = np.argsort(self.num_distinct, kind="stable")
        for start in range(0, len(self), max(int(batch_size), 1)):
            yield np.sort(by_width[start:start + int(batch_size)])

    def subset(self, rows) -> "BagOfWords":
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(rows) else np.zeros(0, np.int64)
        indptr = np.concatenate([[0], np.cumsum(ends - starts)])
        return BagOfWords(indptr, self.indices[take], self.counts[take], self.num_words)

    def to_dense(self) -> np.ndarray:
        out = np.zeros((len(self), self.num_words), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), self.num_distinct)
        out[rows, self.indices] = self.counts
        return out

    def batch(self, rows, representation: str = "auto") -> WordBatch:
        """The counts of documents ``rows`` as a :class:`WordBatch` (``auto``: dense iff ``V <= 4 L``)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        width = int(lengths.max(initial=0))
        if representation == "auto":
            representation = "dense" if self.num_words <= 4 * max(width, 1) else "sparse"
        # flat positions of the rows' entries, and where each goes in the (B, L) layout
        offsets = np.cumsum(lengths) - lengths
        b = np.repeat(np.arange(len(rows)), lengths)
        col = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)
        src = np.repeat(starts, lengths) + col
        if representation == "dense":
            dense = np.zeros((len(rows), self.num_words), dtype=np.float32)
            dense[b, self.indices[src]] = self.counts[src]
            return WordBatch(dense=torch.from_numpy(dense))
        if representation != "sparse":
            raise ValueError(f"representation must be 'auto', 'dense' or 'sparse', got {representation!r}")
        ids = np.zeros((len(rows), max(width, 1)), dtype=np.int64)
        counts = np.zeros((len(rows), max(width, 1)), dtype=np.float32)
        ids[b, col] = self.indices[src]
        counts[b, col] = self.counts[src]
        return WordBatch(ids=torch.from_numpy(ids), counts=torch.from_numpy(counts))


