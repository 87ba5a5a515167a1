"""Ordering statistics (seed 000) against hand-computed values and scipy."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from critics.metrics import kendall_tau, ordering_scores, pmr, position_accuracy, rouge_w, wlcs, wlcs_l
from critics.metrics.ordering import count_inversions


def test_pmr_and_accuracy_by_hand():
    assert pmr([0, 1, 2], [0, 1, 2]) == 1.0
    assert pmr([0, 2, 1], [0, 1, 2]) == 0.0
    assert position_accuracy([0, 2, 1, 3], [0, 1, 2, 3]) == 0.5
    assert position_accuracy([3, 2, 1, 0], [0, 1, 2, 3]) == 0.0


def test_kendall_tau_by_hand():
    # [2, 0, 1] against [0, 1, 2]: the pairs (2,0) and (2,1) are inverted -> 1 - 2*2/3
    assert kendall_tau([2, 0, 1], [0, 1, 2]) == pytest.approx(-1 / 3)
    assert kendall_tau([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert kendall_tau([3, 2, 1, 0], [0, 1, 2, 3]) == -1.0
    # gold need not be the identity: items are labels
    assert kendall_tau([5, 7, 6], [5, 6, 7]) == pytest.approx(1 - 2 * 1 / 3)
    assert kendall_tau([4], [4]) == 1.0


@pytest.mark.parametrize("metric", [pmr, kendall_tau, position_accuracy, wlcs_l, count_inversions])
def test_empty_orders_are_errors_for_every_ordering_metric(metric):
    with pytest.raises(ValueError, match="empty order"):
        metric([], [])


def test_permutations_are_checked():
    with pytest.raises(ValueError):
        kendall_tau([0, 1, 1], [0, 1, 2])
    with pytest.raises(ValueError):
        pmr([0, 1], [0, 1, 2])


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(range(9))), st.permutations(list(range(9))))
def test_kendall_tau_matches_scipy(pred, gold):
    # rank of each item in pred and gold: no ties, so tau-b is 1 - 2 inversions / C(n, 2)
    rp = [pred.index(i) for i in range(9)]
    rg = [gold.index(i) for i in range(9)]
    assert kendall_tau(pred, gold) == pytest.approx(stats.kendalltau(rp, rg).statistic)


@settings(max_examples=40, deadline=None)
@given(st.permutations(list(range(7))))
def test_inversions_match_brute_force(pred):
    gold = list(range(7))
    brute = sum(1 for i, j in itertools.combinations(range(7), 2) if pred[i] > pred[j])
    assert count_inversions(pred, gold) == brute


def test_wlcs_by_hand():
    # x = 0 1 2 3, y = 0 1 3 2, f(k) = k^2: run "0 1" (f(2) = 4) plus one single match (f(1) = 1)
    assert wlcs([0, 1, 2, 3], [0, 1, 3, 2], alpha=2) == pytest.approx(5.0)
    # consecutive runs are rewarded: a full match of 4 scores f(4) = 16
    assert wlcs([0, 1, 2, 3], [0, 1, 2, 3], alpha=2) == pytest.approx(16.0)
    # alpha = 1 is plain LCS
    assert wlcs([0, 2, 1, 3], [0, 1, 2, 3], alpha=1) == pytest.approx(3.0)


def test_rouge_w_by_hand():
    # WLCS = 5 with f(k) = k^2 over 4 items: P = R = sqrt(5 / 16)
    out = rouge_w([0, 1, 3, 2], [0, 1, 2, 3], alpha=2)
    assert out["p"] == pytest.approx(math.sqrt(5 / 16))
    assert out["r"] == pytest.approx(math.sqrt(5 / 16))
    assert out["f"] == pytest.approx(math.sqrt(5 / 16))
    # different lengths (token sequences): pred "a b", gold "a b c", alpha = 2: WLCS = 4
    out = rouge_w(["a", "b"], ["a", "b", "c"], alpha=2)
    assert out["p"] == pytest.approx(1.0)
    assert out["r"] == pytest.approx(math.sqrt(4 / 9))
    assert out["f"] == pytest.approx(2 * (2 / 3) / (1 + 2 / 3))


def test_wlcs_l_by_hand():
    # eqs. 5-7 with f(k) = k^2, n = 4, WLCS = 5: P = sqrt(5/16), R = sqrt(5/256)
    p, r = math.sqrt(5 / 16), math.sqrt(5 / 256)
    assert wlcs_l([0, 1, 3, 2], [0, 1, 2, 3], alpha=2) == pytest.approx(2 * p * r / (p + r))
    # perfect order of 3 with alpha = 1.2: P = 1; R = 3^(-0.2) with f(f(n)), R = 1/3 with f(n)^2
    r_comp = 3 ** -0.2
    assert wlcs_l([0, 1, 2], [0, 1, 2]) == pytest.approx(2 * r_comp / (1 + r_comp))
    assert wlcs_l([0, 1, 2], [0, 1, 2], recall_denominator="square") == pytest.approx(0.5)
    # F-measure weight beta of eq. 7: (1 + b^2) R P / (R + b^2 P)
    assert wlcs_l([0, 1, 2], [0, 1, 2], beta=2.0) == pytest.approx(5 * r_comp / (r_comp + 4))


def test_wlcs_l_falls_with_length_and_rewards_runs():
    assert wlcs_l(list(range(10)), list(range(10))) < wlcs_l(list(range(4)), list(range(4)))
    # a perfect order of n with alpha = 1.2: P = 1, R = n^(1 - alpha) = n^-0.2, F = 2R / (1 + R)
    for n in (4, 10):
        r = n ** -0.2
        assert wlcs_l(list(range(n)), list(range(n))) == pytest.approx(2 * r / (1 + r), rel=1e-12)
    # same number of items in gold relative order, but one consecutive run scores higher
    assert wlcs_l([0, 1, 2, 5, 4, 3], list(range(6))) > wlcs_l([0, 5, 1, 4, 2, 3], list(range(6)))
    # by hand, f(k) = k^1.2, n = 6: "0 1 2" is one run of 3 plus one single match (WLCS = f(3) + 1);
    # "0 . 1 . 2 3" matches 0 and 1 alone and "2 3" as a run of 2 (WLCS = 1 + 1 + f(2))
    f = lambda k: k ** 1.2  # noqa: E731

    def by_hand(w, n=6):
        p, r = (w / f(n)) ** (1 / 1.2), (w / f(f(n))) ** (1 / 1.2)
        return 2 * p * r / (p + r)

    assert wlcs([0, 1, 2, 5, 4, 3], list(range(6))) == pytest.approx(f(3) + 1, rel=1e-12)
    assert wlcs([0, 5, 1, 4, 2, 3], list(range(6))) == pytest.approx(2 + f(2), rel=1e-12)
    assert wlcs_l([0, 1, 2, 5, 4, 3], list(range(6))) == pytest.approx(by_hand(f(3) + 1), rel=1e-12)
    assert wlcs_l([0, 5, 1, 4, 2, 3], list(range(6))) == pytest.approx(by_hand(2 + f(2)), rel=1e-12)


def test_ordering_scores_corpus_means():
    preds = [[0, 1, 2], [2, 1, 0]]
    golds = [[0, 1, 2], [0, 1, 2]]
    out = ordering_scores(preds, golds)
    assert out["pmr"] == 0.5
    assert out["kendall_tau"] == pytest.approx(0.0)
    assert out["position_accuracy"] == pytest.approx((1 + 1 / 3) / 2)
    assert out["n"] == 2
    with pytest.raises(ValueError):
        ordering_scores(preds, golds[:1])
