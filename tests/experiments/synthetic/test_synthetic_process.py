"""The synthetic process (paper sec. 3, app. D) against closed forms and enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from critic import criticize
from critic.document import Document, Section
from critic.latent import PAD
from experiments.synthetic.generator import PRESETS, SyntheticConfig, make_dataset, make_process, sample_sequences
from experiments.synthetic.process import (KnownProcessCritic, StartedChain, closed_form_latent_ppl, documents,
                                           log_likelihood, projection_summary)


def test_paper_closed_form_latent_ppl_near_paper():
    """Paper table 1: data Latent PPL 44.30 (256 states, M = 50, transitions softmax(N(0,1)/0.5))."""
    process = make_process(PRESETS["paper"])
    assert process.log_trans.shape == (257, 256)
    assert len(process.subseq_lengths) == 10_000
    assert closed_form_latent_ppl(process) == pytest.approx(44.30, rel=0.10)


def test_closed_form_equals_enumerated_chain_entropy():
    cfg = SyntheticConfig(num_states=3, num_segments=3, num_letters=4, num_subsequences=6, min_len=2, max_len=3,
                          n_train=0, n_valid=0, n_test=0, seed=4)
    p = make_process(cfg)
    h = 0.0
    for path in itertools.product(range(3), repeat=3):
        lp = p.log_trans[3, path[0]] + p.log_trans[path[0], path[1]] + p.log_trans[path[1], path[2]]
        h -= np.exp(lp) * lp
    assert closed_form_latent_ppl(p) == pytest.approx(np.exp(h / 3), rel=1e-12)


def test_process_structure():
    cfg = PRESETS["tiny"]
    p = make_process(cfg)
    S = cfg.num_subsequences
    assert len({tuple(r[r >= 0]) for r in p.subseq_tokens}) == S  # distinct
    assert ((p.subseq_lengths >= cfg.min_len) & (p.subseq_lengths <= cfg.max_len)).all()
    last = p.subseq_tokens[np.arange(S), p.subseq_lengths - 1]
    assert (last == cfg.delimiter).all()
    body = p.subseq_tokens[:, :-1][np.arange(cfg.max_len - 1)[None] < (p.subseq_lengths - 1)[:, None]]
    assert ((body >= 0) & (body < cfg.num_letters)).all()
    assert np.allclose(np.exp(p.log_trans).sum(1), 1)
    for z in range(cfg.num_states):  # emissions normalised over each state's own subsequences
        assert np.exp(p.log_emit[p.owner == z]).sum() == pytest.approx(1.0)
    # seeded
    assert np.array_equal(make_process(cfg).log_trans, p.log_trans)
    assert not np.array_equal(make_process(SyntheticConfig(**{**cfg.to_dict(), "seed": 1})).log_trans, p.log_trans)


def _true_latent_nll(p, states):
    """``-sum_m log P(z_m | z_{m-1})`` from the true states ``(N, M)``, ``z_0`` = start state."""
    prev = np.concatenate([np.full((len(states), 1), p.num_states), states[:, :-1]], 1)
    return -p.log_trans[prev, states].sum(1)


def test_documents_carry_token_ids():
    p, splits = make_dataset(PRESETS["tiny"])
    d = splits["test"]
    docs = documents(d.tokens, d.lengths, "test")
    assert [doc.id for doc in docs[:2]] == ["test-0", "test-1"] and len(docs) == len(d)
    for doc, row, n in zip(docs, d.tokens, d.lengths):
        assert doc.metadata["tokens"] == row[:n].tolist()
        assert doc.text == " ".join(str(t) for t in row[:n])


def test_critic_is_the_dataset_process():
    cfg = PRESETS["tiny"]
    p, _ = make_dataset(cfg)
    critic = KnownProcessCritic(cfg.to_dict()).fit()
    for name in ("log_trans", "subseq_tokens", "subseq_lengths", "owner", "log_emit"):
        assert np.array_equal(getattr(critic.process_, name), getattr(p, name))


def test_started_chain_scores_prefixes_without_end_term():
    p = make_process(PRESETS["tiny"])
    A, Z = p.log_trans, p.num_states
    paths = [[2], [1, 3, 0], [0, 0, 2, 1, 3, 3]]
    value = torch.tensor([z + [PAD] * (6 - len(z)) for z in paths])
    got = StartedChain(torch.from_numpy(A)).log_prob(value).numpy()
    want = [A[Z, z[0]] + sum(A[a, b] for a, b in zip(z, z[1:])) for z in paths]
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_projection_recovers_states_and_scores_exactly():
    cfg = PRESETS["tiny"]
    p, splits = make_dataset(cfg)
    d = splits["test"]
    assert len(splits["train"]) == cfg.n_train and len(d) == cfg.n_test
    critic = KnownProcessCritic(cfg.to_dict()).fit()
    docs = documents(d.tokens, d.lengths, "test")
    proj = critic.project(docs)
    assert proj.failures == {} and proj.doc_ids == [doc.id for doc in docs]
    assert np.array_equal(proj.posterior.value.numpy(), d.states)
    assert proj.latent_steps.tolist() == [cfg.num_segments] * len(d)
    scores = critic.score(docs)
    assert scores.estimator == "exact" and scores.skipped == {}
    np.testing.assert_allclose(scores.latent_nll, _true_latent_nll(p, d.states), rtol=1e-12)
    prev = np.concatenate([np.full((len(d), 1), cfg.num_states), d.states[:, :-1]], 1)
    ll = log_likelihood(p, d.tokens, d.lengths)
    assert np.allclose(ll, p.log_trans[prev, d.states].sum(1) + p.log_emit[d.subsequences].sum(1))


def test_state_round_trip_gives_identical_scores():
    cfg = PRESETS["tiny"]
    _, splits = make_dataset(cfg)
    docs = documents(splits["valid"].tokens, splits["valid"].lengths, "valid")
    critic = KnownProcessCritic(cfg.to_dict()).fit()
    state, tensors = critic._get_state()
    again = KnownProcessCritic(**critic.get_params())
    again._set_state(state, {k: v.clone() for k, v in tensors.items()})
    assert again.state_sha256() == critic.state_sha256()
    assert np.array_equal(again.score(docs).latent_nll, critic.score(docs).latent_nll)
    p = make_process(cfg)
    np.testing.assert_allclose(again.score(docs).latent_nll, _true_latent_nll(p, splits["valid"].states), rtol=1e-12)


def test_monte_carlo_latent_ppl_matches_closed_form():
    cfg = SyntheticConfig(num_states=5, num_segments=8, num_letters=5, num_subsequences=20, min_len=2, max_len=4,
                          n_train=0, n_valid=0, n_test=0, seed=3)
    p = make_process(cfg)
    d = sample_sequences(p, 20_000, np.random.default_rng(0))
    scores = KnownProcessCritic(cfg.to_dict()).fit().score(documents(d.tokens, d.lengths, "mc"))
    assert scores.n == 20_000
    mc = np.exp(scores.latent_nll.sum() / scores.latent_steps.sum())
    assert mc == pytest.approx(closed_form_latent_ppl(p), rel=0.01)
    # emission frequencies follow the process
    freq = np.bincount(d.subsequences.ravel(), minlength=20) / d.subsequences.size
    marg = np.bincount(d.states.ravel(), minlength=5) / d.states.size
    assert np.allclose(freq, marg[p.owner] * np.exp(p.log_emit), atol=0.01)


def test_unprojectable_sequences_are_counted_with_reasons():
    cfg = PRESETS["tiny"]
    p, splits = make_dataset(cfg)
    d = splits["test"]
    good = d.tokens[0, : d.lengths[0]].tolist()
    first = p.subseq_tokens[0, : p.subseq_lengths[0]].tolist()
    unknown = [cfg.num_letters - 1] * (cfg.max_len + 2) + [cfg.delimiter]  # too long to be a subsequence
    rows = [good, good + [0, 1], unknown + good, first, []]
    T = max(len(r) for r in rows)
    tokens = np.array([r + [-1] * (T - len(r)) for r in rows])
    lengths = np.array([len(r) for r in rows])
    odd = documents(tokens, lengths, "odd") + [Document("bare", (Section(None, "1 2 6"),))]
    critic = KnownProcessCritic(cfg.to_dict()).fit()
    result = criticize(critic, documents(d.tokens, d.lengths, "test"), {"odd": odd}, n_bootstrap=50, seed=0)
    odd_set = result.candidates["odd"]
    assert odd_set.skipped == {"odd-1": "no_final_delimiter", "odd-2": "unknown_subsequence",
                               "odd-4": "no_final_delimiter", "bare": "no token ids in metadata['tokens']"}
    assert projection_summary(odd_set, cfg.num_segments) == {
        "n": 6, "n_scored": 2,
        "reasons": {"unknown_subsequence": 1, "no_final_delimiter": 2, "wrong_segment_count": 1,
                    "no token ids in metadata['tokens']": 1}}
    assert projection_summary(result.reference, cfg.num_segments)["reasons"] == {
        "unknown_subsequence": 0, "no_final_delimiter": 0, "wrong_segment_count": 0}
    by_id = {doc.id: doc for doc in odd_set.documents}
    assert by_id["odd-3"].latent_steps == 1
    assert by_id["odd-3"].latent_nll == pytest.approx(-p.log_trans[cfg.num_states, p.owner[0]])
    assert by_id["odd-0"].latent_nll == pytest.approx(_true_latent_nll(p, d.states[:1])[0])
    ll = log_likelihood(p, tokens, lengths)
    want0 = -_true_latent_nll(p, d.states[:1])[0] + p.log_emit[d.subsequences[0]].sum()
    assert ll[0] == pytest.approx(want0, rel=1e-12) and np.isneginf(ll[1:]).all()
