"""Repetition critic: T(x) and M(x) recomputed by hand from counts read off the training documents, units,
persistence, batch independence, bad input and real man pages with loops."""

import math

import numpy as np
import pytest
import torch

from critic import Critic, criticize
from critic.corrupt import corrupt_all
from critic.document import Document, Section
from critics.repetition import RepetitionCritic
from critics.repetition.units import document_units


def doc(doc_id, *texts, titles=None):
    return Document(doc_id, tuple(Section(t, text) for t, text in zip(titles or [None] * len(texts), texts)))


# Sentence units, min_copy 1.  By hand, the factorisations (state, duration, offset):
#   d1  A B C           NEW(3)
#   d2  A B A B C       NEW(2) COPY(2, 2: a loop) NEW(1)
#   d3  X Y Z W X Y     NEW(4) COPY(2, 4: distant, 2 units between)
TRAIN = [doc("d1", "Alpha one. Beta two. Gamma three."),
         doc("d2", "Alpha one. Beta two.", "Alpha one. Beta two. Gamma three."),
         doc("d3", "X is. Y is. Z is. W is. X is. Y is.")]
TEST = doc("t", "P is.  Q is. P is. Q is.\nP  is. Q is.", "R is.")  # NEW(2) COPY(4, offset 2) NEW(1)


def hand_nll(alpha=0.5, beta=0.5):
    """-log P(z) of TEST from the counts above: transitions NEW -> COPY 2, NEW -> END 2, COPY -> NEW 1,
    COPY -> END 1; NEW durations 3, 2, 1, 4 (bins 1, 1, 0, 2 of B + 1 = 4), COPY durations 2, 2 (bin 1), one
    loop and one distant copy."""
    a_new_copy = (2 + alpha) / (4 + 2 * alpha)  # NEW has 2 targets: COPY, END
    a_new_end = (2 + alpha) / (4 + 2 * alpha)
    a_copy_new = (1 + alpha) / (2 + 3 * alpha)  # COPY has 3: NEW, COPY, END
    new_bins = np.array([1, 2, 1, 0]) + beta
    copy_bins = np.array([0, 2, 0, 0]) + beta
    new_2 = new_bins[1] / new_bins.sum() / (2 * (1 / 2 + 1 / 3))  # in bin {2, 3} the mass goes as 1/d
    new_1 = new_bins[0] / new_bins.sum()
    copy_4 = copy_bins[2] / copy_bins.sum() / (4 * (1 / 4 + 1 / 5 + 1 / 6 + 1 / 7))
    loop = (1 + alpha) / (2 + 2 * alpha)
    return -sum(map(math.log, [new_2, a_new_copy, copy_4, loop / 4, a_copy_new, new_1, a_new_end]))


@pytest.mark.parametrize("alpha, beta", [(0.5, 0.5), (0.1, 2.0)])
def test_latent_nll_recomputed_by_hand(alpha, beta):
    critic = RepetitionCritic(unit="sentence", duration_bins=3, transition_pseudocount=alpha,
                              duration_pseudocount=beta).fit(TRAIN)
    np.testing.assert_array_equal(critic.transition_counts_, [[0, 2, 2], [1, 0, 1]])
    np.testing.assert_array_equal(critic.duration_counts_, [[1, 2, 1, 0], [0, 2, 0, 0], [0, 1, 0, 0]])
    np.testing.assert_array_equal(critic.loop_counts_, [1, 1])
    scores = critic.score([TEST])
    assert scores.latent_nll[0] == pytest.approx(hand_nll(alpha, beta), rel=1e-12)
    assert scores.latent_steps.tolist() == [4.0]  # 3 segments + END
    assert scores.extras["copies"] == [[[2, 4, 0]]]
    assert scores.extras["copied_share"] == [4 / 7] and scores.extras["looped_share"] == [4 / 7]
    assert scores.extras["units"] == [7] and scores.extras["longest_copy"] == [4]
    result = criticize(critic, TRAIN + [TEST], n_bootstrap=20, n_permutations=20)
    total_steps = 2 + 4 + 3 + 4  # d1 .. d3 and TEST
    assert result.reference.latent_ppl == pytest.approx(
        math.exp((critic.score(TRAIN).latent_nll.sum() + hand_nll(alpha, beta)) / total_steps), rel=1e-12)


def test_transition_rows_and_offsets_are_distributions():
    prior = RepetitionCritic(unit="sentence").fit(TRAIN).prior()
    rows = prior.log_transition.exp()
    np.testing.assert_allclose(rows.sum(1).numpy(), 1.0, atol=1e-12)
    assert rows[0, 0] == 0  # NEW -> NEW: one segment
    np.testing.assert_allclose(prior.binned.log_weights.exp().sum(1).numpy(), 1.0, atol=1e-12)


