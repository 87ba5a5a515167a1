"""The entity-grid critic: T(x) by hand and against a brute-force count, M(x), the order rank against re-parsed
permutations, save/load, batches, real text, bad input and settings."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from critic.corrupt import shuffle_document
from critic.critic import Critic
from critic.document import Section
from critic.sentences import sentence_spans
from critics.entitygrid import EntityGridCritic, document_sentences
from critics.entitygrid.prior import EXACT_ORDERS, sentence_orders

from .texts import SECTIONS, TRAIN, document

START = "^"


def brute_force_counts(grids, order: int, salience: int) -> tuple[Counter, Counter]:
    """``(class counts, (class, context, role) counts)`` by walking every cell; contexts are tuples of symbols."""
    classes, cells = Counter(), Counter()
    for grid in grids:
        for e in range(len(grid.entities)):
            chain = grid.chain(e)
            c = int(salience > 1 and sum(r != "-" for r in chain) >= salience)
            classes[c] += 1
            padded = START * order + chain
            for t, role in enumerate(chain):
                cells[c, padded[t:t + order], role] += 1
    return classes, cells


def brute_force_nll(grid, classes: Counter, cells: Counter, *, order: int, salience: int, alpha: float) -> float:
    """``T(x) = -sum_e [log P(c_e) + sum_t log P(r_et | c_e, h_et)]`` with add-alpha estimates from the counts."""
    n_classes = 2 if salience > 1 else 1
    total = 0.0
    for e in range(len(grid.entities)):
        chain = grid.chain(e)
        c = int(salience > 1 and sum(r != "-" for r in chain) >= salience)
        total -= math.log((classes[c] + alpha) / (sum(classes.values()) + n_classes * alpha))
        padded = START * order + chain
        for t, role in enumerate(chain):
            context = padded[t:t + order]
            row = sum(cells[c, context, r] for r in "-XOS")
            total -= math.log((cells[c, context, role] + alpha) / (row + 4 * alpha))
    return total


# ------------------------------------------------------------------ T(x) and M(x)
@pytest.mark.parametrize("order", [1, 2])
def test_t_of_the_training_document_by_hand(order):
    """Trained on ``kernel: S X`` and ``module: O S`` alone, with alpha = 1/2: from the start, S and O were seen once
    each in a row of 2 counts, P = (1 + 1/2) / (2 + 4/2) = 3/8; after S (or ^S) X was seen once, P = 1.5 / 3 = 1/2,
    and likewise S after O.  Both orders see the same contexts here."""
    doc = document("train", *TRAIN)
    plain = EntityGridCritic(order=order, salience=1, smoothing=0.5).fit([doc])
    scores = plain.score([doc])
    assert scores.latent_nll[0] == pytest.approx(-2 * math.log(3 / 8) - 2 * math.log(1 / 2), rel=1e-12)
    assert scores.latent_steps[0] == 4 and scores.estimator == "exact"
    salient = EntityGridCritic(order=order, salience=2, smoothing=0.5).fit([doc])  # both entities salient: P = 5/6
    scores = salient.score([doc])
    assert scores.latent_nll[0] == pytest.approx(-2 * math.log(3 / 8) - 2 * math.log(1 / 2) - 2 * math.log(5 / 6),
                                                 rel=1e-12)
    assert scores.latent_steps[0] == 6  # 2 entities x 2 sentences, and 2 class draws


@pytest.mark.parametrize("order, salience, alpha", [(1, 1, 0.5), (2, 2, 0.1), (2, 3, 2.0)])
def test_counts_and_t_equal_a_brute_force_count(manpages, fitted, order, salience, alpha):
    critic = EntityGridCritic(order=order, salience=salience, smoothing=alpha).fit(manpages["train"])
    classes, cells = brute_force_counts(critic.grids(manpages["train"]), order, salience)
    symbols = "-XOS" + START
    for (c, context, role), n in cells.items():
        code = sum(symbols.index(s) * 5 ** (order - 1 - j) for j, s in enumerate(context))
        assert critic.role_counts_[c, code, "-XOS".index(role)] == n
    assert critic.role_counts_.sum() == sum(cells.values())
    assert critic.class_counts_.tolist() == [classes[c] for c in range(len(critic.class_counts_))]
    held = manpages["valid"] + manpages["test"]
    scores = critic.score(held)
    grids = dict(zip([d.id for d in held], critic.grids(held)))
    for doc_id, t, m in zip(scores.doc_ids, scores.latent_nll, scores.latent_steps):
        grid = grids[doc_id]
        assert t == pytest.approx(brute_force_nll(grid, classes, cells, order=order, salience=salience, alpha=alpha),
                                  rel=1e-10)
        assert m == grid.roles.size + (len(grid.entities) if salience > 1 else 0)
        assert critic.entity_nll(grid).sum() == pytest.approx(t, rel=1e-10)  # the reasons' shares add up to T(x)


def test_the_prior_s_rows_sum_to_one(fitted):
    prior = fitted.prior()
    assert prior.role_log_probs.shape == (2, 25, 4) and prior.class_log_probs.shape == (2,)
    assert torch.allclose(prior.role_log_probs.exp().sum(-1), torch.ones(2, 25, dtype=torch.float64), atol=1e-12)
    assert float(prior.class_log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    assert (fitted.role_counts_[:, 24].sum(-1) > 0).all()  # the start context was counted in both classes


# ------------------------------------------------------------------ the order rank
def reordered(doc, order) -> object:
    """``doc`` with the sentence ``order[t]`` at place ``t``, each section keeping its number of sentences and each
    sentence a paragraph (so that the splitter finds them again; each is parsed again when scored)."""
    placed = [document_sentences(doc)[i] for i in order]
    cuts = np.cumsum([0, *(len(sentence_spans(sec.text)) for sec in doc.sections)])
    return doc.replace_sections([Section(None, "\n\n".join(placed[a:b])) for a, b in zip(cuts[:-1], cuts[1:])],
                                id=f"{doc.id}@{','.join(map(str, order))}")


def brute_force_rank(critic, doc, orders) -> float:
    """The share of ``orders`` whose re-parsed document has a smaller T than ``doc``, ties (1e-9) counting half."""
    scores = critic.score([doc] + [reordered(doc, o) for o in orders])
    assert len(scores.latent_nll) == len(orders) + 1
    assert (scores.latent_steps == scores.latent_steps[0]).all()  # the same sentences: the same grid's shape
    t, others = scores.latent_nll[0], scores.latent_nll[1:]
    tie = np.isclose(others, t, rtol=1e-9, atol=0)
    return float(np.mean((others < t) & ~tie) + 0.5 * np.mean(tie))


SHORT = ("John and Mary saw the dog and the cat. The cat saw the dog of the cat. The kernel loads the module. The "
         "judge gave the lawyer a book.")


@pytest.mark.parametrize("texts", [(SHORT,), SECTIONS])
def test_the_order_rank_of_a_short_document_is_its_place_among_all_its_orders(fitted, texts):
    """Up to 6 sentences (720 orders), all of them, the given one included: 4! = 24 orders of one section, and 6! of
    two sections of three sentences (sentences move across sections); each order's document parsed again."""
    doc = document("d", *texts)
    n = len(document_sentences(doc))
    orders = list(itertools.permutations(range(n)))
    extras = fitted.score([doc]).extras
    assert extras["orders"] == [math.factorial(n)] and len(orders) <= EXACT_ORDERS
    assert extras["order_rank"][0] == pytest.approx(brute_force_rank(fitted, doc, orders), abs=1e-12)
    assert 0 < extras["order_rank"][0] < 0.5


