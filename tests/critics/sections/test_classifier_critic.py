"""Classifier-posterior section critic: exact expectation vs enumeration, MAP = given titles when the
classifier is certain, failures and unknowns, persistence, and accuracy on real man pages."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from critic import Critic
from critic.document import Document, Section
from critics.sections import ClassifierSectionCritic, CorpusFilter, SectionTransitionCritic, UNKNOWN
from critics.sections.classifier import SectionClassifier

# ------------------------------------------------------------------ a classifier test double


class TableClassifier(SectionClassifier):
    """Test double: ``P(z | x)`` read from a table (text -> probabilities over the C classes).

    It learns nothing and is calibrated at T = 1, so the critic's posterior factors are exactly the
    table's rows: what the critic does with them (padding, <unk> column, cross-entropy) is tested alone.
    """

    kind = "test-table"

    def __init__(self, table: dict | None = None):
        self.table = table

    def fit(self, texts, labels, num_classes, *, valid_texts, valid_labels):
        self.num_classes_, self.temperature_, self.valid_accuracy_ = num_classes, 1.0, math.nan
        return self

    def _logits(self, texts):
        return torch.log(torch.stack([self.table[t] for t in texts]))


class TableCritic(ClassifierSectionCritic):
    table: dict = {}

    def _new_classifier(self):
        return TableClassifier(self.table)


def doc(doc_id, sections):
    return Document(doc_id, tuple(Section(t, x) for t, x in sections))


def log_prior(critic, states) -> float:
    """log P_c(z) from the prior's tables, by a loop."""
    p = critic.prior()
    total = float(p.initial[states[0]]) + float(p.final[states[-1]])
    return total + sum(float(p.transition[a, b]) for a, b in zip(states, states[1:]))


@pytest.mark.parametrize("seed", range(6))
def test_expectation_equals_enumeration_over_all_title_sequences(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))  # training titles; the prior has k + 1 states with <unk>
    titles = [f"t{i}" for i in range(k)]
    train = [doc(f"d{n}", [(titles[j], "x") for j in rng.integers(0, k, size=rng.integers(1, 5))])
             for n in range(25)]
    table, test = {}, []
    for n in range(5):
        length = int(rng.integers(1, 5))
        sections = []
        for m in range(length):
            text = f"doc{n} section{m}"
            probs = rng.dirichlet(np.full(k, 0.7))
            probs[rng.random(k) < 0.2] = 0.0  # some impossible titles: 0 * log P contributes nothing
            probs = probs / probs.sum() if probs.sum() > 0 else np.eye(k)[0]
            table[text] = torch.as_tensor(probs)
            # given titles are irrelevant to the posterior: some unknown, some missing
            sections.append((rng.choice(titles + ["other", None]), text))
        if n == 2:
            sections.insert(1, ("see also", "dropped before projection, never classified"))
        test.append(doc(f"x{n}", sections))
    critic = TableCritic(mode="expectation", delta=float(rng.uniform(0.05, 2.0)), normalize_titles=False)
    critic.table = table
    critic.fit(train, validation=train[:3])
    projection = critic.project(test)
    nll = critic.latent_nll(projection)
    assert nll.estimator == "exact" and projection.doc_ids == [d.id for d in test]
    for b, d in enumerate(test):
        kept = [s.text for s in d.sections if s.title != "see also"]
        q = [np.append(table[t].numpy(), 0.0) for t in kept]  # P(<unk> | x) = 0
        brute = sum(math.prod(q[m][z[m]] for m in range(len(kept))) * -log_prior(critic, z)
                    for z in itertools.product(range(k + 1), repeat=len(kept)))
        assert float(nll.value[b]) == pytest.approx(brute, rel=1e-10, abs=1e-10)
        assert float(projection.latent_steps[b]) == len(kept) + 1
    assert critic.vocab_[-1] == UNKNOWN


# ------------------------------------------------------------------ a corpus whose texts name their titles

TITLES = {"Name": "alpha", "Synopsis": "bravo", "Description": "charlie", "Options": "delta", "Bugs": "echo"}


