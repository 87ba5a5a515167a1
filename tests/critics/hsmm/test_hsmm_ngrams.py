"""N-gram vocabularies keep real token tuples and look windows up exactly, for any vocabulary size."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from critics.hsmm.ngrams import NgramVocab, build_vocab


def _corpus(seed=0, types=512, n=80, T=40):
    """Sequences drawn from recurring 'phrases' over ``types`` token types (so long n-grams repeat)."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, types, size=rng.integers(3, 10)) for _ in range(40)]
    lengths = rng.integers(1, T + 1, size=n)
    tokens = np.full((n, T), -1)
    for b in range(n):
        seq = np.concatenate([phrases[i] for i in rng.integers(0, len(phrases), size=T)])[: lengths[b]]
        tokens[b, : lengths[b]] = seq
    every = -(-types // T)  # the first rows spell out every type once
    tokens[:every] = np.resize(np.arange(types), (every, T))
    lengths[:every] = T
    return tokens, lengths


def _windows(tokens, lengths, max_len):
    """Counter of every n-gram (tuple) of the corpus, n = 1 .. max_len."""
    return Counter(tuple(tokens[b, t : t + n]) for b in range(len(tokens)) for n in range(1, max_len + 1)
                   for t in range(lengths[b] - n + 1))


def _brute_lookup(vocab, tokens, lengths):
    table = {tuple(vocab.tokens[i, : vocab.lengths[i]]): i for i in range(vocab.size)}
    N, T = tokens.shape
    out = np.full((N, T, vocab.max_len), -1)
    for b in range(N):
        for t in range(T):
            for l in range(vocab.max_len):
                if t + l + 1 <= lengths[b]:
                    out[b, t, l] = table.get(tuple(tokens[b, t : t + l + 1]), -1)
    return out


@pytest.mark.parametrize("base", [300, 512])  # 300^8 and 512^8 overflow 64-bit polynomial codes
def test_large_vocabulary_keeps_real_ngrams_and_exact_lookups(base):
    tokens, lengths = _corpus(types=base)
    assert len(np.unique(tokens[tokens >= 0])) >= 300
    counts = _windows(tokens, lengths, 8)
    vocab = build_vocab(tokens, lengths, max_len=8, top_k=400, base=base)
    stored = [tuple(vocab.tokens[i, : vocab.lengths[i]]) for i in range(vocab.size)]
    assert all(s in counts for s in stored)  # every stored n-gram occurs in the data
    assert len(set(stored)) == vocab.size
    assert max(len(s) for s in stored) == 8
    # the kept n-grams are the top_k by count (every unigram kept too)
    kept = set(stored)
    threshold = sorted(counts.values(), reverse=True)[399]
    assert all(counts[k] >= threshold or len(k) == 1 for k in kept)
    assert all(k in kept for k, c in counts.items() if c > threshold)
    # lookups equal a brute-force dict of tuples, on the corpus and on new data
    assert np.array_equal(vocab.lookup(tokens, lengths), _brute_lookup(vocab, tokens, lengths))
    other, other_len = _corpus(seed=1, types=base)
    assert np.array_equal(vocab.lookup(other, other_len), _brute_lookup(vocab, other, other_len))
    # rebuilt from its saved form, the vocabulary is the same
    again = NgramVocab.from_tokens(base, vocab.tokens, vocab.lengths, 8)
    assert np.array_equal(again.tokens, vocab.tokens) and np.array_equal(again.offsets, vocab.offsets)


def test_tokens_outside_the_base_never_match():
    """A window with a token >= base would alias (id + 1) * base + t' in the pair key; it must stay -1."""
    tokens = np.array([[1, 2, 0, 3]])
    vocab = build_vocab(tokens, np.array([4]), max_len=2, top_k=10, base=4)
    probe = np.array([[0, 4 + 2, 1, 0]])  # (0, 6) has key 0 * 4 + 6 == 1 * 4 + 2, the key of (1, 2)
    ids = vocab.lookup(probe, np.array([4]))
    assert ids[0, 0, 1] == -1 and ids[0, 1, 0] == -1 and ids[0, 1, 1] == -1
    assert ids[0, 0, 0] == vocab.lookup(np.array([[0]]), np.array([1]))[0, 0, 0] >= 0


def test_final_only_ngrams_end_at_the_end_token():
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 5, size=(20, 15))
    lengths = np.full(20, 15)
    vocab = build_vocab(tokens, lengths, max_len=4, top_k=1000, base=5, final_only=4)
    stored = {tuple(vocab.tokens[i, : vocab.lengths[i]]) for i in range(vocab.size)}
    want = {k for k in _windows(tokens, lengths, 4) if 4 not in k[:-1]}
    assert stored == want