def test_the_order_rank_of_a_long_document_is_its_place_among_sampled_orders(fitted):
    doc = document("long", " ".join(SECTIONS) + " The judge gave the lawyer a book. The driver reads the file.")
    n = len(document_sentences(doc))
    orders = sentence_orders(n, fitted.order_samples)
    assert n == 8 and orders.shape == (fitted.order_samples, n)
    assert fitted.score([doc]).extras["order_rank"][0] == pytest.approx(
        brute_force_rank(fitted, doc, orders.tolist()), abs=1e-12)


def test_sentence_orders_are_all_of_them_up_to_six_sentences_else_uniform_samples():
    assert sentence_orders(3, 100).tolist() == [list(o) for o in itertools.permutations(range(3))]  # identity first
    assert sentence_orders(6, 100).shape == (720, 6) and sentence_orders(1, 100).tolist() == [[0]]
    orders = sentence_orders(7, 5000)
    assert orders.shape == (5000, 7) and (np.sort(orders, axis=1) == np.arange(7)).all()
    assert np.array_equal(orders, sentence_orders(7, 5000))  # the same orders every time
    first = np.bincount(orders[:, 0], minlength=7) / 5000  # each sentence first about 1/7 of the time
    assert np.abs(first - 1 / 7).max() < 0.03


def test_a_single_sentence_ranks_one_half(fitted):
    scores = fitted.score([document("one", "The kernel loads the module.")])
    assert scores.extras["order_rank"] == [0.5] and scores.extras["orders"] == [1]


# ------------------------------------------------------------------ persistence, batches, devices
def test_save_and_load_give_identical_scores(fitted, manpages, tmp_path):
    docs = manpages["valid"] + [document("hand", *SECTIONS)]
    before = fitted.score(docs)
    fitted.save(tmp_path / "grid")
    loaded = Critic.load(tmp_path / "grid")
    after = loaded.score(docs)
    assert type(loaded) is EntityGridCritic and loaded.get_params() == fitted.get_params()
    assert np.array_equal(before.latent_nll, after.latent_nll)
    assert np.array_equal(before.latent_steps, after.latent_steps)
    assert before.extras == after.extras
    assert loaded.state_sha256() == fitted.state_sha256()


def test_a_document_s_numbers_do_not_depend_on_its_batch_or_their_order(fitted, manpages):
    docs = manpages["test"] + [document("hand", *SECTIONS)]
    together = fitted.score(docs)
    reverse = fitted.score(docs[::-1])
    alone = [fitted.score([d]) for d in docs]
    index = {i: k for k, i in enumerate(reverse.doc_ids)}
    for k, doc_id in enumerate(together.doc_ids):
        assert alone[k].latent_nll[0] == together.latent_nll[k] == reverse.latent_nll[index[doc_id]]
        for name, values in together.extras.items():
            assert alone[k].extras[name][0] == values[k] == reverse.extras[name][index[doc_id]]


