"""Relabelled n-gram windows of coreference chains, vectorised with numpy.

A chain is a list of string tokens: a bare token (``.``, a sentence start) or an
entity mention ``TEXT:ID`` (``he:3``, ``F:0``; ``ID`` a non-negative integer,
the document-level entity id).  For position i of a chain the order-n window is

    w_i = relabel(z_{i-n+1}, ..., z_i),   z_j = PAD for j < 0 (left padding, no end token),

where ``relabel`` renumbers the entity ids of the window by first appearance
inside it (``F:42 . she:42 M:34`` -> ``F:0 . she:0 M:1``).  Lower orders are the
suffix truncations of the relabelled n-window, keeping its numbering.

Encoding (all arrays are flat over the positions of a batch of B chains, P positions):

- a :class:`KindTable` numbers the token *kinds* (``<pad>`` = 0, then the bare
  tokens and mention texts, in order of appearance); a table fitted on training
  chains is extended, per call, by kinds first seen there (codes >= its length);
- :func:`encode` gives ``kinds (P,)``, ``ids (P,)`` (-1 for bare tokens) and ``lengths (B,)``;
- :func:`build_windows` gives ``(P, n)`` kind and id arrays, :func:`relabel` the relabelled ids;
- :func:`pack` turns each relabelled window into one int64 key: slot code
  ``c = kind * (n + 1) + rid + 1`` (``rid`` in -1..n-1) and, most significant slot first,
  ``key = sum_j c_j * base**(n-1-j)`` with ``base = max_kinds(n) * (n + 1)``, so that the
  suffix of the last m slots is ``key % base**m`` and the context is ``key // base``.
  ``base`` depends on the order only, so keys from different calls compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np

__all__ = [
    "PAD",
    "KindTable",
    "Encoded",
    "encode",
    "build_windows",
    "relabel",
    "pack",
    "unpack",
    "max_kinds",
    "key_base",
    "decode_codes",
    "chain_index",
]

PAD = "<pad>"
"""The padding token before a chain's first position (never a chain token)."""


