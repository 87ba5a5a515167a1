"""Relabelled windows: encoding, left padding, first-appearance relabelling, packed keys."""

from __future__ import annotations

import numpy as np
import pytest

from critics.coref.windows import (PAD, KeyIndex, KindTable, build_windows, chain_index, decode_codes, encode,
                                   key_base, max_kinds, pack, relabel, unpack, window_keys, window_parts)

from .reference import py_windows, random_chains

TEXTS = (".", "M", "F", "P", "N", "he", "He", "she", "his", "her", "they", "them")


def windows_of(chains, n):
    table = KindTable()
    enc = encode(chains, table)
    kinds, ids = build_windows(enc, n)
    rids = relabel(ids)
    return decode_codes(kinds, rids, table), enc, kinds, rids, table


def test_authors_docstring_example():
    # relabel_ngram("Female:42 . She:42 Male:34") == ("Female:0", ".", "She:0", "Male:1")
    decoded, enc, kinds, rids, _ = windows_of([["Female:42", ".", "She:42", "Male:34"]], 4)
    assert decoded[-1] == ("Female:0", ".", "She:0", "Male:1")
    assert rids[-1].tolist() == [0, -1, 0, 1]
    assert enc.ids.tolist() == [42, -1, 42, 34]


def test_padding_at_the_start_and_figure_five():
    chain = ". F:0 him:1 they:2 . M:1 her:0 he:1 their:2 F:0".split()
    decoded = windows_of([chain], 5)[0]
    assert decoded[0] == (PAD, PAD, PAD, PAD, ".")
    assert decoded[1] == (PAD, PAD, PAD, ".", "F:0")
    assert decoded[3] == (PAD, ".", "F:0", "him:1", "they:2")
    # fig. 5: P(F_0 | M_1 her_0 he_1 their_2) -> relabelled M:0 her:1 he:0 their:2 F:1
    assert decoded[-1] == ("M:0", "her:1", "he:0", "their:2", "F:1")
    assert len(decoded) == len(chain)


def test_random_chains_against_plain_python():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 7):
        chains = random_chains(rng, 40, max_len=25, max_id=6, texts=TEXTS)
        decoded = windows_of(chains, n)[0]
        expected = [w for c in chains for w in list(py_windows(c, n))]
        assert decoded == expected


def test_relabel_rows_directly():
    ids = np.array([[42, -1, 42, 34, 7], [-1, -1, -1, -1, -1], [5, 5, 5, 5, 5], [9, 8, 7, 8, 9], [3, 1, 2, 1, 4]])
    assert relabel(ids).tolist() == [[0, -1, 0, 1, 2], [-1] * 5, [0] * 5, [0, 1, 2, 1, 0], [0, 1, 2, 1, 3]]


def test_chain_index_and_empty_chains():
    chains = [["M:1"], [], [".", "he:1", "M:3"], []]
    decoded, enc, *_ = windows_of(chains, 3)
    assert enc.lengths.tolist() == [1, 0, 3, 0]
    assert chain_index(enc.lengths).tolist() == [0, 2, 2, 2]
    assert enc.offsets.tolist() == [0, 1, 1, 4, 4]
    assert decoded == [(PAD, PAD, "M:0"), (PAD, PAD, "."), (PAD, ".", "he:0"), (".", "he:0", "M:1")]
    assert windows_of([], 5)[0] == []


