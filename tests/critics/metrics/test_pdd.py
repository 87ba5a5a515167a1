"""Positional Discourse Divergence (seed 002)."""

import math

import numpy as np
import pytest

from critics.metrics import pdd, pdd_normalized
from critics.metrics.pdd import positional_bins, positional_distribution

EPS = 1e-8


def kl(q, p):
    return sum((a + EPS) * (math.log(a + EPS) - math.log(b + EPS)) for a, b in zip(q, p))


def test_bins_follow_numpy_histogram_edges():
    assert positional_bins(4, 2).tolist() == [0, 0, 1, 1]
    assert positional_bins(5, 2).tolist() == [0, 0, 1, 1, 1]  # edges 0, 2, 4: bins [0, 2) and [2, 4]
    assert positional_bins(4, 3).tolist() == [0, 1, 2, 2]  # edges 0, 1, 2, 3
    assert positional_bins(3, 3).tolist() == [0, 1, 2]


def test_pdd_by_hand():
    pred, ref = [0, 0, 1, 1], [0, 1, 0, 1]
    # bins {0,1} and {2,3}; pred: [1, 0] then [0, 1]; ref: [.5, .5] in both
    want = (kl([0.5, 0.5], [1, 0]) + kl([0.5, 0.5], [0, 1])) / 2
    assert pdd(pred, ref, num_bins=2) == pytest.approx(want)
    assert pdd_normalized(pred, ref, num_bins=2) == pytest.approx(1 / (1 + want))
    # the direction is KL(reference || prediction)
    assert pdd(ref, pred, num_bins=2) == pytest.approx((kl([1, 0], [0.5, 0.5]) + kl([0, 1], [0.5, 0.5])) / 2)


def test_set_against_set_pools_counts():
    preds = [[0, 1], [1, 1]]
    refs = [[0, 0], [1, 0]]
    # N = min(2, 2, 2); bin 0 pools labels {0, 1} vs {0, 1}; bin 1 pools {1, 1} vs {0, 0}
    want = (kl([0.5, 0.5], [0.5, 0.5]) + kl([1, 0], [0, 1])) / 2
    assert pdd(preds, refs, num_bins=2) == pytest.approx(want)
    dist = positional_distribution(preds, 2, 2)
    assert dist.tolist() == [[0.5, 0.5], [0.0, 1.0]]


def test_bin_capping_follows_the_source():
    # N = min(requested, longest prediction, longest reference)
    assert pdd([0, 1, 2], list(range(3)) * 3, num_bins=5, return_num_bins=True)[1] == 3
    assert pdd([[0, 1], [0, 1, 1, 0]], [[1] * 6], num_bins=5, return_num_bins=True)[1] == 4
    assert pdd([[0] * 9], [[1] * 7], num_bins=5, return_num_bins=True)[1] == 5


def test_self_divergence_is_zero():
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 6, size=rng.integers(3, 20)).tolist() for _ in range(30)]
    assert pdd(docs, docs, num_bins=5, num_classes=6) == pytest.approx(0.0, abs=1e-12)
    assert pdd(docs[0], docs[0], num_bins=5) == pytest.approx(0.0, abs=1e-12)
    assert pdd_normalized(docs, docs, num_bins=5, num_classes=6) == pytest.approx(1.0)


def test_grows_as_labels_are_permuted():
    # documents with a positional structure: role k sits in the k-th fifth of the document
    rng = np.random.default_rng(0)
    docs = [np.repeat(np.arange(5), rng.integers(2, 5, size=5)).tolist() for _ in range(40)]

    def shuffle_fraction(doc, frac):
        doc = list(doc)
        idx = rng.choice(len(doc), size=int(round(frac * len(doc))), replace=False)
        vals = [doc[i] for i in idx]
        rng.shuffle(vals)
        for i, v in zip(idx, vals):
            doc[i] = v
        return doc

    values = []
    for frac in (0.0, 0.25, 0.5, 1.0):
        values.append(np.mean([pdd(shuffle_fraction(d, frac), d, num_bins=5, num_classes=5) for d in docs]))
    assert values[0] == pytest.approx(0.0, abs=1e-12)
    assert values[0] < values[1] < values[2] < values[3]


def test_labels_are_checked():
    with pytest.raises(ValueError):
        pdd([0, 3], [0, 1], num_classes=2)
    with pytest.raises(ValueError):
        pdd([[]], [[0]])
