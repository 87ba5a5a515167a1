"""The synthetic process (paper sec. 3, app. D) against closed forms and enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from experiments.synthetic.generator import PRESETS, SyntheticConfig, make_dataset, make_process, sample_sequences
from experiments.synthetic.process import closed_form_latent_ppl, log_likelihood, project


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


def test_projection_recovers_states_and_scores_exactly():
    cfg = PRESETS["tiny"]
    p, splits = make_dataset(cfg)
    d = splits["test"]
    assert len(splits["train"]) == cfg.n_train and len(d) == cfg.n_test
    proj = project(p, d.tokens, d.lengths, keep_states=True)
    assert proj.ok.all() and not any(proj.reasons.values())
    assert all(np.array_equal(s, t) for s, t in zip(proj.states, d.states))
    prev = np.concatenate([np.full((len(d), 1), cfg.num_states), d.states[:, :-1]], 1)
    assert np.allclose(proj.latent_nll, -p.log_trans[prev, d.states].sum(1))
    ll, _ = log_likelihood(p, d.tokens, d.lengths)
    assert np.allclose(ll, p.log_trans[prev, d.states].sum(1) + p.log_emit[d.subsequences].sum(1))


def test_monte_carlo_latent_ppl_matches_closed_form():
    cfg = SyntheticConfig(num_states=5, num_segments=8, num_letters=5, num_subsequences=20, min_len=2, max_len=4,
                          n_train=0, n_valid=0, n_test=0, seed=3)
    p = make_process(cfg)
    d = sample_sequences(p, 20_000, np.random.default_rng(0))
    proj = project(p, d.tokens, d.lengths)
    mc = np.exp(proj.latent_nll.sum() / proj.latent_steps.sum())
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
    proj = project(p, tokens, lengths)
    assert proj.ok.tolist() == [True, False, False, True, False]
    assert proj.reasons == {"unknown_subsequence": 1, "no_final_delimiter": 2, "wrong_segment_count": 1}
    assert proj.latent_steps[3] == 1
    assert proj.latent_nll[3] == pytest.approx(-p.log_trans[cfg.num_states, p.owner[0]])
    ll, _ = log_likelihood(p, tokens, lengths)
    assert np.isfinite(ll[0]) and np.isneginf(ll[1:]).all()