def certain_corpus(n: int, seed: int, prefix: str) -> list[Document]:
    """Pages with 2-5 sections in a noisy order; each section's text is words only its title uses
    plus common words, so the TF-IDF classifier's MAP is right with probability ~1."""
    rng = np.random.default_rng(seed)
    names = list(TITLES)
    docs = []
    for i in range(n):
        order = sorted(rng.choice(len(names), size=rng.integers(2, 6), replace=False))
        if rng.random() < 0.3:
            rng.shuffle(order)
        sections = [(names[j], " ".join([f"{TITLES[names[j]]}{rng.integers(0, 6)}" for _ in range(6)]
                                        + list(rng.choice(["the", "of", "and", "page", "command"], size=4))))
                    for j in order]
        if rng.random() < 0.2:
            sections.append(("See Also", "ls(1), cp(1)"))
        docs.append(doc(f"{prefix}{i}", sections))
    return docs


@pytest.fixture(scope="module")
def certain():
    train, valid, test = certain_corpus(80, 0, "a"), certain_corpus(20, 1, "v"), certain_corpus(30, 2, "t")
    critic = ClassifierSectionCritic(delta_grid=(0.01, 0.1, 1.0)).fit(train, validation=valid)
    given = SectionTransitionCritic(delta_grid=(0.01, 0.1, 1.0)).fit(train, validation=valid)
    return critic, given, test


