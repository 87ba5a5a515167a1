"""Ordered BERTScore, Algorithm 1 and coherence-lambda (seed 001) on hand-made similarity matrices."""

import itertools
import math

import numpy as np
import pytest

from critics.metrics import align_gold_order, coherence_lambda, ordered_bertscore
from critics.metrics.obs import obs_v1_table, obs_v2_path, obs_v2_select


def hm(a, b):
    return 2 * a * b / (a + b)


C2 = np.array([[0.9, 0.1], [0.2, 0.8]])  # gold rows, predicted columns


def test_v1_n1_by_hand():
    # in order: the diagonal, S_rec = S_prec = 1.7
    assert ordered_bertscore(C2, version=1, n=1) == pytest.approx(hm(1.7 / 2, 1.7 / 2))
    # swapped prediction: only one pair fits a monotone alignment, the best is 0.9
    assert ordered_bertscore(C2[:, [1, 0]], version=1, n=1) == pytest.approx(hm(0.9 / 2, 0.9 / 2))


def test_v1_table_recurrence_eq1():
    s = obs_v1_table(C2, n=1)
    assert s[1, 1] == pytest.approx(0.9)
    assert s[1, 2] == pytest.approx(0.9)  # S[1][2] = max(S[1][1], S[0][2], S[0][1] + C) = 0.9
    assert s[2, 1] == pytest.approx(0.9)
    assert s[2, 2] == pytest.approx(1.7)


def test_v1_n2_lets_one_sentence_align_to_two():
    c = np.array([[0.5, 0.4]])  # one gold sentence, two predicted ones
    # n = 1: recall takes one pair (0.5); precision side also 0.5 over |p| = 2
    assert ordered_bertscore(c, 1, 1) == pytest.approx(hm(0.5, 0.25))
    # n = 2 (eq. 2): the gold sentence covers both predictions in recall: 0.9
    d = ordered_bertscore(c, 1, 2, return_details=True)
    assert d["s_rec"] == pytest.approx(0.9)
    assert d["s_prec"] == pytest.approx(0.5)
    assert d["score"] == pytest.approx(hm(0.9, 0.25))
    # n = inf is n = max(|g|, |p|) = 2
    assert ordered_bertscore(c, 1, math.inf) == pytest.approx(d["score"])


C23 = np.array([[0.9, 0.3, 0.1], [0.2, 0.8, 0.7]])


def test_v2_path_eq3_by_hand():
    s, path = obs_v2_path(C23)
    # S[i][j] = max(S[i][j-1], S[i-1][j], S[i-1][j-1]) + C[i][j]
    assert s[1, 1] == pytest.approx(2.0)
    assert s[1, 2] == pytest.approx(2.7)
    assert path == [(0, 0), (0, 1), (1, 1), (1, 2)]


def test_v2_selection_by_hand():
    # n = 1: 0.9 (0,0), 0.8 (1,1); 0.7 (1,2) and 0.3 (0,1) reuse a row -> 1.7 / (3 + 2 - 1)
    assert ordered_bertscore(C23, version=2, n=1) == pytest.approx(1.7 / 4)
    # n = 2: all four path cells fit -> 2.7 / 4
    assert ordered_bertscore(C23, version=2, n=2) == pytest.approx(2.7 / 4)
    assert ordered_bertscore(C23, version=2, n=math.inf) == pytest.approx(2.7 / 4)
    d = ordered_bertscore(C23, version=2, n=1, return_details=True)
    assert d["chosen"] == [(0, 0), (1, 1)]


def test_v2_path_breaks_float_noise_ties_like_exact_ties():
    flat = np.full((2, 2), 0.5)  # at (1, 1) up and left tie: up is preferred
    assert obs_v2_path(flat)[1] == [(0, 0), (0, 1), (1, 1)]
    for noise in (1e-13, -1e-13):  # rounding-size differences do not change the path ...
        c = flat.copy()
        c[1, 0] += noise
        assert obs_v2_path(c)[1] == [(0, 0), (0, 1), (1, 1)]
    c = flat.copy()
    c[1, 0] += 1e-3  # ... a real difference does
    assert obs_v2_path(c)[1] == [(0, 0), (1, 0), (1, 1)]
    # n = 1 on that path: 0.501 at (1, 0) first, then (0, 0) reuses column 0 and (1, 1) row 1
    picked = obs_v2_select(c, [(0, 0), (1, 0), (1, 1)], n=1)
    assert picked["chosen"] == [(1, 0)] and picked["score"] == pytest.approx(0.501 / 3)


def test_v2_counts_negative_similarities():
    # v2 sums scores on the path even when they are negative (seed 001, sec. 4.2)
    c = np.array([[-0.2]])
    assert ordered_bertscore(c, version=2, n=1) == pytest.approx(-0.2)
    assert ordered_bertscore(c, version=1, n=1) == 0.0  # v1 may skip every pair


def test_identity_similarity_gold_order_is_best():
    rng = np.random.default_rng(0)
    k = 5
    c = rng.uniform(0.2, 0.7, size=(k, k))
    c = (c + c.T) / 2
    np.fill_diagonal(c, 1.0)
    for version in (1, 2):
        gold = ordered_bertscore(c, version, 1)
        others = [ordered_bertscore(c[:, list(p)], version, 1) for p in itertools.permutations(range(k))]
        assert gold == pytest.approx(max(others))
        assert np.mean(others) < gold - 0.05


