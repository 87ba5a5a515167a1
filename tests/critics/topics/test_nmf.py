"""KL-NMF from NNDSVD (critics.topics.nmf), the deterministic start of the CTM and LDA fits: the sparse updates
against the dense formulas, the divergence they lower, their fixed row sums, the exact rank-1 start."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from critics.topics.ctm import BagOfWords
from critics.topics.ctm.fit import _nmf_log_phi
from critics.topics.nmf import kl_nmf, nmf_topics


def counts(n: int = 40, v: int = 60, k: int = 3, seed: int = 0) -> np.ndarray:
    """Poisson counts ``(n, v)`` from a known rank-``k`` model with sparse topics (some zero cells)."""
    rng = np.random.default_rng(seed)
    w = rng.gamma(0.5, 2.0, size=(n, k))
    h = rng.dirichlet(np.full(v, 0.2), size=k) * 40
    return rng.poisson(w @ h).astype(np.float64)


def dense_updates(x: np.ndarray, w: np.ndarray, h: np.ndarray, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """The multiplicative KL updates written densely: H <- H * W^T (X / WH) / W^T 1, then W likewise (X / WH is
    0 where X is: a document without words has its row of W go to 0)."""
    w, h = w.copy(), h.copy()
    ratio = (lambda: np.divide(x, w @ h, out=np.zeros_like(x), where=x > 0))
    for _ in range(iterations):
        h = h * (w.T @ ratio()) / w.sum(0)[:, None]
        w = w * (ratio() @ h.T) / h.sum(1)[None, :]
    return w, h


def divergence(x: np.ndarray, w: np.ndarray, h: np.ndarray) -> float:
    """D(X || WH) = sum x log(x / WH) - x + WH (0 log 0 = 0)."""
    wh = w @ h
    pos = x > 0
    return float(np.sum(x[pos] * np.log(x[pos] / wh[pos])) - x.sum() + wh.sum())


@pytest.mark.parametrize("shape", [(40, 60), (60, 40)])  # both sides of the Gram-matrix choice
def test_sparse_updates_are_the_dense_formulas(shape):
    x = counts(*shape)
    w0, h0 = kl_nmf(x, 3, iterations=0)
    assert w0.shape == (shape[0], 3) and h0.shape == (3, shape[1]) and (w0 > 0).all() and (h0 > 0).all()
    w, h = kl_nmf(sp.csr_matrix(x), 3, iterations=25)
    want_w, want_h = dense_updates(x, w0, h0, 25)
    np.testing.assert_allclose(w, want_w, rtol=1e-9)
    np.testing.assert_allclose(h, want_h, rtol=1e-9)


def test_divergence_never_rises_and_rows_keep_their_sums():
    x = counts()
    d = [divergence(x, *kl_nmf(x, 3, iterations=i)) for i in range(12)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(d, d[1:])), d
    assert d[-1] < 0.8 * d[0]
    w, h = kl_nmf(x, 3, iterations=5)
    np.testing.assert_allclose((w @ h).sum(1), x.sum(1), rtol=1e-10)   # after a W update: the data's row sums


def test_nndsvd_start_is_exact_on_a_positive_rank_one_matrix():
    rng = np.random.default_rng(1)
    x = np.outer(rng.uniform(1, 2, 30), rng.uniform(1, 2, 20))
    w, h = kl_nmf(x, 1, iterations=0)
    np.testing.assert_allclose(w @ h, x, rtol=1e-10)


def test_topics_are_the_normalised_factors_mixed_with_the_corpus():
    x = counts()
    phi, tokens = nmf_topics(x, 3, smoothing=0.1)
    w, h = kl_nmf(x, 3)
    corpus = x.sum(0) + 1
    np.testing.assert_allclose(phi, 0.9 * h / h.sum(1, keepdims=True) + 0.1 * corpus / corpus.sum(), rtol=1e-12)
    np.testing.assert_allclose(phi.sum(1), 1, rtol=1e-12)
    np.testing.assert_allclose(tokens, w.sum(0) * h.sum(1), rtol=1e-12)
    assert tokens.sum() == pytest.approx(x.sum(), rel=1e-10)          # the topics' tokens are the corpus's


def test_disjoint_topics_are_recovered():
    rng = np.random.default_rng(2)
    h = np.zeros((3, 30))
    for k in range(3):
        h[k, 10 * k:10 * k + 10] = rng.dirichlet(np.ones(10))
    x = rng.poisson(rng.gamma(0.3, 100, size=(200, 3)) @ h).astype(float)
    phi, _ = nmf_topics(x, 3, smoothing=0.0)
    cos = (phi / np.linalg.norm(phi, axis=1, keepdims=True)) @ (h / np.linalg.norm(h, axis=1, keepdims=True)).T
    assert np.sort(cos.max(1)).min() > 0.99 and sorted(cos.argmax(1)) == [0, 1, 2]


def test_same_matrix_in_any_form_gives_the_same_topics():
    """Dense, canonical CSR, and CSR with unsorted column ids and duplicate entries: one matrix, one answer."""
    x = counts()
    rng = np.random.default_rng(3)
    indptr, indices, data = [0], [], []
    for row in x:
        cols = np.flatnonzero(row)
        rng.shuffle(cols)
        for c in cols:                                   # each count split into two entries for the same cell
            indices += [c, c]
            data += [row[c] - 1, 1.0]
        indptr.append(len(indices))
    messy = sp.csr_matrix((data, indices, indptr), shape=x.shape)
    assert not messy.has_sorted_indices
    want = nmf_topics(x, 3)
    for form in (sp.csr_matrix(x), messy, sp.coo_matrix(x)):
        got = nmf_topics(form, 3)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    again = nmf_topics(x, 3)
    assert np.array_equal(again[0], want[0]) and np.array_equal(again[1], want[1])   # nothing random


def test_more_topics_than_singular_triplets_start_flat():
    x = counts(n=4, v=30)
    w, h = kl_nmf(x, 6, iterations=0)
    assert w.shape == (4, 6) and h.shape == (6, 30)
    assert np.all(h[4:] == h[5, 0]) and np.all(w[:, 4:] == h[5, 0])   # the fill value


def test_ctm_start_is_the_nmf_topics():
    x = counts()
    got = _nmf_log_phi(BagOfWords.from_dense(x), 3)
    assert torch.equal(got, torch.from_numpy(np.log(nmf_topics(x, 3)[0])).float())


@pytest.mark.parametrize("bad", [-np.eye(3), np.zeros((3, 4))])
def test_bad_counts_are_refused(bad):
    with pytest.raises(ValueError):
        kl_nmf(bad, 2)
