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
  tokens and mention texts, each call adding its new kinds in sorted token order); a
  table fitted on training chains is extended, per call, by kinds first seen there
  (codes >= its length);
- :func:`encode` gives each position's distinct token ``which (P,)``, the kind and id of each
  distinct token, hence ``kinds (P,)`` and ``ids (P,)`` (-1 for bare tokens), and ``lengths (B,)``;
- :func:`build_windows` gives ``(P, n)`` kind and id arrays, :func:`relabel` the relabelled ids;
- :func:`pack` turns each relabelled window into one int64 key: slot code
  ``c = kind * (n + 1) + rid + 1`` (``rid`` in -1..n-1) and, most significant slot first,
  ``key = sum_j c_j * base**(n-1-j)`` with ``base = max_kinds(n) * (n + 1)``, so that the
  suffix of the last m slots is ``key % base**m`` and the context is ``key // base``.
  ``base`` depends on the order only, so keys from different calls compare.

The scoring path computes the packed keys without the ``(P, n)`` intermediates
(:func:`window_parts`, equal to ``pack`` of :func:`build_windows` relabelled): on the padded
flat id array, ``c_t`` is the distance (1..n-1) from position t back to the nearest earlier
token of the same entity, ``n`` when there is none that close and ``0`` for a bare token (n - 1
vectorised comparisons of shifted slices, not n(n-1)/2 per window).  In the window ending at q,
slot j holds the token t = q - n + 1 + j; it repeats the entity of slot ``j - c_t`` if
``c_t <= j`` and is a first appearance otherwise.  So the relabelled ids of a window are a
function of the ``n`` numbers ``c_t`` of its slots, read in a table of the ``(n + 1) ** n`` raw
patterns built once per order (orders up to 6; larger ones pack :func:`build_windows`); the
kind part of the key is a Horner sum over strided slices of the padded kind codes.
:class:`KeyIndex` is a numpy hash index of distinct keys (the priors' context tables), cheaper
per query than ``np.searchsorted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
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
    "window_parts",
    "window_keys",
    "KeyIndex",
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
    if not isinstance(token, str) or token.split() != [token]:  # empty, or holds whitespace
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
    """A batch of chains as flat arrays: token ``t`` of the batch is distinct token ``which[t]``, of
    kind ``kind_of[which[t]]`` and id ``id_of[which[t]]`` (-1: bare); ``lengths (B,)``.  ``kinds``
    and ``ids`` (``(P,)`` each) are gathered on first use."""

    which: np.ndarray
    kind_of: np.ndarray
    id_of: np.ndarray
    lengths: np.ndarray
    table: KindTable

    @cached_property
    def kinds(self) -> np.ndarray:
        """``(P,)`` kind codes."""
        return self.kind_of[self.which]

    @cached_property
    def ids(self) -> np.ndarray:
        """``(P,)`` entity ids, -1 for bare tokens."""
        return self.id_of[self.which]

    @cached_property
    def chain_index(self) -> np.ndarray:
        """``(P,)`` index of the chain each position belongs to (:func:`chain_index`)."""
        return chain_index(self.lengths)

    @property
    def offsets(self) -> np.ndarray:
        """``(B+1,)`` start of each chain in the flat arrays."""
        return np.concatenate([[0], np.cumsum(self.lengths)])


class _FirstSeen(dict):
    """token -> its index in order of first appearance (filled while the tokens stream by)."""

    def __missing__(self, token):
        index = self[token] = len(self)
        return index


def encode(chains: Sequence[Sequence[str]], table: KindTable) -> Encoded:
    """Encode chains with ``table`` (extended in place by new kinds; pass a copy to keep it).

    One pass over the tokens, in C (``map`` over a dict that numbers a token at its first
    appearance, into a ``bytearray``, or ``np.fromiter`` past 256 distinct tokens); only the
    distinct token strings are parsed in Python, and
    new kinds are added in sorted token order, so that their codes do not depend on the order of
    the chains.
    """
    if isinstance(chains, (str, bytes)):
        raise TypeError("chains must be a sequence of token sequences, not a string")
    if not isinstance(chains, (list, tuple)):
        chains = list(chains)
    if not set(map(type, chains)) <= {list, tuple}:  # (a C-speed test of the common case)
        chains = [c.split() if isinstance(c, str) else c for c in chains]
    lengths = np.fromiter(map(len, chains), dtype=np.int64, count=len(chains))
    seen = _FirstSeen()
    try:  # up to 256 distinct tokens, a bytearray (in C) is the cheapest sink for the numbers
        which = np.frombuffer(bytearray(map(seen.__getitem__, chain.from_iterable(chains))),
                              dtype=np.uint8).astype(np.int64)  # intp indexes take numpy's fast path
    except ValueError:  # a 257th distinct token: start over (the numbers seen so far are kept)
        which = np.fromiter(map(seen.__getitem__, chain.from_iterable(chains)), dtype=np.int64,
                            count=int(lengths.sum()))
    distinct = list(seen)  # first-appearance order, the order of ``which``
    parsed = [_parse(t) for t in distinct]
    for i in sorted(range(len(distinct)), key=lambda i: str(distinct[i])):  # kind codes in token order
        table.add(parsed[i][0])
    kind_of = np.fromiter((table.index[k] for k, _ in parsed), dtype=np.int64, count=len(parsed))
    id_of = np.fromiter((i for _, i in parsed), dtype=np.int64, count=len(parsed))
    return Encoded(which, kind_of, id_of, lengths, table)


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
    Returns a transposed view of an ``(n, R)`` array, like :func:`build_windows`.  (The reference
    of :func:`window_parts`, off the scoring path; comparing all slots at once on an ``(R, n, n)``
    boolean array, first appearances by ``argmax``, measured 2.5 times slower than this.)
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


_FUSED_MAX_ORDER = 6
"""Largest order whose raw slot patterns, ``(n + 1) ** n`` (117,649 at n = 6), get a table; above it
:func:`window_parts` packs :func:`build_windows` relabelled."""


@lru_cache(maxsize=None)
def _pattern_tables(order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(context part, target part)`` of the relabelled ids of every raw pattern (module doc).

    A raw pattern is ``sum_j c_j (n+1)**j`` (``c_j`` in 0..n the look-back of slot j, clipped to
    ``j + 1``, a first appearance, inside the window); its context part is
    ``sum_{j<n-1} (rid_j + 1) base**(n-2-j)``, its target part ``rid_{n-1} + 1``."""
    n, base = order, key_base(order)
    code = np.arange((n + 1) ** n, dtype=np.int64)
    count = np.zeros_like(code)
    rids: list[np.ndarray] = []
    for j in range(n):
        c = np.minimum(code % (n + 1), j + 1)
        code //= n + 1
        first = c == j + 1
        rid = np.where(first, count, -1)
        for d in range(1, j + 1):  # repeats the entity of slot j - d
            rid = np.where(c == d, rids[j - d], rid)
        rids.append(rid)
        count += first
    context = np.zeros_like(count)
    for j in range(n - 1):
        context = context * base + rids[j] + 1
    return context, rids[n - 1] + 1


def window_parts(enc: Encoded, order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(contexts (P,), targets (P,))`` of every position's relabelled window: the packed
    context (its first ``order - 1`` slots) and the slot code of its last slot, so that
    ``contexts * key_base(order) + targets == pack(kinds, relabel(ids), order)`` for
    ``kinds, ids = build_windows(enc, order)``; computed without the ``(P, order)`` arrays
    (module doc)."""
    n, pad, base = order, order - 1, key_base(order)
    if n > _FUSED_MAX_ORDER:
        kinds, ids = build_windows(enc, n)
        keys = pack(kinds, relabel(ids), n)
        return keys // base, keys % base
    num_chains, total, distinct = len(enc.lengths), len(enc.which), len(enc.kind_of)
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if distinct and enc.kind_of.max() >= max_kinds(n):
        raise ValueError(f"more than {max_kinds(n)} token kinds: windows of order {n} do not fit an int64 key")
    size = total + pad * num_chains
    # Position p of chain b sits at pad + start[p], start[p] = p + pad * b, in the padded layout
    # (pad <pad> slots before each chain); the window ending there is window start[p] below.  The
    # padded arrays are gathered from per-distinct-token tables (the <pad> token last), and the
    # arithmetic runs on small dtypes without boolean-masked writes (those cost several times more).
    start = np.arange(total)
    if pad:
        start += enc.chain_index * pad
    token = np.full(size, distinct, dtype=np.intp)
    token[pad:][start] = enc.which
    code_of = enc.kind_of * (n + 1)
    codes = np.append(code_of, 0).astype(np.int16 if base <= np.iinfo(np.int16).max else np.int64)[token]
    wide = distinct and (enc.id_of.max() > np.iinfo(np.int32).max)
    ids = np.append(enc.id_of, -1).astype(np.int64 if wide else np.int32)[token]
    entity = ids >= 0
    look = entity.view(np.int8) * np.int8(n)
    for d in range(n - 1, 0, -1):  # look = min(look, d where the token d back is the same entity)
        same = ids[d:] == ids[:-d]
        same &= entity[d:]
        nearer = same.view(np.int8) * np.int8(d - n)
        nearer += np.int8(n)
        np.minimum(look[d:], nearer, out=look[d:])
    # window i (ending at padded index i + pad) has slot j at padded index i + j
    length = size - pad
    raw = look[pad:].astype(np.int16 if (n + 1) ** n <= np.iinfo(np.int16).max else np.int32)
    for j in range(n - 2, -1, -1):
        raw *= n + 1
        raw += look[j:j + length]
    raw = raw[start].astype(np.intp)
    context_part, target_part = _pattern_tables(n)
    contexts = codes[:length].astype(np.int64) if n > 1 else np.zeros(length, dtype=np.int64)
    for j in range(1, n - 1):  # the kind part of the context key: Horner over its n - 1 slots
        contexts *= base
        contexts += codes[j:j + length]
    contexts = contexts[start]
    contexts += context_part[raw]
    targets = code_of[enc.which]
    targets += target_part[raw]
    return contexts, targets


def window_keys(enc: Encoded, order: int) -> np.ndarray:
    """``(P,)`` packed relabelled windows of every position (:func:`window_parts` joined)."""
    contexts, targets = window_parts(enc, order)
    contexts *= key_base(order)
    contexts += targets
    return contexts


class KeyIndex:
    """A numpy hash index of distinct non-negative int64 keys: ``get(queries)`` gives the value
    stored with each query key, ``default`` for a key not held.

    Open addressing with linear probing in a power-of-two table at most half full; the home slot
    of a key is the top bits of ``key * 0x9E3779B97F4A7C15`` (mod 2**64, Fibonacci hashing).  A
    query costs one gather into the table (a few for the keys pushed off their home slot), against
    the ~log2(N) dependent steps of ``np.searchsorted`` into a sorted array of N keys.  Keys are
    inserted first come first served, in the order given or by decreasing ``priority`` (e.g. how
    often each key is expected to be asked for), so that the most asked-for sit in their home slots.
    """

    _MULT = np.uint64(0x9E3779B97F4A7C15)
    _EMPTY = -1

    def __init__(self, keys: np.ndarray, values: np.ndarray | None = None, default: int = -1,
                 priority: np.ndarray | None = None):
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if keys.size and keys.min() < 0:
            raise ValueError("KeyIndex holds non-negative keys only")
        values = np.arange(len(keys), dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64)
        if values.shape != keys.shape:
            raise ValueError("one value per key")
        if priority is not None:
            first = np.argsort(-np.asarray(priority), kind="stable")
            keys, values = keys[first], values[first]
        bits = max(3, (2 * len(keys) - 1).bit_length())  # 2**bits >= 2 * len(keys)
        self.mask, self.shift, self.default = (1 << bits) - 1, np.uint64(64 - bits), int(default)
        self.keys = np.full(1 << bits, self._EMPTY, dtype=np.int64)
        self.values = np.full(1 << bits, self.default, dtype=np.int64)  # an empty slot answers default
        slot = self._slots(keys)
        pending = np.arange(len(keys))
        while len(pending):  # each round, every free slot asked for takes its first asker
            at = slot[pending]
            free = self.keys[at] == self._EMPTY
            ask, at = pending[free], at[free]
            # numpy keeps the last write of a slot (in practice; not promised, and only speed hangs
            # on it): written in reverse, the first asker takes the slot
            self.keys[at[::-1]] = keys[ask[::-1]]
            took = self.keys[at] == keys[ask]
            if len(np.unique(at[took])) != took.sum():
                raise ValueError("KeyIndex keys must be distinct")
            self.values[at[took]] = values[ask[took]]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(free)[took]] = True
            pending = pending[~placed]
            slot[pending] = (slot[pending] + 1) & self.mask

    def __len__(self) -> int:
        return int((self.keys != self._EMPTY).sum())

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        slots = keys.view(np.uint64) * self._MULT
        slots >>= self.shift
        return slots.view(np.int64)

    def get(self, queries: np.ndarray) -> np.ndarray:
        """``(Q,)`` int64: the value of each query key, ``default`` where the key is not held."""
        return self.find(queries)[0]

    def find(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(values (Q,), missing)``: :meth:`get`, and the sorted indices of the queries not held."""
        queries = np.ascontiguousarray(queries, dtype=np.int64)
        slot = self._slots(queries)
        out = self.values[slot]
        held = self.keys[slot]
        # a query that met an empty slot is missing (and has its default); one that met another
        # key probes on
        todo = np.flatnonzero(held != queries)
        empty = held[todo] == self._EMPTY
        missing = [todo[empty]]
        todo = todo[~empty]
        out[todo] = self.default
        while len(todo):
            at = (slot[todo] + 1) & self.mask
            slot[todo] = at
            held = self.keys[at]
            hit = held == queries[todo]
            out[todo[hit]] = self.values[at[hit]]
            empty = held == self._EMPTY
            missing.append(todo[empty])
            todo = todo[~hit & ~empty]
        missing = np.concatenate(missing) if len(missing) > 1 else missing[0]
        if len(missing) > 1 and np.any(missing[1:] < missing[:-1]):
            missing.sort()
        return out, missing


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
