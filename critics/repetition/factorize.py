"""The copy factorisation of a sequence of units: each segment NEW text or a COPY of an earlier span (LZ77).

A sequence ``u_0 .. u_{n-1}`` (integer codes of sentences or words) is cut greedily from the left.  At position
``i`` the longest previous factor is the largest ``L`` such that ``u[j : j + L] == u[i : i + L]`` for some
``j < i`` (the source may overlap the copy, ``j + L > i``, as in LZ77: a paragraph written three times in a row is
its first writing, then one copy of twice its length whose source starts one period back); the source is the
leftmost such ``j``, the first time the span was written.  When ``L >= min_copy`` the units ``i .. i + L - 1`` are
one COPY segment and the cut moves on by ``L``; otherwise ``u_i`` is NEW and it moves on by one.  Adjacent NEW
units are one NEW segment, so two NEW segments never follow each other; two COPY segments can (a copy of another
source right after a copy).

The longest previous factors come from the suffix automaton of the whole sequence (Blumer et al. 1985), built in
``O(n)`` transitions: its state reached from the root by reading ``u[i : i + L]`` holds that string with all its
end positions, and keeps the first of them, so the leftmost start of ``u[i : i + L]`` is ``first_end - L + 1``.
That start never decreases as ``L`` grows (a longer string occurs at a subset of the shorter one's starts), so
reading ``u_i, u_{i+1}, ..`` until the leftmost start reaches ``i`` finds ``L`` and its source.  Each read is one
unit of the factor being cut or the one that ends it, so cutting the whole sequence costs ``O(n * min_copy)``
dictionary lookups: linear, with no scan over earlier positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

__all__ = ["Factorisation", "factorize", "encode"]


@dataclass(frozen=True)
class Factorisation:
    """The segments of one sequence of ``n`` units, in order, ``S`` of them (each an ``(S,)`` int64 array):
    ``starts`` (first unit), ``lengths`` (units, >= 1) and ``sources`` (first unit of the span a COPY repeats,
    ``-1`` for NEW).  The segments tile ``0 .. n - 1``."""

    starts: np.ndarray
    lengths: np.ndarray
    sources: np.ndarray

    @classmethod
    def of(cls, segments: Sequence[tuple[int, int, int]]) -> "Factorisation":
        """From ``(start, length, source)`` triples."""
        columns = np.asarray(segments, dtype=np.int64).reshape(-1, 3)
        return cls(columns[:, 0].copy(), columns[:, 1].copy(), columns[:, 2].copy())

    @classmethod
    def from_copies(cls, copies: Sequence[Sequence[int]], n: int) -> "Factorisation":
        """The factorisation of ``n`` units with these COPY segments ``(start, length, source)`` (in order, not
        overlapping) and NEW segments between them: what :attr:`copies` and :attr:`units` keep of one."""
        segments, at = [], 0
        for start, length, source in [*copies, (n, 0, -1)]:
            if start > at:
                segments.append((at, start - at, -1))
            if length:
                segments.append((start, length, source))
            at = start + length
        return cls.of(segments)

    @property
    def is_copy(self) -> np.ndarray:
        """``(S,)`` bool: True for COPY segments."""
        return self.sources >= 0

    @property
    def offsets(self) -> np.ndarray:
        """``(S,)``: ``start - source`` of each COPY (how far back its source starts; the period of a copy that
        overlaps its source), 0 for NEW."""
        return np.where(self.is_copy, self.starts - self.sources, 0)

    @property
    def units(self) -> int:
        """``n``, the units the segments cover."""
        return int(self.lengths.sum())

    @property
    def copied_units(self) -> int:
        return int(self.lengths[self.is_copy].sum())

    @property
    def looped_units(self) -> int:
        """Units in loops: copies that start where their source ends or inside it (offset <= length), i.e. repeat
        a span right after itself."""
        return int(self.lengths[self.is_copy & (self.offsets <= self.lengths)].sum())

    @property
    def copies(self) -> list[tuple[int, int, int]]:
        """``(start, length, source)`` of each COPY segment, in order."""
        keep = self.is_copy
        return list(zip(self.starts[keep].tolist(), self.lengths[keep].tolist(), self.sources[keep].tolist()))


def encode(keys: Sequence[Hashable]) -> list[int]:
    """Each key's code: the index of its first occurrence among the distinct keys (equal keys, equal codes)."""
    codes: dict[Hashable, int] = {}
    return [codes.setdefault(k, len(codes)) for k in keys]


def _suffix_automaton(codes: Sequence[int]) -> tuple[list[dict[int, int]], list[int]]:
    """The suffix automaton of ``codes``: per state its transitions ``{code: state}`` and the end position of the
    first occurrence of its strings (state 0 is the root, the empty string)."""
    edges: list[dict[int, int]] = [{}]
    link, longest, first_end = [-1], [0], [-1]
    last = 0
    for i, c in enumerate(codes):
        cur = len(edges)
        edges.append({})
        link.append(-1)
        longest.append(longest[last] + 1)
        first_end.append(i)
        p = last
        while p != -1 and c not in edges[p]:
            edges[p][c] = cur
            p = link[p]
        if p == -1:
            link[cur] = 0
        else:
            q = edges[p][c]
            if longest[p] + 1 == longest[q]:
                link[cur] = q
            else:  # split q: its strings of length <= longest[p] + 1 now also end at i
                clone = len(edges)
                edges.append(dict(edges[q]))
                link.append(link[q])
                longest.append(longest[p] + 1)
                first_end.append(first_end[q])
                while p != -1 and edges[p].get(c) == q:
                    edges[p][c] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        last = cur
    return edges, first_end


def factorize(codes: Sequence[int], min_copy: int = 1) -> Factorisation:
    """The greedy leftmost-longest copy factorisation of ``codes`` (see the module docstring); COPY segments are
    at least ``min_copy >= 1`` units long."""
    if min_copy < 1:
        raise ValueError(f"min_copy must be >= 1, got {min_copy}")
    codes = list(codes)
    n = len(codes)
    edges, first_end = _suffix_automaton(codes)
    segments: list[tuple[int, int, int]] = []
    i = 0
    while i < n:
        state = length = 0
        source = -1
        while i + length < n:
            following = edges[state][codes[i + length]]
            leftmost = first_end[following] - length  # leftmost start of codes[i : i + length + 1]
            if leftmost >= i:
                break
            state, length, source = following, length + 1, leftmost
        if length >= min_copy:
            segments.append((i, length, source))
            i += length
        else:
            if segments and segments[-1][2] < 0:  # NEW after NEW: the same segment
                start, new, _ = segments.pop()
                segments.append((start, new + 1, -1))
            else:
                segments.append((i, 1, -1))
            i += 1
    return Factorisation.of(segments)