def test_align_gold_order_by_hand():
    # rows P (extracted), columns G (gold)
    sim = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    order, match = align_gold_order(sim, return_matching=True)
    # 0.9: p0->g1, 0.8: p1->g0, 0.7: p2->g1 (every G matched, so reuse is allowed)
    assert match == {0: 1, 1: 0, 2: 1}
    assert order == [1, 0, 2]


def test_align_gold_order_skips_used_gold_while_some_unmatched():
    sim = np.array([[0.0, 0.1, 0.9], [0.1, 0.2, 0.8], [0.6, 0.3, 0.7]])
    # 0.9 p0->g2; 0.8 and 0.7 want g2 while g0, g1 are free: skipped; 0.6 p2->g0; 0.2 p1->g1
    order, match = align_gold_order(sim, return_matching=True)
    assert match == {0: 2, 2: 0, 1: 1}
    assert order == [2, 1, 0]


def test_coherence_lambda_by_hand():
    emb = [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    ents = [{"a", "b"}, {"b"}, {"c"}]
    cos = 1 / math.sqrt(2)
    # pair 1: NESim = 1/min(2, 1) = 1; pair 2: NESim = 0
    want = ((0.5 * 1 + 0.5 * cos) + (0.5 * 0 + 0.5 * cos)) / 2
    assert coherence_lambda(emb, ents, 0.5) == pytest.approx(want)
    assert coherence_lambda(emb, ents, 0.0) == pytest.approx(cos)
    assert coherence_lambda(emb, ents, 1.0) == pytest.approx(0.5)
    # no entity in a sentence: NESim counts 0
    assert coherence_lambda(emb, [set(), {"b"}, set()], 1.0) == 0.0
    with pytest.raises(ValueError):
        coherence_lambda([[1.0, 0.0]], [set()], 0.5)


def test_batches_and_groups_cover_everything_within_bounds():
    from critics.metrics.encoders import _batches, _groups

    lengths = sorted(np.random.default_rng(0).integers(1, 60, size=50).tolist())
    batches = list(_batches(lengths, 8, 100))
    assert [i for b in batches for i in b] == list(range(50))
    assert all(len(b) <= 8 and (len(b) == 1 or len(b) * lengths[b[-1]] <= 100) for b in batches)
    pairs = [(["a", "b"], ["b", "c"]), (["a"], ["c"]), (["d"], ["e", "a"]), (["f"], ["f"])]
    size = dict(zip("abcdef", [3, 4, 5, 6, 7, 8]))
    groups = list(_groups(pairs, size, 14))
    assert groups == [(["a", "b", "c"], pairs[:2]), (["d", "e", "a"], pairs[2:3]), (["f"], pairs[3:])]


SENTENCES = ["The cat sat on the mat.", "A dog barked at the mailman.", "Stocks fell sharply on Monday.",
             "It rained all day in Paris.", "The kernel schedules the threads."]


def test_batched_ordered_bertscore_equals_the_per_document_path():
    from bert_score import BERTScorer

    from critic.lm.encoders import resolve_encoder
    from critics.metrics.encoders import BertScoreSimilarity
    from critics.metrics.text import ordered_bertscore_text, ordered_bertscore_texts

    golds = [SENTENCES[:3], SENTENCES[2:], SENTENCES[1:4]]
    preds = [SENTENCES[:3][::-1], SENTENCES[3:], [SENTENCES[0], SENTENCES[3]]]
    # tiny batches and groups: several encoder batches, texts re-encoded across groups
    sim = BertScoreSimilarity(batch_size=2, batch_tokens=24, max_tokens=30)
    batched = ordered_bertscore_texts(golds, preds, version=2, n=2, similarity=sim)
    one_by_one = [ordered_bertscore_text(g, p, version=2, n=2) for g, p in zip(golds, preds)]
    np.testing.assert_allclose(batched, one_by_one, rtol=0, atol=1e-6)
    # and the bert-score package itself, one sentence pair at a time
    scorer = BERTScorer(model_type=resolve_encoder(None), num_layers=6, batch_size=1, use_fast_tokenizer=True)
    for g, p, got in zip(golds, preds, sim.matrices(list(zip(golds, preds)))):
        want = np.array([[float(scorer.score([c], [r], batch_size=1)[2][0]) for c in p] for r in g])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        # v2 on the two matrices (tie-aware): the DP optimum moves by at most the cells' difference, the
        # path chosen on ours is optimal on the package's matrix within that (near-ties may pick another
        # optimal path), and the package's matrix scored on that path gives our score
        tol = 1e-5 * sum(got.shape)
        table_got, path_got = obs_v2_path(got)
        table_want, _ = obs_v2_path(want)
        assert table_got[-1, -1] == pytest.approx(table_want[-1, -1], abs=tol)
        assert sum(want[cell] for cell in path_got) >= table_want[-1, -1] - tol
        want_on_path = obs_v2_select(want, path_got, 2)["score"]
        assert ordered_bertscore(got, 2, 2) == pytest.approx(want_on_path, abs=1e-5)
    with pytest.raises(ValueError, match="2 predictions but 3 gold"):
        ordered_bertscore_texts(golds, preds[:2], similarity=sim)