def test_the_prior_follows_the_device(fitted):
    assert fitted.to("cpu").prior().device == torch.device("cpu")
    with pytest.raises(ValueError, match="device must be"):
        fitted.to("gpu")


# ------------------------------------------------------------------ real text
def test_shuffled_pages_score_higher_than_their_originals(fitted, manpages):
    """Fitted on the 22 fixture man pages: the corruption ``shuffled-document`` raises a held-out page's T/M on
    average and its order rank (about 1/2 for a shuffle, near 0 for the originals); and a random order of a page's
    own sentences (the same grid, columns permuted) has a larger T than the page in most pairs (B&L's task)."""
    held = manpages["valid"] + manpages["test"]
    shuffles = [s.replace_sections(s.sections, id=f"{d.id}#{seed}") for d in held for seed in range(5)
                if (s := shuffle_document(d, seed)) is not None]
    real, bad = fitted.score(held), fitted.score(shuffles)
    assert real.n == len(held) and bad.n == len(shuffles) == 5 * len(held)
    per_step = dict(zip(real.doc_ids, real.latent_nll / real.latent_steps))
    source = [i.split("#")[0] for i in bad.doc_ids]
    assert np.mean(bad.latent_nll / bad.latent_steps) > np.mean([per_step[s] for s in source])
    assert np.mean(bad.extras["order_rank"]) > 0.3 > np.mean(real.extras["order_rank"])
    rng = np.random.default_rng(0)
    orders = {d.id: [rng.permutation(len(document_sentences(d))) for _ in range(5)] for d in held}
    flat = [d.replace_sections([Section(None, "\n\n".join(document_sentences(d)))]) for d in held]  # one section
    permuted = fitted.score([reordered(d, o) for d in flat for o in orders[d.id]])
    t_real = dict(zip(real.doc_ids, real.latent_nll))
    assert np.mean([t_real[i.split("@")[0]] < t for i, t in zip(permuted.doc_ids, permuted.latent_nll)]) > 0.75


# ------------------------------------------------------------------ bad input, settings
def test_documents_without_sentences_or_entities_are_skipped_with_their_reason(fitted):
    docs = [document("empty"), document("blank", "  ", "\n"), document("pronouns", "It is. They went there."),
            document("good", *SECTIONS)]
    scores = fitted.score(docs)
    assert scores.doc_ids == ["good"]
    assert scores.skipped == {"empty": "document has no sentences", "blank": "document has no sentences",
                              "pronouns": "no entities (noun-phrase heads) in its 2 sentence(s)"}


def test_fit_skips_unusable_training_documents_and_refuses_when_none_is_left():
    good = document("good", *SECTIONS)
    critic = EntityGridCritic().fit([document("empty"), good, document("pronouns", "It is.")])
    assert critic.training_skipped_ == {"empty": "document has no sentences",
                                        "pronouns": "no entities (noun-phrase heads) in its 1 sentence(s)"}
    assert critic.training_used() == 1 and "used 1 of 3 training documents" in critic.fit_summary(3)
    assert "2 were skipped" in critic.fit_warnings()[0]
    with pytest.raises(ValueError, match="no training document has entities"):
        EntityGridCritic().fit([document("empty"), document("pronouns", "It is.")])


def test_a_fit_without_salient_entities_warns():
    critic = EntityGridCritic(salience=3).fit([document("d", *TRAIN)])
    assert any("no training entity is mentioned in 3 or more sentences" in w for w in critic.fit_warnings())
    assert EntityGridCritic(salience=2).fit([document("d", *TRAIN)]).fit_warnings() == []


@pytest.mark.parametrize("settings, message", [({"order": 3}, "order must be one of 1, 2"),
                                               ({"smoothing": 0}, "smoothing must be > 0"),
                                               ({"salience": 0}, "salience must be >= 1"),
                                               ({"order_samples": 1}, "order_samples must be >= 2")])
def test_fit_checks_the_settings_against_their_declarations(settings, message):
    with pytest.raises(ValueError, match=message):
        EntityGridCritic(**settings).fit([document("d", *TRAIN)])


def test_a_fold_s_smoothing_keeps_the_full_fit_s_estimates():
    """Fitting on ``share`` of the data with ``fold_params(share)`` gives the tables of the full fit: here the full
    data is a document twice, the fold one copy of it (share 1/2)."""
    docs = [document("a", *SECTIONS), document("b", *SECTIONS)]
    full = EntityGridCritic(smoothing=0.3).fit(docs)
    fold = EntityGridCritic(**full.fold_params(0.5)).fit(docs[:1])
    assert fold.smoothing == pytest.approx(0.15)
    assert torch.allclose(fold.prior().role_log_probs, full.prior().role_log_probs, rtol=1e-12, atol=0)
    assert torch.allclose(fold.prior().class_log_probs, full.prior().class_log_probs, rtol=1e-12, atol=0)