def test_map_mode_equals_the_given_title_critic_when_the_classifier_is_certain(certain):
    critic, given, test = certain
    assert critic.delta_ == given.delta_ and critic.vocab_ == given.vocab_
    assert critic.valid_accuracy_ == 1.0
    scores, want = critic.score(test), given.score(test)
    assert scores.doc_ids == want.doc_ids == [d.id for d in test]
    assert min(scores.extras["map_probability"]) > 0.999
    np.testing.assert_allclose(scores.latent_nll, want.latent_nll, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(scores.latent_steps, want.latent_steps)
    # no titles needed: the same pages without titles score the same
    bare = [d.replace_sections([Section(None if s.title != "See Also" else s.title, s.text) for s in d.sections])
            for d in test]
    np.testing.assert_allclose(critic.score(bare).latent_nll, want.latent_nll, rtol=0, atol=1e-9)
    # the exact expectation is within the (tiny) uncertainty of the MAP
    critic.mode = "expectation"
    try:
        expected = critic.score(test).latent_nll
    finally:
        critic.mode = "map"
    np.testing.assert_allclose(expected, want.latent_nll, rtol=0, atol=0.05)
    assert critic.labels(test) == [given.titles(d) for d in test]
    accuracy, compared = critic.accuracy(test)
    assert accuracy == 1.0 and compared == sum(len(given.titles(d)) for d in test)


def test_failures_unknowns_and_labels(certain):
    critic, _, _ = certain
    batch = [Document("empty", ()), doc("refs", [("See Also", "a(1)")]),
             doc("blank", [("Name", "alpha1 alpha2"), ("Bugs", "  \n ")]),
             doc("odd", [("Name", "alpha1 alpha2"), ("Oddity", "echo3 echo1"), (None, "bravo1 bravo2")])]
    projection = critic.project(batch)
    assert projection.doc_ids == ["odd"]
    assert projection.failures == {
        "empty": "document has no sections",
        "refs": "no sections left after dropping see also/external link/reference/further reading/note/source "
                "sections",
        "blank": "section 1 has no text (empty or whitespace); the classifier posterior needs each section's text",
    }
    assert {d.id: critic.check(d) for d in batch} == {**projection.failures, "odd": None}
    assert projection.unknown == {"odd": 1}  # "oddity" is not a training title; the untitled one is not counted
    assert projection.extras["labels"] == [["name", "bug", "synopsis"]]
    assert projection.latent_steps.tolist() == [4.0]
    scores = critic.score(batch)
    assert scores.doc_ids == ["odd"] and scores.skipped == projection.failures and scores.unknown == {"odd": 1}
    assert critic.labels(batch) == [None, None, None, ["name", "bug", "synopsis"]]
    # accuracy compares sections with a known given title only: "name" (right); "oddity" and None are not compared
    assert critic.accuracy(batch) == (1.0, 1)


def test_one_classifier_call_per_projection(certain, monkeypatch):
    critic, _, test = certain
    calls = []
    original = type(critic.classifier_).log_proba
    monkeypatch.setattr(type(critic.classifier_), "log_proba",
                        lambda self, texts: calls.append(len(texts)) or original(self, texts))
    projection = critic.project(test)
    assert calls == [int(projection.latent_steps.sum()) - len(test)]


@pytest.mark.parametrize("settings,match", [
    ({"classifier": "bert"}, "classifier must be one of"), ({"mode": "sample"}, "mode must be one of"),
    ({"finetune": True}, "finetune"), ({"encoder": "bert-base-uncased"}, "encoder"),
])
def test_bad_settings_name_the_setting(settings, match):
    critic = ClassifierSectionCritic(delta=0.1, **settings)
    train = certain_corpus(10, 3, "b")
    with pytest.raises(ValueError, match=match):
        critic.fit(train, validation=train)
    assert not critic.is_fitted


def test_bad_data_is_a_value_error():
    train = certain_corpus(10, 3, "b")
    blank = [d.replace_sections([Section(s.title, " ") for s in d.sections]) for d in train]
    critic = ClassifierSectionCritic(delta=0.1)
    with pytest.raises(ValueError, match=r"no usable training sections for the classifier: of \d+, "):
        critic.fit(blank, validation=train)
    with pytest.raises(ValueError, match="no usable validation sections"):
        critic.fit(train, validation=blank)
    with pytest.raises(ValueError, match="validation documents are needed"):
        critic.fit(train)
    assert not critic.is_fitted
    fitted = ClassifierSectionCritic(delta=0.1).fit(train, validation=train)
    fitted.mode = "sampled"
    with pytest.raises(ValueError, match="mode must be one of"):
        fitted.project(train)


@pytest.mark.parametrize("mode", ["map", "expectation"])
def test_save_load_scores_identically(certain, tmp_path, mode):
    critic, _, test = certain
    critic.mode = mode
    try:
        critic.save(tmp_path / "c")
        want = critic.score(test)
    finally:
        critic.mode = "map"
    meta = json.loads((tmp_path / "c" / "critic.json").read_text())
    assert meta["critic"] == "sections-classifier" and meta["params"]["mode"] == mode
    assert {"classifier/classifier.json", "classifier/tensors.safetensors"} <= set(meta["files"])
    again = Critic.load(tmp_path / "c")
    assert isinstance(again, ClassifierSectionCritic) and again.mode == mode
    assert again.valid_accuracy_ == critic.valid_accuracy_ and again.classifier_sections_ == critic.classifier_sections_
    got = again.score(test)
    np.testing.assert_array_equal(got.latent_nll, want.latent_nll)
    assert got.extras == want.extras


# ------------------------------------------------------------------ real man pages

MAN = Path("/usr/share/man")


@pytest.fixture(scope="module")
def manpages(request):
    """The machine's man pages, filtered as experiments/manpages (min_sections=3, min_title_count=5)."""
    if not (MAN / "man2").is_dir():
        pytest.skip(f"no man pages under {MAN} (apt-get install manpages manpages-dev)")
    splits = request.getfixturevalue("system_manpages")
    return CorpusFilter(min_sections=3, min_title_count=5).apply(splits)[0]


def test_tfidf_posterior_is_accurate_on_held_out_man_pages(manpages):
    critic = ClassifierSectionCritic().fit(manpages["train"], validation=manpages["valid"])
    accuracy, compared = critic.accuracy(manpages["test"])
    assert compared > 500
    assert accuracy >= 0.90
    assert critic.valid_accuracy_ >= 0.90
    assert critic.classifier_.valid_nll_ <= critic.classifier_.valid_nll_uncalibrated_
    # pages whose sections are all labelled right score as with their given titles
    given = SectionTransitionCritic(delta=critic.delta_).fit(manpages["train"])
    test = manpages["test"]
    scores, want = critic.score(test), given.score(test)
    right = [b for b, (d, labels) in enumerate(zip(test, critic.labels(test))) if labels == given.titles(d)]
    assert len(right) > len(test) // 2
    np.testing.assert_allclose(scores.latent_nll[right], want.latent_nll[right], rtol=0, atol=1e-9)


def test_encoder_posterior_on_a_small_man_page_subset(manpages, tmp_path):
    train, valid, test = manpages["train"][:30], manpages["valid"][:8], manpages["test"][:10]
    critic = ClassifierSectionCritic(classifier="encoder", delta=0.1).fit(train, validation=valid)
    accuracy, compared = critic.accuracy(test)
    assert compared > 50
    assert accuracy >= 0.75  # 16 titles, 30 training pages (0.90 when written); full train split: 0.93
    critic.save(tmp_path / "e")
    again = Critic.load(tmp_path / "e")
    np.testing.assert_array_equal(again.score(test).latent_nll, critic.score(test).latent_nll)
