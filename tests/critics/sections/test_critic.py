"""Section-transition critic: hand-computed Latent PPL, delta choice, unknowns, persistence, real data."""

import math
from collections import Counter

import numpy as np
import pytest

from critic import Critic, criticize
from critic.corrupt import corrupt_all
from critic.document import Document, Section
from critics.sections import SectionTransitionCritic, UNKNOWN


def doc(doc_id, titles):
    return Document(doc_id, tuple(Section(t, "text") for t in titles))


TRAIN = [doc("a", ["intro", "method", "result"]), doc("b", ["intro", "result"]),
         doc("c", ["intro", "method", "method", "result"]), doc("d", ["method", "result"])]
VALID = [doc("v1", ["intro", "method", "result"]), doc("v2", ["intro", "result", "method"])]


def hand_log_prob(titles, delta):
    """P(j|i) = (C[i,j] + delta) / (C[i,.] + delta * |targets(i)|) counted from TRAIN by hand."""
    seqs = [["<bos>", *d.section_titles, "<eos>"] for d in TRAIN]
    pairs = Counter((a, b) for s in seqs for a, b in zip(s, s[1:]))
    states = ["intro", "method", "result", UNKNOWN]
    total = 0.0
    path = ["<bos>", *[t if t in states else UNKNOWN for t in titles], "<eos>"]
    for a, b in zip(path, path[1:]):
        targets = states if a == "<bos>" else states + ["<eos>"]
        row = sum(pairs[(a, t)] for t in targets)
        total += math.log((pairs[(a, b)] + delta) / (row + delta * len(targets)))
    return total


def test_latent_ppl_recomputed_by_hand():
    critic = SectionTransitionCritic(delta=0.3, normalize_titles=False).fit(TRAIN)
    test = [doc("t1", ["intro", "result", "method"]), doc("t2", ["method", "intro", "zzz"]), doc("t3", ["result"])]
    scores = critic.score(test)
    want = [-hand_log_prob(d.section_titles, 0.3) for d in test]
    np.testing.assert_allclose(scores.latent_nll, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(scores.latent_steps, [4, 4, 2])
    ppl = math.exp(sum(want) / 10)
    result = criticize(critic, test, n_bootstrap=50)
    assert result.reference.latent_ppl == pytest.approx(ppl, abs=1e-9)
    assert scores.unknown == {"t2": 1}


def test_delta_chosen_on_validation_from_grid():
    grid = (0.01, 0.1, 1.0)
    critic = SectionTransitionCritic(delta_grid=grid, normalize_titles=False).fit(TRAIN, validation=VALID)
    steps = sum(len(d.sections) + 1 for d in VALID)
    by_hand = {d: math.exp(-sum(hand_log_prob(v.section_titles, d) for v in VALID) / steps) for d in grid}
    assert critic.validation_ppl_ == pytest.approx(by_hand, rel=1e-12)
    assert critic.delta_ == min(by_hand, key=by_hand.get)
    with pytest.raises(ValueError, match="validation"):
        SectionTransitionCritic(normalize_titles=False).fit(TRAIN)


def test_prior_is_normalised():
    p = SectionTransitionCritic(delta=0.5).fit(TRAIN).prior()
    assert p.initial.exp().sum().item() == pytest.approx(1.0, abs=1e-12)
    rows = p.transition.exp().sum(1) + p.final.exp()
    np.testing.assert_allclose(rows.numpy(), 1.0, atol=1e-12)


def test_bad_documents_are_counted_with_reasons():
    critic = SectionTransitionCritic(delta=0.1).fit(TRAIN)
    bad = [Document("empty", ()), doc("only-refs", ["References", "See also"]),
           Document("untitled", (Section("Intro", "x"), Section(None, "y"))), doc("ok", ["Intro", "Oddity"])]
    scores = critic.score(bad)
    assert scores.doc_ids == ["ok"]
    assert scores.skipped["empty"] == "document has no sections"
    assert scores.skipped["only-refs"].startswith("no sections left after dropping see also/")
    assert scores.skipped["untitled"].startswith("section 1 has no title")
    assert scores.unknown == {"ok": 1}


def test_save_load_round_trip_is_exact(tmp_path):
    critic = SectionTransitionCritic(delta_grid=(0.05, 0.5)).fit(TRAIN, validation=VALID)
    critic.save(tmp_path / "c")
    meta = (tmp_path / "c" / "critic.json").read_text()
    assert '"format_version": 1' in meta and '"critic": "sections"' in meta
    again = Critic.load(tmp_path / "c")
    test = VALID + [doc("x", ["result", "intro", "oddity"])]
    np.testing.assert_array_equal(again.score(test).latent_nll, critic.score(test).latent_nll)
    assert again.delta_ == critic.delta_ and again.vocab_ == critic.vocab_


def test_real_pages_beat_each_corruption_with_separate_cis(system_manpages):
    critic = SectionTransitionCritic().fit(system_manpages["train"], validation=system_manpages["valid"])
    test = system_manpages["test"]
    assert len(test) > 80
    candidates = {name: corrupt_all(test, name, seed=0) for name in ("permuted", "repeated", "dropped")}
    result = criticize(critic, test, candidates, n_bootstrap=1000, seed=0)
    real = result.reference
    for name, cand in result.candidates.items():
        assert cand.latent_ppl > real.latent_ppl, name
        assert cand.latent_ppl_ci[0] > real.latent_ppl_ci[1], (name, cand.latent_ppl_ci, real.latent_ppl_ci)
        assert cand.p_value < 0.01


def test_transition_errors_by_hand():
    from critics.sections.analysis import transition_errors

    critic = SectionTransitionCritic(delta=0.01, normalize_titles=False).fit(TRAIN)
    docs = [doc("x", ["result", "intro"]), doc("y", ["intro", "method", "result"])]
    errors, failures = transition_errors(critic, docs, threshold=0.05)
    # 7 transitions; never seen in TRAIN (so below 0.05): <bos>->result, intro-><eos>, result->intro
    assert [(e.previous, e.current) for e in errors] == [("<bos>", "result"), ("intro", "<eos>"), ("result", "intro")]
    # <bos> row: 4 starts over 4 targets; result row: 4 ends over 4 types + <eos>
    assert errors[0].probability == pytest.approx(0.01 / (4 + 0.01 * 4), rel=1e-12)
    assert errors[2].probability == pytest.approx(0.01 / (4 + 0.01 * 5), rel=1e-12)
    assert failures == pytest.approx(3 / 7)


def test_empirical_transitions_and_heatmap(tmp_path):
    from critics.sections.plots import empirical_transitions, transition_difference_heatmap

    critic = SectionTransitionCritic(delta=0.01, normalize_titles=False).fit(TRAIN)
    labels = ["<bos>", "intro", "method", "result", "<eos>"]
    table = empirical_transitions(critic, TRAIN, labels)
    # by hand: <bos> -> intro 3/4, method 1/4; method -> method 1/4, result 3/4
    np.testing.assert_allclose(table[0], [0, 0.75, 0.25, 0, 0])
    np.testing.assert_allclose(table[2], [0, 0, 0.25, 0.75, 0])
    path = transition_difference_heatmap(critic, TRAIN, VALID, tmp_path / "t.png")
    assert path.stat().st_size > 1000