def test_packed_keys_roundtrip_and_suffixes():
    rng = np.random.default_rng(1)
    n = 5
    _, _, kinds, rids, table = windows_of(random_chains(rng, 30, max_len=25, max_id=6, texts=TEXTS), n)
    keys = pack(kinds, rids, n)
    back_kinds, back_rids = unpack(keys, n)
    assert np.array_equal(back_kinds, kinds) and np.array_equal(back_rids, rids)
    base = key_base(n)
    for m in range(1, n + 1):  # the last m slots, packed alone, are key % base**m
        assert np.array_equal(pack(kinds[:, n - m:], rids[:, n - m:], n), keys % base**m)
    assert np.array_equal(pack(kinds[:, :-1], rids[:, :-1], n), keys // base)
    # equal keys <=> equal windows
    rows = {tuple(map(tuple, zip(k, r))) for k, r in zip(kinds.tolist(), rids.tolist())}
    assert len(np.unique(keys)) == len(rows)


def test_key_bounds():
    for n in range(1, 9):
        k = max_kinds(n)
        assert (k * (n + 1)) ** n < 2**63 <= ((k + 1) * (n + 1)) ** n
    assert max_kinds(5) >= 1000
    many = np.full((1, 5), max_kinds(5), dtype=np.int64)
    with pytest.raises(ValueError, match="token kinds"):
        pack(many, np.zeros((1, 5), dtype=np.int64), 5)


def test_kind_table_extension_is_local_to_a_copy():
    table = KindTable()
    encode([["M:0", "."]], table)
    frozen = table.copy()
    enc = encode([["M:5", "zz:1"]], frozen)
    assert table.kinds == [PAD, ".", "M"]  # sorted distinct tokens give the codes
    assert frozen.kinds == [PAD, ".", "M", "zz"] and enc.kinds.tolist() == [2, 3]
    # string chains are split on whitespace
    assert encode(["M:0 . he:0"], KindTable()).ids.tolist() == [0, -1, 0]


@pytest.mark.parametrize("bad", ["M:x", "M:-1", ":3", "", "a b", PAD, 3])
def test_bad_tokens(bad):
    with pytest.raises(ValueError):
        encode([["M:0", bad]], KindTable())


def test_window_parts_equal_the_packed_relabelled_windows():
    rng = np.random.default_rng(2)
    chains = random_chains(rng, 60, max_len=25, max_id=6, texts=TEXTS) + [[], ["M:3"], [], ["."] * 9, ["he:7"] * 9, []]
    for n in range(1, 9):  # orders above 6 take the build_windows path
        enc = encode(chains, KindTable())
        kinds, ids = build_windows(enc, n)
        want = pack(kinds, relabel(ids), n)
        contexts, targets = window_parts(enc, n)
        assert contexts.dtype == targets.dtype == np.int64
        assert np.array_equal(contexts * key_base(n) + targets, want), n
        assert np.array_equal(contexts, want // key_base(n)) and np.array_equal(targets, want % key_base(n))
        assert np.array_equal(window_keys(encode(chains, KindTable()), n), want)
    for empty in ([], [[]], [[], []]):
        assert window_keys(encode(empty, KindTable()), 5).shape == (0,)


def test_window_parts_with_many_distinct_tokens_and_large_ids():
    # more than 256 distinct tokens (the bytearray sink gives way to np.fromiter, the 257th last) and
    # ids past int32
    chains = [[f"M:{i}" for i in range(300)] + ["he:299", ".", "M:0"], [f"F:{2**40 + i % 3}" for i in range(8)]]
    enc = encode(chains, KindTable())
    assert enc.ids.tolist()[:3] == [0, 1, 2] and enc.ids[-1] == 2**40 + 7 % 3
    assert enc.kinds.tolist()[300:303] == [enc.table.index["he"], enc.table.index["."], enc.table.index["M"]]
    for n in (3, 5):
        kinds, ids = build_windows(enc, n)
        assert np.array_equal(window_keys(enc, n), pack(kinds, relabel(ids), n))
    decoded = windows_of(chains, 3)[0]
    assert decoded[301] == ("M:0", "he:0", ".") and decoded[302] == ("he:0", ".", "M:1")
    assert decoded[-1] == ("F:0", "F:1", "F:2")


def test_encode_takes_any_iterable_and_gathers_lazily():
    enc = encode(iter([["M:0", "."], "he:0 M:1", ("F:4",)]), KindTable())
    assert enc.lengths.tolist() == [2, 2, 1] and enc.ids.tolist() == [0, -1, 0, 1, 4]
    assert enc.chain_index.tolist() == [0, 0, 1, 1, 2]
    assert [enc.table.kinds[k] for k in enc.kinds] == ["M", ".", "he", "M", "F"]
    assert np.array_equal(enc.kinds, enc.kind_of[enc.which])


def test_key_index_against_searchsorted():
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 7, 100, 3000):
        for keys in (np.unique(rng.integers(0, 2**62, n)), np.arange(n) * key_base(5) ** 3, np.arange(n)):
            values = rng.integers(0, 10**6, len(keys))
            priority = rng.integers(0, 5, len(keys))
            queries = np.concatenate([keys, rng.integers(0, 2**62, 200), np.arange(300), keys[::-1]])
            rng.shuffle(queries)
            at = np.minimum(np.searchsorted(keys, queries), max(len(keys) - 1, 0))
            held = (keys[at] == queries) if len(keys) else np.zeros(len(queries), dtype=bool)
            for index in (KeyIndex(keys, values), KeyIndex(keys, values, priority=priority)):
                got, missing = index.find(queries)
                assert len(index) == len(keys)
                assert np.array_equal(got, np.where(held, values[at] if len(keys) else 0, -1))
                assert np.array_equal(missing, np.flatnonzero(~held))
                assert np.array_equal(index.get(queries), got)


def test_key_index_probes_wrap_around_and_priority_takes_home_slots():
    index = KeyIndex(np.array([5, 9, 11]), np.array([50, 90, 110]), default=-7)
    assert len(index.keys) == 8  # at most half full
    assert index.get(np.array([11, 5, 9, 0, 2**62])).tolist() == [110, 50, 90, -7, -7]
    home = KeyIndex(np.array([1]))._slots(np.arange(2000))  # home slots in a table of 8
    # three keys at home in the last slot: two wrap around to slots 0 and 1
    last = np.flatnonzero(home == 7)[:3]
    wrapped = KeyIndex(last, last + 1)
    assert wrapped.keys[[7, 0, 1]].tolist() == last.tolist()
    others = np.flatnonzero(home == 0)[:2]  # at home in slot 0: taken, they probe on
    assert wrapped.get(np.concatenate([last, others])).tolist() == (last + 1).tolist() + [-1, -1]
    # keys that share a home slot: the one of highest priority sits there
    same = np.flatnonzero(home == home[0])[:3]
    for top in range(3):
        index = KeyIndex(same, priority=(np.arange(3) == top).astype(int))
        assert index.keys[index._slots(same[top:top + 1])[0]] == same[top]
        assert index.get(same).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="distinct"):
        KeyIndex(np.array([4, 4]))
    with pytest.raises(ValueError, match="non-negative"):
        KeyIndex(np.array([-2]))