def max_kinds(order: int) -> int:
    """Most token kinds whose windows fit one int64 key: ``(max_kinds * (n+1)) ** n < 2**63``."""
    k = int((2.0**63) ** (1.0 / order) // (order + 1))
    while k > 1 and (k * (order + 1)) ** order >= 2**63:
        k -= 1
    return k


def key_base(order: int) -> int:
    """The radix of a packed key: ``max_kinds(order) * (order + 1)`` slot codes per slot."""
    return max_kinds(order) * (order + 1)


def _parse(token: str) -> tuple[str, int]:
    """``(kind, id)`` of one chain token; ``id = -1`` for a bare token."""
    if not isinstance(token, str) or not token or any(ch.isspace() for ch in token):
        raise ValueError(f"chain token {token!r} is not a non-empty string without whitespace")
    if token == PAD:
        raise ValueError(f"{PAD!r} is the padding token, not a chain token")
    text, colon, ident = token.rpartition(":")
    if not colon:
        return token, -1
    if not text or not ident.isdigit() or not ident.isascii():
        raise ValueError(f"chain token {token!r}: a mention is TEXT:ID with ID a non-negative integer")
    return text, int(ident)


class KindTable:
    """Token kinds (``<pad>``, bare tokens, mention texts) and their integer codes; ``<pad>`` is 0."""

    def __init__(self, kinds: Sequence[str] = ()):
        self.kinds: list[str] = [PAD]
        self.index: dict[str, int] = {PAD: 0}
        for k in kinds:
            self.add(k)

    def add(self, kind: str) -> int:
        code = self.index.get(kind)
        if code is None:
            code = self.index[kind] = len(self.kinds)
            self.kinds.append(kind)
        return code

    def copy(self) -> "KindTable":
        return KindTable(self.kinds[1:])

    def __len__(self) -> int:
        return len(self.kinds)


@dataclass
class Encoded:
    """A batch of chains as flat arrays: ``kinds (P,)`` codes, ``ids (P,)`` (-1: bare), ``lengths (B,)``."""

    kinds: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray
    table: KindTable

    @property
    def offsets(self) -> np.ndarray:
        """``(B+1,)`` start of each chain in the flat arrays."""
        return np.concatenate([[0], np.cumsum(self.lengths)])


def encode(chains: Sequence[Sequence[str]], table: KindTable) -> Encoded:
    """Encode chains with ``table`` (extended in place by new kinds; pass a copy to keep it).

    Only the distinct token strings are parsed in Python; the per-token mapping runs in C
    (``map`` over a dict) and numpy.
    """
    if isinstance(chains, (str, bytes)):
        raise TypeError("chains must be a sequence of token sequences, not a string")
    chains = [c.split() if isinstance(c, str) else c for c in chains]
    lengths = np.fromiter(map(len, chains), dtype=np.int64, count=len(chains))
    flat = list(chain.from_iterable(chains))
    distinct = sorted(set(flat), key=str)  # sorted: kind codes do not depend on hash order
    position = {t: i for i, t in enumerate(distinct)}
    parsed = [_parse(t) for t in distinct]
    kind_of = np.fromiter((table.add(k) for k, _ in parsed), dtype=np.int64, count=len(parsed))
    id_of = np.fromiter((i for _, i in parsed), dtype=np.int64, count=len(parsed))
    which = np.fromiter(map(position.__getitem__, flat), dtype=np.int64, count=len(flat))
    return Encoded(kind_of[which], id_of[which], lengths, table)


def chain_index(lengths: np.ndarray) -> np.ndarray:
    """``(P,)`` index of the chain each position belongs to (for per-chain sums)."""
    return np.repeat(np.arange(len(lengths)), lengths)


def build_windows(enc: Encoded, order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(kinds, ids)``, each ``(P, order)``: row p is the window ending at position p, left-padded
    with ``<pad>`` (kind 0, id -1) before its chain's first token.  Both are transposed views of
    slot-major ``(order, P)`` arrays (each slot's column is contiguous)."""
    pad = order - 1
    num_chains, total = len(enc.lengths), len(enc.kinds)
    kinds = np.zeros(total + pad * num_chains, dtype=np.int64)
    ids = np.full(total + pad * num_chains, -1, dtype=np.int64)
    # position p of chain b sits at p + pad * (b + 1) in the padded layout
    where = np.arange(total) + pad * (chain_index(enc.lengths) + 1)
    kinds[where], ids[where] = enc.kinds, enc.ids
    gather = np.arange(-pad, 1)[:, None] + where[None, :]
    return kinds[gather].T, ids[gather].T


def relabel(ids: np.ndarray) -> np.ndarray:
    """Renumber the ids of each row ``(R, n)`` by first appearance in the row; -1 stays -1.

    Slot by slot (vectorised over rows): slot j takes the relabelled id of an earlier slot holding
    the same id, else the next new number ``count`` (the number of distinct ids in slots < j).
    Returns a transposed view of an ``(n, R)`` array, like :func:`build_windows`.
    """
    cols = np.ascontiguousarray(np.asarray(ids).T)
    n = cols.shape[0]
    rid = np.empty_like(cols)
    count = np.zeros(cols.shape[1], dtype=cols.dtype)
    for j in range(n):
        col = cols[j]
        entity = col >= 0
        r = np.where(entity, count, -1)
        new = entity
        for q in range(j):
            same = (cols[q] == col) & entity
            np.copyto(r, rid[q], where=same)
            new = new & ~same
        rid[j] = r
        count += new
    return rid.T


def pack(kinds: np.ndarray, rids: np.ndarray, order: int) -> np.ndarray:
    """One int64 key per row of relabelled windows ``(R, m)``, ``m <= order`` (see module doc)."""
    n = order
    if kinds.size and kinds.max() >= max_kinds(n):
        raise ValueError(f"more than {max_kinds(n)} token kinds: windows of order {n} do not fit an int64 key")
    codes = kinds * (n + 1) + rids + 1
    base = key_base(n)
    key = np.zeros(codes.shape[0], dtype=np.int64)
    for j in range(codes.shape[1]):  # Horner over the n slots, vectorised over rows
        key = key * base + codes[:, j]
    return key


def unpack(keys: np.ndarray, order: int, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(kinds, rids)``, each ``(R, width)``: the inverse of :func:`pack` (``width`` defaults to order)."""
    n, base = order, key_base(order)
    width = n if width is None else width
    keys = np.asarray(keys, dtype=np.int64)
    codes = np.empty((len(keys), width), dtype=np.int64)
    rest = keys.copy()
    for j in range(width - 1, -1, -1):
        codes[:, j] = rest % base
        rest //= base
    return codes // (n + 1), codes % (n + 1) - 1


def decode_codes(kinds: np.ndarray, rids: np.ndarray, table: KindTable) -> list[tuple[str, ...]]:
    """Relabelled windows ``(R, m)`` as tuples of token strings (``<pad>``, ``.``, ``M:0``, ...)."""
    names = np.asarray(table.kinds, dtype=object)
    cache: dict[tuple[int, int], str] = {}

    def token(k: int, r: int) -> str:
        got = cache.get((k, r))
        if got is None:
            got = cache[(k, r)] = names[k] if r < 0 else f"{names[k]}:{r}"
        return got

    return [tuple(token(k, r) for k, r in zip(kr, rr)) for kr, rr in zip(kinds.tolist(), rids.tolist())]
