"""Ordered BERTScore, Algorithm 1 and coherence-lambda (seed 001) on hand-made similarity matrices."""

import itertools
import math

import numpy as np
import pytest

from critics.metrics import align_gold_order, coherence_lambda, ordered_bertscore
from critics.metrics.obs import obs_v1_table, obs_v2_path


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
