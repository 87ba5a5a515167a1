"""The HSMM critic: exact Latent NLL from posterior marginals, save/load, projection checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from critic import Critic, get_critic
from critic.document import Document, Section
from critics.hsmm import HSMMCritic
from critics.hsmm.model import HSMMLM, _cut
from critics.hsmm.ngrams import build_vocab, window_codes
from hsmm_brute import brute_posterior, enumerate_paths


def _docs(n, seed=0):
    """Sequences of two alternating 'words' 'a b' / 'c d e', each ended by '.'."""
    rng = np.random.default_rng(seed)
    words = [["a", "b", "."], ["c", "d", "e", "."]]
    docs = []
    for i in range(n):
        toks = []
        for _ in range(rng.integers(1, 4)):
            toks += words[rng.integers(0, 2)]
        docs.append(Document(id=f"d{i}", sections=(Section(None, " ".join(toks)),)))
    return docs


@pytest.fixture(scope="module")
def fitted():
    return HSMMCritic(num_states=2, max_len=4, top_k_ngrams=50, end_token=".", epochs=2, fit_batch_size=8,
                      seed=0).fit(_docs(40), validation=_docs(8, seed=1))


def test_registered_and_a_critic():
    assert get_critic("hsmm") is HSMMCritic
    assert issubclass(HSMMCritic, Critic)


def test_latent_nll_equals_enumerated_cross_entropy(fitted):
    docs = [Document(id=str(i), sections=(Section(None, t),)) for i, t in enumerate(["a b .", "c d e .", "a b . a b ."])]
    projection = fitted.project(docs)
    nll, steps, q = fitted.latent_nll(projection).value, projection.latent_steps, projection.posterior
    p = fitted.prior()
    assert nll.dtype == torch.float64 and nll.shape == (3,)
    for b, d in enumerate(docs):
        n = int(q.lengths[b])
        paths = enumerate_paths(q.init, q.trans, q.dur, q.emit[b], n)
        scores = torch.stack([s for s, _ in paths])
        w = (scores - torch.logsumexp(scores, 0)).exp()
        prior_ll = torch.stack([
            p.init[segs[0][2]] + sum(p.trans[segs[m - 1][2], c] for m, (_, _, c) in enumerate(segs) if m)
            + sum(p.dur[c, ln - 1] for (_, ln, c) in segs)
            for _, segs in paths
        ])
        assert float(nll[b]) == pytest.approx(float(-(w * prior_ll).sum()), rel=1e-9)
        assert float(steps[b]) == pytest.approx(float((w * torch.tensor([len(s) for _, s in paths])).sum()), rel=1e-9)


def test_entropy_and_kbest_of_documents_match_enumeration(fitted):
    docs = [Document(id=str(i), sections=(Section(None, t),)) for i, t in enumerate(["a b .", "c d e . a b ."])]
    bad = Document(id="bad", sections=(Section(None, "a zz"),))
    entropy = fitted.entropy(docs + [bad])
    assert list(entropy) == ["0", "1"]  # the document that cannot be projected is left out
    kept, q, _ = fitted.posterior(docs)
    for b, d in enumerate(docs):
        exact = brute_posterior(q.init, q.trans, q.dur, q.emit[b], int(q.lengths[b]))
        p = torch.tensor([pr for _, pr in exact.values()], dtype=torch.float64)
        assert entropy[d.id] == pytest.approx(float(-torch.special.xlogy(p, p).sum()), abs=1e-9)
        best = fitted.kbest(d, k=3)
        ranked = sorted(exact.items(), key=lambda item: -item[1][1])[:3]
        assert [lp for lp, _ in best] == pytest.approx([np.log(pr) for _, (_, pr) in ranked], abs=1e-9)
        tokens = d.text.split()
        assert [segs for _, segs in best] == [[(tokens[s: s + n], c) for s, n, c in z] for z, _ in ranked]
    assert q.sample((5,)).shape == (5, *q.emit.shape)
    with pytest.raises(ValueError, match="cannot be projected"):
        fitted.kbest(bad)


def test_validation_documents_that_cannot_be_used_are_counted_never_replaced():
    bad = Document(id="v-bad", sections=(Section(None, "a b zz ."),))
    critic = HSMMCritic(num_states=2, max_len=4, top_k_ngrams=50, end_token=".", epochs=1, fit_batch_size=8, seed=0)
    critic.fit(_docs(20), validation=_docs(4, seed=1) + [bad])
    assert list(critic.validation_skipped_) == ["v-bad"] and "never seen" in critic.validation_skipped_["v-bad"]
    with pytest.raises(ValueError, match="none of the 1 validation documents can be used, e.g. 'v-bad'"):
        HSMMCritic(num_states=2, max_len=4, epochs=1).fit(_docs(20), validation=[bad])
    with pytest.raises(ValueError, match="needs validation documents"):
        HSMMCritic(num_states=2, max_len=4, epochs=1).fit(_docs(20))


def test_check_reports_unknown_and_empty(fitted):
    bad = Document(id="x", sections=(Section(None, "a b zz ."),))
    empty = Document(id="y", sections=(Section(None, "   "),))
    scores = fitted.score(_docs(4, seed=2) + [bad, empty])
    assert scores.n == 4
    assert set(scores.skipped) == {"x", "y"} and "never seen" in scores.skipped["x"]


def test_metadata_tokens_take_precedence(fitted):
    d_text = Document(id="t", sections=(Section(None, "a b ."),))
    d_meta = Document(id="m", sections=(Section(None, "ignored text"),), metadata={"tokens": ["a", "b", "."]})
    assert fitted.score([d_text]).latent_nll == pytest.approx(fitted.score([d_meta]).latent_nll, rel=1e-12)


def test_save_load_roundtrip(fitted, tmp_path):
    docs = _docs(5, seed=9)
    fitted.save(tmp_path / "c")
    again = Critic.load(tmp_path / "c")
    assert isinstance(again, HSMMCritic)
    np.testing.assert_array_equal(fitted.score(docs).latent_nll, again.score(docs).latent_nll)  # exact round trip
    assert again.validation_skipped_ == fitted.validation_skipped_


def test_fit_learns_the_words(fitted):
    """Viterbi segments the alternating words at the delimiter."""
    docs = [Document(id="v", sections=(Section(None, "a b . c d e . a b ."),))]
    _, states, starts = fitted.project(docs).posterior.argmax()
    assert starts[0].nonzero().flatten().tolist() == [0, 3, 7]


def test_ngram_lookup_matches_python():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 3, size=(4, 9))
    lengths = np.array([9, 5, 1, 7])
    vocab = build_vocab(tokens, lengths, max_len=3, top_k=10, base=3)
    table = {tuple(vocab.tokens[i, : vocab.lengths[i]]): i for i in range(vocab.size)}
    ids = vocab.lookup(tokens, lengths)
    for b, t, l in itertools.product(range(4), range(9), range(3)):
        want = table.get(tuple(tokens[b, t: t + l + 1])) if t + l + 1 <= lengths[b] else None
        assert ids[b, t, l] == (-1 if want is None else want)
    # the top-k are the most frequent windows (every unigram kept)
    counts = {}
    for b in range(4):
        for l in range(1, 4):
            for t in range(lengths[b] - l + 1):
                counts[tuple(tokens[b, t: t + l])] = counts.get(tuple(tokens[b, t: t + l]), 0) + 1
    kept = set(table)
    threshold = sorted(counts.values(), reverse=True)[9]
    assert all(counts[k] >= threshold or len(k) == 1 for k in kept)
    assert all(k in kept for k, c in counts.items() if c > threshold)
    codes, valid = window_codes(tokens, lengths, 2, 3)
    assert codes[0, 0] == tokens[0, 0] * 3 + tokens[0, 1] and not valid[1, 4]


def test_sampling_follows_the_initial_distribution():
    vocab = build_vocab(np.array([[0, 1, 2, 0, 1, 2]]), np.array([6]), max_len=2, top_k=20, base=3)
    model = HSMMLM(vocab, 3, seed=0)
    with torch.no_grad():
        model.init_logits.copy_(torch.tensor([2.0, 0.0, -1.0]))
        model.dur_logits.copy_(torch.tensor([[5.0, -5.0]] * 3))  # unit segments
    g = torch.Generator().manual_seed(0)
    n = 4000
    init = model.log_init().exp()
    # first token distribution = sum_c init[c] P(token | c, length 1)
    expect = (init[:, None] * model.log_emit()[:, :3].exp()).sum(0)
    toks, lens = model.sample(n, stop_token=2, stop_count=1, max_segments=50, generator=g)
    freq = np.bincount(toks[:, 0], minlength=3) / n
    assert np.allclose(freq, expect.detach().numpy(), atol=0.03)
    assert (toks[np.arange(n), lens - 1] == 2).mean() > 0.99  # cut right after the stop token


def test_cut_packs_and_truncates():
    toks = np.array([[0, -1, 2, 1, 2, 0], [1, 1, -1, -1, 1, 1]])
    out, lens = _cut(toks, 2, 2)
    assert lens.tolist() == [4, 4]
    assert out[0].tolist()[:4] == [0, 2, 1, 2] and out[1].tolist() == [1, 1, 1, 1]
