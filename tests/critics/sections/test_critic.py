"""Section-transition critic: hand-computed Latent PPL, delta choice, unknowns, persistence, real data."""

import math
from collections import Counter

import numpy as np
import pytest

from critic import Critic, criticize
from critic.critic import FORMAT_VERSION
from critic.corrupt import corrupt_all
from critic.document import Document, Section
from critics.sections import SectionTransitionCritic, TitleNormalizer, UNKNOWN
from critics.sections.critic import _padded


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
    assert f'"format_version": {FORMAT_VERSION}' in meta and '"critic": "sections"' in meta
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
    from critics.sections.analysis import repetition_share, section_paths, transition_errors, transition_errors_table

    critic = SectionTransitionCritic(delta=0.01, normalize_titles=False).fit(TRAIN)
    docs = [doc("x", ["result", "intro"]), doc("y", ["intro", "method", "result"]), doc("z", [])]
    paths = section_paths(critic, docs)
    assert paths == [["result", "intro"], ["intro", "method", "result"], None]
    errors, failures = transition_errors(critic, paths, threshold=0.05)
    # 7 transitions; never seen in TRAIN (so below 0.05): <bos>->result, intro-><eos>, result->intro
    assert [(e.previous, e.current) for e in errors] == [("<bos>", "result"), ("intro", "<eos>"), ("result", "intro")]
    # <bos> row: 4 starts over 4 targets; result row: 4 ends over 4 types + <eos>
    assert errors[0].probability == pytest.approx(0.01 / (4 + 0.01 * 4), rel=1e-12)
    assert errors[2].probability == pytest.approx(0.01 / (4 + 0.01 * 5), rel=1e-12)
    assert failures == pytest.approx(3 / 7)
    assert repetition_share(errors) == 0.0
    # + <bos> result result <eos>: <bos> -> result again and the unseen repetition result -> result are
    # errors (result -> <eos> is not): 5 error transitions of 10, one of them a repetition
    errors, failures = transition_errors(critic, paths + [["result", "result"]], threshold=0.05)
    assert failures == pytest.approx(5 / 10) and repetition_share(errors) == pytest.approx(1 / 5)
    assert math.isnan(transition_errors(critic, [None], threshold=0.05)[1])  # no path: no share, not 0%
    assert "| total failures | — | < 0.01 | — (no transitions) |" in transition_errors_table(critic, [])
    assert "| repetitions (z_m = z_m-1) | — | — | 20.00 of failures |" in \
        transition_errors_table(critic, paths + [["result", "result"]], threshold=0.05)


def test_empirical_transitions_graph_and_heatmap(tmp_path):
    from critics.sections.analysis import section_paths
    from critics.sections.plots import (empirical_transitions, transition_difference_graph,
                                        transition_difference_heatmap, transition_differences)

    critic = SectionTransitionCritic(delta=0.01, normalize_titles=False).fit(TRAIN)
    labels = ["<bos>", "intro", "method", "result", "<eos>"]
    train = section_paths(critic, TRAIN)
    table = empirical_transitions(train, labels)
    # by hand: <bos> -> intro 3/4, method 1/4; method -> method 1/4, result 3/4
    np.testing.assert_allclose(table[0], [0, 0.75, 0.25, 0, 0])
    np.testing.assert_allclose(table[2], [0, 0, 0.25, 0.75, 0])
    # a row counts transitions to labels not shown: method -> method 1/4 of method's 4 transitions
    np.testing.assert_allclose(empirical_transitions(train, ["method"]), [[0.25]])
    cand = [["intro", "intro", "result"], ["intro", "intro", "method"]]
    edges = transition_differences(critic, train, cand, threshold=0.05, min_difference=0.1)
    # by hand.  TRAIN: intro -> method 2/3, result 1/3; method -> method 1/4, result 3/4.
    # candidate: intro -> intro 2/4, result 1/4, method 1/4; method -> <eos> only (so 0 to the shown types)
    got = {(e.previous, e.current): (round(e.difference, 12), e.unlikely) for e in edges}
    assert got == {("method", "result"): (-0.75, False), ("intro", "intro"): (0.5, True),
                   ("intro", "method"): (round(0.25 - 2 / 3, 12), False), ("method", "method"): (-0.25, False)}
    assert [(e.previous, e.current) for e in edges][:2] == [("method", "result"), ("intro", "intro")]  # |D| first
    assert transition_difference_graph(critic, train, cand, tmp_path / "g.png").stat().st_size > 1000
    path = transition_difference_heatmap(critic, train, section_paths(critic, VALID), tmp_path / "t.png")
    assert path.stat().st_size > 1000


