"""A known CTM to recover (:func:`known_ctm`) and documents drawn from a CTM (:func:`sample_documents`)."""

from __future__ import annotations

import numpy as np
import torch

from .words import BagOfWords

__all__ = ["known_ctm", "sample_documents"]


def known_ctm(num_topics: int, vocab: int, seed: int = 0, *, factors: str = "blocks"
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A known CTM for tests and benchmarks, float64 ``(mu (K,), Sigma (K, K), phi (K, V))``, all drawn from
    ``seed``: the correlation of ``w w^T + 0.3 I`` scaled to standard deviation 1.5, ``mu ~ N(0, 0.5^2)``,
    Dirichlet(0.05) topics.  ``factors="blocks"``: two blocks of topics, positively correlated within and
    negatively across (``w[:, 0] = +-1`` by block, ``w[:, 1] ~ N(0, 0.7^2)``); ``"random"``: three standard
    normal factors (strong correlations in every direction)."""
    rng = np.random.default_rng(seed)
    if factors == "blocks":
        w = np.zeros((num_topics, 2))
        w[: num_topics // 2, 0], w[num_topics // 2:, 0] = 1.0, -1.0
        w[:, 1] = rng.normal(0.0, 0.7, num_topics)
    elif factors == "random":
        w = rng.normal(0.0, 1.0, (num_topics, 3))
    else:
        raise ValueError(f"factors must be 'blocks' or 'random', got {factors!r}")
    r = w @ w.T + 0.3 * np.eye(num_topics)
    d = np.sqrt(np.diag(r))
    sigma = r / np.outer(d, d) * 1.5 ** 2
    mu = rng.normal(0.0, 0.5, num_topics)
    phi = rng.dirichlet(np.full(vocab, 0.05), size=num_topics)
    return torch.tensor(mu), torch.tensor(sigma), torch.tensor(phi)


def sample_documents(mu: torch.Tensor, sigma: torch.Tensor, phi: torch.Tensor, num_docs: int, *,
                     min_words: int = 80, max_words: int = 150, seed: int = 0) -> tuple[BagOfWords, torch.Tensor]:
    """Documents from a known CTM: ``(bag of words, true z (num_docs, K))``; lengths uniform in
    ``[min_words, max_words]``; seeded, global RNG untouched."""
    gen = torch.Generator().manual_seed(int(seed))
    mu64, sigma64, phi64 = (t.detach().to(torch.float64).cpu() for t in (mu, sigma, phi))
    L = torch.linalg.cholesky(sigma64)
    z = mu64 + torch.randn((num_docs, mu64.shape[0]), generator=gen, dtype=torch.float64) @ L.T
    word_probs = torch.softmax(z, -1) @ phi64                     # (N, V): topics marginalised
    lengths = torch.randint(min_words, max_words + 1, (num_docs,), generator=gen)
    counts = np.zeros((num_docs, phi64.shape[1]), dtype=np.float32)
    for d in range(num_docs):
        draws = torch.multinomial(word_probs[d], int(lengths[d]), replacement=True, generator=gen)
        counts[d] = np.bincount(draws.numpy(), minlength=phi64.shape[1])
    return BagOfWords.from_dense(counts), z
