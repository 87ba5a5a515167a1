"""Why a section critic finds a document unlikely: its least likely transitions, with P_c recomputed here from
bigram counts taken by hand and the add-delta formula, for the given-title and the classifier critic."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from critic.criticism import criticize
from critic.document import Document, Section
from critic.results import DocumentResult
from critics.sections import ClassifierSectionCritic, SectionTransitionCritic

from tests.critics.sections.test_classifier_critic import TITLES, certain_corpus

DELTA = 0.5


def page(doc_id: str, titles: list[str]) -> Document:
    return Document(doc_id, tuple(Section(t, f"text of {t}") for t in titles))


def training() -> list[Document]:
    return ([page(f"a{i}", ["name", "synopsis", "description"]) for i in range(20)]
            + [page(f"b{i}", ["name", "description", "options"]) for i in range(10)]
            + [page(f"c{i}", ["name", "options"]) for i in range(5)])


class ByHand:
    """``P_c(to | from)`` of add-delta smoothed bigram counts over ``<bos> titles <eos>``, counted with dicts:
    ``(C[i, j] + delta) / (sum_j' C[i, j'] + C[i, <eos>] + delta (K + 1))`` and, from ``<bos>``,
    ``(C[<bos>, j] + delta) / (documents + delta K)``; K: the training titles and ``<unk>``."""

    def __init__(self, chains: list[list[str]], delta: float):
        self.delta = delta
        self.counts = Counter((a, b) for c in chains for a, b in zip(["<bos>", *c], [*c, "<eos>"]))
        self.k = len({t for c in chains for t in c}) + 1

    def p(self, a: str, b: str) -> float:
        out = sum(n for (x, _), n in self.counts.items() if x == a)
        targets = self.k if a == "<bos>" else self.k + 1
        return (self.counts[(a, b)] + self.delta) / (out + self.delta * targets)

    def reasons(self, chain: list[str], shown: list[str] | None = None, top: int = 3) -> list[str]:
        """The ``top`` least likely distinct transitions (ties: the earlier), as the critic words them."""
        states, names = ["<bos>", *chain, "<eos>"], ["<bos>", *(shown or chain), "<eos>"]
        rows: dict[tuple[str, str], list] = {}
        for m in range(1, len(states)):
            key = (names[m - 1], names[m])
            rows.setdefault(key, [self.p(states[m - 1], states[m]), m, 0])[2] += 1
        least = sorted(rows.items(), key=lambda kv: (kv[1][0], kv[1][1]))[:top]
        return [f"{a} -> {b}: P = {p:.3g}" + (f" ({n} times)" if n > 1 else "") for (a, b), (p, _, n) in least]


@pytest.fixture(scope="module")
def critic():
    return SectionTransitionCritic(delta=DELTA, normalize_titles=False, drop_titles=()).fit(training())


def results(critic, docs: list[Document]) -> dict[str, DocumentResult]:
    result = criticize(critic, training(), {"test": docs}, n_bootstrap=10, n_permutations=10)
    return {d.id: d for d in result.candidates["test"].documents}


def test_a_transition_never_seen_in_training_is_the_first_reason_with_its_probability(critic):
    hand = ByHand([[s.title for s in d.sections] for d in training()], DELTA)
    docs = [page("odd", ["name", "synopsis", "options"]), page("typical", ["name", "synopsis", "description"])]
    got = {i: critic.explain(r, next(d for d in docs if d.id == i)) for i, r in results(critic, docs).items()}
    p_unseen = DELTA / (20 + DELTA * 6)  # synopsis -> options: never counted; 20 from synopsis; K = 4 + <unk>, + <eos>
    assert got["odd"][0] == f"synopsis -> options: P = {p_unseen:.3g}"
    assert got["odd"] == hand.reasons(["name", "synopsis", "options"])
    assert got["typical"] == hand.reasons(["name", "synopsis", "description"])
    # the reasons' probabilities are the factors of T(x) = -sum log P
    r = results(critic, docs)["odd"]
    chain = ["<bos>", "name", "synopsis", "options", "<eos>"]
    assert r.latent_nll == pytest.approx(-sum(math.log(hand.p(a, b)) for a, b in zip(chain, chain[1:])), rel=1e-12)


def test_unseen_titles_are_named_and_repeated_transitions_counted(critic):
    hand = ByHand([[s.title for s in d.sections] for d in training()], DELTA)
    doc = page("rep", ["name", "frobnicate", "options", "options", "options"])
    got = critic.explain(results(critic, [doc])["rep"], doc)
    assert got == hand.reasons(["name", "<unk>", "options", "options", "options"],
                               ["name", '<unk> ("frobnicate")', "options", "options", "options"])
    assert "options -> options: P = " in " ".join(got) and "(2 times)" in " ".join(got)
    assert '<unk> ("frobnicate")' in " ".join(got)


def test_the_given_title_critic_needs_the_scored_document(critic):
    docs = [page("odd", ["name", "synopsis", "options"]), page("other", ["name", "options"])]
    r = results(critic, docs)
    with pytest.raises(ValueError, match="pass the document"):
        critic.explain(r["odd"])
    with pytest.raises(ValueError, match="not the one the result describes"):
        critic.explain(r["odd"], docs[1])
    wrong = page("odd", ["name", "options"])  # same id, other sections
    with pytest.raises(ValueError, match="not the document that was scored"):
        critic.explain(r["odd"], wrong)


def test_the_classifier_critic_names_the_least_likely_transitions_of_its_map_path():
    train, valid = certain_corpus(80, 0, "a"), certain_corpus(20, 1, "v")
    critic = ClassifierSectionCritic(delta=DELTA, normalize_titles=False, drop_titles=()).fit(train, validation=valid)
    hand = ByHand([[s.title for s in d.sections] for d in train], DELTA)
    # untitled sections whose words the classifier knows: Name, Bugs, Bugs, Options (no page repeats a section)
    words = {title: " ".join(f"{w}{k}" for k in range(6)) for title, w in TITLES.items()}
    path = ["Name", "Bugs", "Bugs", "Options"]
    doc = Document("x", tuple(Section(None, words[t]) for t in path))
    result = criticize(critic, valid, {"test": [doc]}, n_bootstrap=10, n_permutations=10)
    r = result.candidates["test"].documents[0]
    assert r.extras["labels"] == path
    got = critic.explain(r, doc)
    assert got == hand.reasons(path)
    p_unseen = DELTA / (sum(n for (a, _), n in hand.counts.items() if a == "Bugs") + DELTA * (hand.k + 1))
    assert hand.counts[("Bugs", "Bugs")] == 0 and got[0] == f"Bugs -> Bugs: P = {p_unseen:.3g}"
    # without the extras the document is classified again: the same reasons
    bare = DocumentResult(r.id, r.latent_nll, r.latent_steps, r.latent_nll_per_step, r.outlier_p_value)
    assert critic.explain(bare, doc) == got
    with pytest.raises(ValueError, match="no 'labels' extra and no document"):
        critic.explain(bare)


def test_the_worst_transition_is_the_largest_factor_of_t_and_joins_the_outlier_p_value(critic):
    """``worst_transition_nll`` = max over the M + 1 transitions of -log P_c, by hand; T(x) is their sum; the
    outlier p-value is the conformal combination of the two statistics' ranks among the reference's (plain: the
    definition, brute force)."""
    import numpy as np

    from critic.stats import id_uniforms
    from tests.critic.test_conformal import augmented_p

    by_hand = ByHand([[s.title for s in d.sections] for d in training()], DELTA)
    chains = {"ok": ["name", "synopsis", "description"], "repeat": ["name", "synopsis", "synopsis", "description"],
              "one": ["options"], "drop": ["name", "description"]}
    got = results(critic, [page(k, v) for k, v in chains.items()])
    plain = criticize(critic, training(), {"test": [page(k, v) for k, v in chains.items()]}, n_bootstrap=10,
                      n_permutations=10, outlier_score="plain")
    ref = plain.reference.documents
    names = ("latent_nll_per_step", "worst_transition_nll")
    pool = np.array([[d.latent_nll_per_step, d.extras["worst_transition_nll"]] for d in ref])
    pool_u = np.column_stack([id_uniforms([d.id for d in ref], f"0:{n}") for n in names])
    for d in plain.candidates["test"].documents:
        u = [id_uniforms([d.id], f"0:{n}")[0] for n in names]
        assert d.outlier_p_value == pytest.approx(augmented_p(pool, pool_u, [d.latent_nll_per_step,
                                                                             d.extras["worst_transition_nll"]],
                                                              u, id_uniforms([d.id], "0:outlier")[0]), rel=1e-12)
    for doc_id, chain in chains.items():
        factors = [-math.log(by_hand.p(a, b)) for a, b in zip(["<bos>", *chain], [*chain, "<eos>"])]
        d = got[doc_id]
        assert d.extras["worst_transition_nll"] == pytest.approx(max(factors), rel=1e-12)
        assert d.latent_nll == pytest.approx(sum(factors), rel=1e-12)
        p = d.p_values
        assert set(p) == {"latent_nll_per_step", "worst_transition_nll"}
        assert min(p.values()) <= d.outlier_p_value  # the combined rank is never more extreme than the best one
    assert got["repeat"].extras["worst_transition_nll"] > got["ok"].extras["worst_transition_nll"]