@pytest.mark.parametrize("settings,name", [
    ({"delta": 0}, "delta"), ({"delta": -0.1}, "delta"), ({"delta": math.nan}, "delta"),
    ({"delta": math.inf}, "delta"), ({"delta": 1e308}, "delta"), ({"delta": 5e-324}, "delta"),
    ({"delta_grid": (0.1, 0.0, 1.0)}, r"delta_grid\[1\]"), ({"delta_grid": (0.1, 1e20)}, r"delta_grid\[1\]"),
    ({"delta_grid": (float("nan"),)}, r"delta_grid\[0\]"), ({"delta_grid": ()}, "delta_grid"),
])
def test_delta_must_be_positive_and_finite(settings, name):
    critic = SectionTransitionCritic(normalize_titles=False, **settings)
    with pytest.raises(ValueError, match=name):
        critic.fit(TRAIN, validation=VALID)
    assert not critic.is_fitted


def test_unusable_validation_documents_are_kept_with_reasons(tmp_path):
    bad = [Document("empty", ()), doc("refs", ["see also", "source"]), Document("untitled", (Section(None, "y"),))]
    critic = SectionTransitionCritic(delta_grid=(0.1, 1.0), normalize_titles=False).fit(TRAIN, validation=VALID + bad)
    assert critic.validation_skipped_ == {
        "empty": "document has no sections",
        "refs": "no sections left after dropping see also/external link/reference/further reading/note/source "
                "sections",
        "untitled": "section 0 has no title (or none left after normalisation); the given-title posterior "
                    "needs one per section",
    }
    # the usable ones alone choose the same delta with the same validation PPLs
    alone = SectionTransitionCritic(delta_grid=(0.1, 1.0), normalize_titles=False).fit(TRAIN, validation=VALID)
    assert critic.validation_ppl_ == alone.validation_ppl_ and alone.validation_skipped_ == {}
    critic.save(tmp_path / "c")
    assert Critic.load(tmp_path / "c").validation_skipped_ == critic.validation_skipped_
    unfitted = SectionTransitionCritic(normalize_titles=False)
    with pytest.raises(ValueError, match=r"all 3 failed, e.g. 'empty': document has no sections"):
        unfitted.fit(TRAIN, validation=bad)
    assert not unfitted.is_fitted


def test_bigram_counts_match_a_loop_over_documents():
    rng = np.random.default_rng(0)
    k = 5
    seqs = [rng.integers(0, k, size=rng.integers(1, 7)).tolist() for _ in range(40)]
    start, trans, end = np.zeros(k), np.zeros((k, k)), np.zeros(k)
    for s in seqs:
        start[s[0]] += 1
        end[s[-1]] += 1
        for a, b in zip(s, s[1:]):
            trans[a, b] += 1
    got = SectionTransitionCritic._count(np.concatenate(seqs), np.array([len(s) for s in seqs]), k)
    for g, w in zip(got, (start, trans, end)):
        np.testing.assert_array_equal(g, w)
    states = _padded(np.concatenate(seqs), np.array([len(s) for s in seqs])).numpy()
    width = max(len(s) for s in seqs)
    np.testing.assert_array_equal(states, [s + [-1] * (width - len(s)) for s in seqs])


