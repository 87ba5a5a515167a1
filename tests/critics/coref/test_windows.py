"""Relabelled windows: encoding, left padding, first-appearance relabelling, packed keys."""

from __future__ import annotations

import numpy as np
import pytest

from critics.coref.windows import (PAD, KindTable, build_windows, chain_index, decode_codes, encode, key_base,
                                   max_kinds, pack, relabel, unpack)

TEXTS = [".", "M", "F", "P", "N", "he", "He", "she", "his", "her", "they", "them"]


def random_chains(rng, n, max_len=25, max_id=6):
    chains = []
    for _ in range(n):
        chain = []
        for _ in range(int(rng.integers(0, max_len + 1))):
            text = TEXTS[int(rng.integers(len(TEXTS)))]
            chain.append(text if text == "." else f"{text}:{int(rng.integers(max_id))}")
        chains.append(chain)
    return chains


def reference_windows(chain, n):
    """Plain Python: pad on the left, renumber each window's ids by first appearance."""
    padded = [PAD] * (n - 1) + list(chain)
    out = []
    for i in range(len(chain)):
        ids, window = {}, []
        for tok in padded[i:i + n]:
            text, colon, ident = tok.rpartition(":")
            if not colon:
                window.append(tok)
            else:
                ids.setdefault(ident, len(ids))
                window.append(f"{text}:{ids[ident]}")
        out.append(tuple(window))
    return out


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
        chains = random_chains(rng, 40)
        decoded = windows_of(chains, n)[0]
        expected = [w for c in chains for w in reference_windows(c, n)]
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
    _, _, kinds, rids, table = windows_of(random_chains(rng, 30), n)
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
