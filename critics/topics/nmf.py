"""A deterministic, data-driven start for topic models: KL-NMF of the document-word counts from NNDSVD.

For counts ``X (N, V)`` (``N`` documents, ``V`` word types) and ``K`` topics, non-negative ``W (N, K)`` and
``H (K, V)`` minimise the generalised Kullback-Leibler divergence

    D(X || W H) = sum_{d,w} [ x_dw log(x_dw / (WH)_dw) - x_dw + (WH)_dw ],

which is, up to constants, minus the Poisson log-likelihood of ``X`` with means ``W H`` and, after
normalising, the multinomial likelihood of PLSA (Gaussier and Goutte, 2005): with ``h_k = sum_w H_kw``,
``phi_k = H_k / h_k`` is topic ``k``'s word distribution and ``W_dk h_k`` the expected number of document
``d``'s tokens from topic ``k``.  The multiplicative updates of Lee and Seung (2001), each of which does not
increase ``D``, are

    H_kw <- H_kw * [sum_d W_dk x_dw / (WH)_dw] / sum_d W_dk,
    W_dk <- W_dk * [sum_w H_kw x_dw / (WH)_dw] / sum_w H_kw,

here ``H`` then ``W`` in each iteration, computed over the non-zero ``x_dw`` only.  After a ``W`` update every
row sum is the data's, ``sum_w (WH)_dw = sum_w x_dw``, so the topics' expected token counts
``t_k = sum_d W_dk h_k`` add up to the corpus's tokens.

The start is NNDSVD (Boutsidis and Gallopoulos, 2008; :func:`_nndsvd`), with zeros filled with the matrix's
mean / 100 so that the multiplicative updates can move them.  Nothing is random: every seed of a model that
starts here starts from the same topics (the CTM's ``init="nmf"``, the LDA critic's ``init="nmf"``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["kl_nmf", "nmf_topics"]


def _nndsvd(x, k: int) -> tuple[np.ndarray, np.ndarray]:
    """NNDSVD (Boutsidis and Gallopoulos, 2008) of a sparse non-negative ``x (N, V)``: ``W (N, k)``, ``H (k, V)``
    from the leading ``k`` singular triplets, each split into its positive and negative parts and the larger
    one kept.  Deterministic: the SVD is the eigen-decomposition of the smaller Gram matrix, or ARPACK from a
    fixed start vector when both sides are large; the singular vectors' signs do not matter."""
    import scipy.sparse.linalg as spla

    n, v = x.shape
    k = min(k, n, v)
    if min(n, v) <= 4000:
        if n <= v:
            vals, u = np.linalg.eigh((x @ x.T).toarray())
            order = np.argsort(vals)[::-1][:k]
            s = np.sqrt(np.clip(vals[order], 0.0, None))
            u = u[:, order]
            vt = (x.T @ u).T / np.maximum(s, 1e-300)[:, None]
        else:
            vals, w = np.linalg.eigh((x.T @ x).toarray())
            order = np.argsort(vals)[::-1][:k]
            s = np.sqrt(np.clip(vals[order], 0.0, None))
            vt = w[:, order].T
            u = (x @ vt.T) / np.maximum(s, 1e-300)[None, :]
    else:
        u, s, vt = spla.svds(x, k=k, v0=np.full(min(n, v), 1.0 / math.sqrt(min(n, v))), solver="arpack")
        order = np.argsort(s)[::-1]
        u, s, vt = u[:, order], s[order], vt[order]
    w_out, h_out = np.zeros((n, k)), np.zeros((k, v))
    for j in range(k):
        a, b = u[:, j], vt[j]
        ap, an, bp, bn = np.maximum(a, 0), np.maximum(-a, 0), np.maximum(b, 0), np.maximum(-b, 0)
        pos = np.linalg.norm(ap) * np.linalg.norm(bp)
        neg = np.linalg.norm(an) * np.linalg.norm(bn)
        a, b, mass = (ap, bp, pos) if pos >= neg else (an, bn, neg)
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if mass <= 0 or na == 0 or nb == 0:
            continue
        scale = math.sqrt(s[j] * mass)
        w_out[:, j], h_out[j] = scale * a / na, scale * b / nb
    return w_out, h_out


def _csr(counts):
    """``counts`` (a dense array or any scipy sparse matrix, ``(N, V)``) as float64 CSR in canonical form
    (duplicates summed, column ids sorted within rows)."""
    import scipy.sparse as sp

    x = sp.csr_matrix(counts, dtype=np.float64)
    x.sum_duplicates()
    if x.nnz and x.data.min() < 0:
        raise ValueError("kl_nmf: counts must be non-negative")
    return x


def kl_nmf(counts, k: int, *, iterations: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """``W (N, k)``, ``H (k, V)`` from ``iterations`` multiplicative KL updates of the counts ``(N, V)`` (dense or
    scipy sparse) from NNDSVD (see the module docstring; no randomness).  With fewer than ``k`` singular
    triplets (``k > min(N, V)``) the extra topics start flat."""
    import scipy.sparse as sp

    x = _csr(counts)
    n, v = x.shape
    if n == 0 or v == 0 or x.sum() <= 0:
        raise ValueError(f"kl_nmf needs a count matrix with a positive entry, got shape {x.shape}")
    rows = np.repeat(np.arange(n), np.diff(x.indptr))
    cols, data = x.indices, x.data
    w, h = _nndsvd(x, k)
    fill = x.sum() / (n * v) / 100.0
    w[w <= 0], h[h <= 0] = fill, fill
    if w.shape[1] < k:                                              # fewer singular triplets than topics
        w = np.hstack([w, np.full((n, k - w.shape[1]), fill)])
        h = np.vstack([h, np.full((k - h.shape[0], v), fill)])
    for _ in range(int(iterations)):
        ratio = sp.csr_matrix((data / np.maximum(np.einsum("ek,ek->e", w[rows], h[:, cols].T), 1e-300),
                               (rows, cols)), shape=(n, v))
        h *= (ratio.T @ w).T / np.maximum(w.sum(0), 1e-300)[:, None]
        ratio = sp.csr_matrix((data / np.maximum(np.einsum("ek,ek->e", w[rows], h[:, cols].T), 1e-300),
                               (rows, cols)), shape=(n, v))
        w *= (ratio @ h.T) / np.maximum(h.sum(1), 1e-300)[None, :]
    return w, h


def nmf_topics(counts, k: int, *, iterations: int = 100, smoothing: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Topics from :func:`kl_nmf` of the counts ``(N, V)``: ``phi (k, V)`` and ``tokens (k,)``.

    ``phi_k = (1 - smoothing) H_k / h_k + smoothing c / sum(c)``, each row a distribution over the ``V`` words,
    mixed with the corpus's add-one word distribution (``c_w = 1 + sum_d x_dw``) so that no word has
    probability 0; ``tokens_k = h_k sum_d W_dk``, the expected number of the corpus's tokens from topic ``k``
    (``sum_k tokens_k = sum_dw x_dw`` after the last update).  Deterministic."""
    if not 0 <= smoothing <= 1:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing!r}")
    x = _csr(counts)
    w, h = kl_nmf(x, k, iterations=iterations)
    mass = np.maximum(h.sum(1), 1e-300)
    corpus = np.bincount(x.indices, weights=x.data, minlength=x.shape[1]) + 1.0
    phi = (1 - smoothing) * h / mass[:, None] + smoothing * corpus / corpus.sum()
    return phi, w.sum(0) * h.sum(1)