def test_each_distinct_title_is_normalised_once(monkeypatch):
    calls = Counter()
    original = TitleNormalizer.__call__

    def counting(self, title, *lemma):
        calls[title] += 1
        return original(self, title, *lemma)

    monkeypatch.setattr(TitleNormalizer, "__call__", counting)
    train = [doc(f"t{i}", ["Intro", "Methods", "Results", "See Also"]) for i in range(30)]
    test = [doc(f"x{i}", ["Results", "Intro", "Discussion"]) for i in range(30)]
    critic = SectionTransitionCritic(delta=0.1).fit(train)
    scores = critic.score(test)
    assert scores.n == 30 and set(scores.unknown.values()) == {1}
    titles = ["Intro", "Methods", "Results", "See Also", "Discussion"]
    assert {t: calls[t] for t in titles} == dict.fromkeys(titles, 1)
    assert critic.titles(test[0]) == ["result", "intro", "discussion"]


def test_a_loaded_critic_lemmatises_its_training_words_without_simplemma(tmp_path, monkeypatch):
    """Issue 40: the fitted critic keeps word -> lemma of its training titles and drop titles (saved with it), so
    scoring titles made of those words never reads simplemma's dictionary; a new word still goes to simplemma, and
    the scores are those of normalising every title afresh."""
    from critics.sections import normalize

    train = [doc(f"t{i}", ["Introduction", "Methods", "2 Results", "See Also"]) for i in range(3)]
    critic = SectionTransitionCritic(delta=0.1).fit(train)
    drop_words = {w for t in critic.drop_titles for w in TitleNormalizer().words(t)}
    assert critic.lemmas_ == {w: normalize.lemma(w) for w in sorted({"introduction", "methods", "results", *drop_words})}
    assert critic.lemmas_["results"] == "result" and list(critic.lemmas_) == sorted(critic.lemmas_)
    assert SectionTransitionCritic(delta=0.1, normalize_titles=False).fit(train).lemmas_ == {}
    critic.save(tmp_path / "c")
    known = [doc("k", ["METHODS", "Introduction", "Results 3", "see also"])]
    new = [doc("n", ["Methods", "Discussions"])]
    want = critic.score(known + new).latent_nll

    looked_up, original = [], normalize._lemma

    def simplemma(word):
        looked_up.append(word)
        return original(word)

    monkeypatch.setattr(normalize, "_lemma", simplemma)
    again = Critic.load(tmp_path / "c")
    assert again.lemmas_ == critic.lemmas_
    assert again.score(known).latent_nll.tolist() == want[:1].tolist() and looked_up == []
    assert again.score(new).latent_nll.tolist() == want[1:].tolist() and looked_up == ["discussions"]
    assert again.titles(new[0]) == ["method", "discussion"]


def test_a_critic_saved_without_lemmas_loads_and_scores_the_same(tmp_path):
    """A critic saved before the lemma table lemmatises every word with simplemma, as it did."""
    import json

    import torch

    from critic.critic import _state_digest

    critic = SectionTransitionCritic(delta=0.1).fit(TRAIN + [doc("e", ["Intro", "Notes", "Results"])])
    path = critic.save(tmp_path / "c")
    meta = json.loads((path / "critic.json").read_text())
    del meta["state"]["lemmas"]
    meta["state_sha256"] = _state_digest(meta, torch.load(path / "tensors.pt", weights_only=True), meta["files"])
    (path / "critic.json").write_text(json.dumps(meta))
    again = Critic.load(path)
    test = [doc("x", ["Results", "intro", "method", "Notes"]), doc("y", ["Intros", "Results"])]
    assert again.lemmas_ == {} and again.score(test).latent_nll.tolist() == critic.score(test).latent_nll.tolist()


def test_project_reports_unusable_documents_as_failures():
    critic = SectionTransitionCritic(delta=0.1, normalize_titles=False).fit(TRAIN)
    batch = [doc("x", ["intro", "zzz"]), Document("untitled", (Section("intro", "a"), Section(" ", "b")))]
    projection = critic.project(batch)
    assert projection.doc_ids == ["x"]
    assert projection.failures == {"untitled": critic.check(batch[1])}
    assert projection.unknown == {"x": 1}
    assert projection.latent_steps.tolist() == [3.0]
    np.testing.assert_array_equal(projection.posterior.value.numpy(),
                                  [[critic.index_["intro"], critic.index_[UNKNOWN]]])