def test_units_are_every_section_s_sentences_or_words_normalised():
    d = doc("u", "One  Two. ONE two.", "\n", "Three, four five.", titles=["a", "b", "c"])
    sentences = document_units(d, "sentence")
    assert sentences.keys == ["one two.", "one two.", "three, four five."]
    assert sentences.sections.tolist() == [0, 0, 2]
    assert [d.sections[k].text[s:e] for k, (s, e) in zip(sentences.sections, sentences.spans)] == [
        "One  Two.", "ONE two.", "Three, four five."]
    words = document_units(d, "token")
    assert words.keys == ["one", "two", "one", "two", "three", "four", "five"]
    # a copy may point into an earlier section
    critic = RepetitionCritic(unit="token", min_copy=3).fit(TRAIN)
    crossing = doc("x", "a b c d", "e a b c")
    assert critic.score([crossing]).extras["copies"] == [[[5, 3, 0]]]


def test_save_load_round_trip_is_exact(tmp_path):
    critic = RepetitionCritic(unit="sentence", duration_bins=5).fit(TRAIN + [doc("empty", " ")])
    critic.save(tmp_path / "c")
    again = Critic.load(tmp_path / "c")
    assert isinstance(again, RepetitionCritic) and again.get_params() == critic.get_params()
    test = TRAIN + [TEST]
    np.testing.assert_array_equal(again.score(test).latent_nll, critic.score(test).latent_nll)
    assert again.training_skipped_ == {"empty": "document has no sentences"} and again.training_used() == 3
    assert again.state_sha256() == critic.state_sha256()


def test_a_document_scores_the_same_alone_among_others_and_in_any_order():
    critic = RepetitionCritic().fit(TRAIN)
    docs = TRAIN + [TEST, doc("long", " ".join(["the same words again and again"] * 40) + " and an end")]
    together = dict(zip(critic.score(docs).doc_ids, critic.score(docs).latent_nll))
    alone = {d.id: critic.score([d]).latent_nll[0] for d in docs}
    critic.batch_size = 2
    reverse = critic.score(docs[::-1])
    assert together == alone == dict(zip(reverse.doc_ids, reverse.latent_nll))


def test_documents_without_units_are_skipped_with_their_reason():
    critic = RepetitionCritic(unit="sentence").fit(TRAIN)
    scores = critic.score([doc("blank", " \n "), Document("none", ()), TEST])
    assert scores.doc_ids == ["t"]
    assert scores.skipped == {"blank": "document has no sentences", "none": "document has no sentences"}
    words = RepetitionCritic(unit="token").fit(TRAIN)
    assert words.check(doc("dots", "... !")) == "document has no words"
    assert words.score([doc("dots", "... !")]).skipped == {"dots": "document has no words"}
    with pytest.raises(ValueError, match="no training document has words"):
        RepetitionCritic().fit([doc("dots", "... !")])


def test_settings_are_checked_before_fitting():
    for bad in ({"unit": "paragraph"}, {"min_copy": 0}, {"duration_bins": 0}, {"transition_pseudocount": 0.0},
                {"duration_pseudocount": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RepetitionCritic(**bad).fit(TRAIN)


def test_folds_smooth_in_proportion_so_an_unseen_event_keeps_its_probability():
    critic = RepetitionCritic(transition_pseudocount=0.4, duration_pseudocount=0.2)
    assert critic.fold_params(0.8) == {**critic.get_params(), "transition_pseudocount": pytest.approx(0.32),
                                       "duration_pseudocount": pytest.approx(0.16)}


def test_a_fit_without_a_single_copy_warns():
    critic = RepetitionCritic(unit="sentence").fit([TRAIN[0]])
    assert any("no training document repeats a sentence" in w for w in critic.fit_warnings())
    assert not RepetitionCritic(unit="sentence").fit(TRAIN).fit_warnings()


def test_the_device_is_explicit_and_the_prior_follows_it():
    critic = RepetitionCritic().fit(TRAIN).to("cpu")
    assert critic.prior().log_transition.device == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            critic.to("cuda")


@pytest.fixture(scope="module")
def man_critic(system_manpages):
    return RepetitionCritic().fit(system_manpages["train"])


def auc(bad: np.ndarray, real: np.ndarray) -> float:
    """P(a bad document's score > a real one's), ties half."""
    return float(((bad[:, None] > real[None, :]).mean() + 0.5 * (bad[:, None] == real[None, :]).mean()))


@pytest.mark.parametrize("corruption", ["looped-paragraph", "looped-tail"])
def test_looped_man_pages_score_clearly_higher_than_real_ones(man_critic, system_manpages, corruption):
    test = system_manpages["test"]
    assert len(test) > 80
    looped = corrupt_all(test, corruption, seed=0)
    result = criticize(man_critic, test, {"looped": looped}, n_bootstrap=500, seed=0)
    real, cand = result.reference, result.candidates["looped"]
    assert cand.latent_ppl_ci[0] > real.latent_ppl_ci[1]
    t = {d.id: d.latent_nll for d in real.documents}
    assert np.mean([d.latent_nll > t[d.id.split("#")[0]] for d in cand.documents]) > 0.9  # each page against itself
    p_real = np.array([d.outlier_p_value for d in real.documents])
    p_looped = np.array([d.outlier_p_value for d in cand.documents])
    assert auc(-p_looped, -p_real) > 0.95
