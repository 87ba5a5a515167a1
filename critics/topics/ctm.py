"""The correlated topic model (Blei and Lafferty, 2006) in Pyro, as the paper's topic critic uses it (sec. 6, app. F).

Generative process for a document ``d`` with ``K`` topics over ``V`` word types::

    z_d ~ N(mu, Sigma),   Sigma = L L^T (L a learned Cholesky factor)
    theta_d = softmax(z_d)
    w_dn ~ Categorical(theta_d @ phi)       (topic assignments marginalised)
    phi_k = softmax(eta_k)                  (eta: learned logits, one row per topic)

so that a document's log-likelihood is the bag-of-words sum

    log p(x_d | z_d) = sum_w n_dw log (theta_d @ phi)_w

(the multinomial coefficient, constant in every parameter, is left out).  The
globals ``mu``, ``L`` and ``phi`` are point estimates.  ``phi`` has no prior by
default (maximum likelihood on the logits); ``topic_concentration=beta`` adds a
symmetric ``Dirichlet(beta)`` log-density on every ``phi_k`` (MAP; ``beta > 1``
smooths).

Fitting (:func:`fit_ctm`), two methods.  Variational EM (``method="em"``, the critic's default): from topics
that KL-NMF of the counts gives (no randomness), each iteration fits every document's ``q(z_d) = N(m_d, diag
v_d)`` with the globals frozen (the Newton path below, warm-started), then sets ``mu, Sigma`` in closed form
(the inverse-Wishart MAP of :func:`closed_form_prior`: the maximum-likelihood ``Sigma`` grows without
settling) and the topics by a minorise-maximise step; it stops when the objective per document changes by at
most ``tol`` (relative).  Stochastic variational inference (``method="svi"``) with Pyro's ``Trace_ELBO`` (its
``differentiable_loss``, on our own tensors: nothing goes into Pyro's global parameter store), the same
diagonal Gaussian guide, documents subsampled by ``pyro.plate(..., subsample=idx)`` (the ELBO is scaled by
``N / B``); the per-document parameters are rows of ``(N, K)`` tables read through a sparse embedding lookup
and updated by ``SparseAdam`` (lazy Adam: only the rows of the minibatch move), the globals by ``Adam``; it
stops after ``steps`` steps or when the mean ELBO of the last ``window`` steps changes by less than ``tol``
(relative) from the window before.

Inference for new documents (:func:`infer_local`): the globals are frozen and
only ``m, log s`` of a batch of documents are fitted, many documents at once, to

    ELBO_d = E_q[log p(x_d | z)] - H(q_d, N(mu, Sigma)) + H(q_d)

with the two Gaussian terms in closed form and the likelihood term by Monte Carlo over
standard-normal draws shared by all documents (common random numbers); every batch starts from the
same seed, so a document's ``m, v`` do not depend on which other documents share its batch: fitting
documents one at a time gives the same numbers (the benchmark checks it).  Each document stops on
its own and leaves the batch.  Two methods:

* ``adam`` (this function's default): ``num_samples`` fresh draws per step and Adam, up to 300 steps, a
  document stopped when its mean ELBO over a window of steps changes by less than ``tol`` relative; the
  noisy estimates often fail the test, and the iterate keeps Adam's jitter.
* ``newton`` (the critic's default): the draws are ``num_draws`` (24) fixed ones in antithetic pairs,
  moment-matched (every coordinate's mean square exactly 1), the same at every iteration, so the ELBO is a
  deterministic function of ``m, log s`` (the same estimator with its draws frozen).  An iteration takes a
  Newton step on ``m`` with the curvature ``Sigma^-1 + J(m)`` (``J`` the likelihood's Gauss-Newton matrix at
  the mean on the 24 topics where it is largest against the prior's, the diagonal of its exact Hessian on the
  others; solved without a ``K x K`` matrix per document) and a fixed-point step ``v_k = 1 / (Sigma^-1_kk -
  E[d^2_k log p])`` (Stein's lemma on the draws), halved until the bound does not fall.  Bound and gradients
  are computed in closed form over the words present only.  A document has converged when the step's
  predicted gain (Newton decrement ``1/2 g_m^T dm + 1/4 |g_log s|^2``) is at most ``tol`` (1e-5) times its
  bound; it then stops within about ``tol |bound|`` of the maximum.

Fixing the draws changes which bound is maximised, not the model.  Against a long reference (1,024 draws,
tol 1e-7) on the benchmark, the 24-draw Newton result's Latent NLLs are off by a median 0.074 nats (max
0.43), Adam's by 0.24 (max 0.99), at 3.3-4.7x Adam's documents per CPU second (docs/critics/topics.md).

Counts are kept as a CSR bag of words (:class:`BagOfWords`); a batch becomes a
dense ``(B, V)`` count matrix when ``V`` is at most four times its largest
number of distinct words per document (the product ``theta @ phi`` is then one
matrix multiplication), otherwise padded ``(B, L)`` word ids and counts (only the
``L`` columns of ``phi`` a document uses are gathered).  Topic-word probabilities enter products floored at
1e-30 (float32 denormals below ~1e-38 made the batched product 3x slower).

Softmax is invariant to adding a constant to all of ``z``: the model only sees
``z`` up to a shift along ``1``, so ``mu`` and ``Sigma`` are identified only
after centring, ``C z`` with ``C = I - 11^T / K`` (compare ``C Sigma C``, not
``Sigma``).  The prior keeps its full ``K`` dimensions (as the paper's ``z in R^M``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from critic import progress

from .nmf import nmf_topics

__all__ = ["BagOfWords", "WordBatch", "CTMGlobals", "FitResult", "LocalResult", "fit_ctm", "infer_local",
           "log_likelihood", "local_elbo", "PriorTerms", "sample_documents", "known_ctm", "centre"]

_TINY = 1e-30
_PHI_FLOOR = 1e-30
"""Topic-word probabilities are floored here in products: below ~1.2e-38 float32 numbers are
denormal and make a CPU matrix product several times slower, for no difference in the likelihood."""
_LOG_2PI = math.log(2 * math.pi)


# --------------------------------------------------------------------------- data


@dataclass
class WordBatch:
    """The counts of ``B`` documents: ``dense (B, V)``, or padded ``ids (B, L)`` with ``counts (B, L)``
    (padding: id 0 with count 0).  ``columns (B, L, K)``: ``phi``'s columns of the ids, gathered once
    when ``phi`` is frozen (:meth:`with_columns`)."""

    dense: torch.Tensor | None = None
    ids: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    columns: torch.Tensor | None = None

    def to(self, device) -> "WordBatch":
        move = (lambda t: None if t is None else t.to(device))
        return WordBatch(move(self.dense), move(self.ids), move(self.counts), move(self.columns))

    def rows(self, keep: torch.Tensor) -> "WordBatch":
        """The documents ``keep`` (a boolean ``(B,)`` mask) of this batch."""
        pick = (lambda t: None if t is None else t[keep])
        return WordBatch(pick(self.dense), pick(self.ids), pick(self.counts), pick(self.columns))

    def with_columns(self, phi: torch.Tensor) -> "WordBatch":
        """This batch with the columns of a fixed ``phi (K, V)`` gathered (a no-op for dense counts)."""
        if self.dense is not None:
            return self
        return WordBatch(None, self.ids, self.counts.to(phi.dtype), phi.clamp_min(_PHI_FLOOR).T[self.ids])


@dataclass
class BagOfWords:
    """Word counts of ``N`` documents over ``V`` word types, in CSR form.

    Document ``d`` has word ids ``indices[indptr[d]:indptr[d+1]]`` (distinct)
    with positive ``counts`` at the same positions.
    """

    indptr: np.ndarray
    indices: np.ndarray
    counts: np.ndarray
    num_words: int

    def __post_init__(self) -> None:
        self.indptr = np.asarray(self.indptr, dtype=np.int64)
        self.indices = np.asarray(self.indices, dtype=np.int64)
        self.counts = np.asarray(self.counts, dtype=np.float32)
        if self.indptr.ndim != 1 or self.indptr[0] != 0 or self.indptr[-1] != len(self.indices) \
                or len(self.counts) != len(self.indices) or np.any(np.diff(self.indptr) < 0):
            raise ValueError("BagOfWords: indptr, indices and counts do not form a CSR matrix")
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= self.num_words):
            raise ValueError(f"BagOfWords: word ids must lie in [0, {self.num_words})")

    @classmethod
    def from_dense(cls, counts) -> "BagOfWords":
        """From an ``(N, V)`` array of non-negative counts."""
        counts = np.asarray(counts)
        rows, cols = np.nonzero(counts)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=counts.shape[0]))])
        return cls(indptr, cols, counts[rows, cols], counts.shape[1])

    @classmethod
    def from_ids(cls, docs: Sequence[Sequence[int]], num_words: int) -> "BagOfWords":
        """From one sequence of word ids per document (tokens, repeats counted)."""
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        flat = np.fromiter((w for d in docs for w in d), dtype=np.int64, count=int(lengths.sum()))
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        keys, counts = np.unique(doc_of * num_words + flat, return_counts=True)  # sorted by doc, then word
        rows = keys // num_words
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(docs)))])
        return cls(indptr, keys % num_words, counts, num_words)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_tokens(self) -> np.ndarray:
        """Tokens per document ``(N,)``."""
        return np.add.reduceat(np.append(self.counts, 0), self.indptr[:-1]) * (np.diff(self.indptr) > 0)

    @property
    def num_distinct(self) -> np.ndarray:
        return np.diff(self.indptr)

    def subset(self, rows) -> "BagOfWords":
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(rows) else np.zeros(0, np.int64)
        indptr = np.concatenate([[0], np.cumsum(ends - starts)])
        return BagOfWords(indptr, self.indices[take], self.counts[take], self.num_words)

    def to_dense(self) -> np.ndarray:
        out = np.zeros((len(self), self.num_words), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), self.num_distinct)
        out[rows, self.indices] = self.counts
        return out

    def batch(self, rows, representation: str = "auto") -> WordBatch:
        """The counts of documents ``rows`` as a :class:`WordBatch` (``auto``: dense iff ``V <= 4 L``)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        width = int(lengths.max(initial=0))
        if representation == "auto":
            representation = "dense" if self.num_words <= 4 * max(width, 1) else "sparse"
        # flat positions of the rows' entries, and where each goes in the (B, L) layout
        offsets = np.cumsum(lengths) - lengths
        b = np.repeat(np.arange(len(rows)), lengths)
        col = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)
        src = np.repeat(starts, lengths) + col
        if representation == "dense":
            dense = np.zeros((len(rows), self.num_words), dtype=np.float32)
            dense[b, self.indices[src]] = self.counts[src]
            return WordBatch(dense=torch.from_numpy(dense))
        if representation != "sparse":
            raise ValueError(f"representation must be 'auto', 'dense' or 'sparse', got {representation!r}")
        ids = np.zeros((len(rows), max(width, 1)), dtype=np.int64)
        counts = np.zeros((len(rows), max(width, 1)), dtype=np.float32)
        ids[b, col] = self.indices[src]
        counts[b, col] = self.counts[src]
        return WordBatch(ids=torch.from_numpy(ids), counts=torch.from_numpy(counts))


# --------------------------------------------------------------------------- model pieces


@dataclass
class CTMGlobals:
    """The fitted globals: ``mu (K,)``, ``scale_tril (K, K)`` (``Sigma = L L^T``), ``log_phi (K, V)``."""

    mu: torch.Tensor
    scale_tril: torch.Tensor
    log_phi: torch.Tensor

    @property
    def num_topics(self) -> int:
        return self.mu.shape[-1]

    @property
    def phi(self) -> torch.Tensor:
        return self.log_phi.exp()

    @property
    def sigma(self) -> torch.Tensor:
        return self.scale_tril @ self.scale_tril.T

    def prior(self) -> torch.distributions.MultivariateNormal:
        return torch.distributions.MultivariateNormal(self.mu, scale_tril=self.scale_tril)

    def to(self, device=None, dtype=None) -> "CTMGlobals":
        return CTMGlobals(*(t.to(device=device, dtype=dtype) for t in (self.mu, self.scale_tril, self.log_phi)))

    def detach(self) -> "CTMGlobals":
        return CTMGlobals(*(t.detach() for t in (self.mu, self.scale_tril, self.log_phi)))


def log_likelihood(z: torch.Tensor, phi: torch.Tensor, batch: WordBatch) -> torch.Tensor:
    """``sum_w n_dw log (softmax(z_d) @ phi)_w`` for ``z (..., B, K)``, ``phi (K, V)``: shape ``(..., B)``."""
    theta = torch.softmax(z, dim=-1)
    if batch.columns is None:
        phi = phi.clamp_min(_PHI_FLOOR)
    if batch.dense is not None:
        probs = theta @ phi                                        # (..., B, V)
        return (batch.dense * torch.log(probs.clamp_min(_TINY))).sum(-1)
    cols = phi.T[batch.ids] if batch.columns is None else batch.columns  # (B, L, K)
    probs = torch.einsum("...bk,blk->...bl", theta, cols)          # (..., B, L)
    return (batch.counts * torch.log(probs.clamp_min(_TINY))).sum(-1)


class PriorTerms:
    """What the Gaussian prior ``N(mu, L L^T)`` contributes, computed once: ``L^-1``, ``diag(Sigma^-1)``,
    ``log|Sigma|``."""

    def __init__(self, mu: torch.Tensor, scale_tril: torch.Tensor):
        k = mu.shape[-1]
        self.mu = mu
        self.inv_l = torch.linalg.solve_triangular(scale_tril, torch.eye(k, dtype=scale_tril.dtype,
                                                                          device=scale_tril.device), upper=False)
        self.precision_diag = self.inv_l.pow(2).sum(-2)
        self.log_det = 2 * torch.log(torch.diagonal(scale_tril)).sum()

    def cross_entropy(self, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``H(N(m, diag v), N(mu, Sigma))`` per row: ``1/2 [K log 2pi + log|Sigma| + tr(Sigma^-1 diag v)
        + (m - mu)^T Sigma^-1 (m - mu)]``."""
        maha = ((m - self.mu) @ self.inv_l.T).pow(2).sum(-1)       # |L^-1 (m - mu)|^2
        return 0.5 * (m.shape[-1] * _LOG_2PI + self.log_det + (v * self.precision_diag).sum(-1) + maha)


def local_elbo(m: torch.Tensor, log_s: torch.Tensor, eps: torch.Tensor, prior: PriorTerms, phi: torch.Tensor,
               batch: WordBatch) -> torch.Tensor:
    """Per-document ELBO ``(B,)`` of ``q = N(m, diag exp(2 log_s))``: the likelihood term by Monte Carlo over
    the standard-normal draws ``eps (S, 1|B, K)``, the prior cross-entropy and the entropy in closed form."""
    s = log_s.exp()
    z = m + s * eps                                                # (S, B, K)
    expected_loglik = log_likelihood(z, phi, batch).mean(0)
    entropy = 0.5 * m.shape[-1] * (_LOG_2PI + 1) + log_s.sum(-1)
    return expected_loglik - prior.cross_entropy(m, s * s) + entropy


def centre(x: torch.Tensor | np.ndarray, *, covariance: bool = False):
    """``C x`` (``x (..., K)`` latents) or ``C x C`` (``covariance=True``), ``C = I - 11^T / K``: the part of
    ``z`` that softmax sees."""
    if covariance:
        x = x - x.mean(-1, keepdims=True) if isinstance(x, np.ndarray) else x - x.mean(-1, keepdim=True)
        return x - x.mean(-2, keepdims=True) if isinstance(x, np.ndarray) else x - x.mean(-2, keepdim=True)
    return x - x.mean(-1, keepdims=True) if isinstance(x, np.ndarray) else x - x.mean(-1, keepdim=True)


# --------------------------------------------------------------------------- convergence


class _Windows:
    """Relative change of windowed ELBO means: ``|a_w - a_{w-1}| <= tol |a_{w-1}|`` per column."""

    def __init__(self, window: int, tol: float):
        self.window, self.tol = max(int(window), 1), float(tol)
        self.current: torch.Tensor | None = None
        self.previous: torch.Tensor | None = None
        self.n = 0

    def add(self, values: torch.Tensor) -> torch.Tensor | None:
        """Add one step's values; at the end of a window return a mask of converged columns."""
        self.current = values.detach().clone() if self.current is None else self.current + values.detach()
        self.n += 1
        if self.n < self.window:
            return None
        mean = self.current / self.n
        done = None
        if self.previous is not None and self.tol > 0:
            done = (mean - self.previous).abs() <= self.tol * self.previous.abs()
        self.previous, self.current, self.n = mean, None, 0
        return done


# --------------------------------------------------------------------------- fitting


@dataclass
class FitResult:
    """What :func:`fit_ctm` learned: the globals, the training documents' ``m, v (N, K)``, the ELBO trace
    (per document, one minibatch estimate per step), steps run and whether the tolerance was met."""

    globals: CTMGlobals
    m: torch.Tensor
    v: torch.Tensor
    elbo_trace: list[float]
    steps: int
    converged: bool


def _initial_log_phi(bow: BagOfWords, k: int, rng: np.random.Generator) -> torch.Tensor:
    """Seeded start: topic ``k`` is half the word distribution of a few random documents, half the corpus's."""
    dense_total = np.bincount(bow.indices, weights=bow.counts, minlength=bow.num_words) + 1.0
    corpus = dense_total / dense_total.sum()
    per_topic = max(1, min(10, len(bow) // max(k, 1)))
    picks = rng.choice(len(bow), size=(k, per_topic), replace=len(bow) < k * per_topic)
    phi = np.empty((k, bow.num_words))
    for t in range(k):
        sub = bow.subset(picks[t])
        c = np.bincount(sub.indices, weights=sub.counts, minlength=bow.num_words)
        phi[t] = 0.5 * c / max(c.sum(), 1.0) + 0.5 * corpus
    return torch.from_numpy(np.log(phi)).float()


def _scale_tril(raw: torch.Tensor) -> torch.Tensor:
    return torch.tril(raw, -1) + torch.diag_embed(F.softplus(torch.diagonal(raw)) + 1e-4)


def _raw_from_scale_tril(L: torch.Tensor) -> torch.Tensor:
    d = (torch.diagonal(L) - 1e-4).clamp_min(1e-6)
    return torch.tril(L, -1) + torch.diag_embed(d + torch.log(-torch.expm1(-d)))  # softplus^-1


def _nmf_log_phi(bow: BagOfWords, k: int) -> torch.Tensor:
    """A deterministic start for the topics from the data: the topics of :func:`critics.topics.nmf.nmf_topics`
    (KL-NMF of ``bow``'s counts from NNDSVD, mixed 5% with the corpus's word distribution) as float32 logits
    ``(K, V)``.  No randomness anywhere: every seed gets the same topics."""
    import scipy.sparse as sp

    counts = sp.csr_matrix((bow.counts.astype(np.float64), bow.indices, bow.indptr), shape=(len(bow), bow.num_words))
    phi, _ = nmf_topics(counts, k)
    return torch.from_numpy(np.log(phi)).float()


def closed_form_prior(m: torch.Tensor, v: torch.Tensor, *, prior_weight: float = 0.0, prior_scale: float = 1.0,
                      jitter: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """The M-step for the prior from the documents' posteriors ``N(m_d, diag v_d)`` (``m, v (N, K)``):
    ``mu = mean_d m_d`` and, with the scatter ``S = sum_d [diag(v_d) + (m_d - mu)(m_d - mu)^T]``,

        Sigma = (S + nu s_0 I) / (N + nu),   nu = prior_weight N,  s_0 = prior_scale,

    which maximises ``sum_d -H(q_d, N(mu, Sigma)) + log p(Sigma)`` exactly, ``p`` the inverse-Wishart prior with
    scale matrix ``nu s_0 I`` and ``nu - K - 1`` degrees of freedom (:func:`covariance_log_prior`): the linear
    shrinkage ``(1 - lam) S / N + lam s_0 I``, ``lam = nu / (N + nu)``.  ``prior_weight = 0`` is the maximum
    likelihood ``S / N``.  Returns ``(mu, scale_tril)``, the Cholesky factor of ``Sigma`` (computed in float64,
    ``jitter`` times the mean variance added to the diagonal if it is not positive definite), in ``m``'s dtype."""
    m64, v64 = m.double(), v.double()
    n, k = m64.shape
    mu = m64.mean(0)
    resid = m64 - mu
    nu = float(prior_weight) * n
    scatter = resid.T @ resid + torch.diag(v64.sum(0))
    sigma = (scatter + nu * float(prior_scale) * torch.eye(k, dtype=torch.float64, device=m.device)) / (n + nu)
    chol, info = torch.linalg.cholesky_ex(sigma)
    if int(info) != 0:
        chol = torch.linalg.cholesky(sigma + jitter * torch.diagonal(sigma).mean() * torch.eye(k, dtype=sigma.dtype,
                                                                                               device=m.device))
    return mu.to(m.dtype), chol.to(m.dtype)


def covariance_log_prior(scale_tril: torch.Tensor, nu: float, prior_scale: float) -> float:
    """``log p(Sigma)`` up to a constant for the inverse-Wishart prior of :func:`closed_form_prior` (scale matrix
    ``nu s_0 I``, ``nu - K - 1`` degrees of freedom): ``-nu/2 log|Sigma| - nu s_0/2 tr(Sigma^-1)``, from the
    Cholesky factor ``L`` (``log|Sigma| = 2 sum log diag L``, ``tr(Sigma^-1) = ||L^-1||_F^2``); 0 when ``nu = 0``."""
    if nu == 0:
        return 0.0
    chol = scale_tril.double()
    inverse = torch.linalg.solve_triangular(chol, torch.eye(len(chol), dtype=chol.dtype, device=chol.device),
                                            upper=False)
    log_det = 2.0 * torch.log(torch.diagonal(chol)).sum()
    return float(-0.5 * nu * log_det - 0.5 * nu * prior_scale * (inverse ** 2).sum())


def gauge_fixed_prior(mu: torch.Tensor, scale_tril: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prior with its unidentified direction fixed: ``softmax(eta)`` does not change when ``eta`` moves along
    the all-ones vector ``1``, so the likelihood cannot hold ``mu, Sigma`` there and EM lets them drift (the fitted
    ``Sigma``'s trace then differs by seed).  With ``C = I - 1 1^T / K``: ``mu <- C mu`` and ``Sigma <- C Sigma C +
    s 1 1^T / K`` with ``s = trace(C Sigma C) / (K - 1)``, the identified subspace's mean variance: the same
    distribution of ``softmax(eta)`` (``1`` uncorrelated with the rest), a fixed variance along ``1``.  Returns
    ``(mu, scale_tril)``."""
    k = len(mu)
    mu64, chol64 = mu.double(), scale_tril.double()
    centre_k = torch.eye(k, dtype=torch.float64, device=mu.device) - 1.0 / k
    sigma = centre_k @ (chol64 @ chol64.T) @ centre_k
    ones = torch.full((k, k), 1.0 / k, dtype=torch.float64, device=mu.device)
    sigma = sigma + torch.trace(sigma) / (k - 1) * ones
    return (centre_k @ mu64).to(mu.dtype), torch.linalg.cholesky(sigma).to(mu.dtype)


def _em_topics(bow: BagOfWords, m: torch.Tensor, v: torch.Tensor, phi: torch.Tensor, eps: torch.Tensor, *,
               topic_concentration: float | None, batch_size: int = 512) -> torch.Tensor:
    """The M-step for the topics, ``log phi (K, V)``: with ``z_ds = m_d + s_d eps_s`` on the draws ``eps (S, K)``,
    ``theta_ds = softmax(z_ds)``, each word's topic responsibilities ``r_dwk = mean_s theta_dsk phi_kw /
    (theta_ds . phi_w)`` at the current ``phi``, and ``phi_kw`` proportional to ``sum_d n_dw r_dwk`` (plus
    ``beta - 1`` with a Dirichlet(``beta``) on each topic, floored at 0).  A minorise-maximise step (Jensen on
    ``log theta . phi_w`` per draw), so it does not lower ``E_q[log p(x | z)]`` on those draws."""
    k, vocab = phi.shape
    expected = torch.zeros(k, vocab, dtype=torch.float64, device=phi.device)
    s = v.sqrt()
    for start in range(0, len(bow), batch_size):
        rows = np.arange(start, min(start + batch_size, len(bow)))
        batch = bow.batch(rows, "sparse").to(phi.device)
        cols = phi.clamp_min(_PHI_FLOOR).T[batch.ids]                        # (B, L, K)
        theta = torch.softmax(m[rows].unsqueeze(1) + s[rows].unsqueeze(1) * eps, -1)   # (B, S, K)
        p = torch.bmm(theta, cols.transpose(1, 2)).clamp_min(_TINY)           # (B, S, L)
        weight = batch.counts.unsqueeze(1) / p / eps.shape[0]                 # n_w / (S p_sw)
        r = torch.bmm(weight.transpose(1, 2), theta) * cols                  # (B, L, K): sum_s n_w r_swk / S
        expected.index_add_(1, batch.ids.reshape(-1), r.reshape(-1, k).T.double())
    if topic_concentration is not None:
        expected = (expected + (topic_concentration - 1.0)).clamp_min(0.0)
    phi_new = expected / expected.sum(-1, keepdim=True).clamp_min(_TINY)
    return torch.log(phi_new.clamp_min(_PHI_FLOOR)).to(phi.dtype)


def _fit_em(bow: BagOfWords, k: int, *, iterations: int, tol: float, window: int, seed: int,
            topic_concentration: float | None, init: str, rng: np.random.Generator, num_draws: int,
            infer_tol: float, infer_steps: int, prior_weight: float, prior_scale: float,
            device: torch.device) -> FitResult:
    """Variational EM (:func:`fit_ctm` with ``method="em"``).  Each iteration: the E-step fits every training
    document's ``q(z_d) = N(m_d, diag v_d)`` with the globals frozen (:func:`infer_local`, ``method="newton"``:
    a deterministic bound on ``num_draws`` fixed draws from ``seed``; warm-started from the last E-step); its
    summed bound plus ``Sigma``'s log prior (:func:`covariance_log_prior`), per document, is the objective
    recorded; then the M-steps: ``mu, Sigma`` in closed form (:func:`closed_form_prior` with ``prior_weight``,
    ``prior_scale``; its unidentified direction fixed by :func:`gauge_fixed_prior`), the topics by
    :func:`_em_topics`.  Stops when the objective's mean over ``window`` iterations changes by at most ``tol``
    relative to the window before (:class:`_Windows`), or after ``iterations``."""
    n = len(bow)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        if init == "nmf":
            log_phi = _nmf_log_phi(bow, k)
        else:
            log_phi = _initial_log_phi(bow, k, rng)
            log_phi = torch.log_softmax(log_phi + 0.01 * torch.randn(log_phi.shape), -1)
        gen = torch.Generator().manual_seed(int(seed) + 1)
        half = torch.randn(((num_draws + 1) // 2, k), generator=gen)
    eps = torch.cat([half, -half]).to(device)
    g = CTMGlobals(torch.zeros(k, device=device), torch.eye(k, device=device), log_phi.to(device))
    windows = _Windows(window, tol)
    trace: list[float] = []
    converged, it = False, 0
    m = v = None
    shown = progress.bar(int(iterations), f"ctm: fitting K={k} on {n} documents (variational EM)", "iteration")
    for it in range(1, int(iterations) + 1):
        local = infer_local(g, bow, method="newton", steps=infer_steps, tol=infer_tol, num_draws=num_draws,
                            seed=seed, warm_start=None if m is None else (m, v))  # from the last E-step
        m, v = local.m, local.v
        value = float(local.elbo.sum()) + covariance_log_prior(g.scale_tril, prior_weight * n, prior_scale)
        if topic_concentration is not None and topic_concentration != 1.0:
            value += float((topic_concentration - 1.0) * g.log_phi.double().sum())
        value /= n
        if not math.isfinite(value):
            raise FloatingPointError(f"fit_ctm: the ELBO became {value} at EM iteration {it}")
        trace.append(value)
        shown.update()
        shown.set_postfix(elbo_per_doc=f"{value:.3f}", refresh=False)
        done = windows.add(torch.tensor([value], dtype=torch.float64))
        if done is not None and bool(done.all()):
            converged = True
            break
        if it == int(iterations):
            break
        mu, scale_tril = gauge_fixed_prior(*closed_form_prior(m, v, prior_weight=prior_weight,
                                                               prior_scale=prior_scale))
        log_phi = _em_topics(bow, m, v, g.phi, eps, topic_concentration=topic_concentration)
        g = CTMGlobals(mu, scale_tril, log_phi)
    shown.close()
    return FitResult(g.detach(), m.detach().clone(), v.detach().clone(), trace, it, converged)


def fit_ctm(bow: BagOfWords, num_topics: int, *, steps: int = 2000, batch_size: int = 256, lr: float = 0.05,
            num_particles: int = 1, tol: float = 1e-5, window: int | None = None, seed: int = 0,
            topic_concentration: float | None = None, representation: str = "auto",
            device: str | torch.device = "cpu", method: str = "svi", init: str = "random",
            prior_step: str = "gradient", em_draws: int = 64, em_infer_tol: float = 1e-5,
            em_infer_steps: int = 100, covariance_prior_weight: float = 0.5,
            covariance_prior_scale: float = 1.0) -> FitResult:
    """Fit the CTM to ``bow``; see the module docstring.

    ``method="svi"`` (this function's default): SVI (Pyro ``Trace_ELBO``), ``steps`` steps of ``batch_size``
    documents (``pyro.plate`` subsampling; the whole corpus when it is smaller), ``num_particles`` vectorised
    ELBO particles, Adam / SparseAdam with ``lr``; stops when the minibatch ELBO's mean over ``window``
    (default 50) steps changes by at most ``tol`` relative to the window before.  ``prior_step="closed-form"``
    sets ``mu, Sigma`` from the documents' posterior tables once per pass over the corpus
    (:func:`closed_form_prior`) instead of by Adam.

    ``method="em"``: variational EM (:func:`_fit_em`), at most ``steps`` iterations, each an E-step on every
    document (Newton, ``em_draws`` fixed draws, ``em_infer_tol``, ``em_infer_steps``) and closed-form M-steps;
    stops when the objective's mean over ``window`` (default 1) iterations changes by at most ``tol`` relative.

    ``covariance_prior_weight`` (``w``), ``covariance_prior_scale`` (``s_0``): the closed-form ``Sigma`` steps (EM,
    and SVI's ``prior_step="closed-form"``) take the inverse-Wishart MAP of :func:`closed_form_prior`,
    ``Sigma = (S + w N s_0 I) / (N + w N)``; ``w = 0``: maximum likelihood.  Without it EM's ``Sigma`` grows
    without settling (its trace 813-2,175 by seed at K = 10 on 1,000 summaries) and fits disagree by seed
    (docs/critics/topics.md).  SVI with ``prior_step="gradient"`` fits ``mu, L`` by Adam, without the prior.

    ``init``: ``"random"`` (topics from a few seeded random documents, mixed with the corpus's word
    distribution) or ``"nmf"`` (:func:`_nmf_log_phi`: KL-NMF from NNDSVD, no randomness).  Seeded: the same
    ``seed`` gives the same fit; the global RNG is left as it was.
    """
    if method not in ("svi", "em"):
        raise ValueError(f"method must be 'svi' or 'em', got {method!r}")
    if init not in ("random", "nmf"):
        raise ValueError(f"init must be 'random' or 'nmf', got {init!r}")
    if prior_step not in ("gradient", "closed-form"):
        raise ValueError(f"prior_step must be 'gradient' or 'closed-form', got {prior_step!r}")
    n, k = len(bow), int(num_topics)
    if n == 0:
        raise ValueError("fit_ctm needs at least one document")
    if k < 2:
        raise ValueError(f"num_topics must be at least 2, got {num_topics}")
    if topic_concentration is not None and topic_concentration <= 0:
        raise ValueError(f"topic_concentration must be > 0, got {topic_concentration}")
    if not (math.isfinite(covariance_prior_weight) and covariance_prior_weight >= 0):
        raise ValueError(f"covariance_prior_weight must be a finite number >= 0, got {covariance_prior_weight}")
    if not (math.isfinite(covariance_prior_scale) and covariance_prior_scale > 0):
        raise ValueError(f"covariance_prior_scale must be a finite number > 0, got {covariance_prior_scale}")
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    if method == "em":
        return _fit_em(bow, k, iterations=steps, tol=tol, window=1 if window is None else window, seed=seed,
                       topic_concentration=topic_concentration, init=init, rng=rng, num_draws=int(em_draws),
                       infer_tol=em_infer_tol, infer_steps=int(em_infer_steps),
                       prior_weight=float(covariance_prior_weight), prior_scale=float(covariance_prior_scale),
                       device=device)
    window = 50 if window is None else window

    import pyro
    import pyro.distributions as dist
    from pyro.infer import Trace_ELBO

    b = min(int(batch_size), n)
    closed_prior = prior_step == "closed-form"

    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        eta = (_nmf_log_phi(bow, k) if init == "nmf" else _initial_log_phi(bow, k, rng)).to(device)
        eta = (eta + (0.0 if init == "nmf" else 0.01) * torch.randn(eta.shape, device=device)).requires_grad_()
        mu = torch.zeros(k, device=device, requires_grad=True)
        raw_l = _raw_from_scale_tril(torch.eye(k, device=device)).requires_grad_()
        loc = torch.zeros(n, k, device=device, requires_grad=True)
        log_scale = torch.full((n, k), math.log(0.5), device=device, requires_grad=True)

        def model(idx, batch):
            L = _scale_tril(raw_l)
            log_phi = torch.log_softmax(eta, dim=-1)
            if topic_concentration is not None and topic_concentration != 1.0:
                pyro.factor("phi_prior", (topic_concentration - 1.0) * log_phi.sum())
            with pyro.plate("docs", n, subsample=idx):
                z = pyro.sample("z", dist.MultivariateNormal(mu, scale_tril=L))
                pyro.factor("words", log_likelihood(z, log_phi.exp(), batch))

        def guide(idx, batch):
            with pyro.plate("docs", n, subsample=idx):
                m = F.embedding(idx, loc, sparse=True)
                s = F.embedding(idx, log_scale, sparse=True).exp()
                pyro.sample("z", dist.Normal(m, s).to_event(1))

        elbo = Trace_ELBO(num_particles=num_particles, vectorize_particles=num_particles > 1, max_plate_nesting=1)
        opt_global = torch.optim.Adam([eta] if closed_prior else [eta, mu, raw_l], lr=lr)
        opt_local = torch.optim.SparseAdam([loc, log_scale], lr=lr)
        passes_done = 0
        windows = _Windows(window, tol)
        trace: list[float] = []
        order = rng.permutation(n)
        pos, converged, step = 0, False, 0
        full = bow.batch(np.arange(n), representation).to(device) if b == n else None
        shown = progress.bar(int(steps), f"ctm: fitting K={k} on {n} documents", "step")
        for step in range(1, int(steps) + 1):
            if b == n:
                idx_np, batch = np.arange(n), full
            else:
                if pos + b > n:
                    order, pos = rng.permutation(n), 0
                idx_np, pos = np.sort(order[pos:pos + b]), pos + b
                batch = bow.batch(idx_np, representation).to(device)
            idx = torch.from_numpy(idx_np).to(device)
            opt_global.zero_grad()
            opt_local.zero_grad()
            loss = elbo.differentiable_loss(model, guide, idx, batch)
            loss.backward()
            opt_global.step()
            opt_local.step()
            value = -loss.item() / n
            if not math.isfinite(value):
                raise FloatingPointError(f"fit_ctm: the ELBO became {value} at step {step} (lower lr?)")
            trace.append(value)
            shown.update()
            if step % 50 == 0:
                shown.set_postfix(elbo_per_doc=f"{value:.2f}", refresh=False)
            done = windows.add(torch.tensor([value]))
            if done is not None and bool(done.all()):
                converged = True
                break
            if closed_prior and step * b // n > passes_done:             # a pass over the corpus: mu, Sigma
                passes_done = step * b // n
                with torch.no_grad():
                    new_mu, new_l = closed_form_prior(loc.detach(), (2 * log_scale.detach()).exp(),
                                                      prior_weight=covariance_prior_weight,
                                                      prior_scale=covariance_prior_scale)
                    mu.copy_(new_mu)
                    raw_l.copy_(_raw_from_scale_tril(new_l))
        shown.close()

    with torch.no_grad():
        globals_ = CTMGlobals(mu.detach().clone(), _scale_tril(raw_l).detach(), torch.log_softmax(eta, -1).detach())
        s = log_scale.detach().exp()
    return FitResult(globals_, loc.detach().clone(), s * s, trace, step, converged)


# --------------------------------------------------------------------------- inference for new documents


@dataclass
class LocalResult:
    """Posteriors of new documents: ``m, v (N, K)``, per document the step at which it stopped and
    whether it met the tolerance, and per batch the ELBO trace (mean per document, one value per step)."""

    m: torch.Tensor
    v: torch.Tensor
    steps: torch.Tensor
    converged: torch.Tensor
    elbo: torch.Tensor
    elbo_traces: list[list[float]] = field(default_factory=list)


_METHOD_DEFAULTS = {"adam": {"steps": 300, "tol": 1e-4}, "newton": {"steps": 100, "tol": 1e-5}}
"""Per method, the most steps (Adam steps, or Newton iterations) and the tolerance when none is given."""


def infer_local(globals_: CTMGlobals, bow: BagOfWords, *, method: str = "adam", steps: int | None = None,
                tol: float | None = None, lr: float = 0.05, num_samples: int = 4, num_draws: int = 24,
                batch_size: int = 512, window: int = 25, seed: int = 0, init_scale: float = 0.3,
                representation: str = "auto", warm_start: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> LocalResult:
    """Fit ``q(z_d) = N(m_d, diag v_d)`` to each document of ``bow`` with the globals frozen.

    Documents go ``batch_size`` at a time, ``m`` started at ``mu`` and ``log s`` at ``log init_scale`` (or,
    ``method="newton"`` only, at ``warm_start = (m, v)``, each ``(n, K)``: a warm start from an earlier fit, as
    variational EM's E-steps take), each document stopping on its own.  ``method``:

    * ``"adam"`` (the default here; the critic's is ``"newton"``): stochastic optimisation with
      ``num_samples`` fresh draws per step, Adam with ``lr`` (:func:`_infer_batch`); a document stops once its
      mean ELBO over a ``window`` of steps changes by less than ``tol`` (default ``1e-4``; ``0``: exactly
      ``steps`` steps, default 300) relative to the window before.
    * ``"newton"``: maximise each document's ELBO (:func:`local_elbo`) on ``num_draws`` (24) fixed
      standard-normal draws (:func:`_newton_batch`), a deterministic bound, by Newton steps on ``m`` and
      fixed-point steps on ``v``; a document stops, converged, when the step's predicted gain is at most
      ``tol`` (default ``1e-5``) times its bound, or after ``steps`` iterations (default 100).

    Computes on the globals' device, in their dtype.
    """
    if method not in _METHOD_DEFAULTS:
        raise ValueError(f"method must be 'newton' or 'adam', got {method!r}")
    if warm_start is not None and (method != "newton"
                                   or tuple(warm_start[0].shape) != (len(bow), globals_.num_topics)):
        raise ValueError(f"warm_start must be (m, v) of shape ({len(bow)}, {globals_.num_topics}), for method 'newton'")
    steps = _METHOD_DEFAULTS[method]["steps"] if steps is None else int(steps)
    tol = _METHOD_DEFAULTS[method]["tol"] if tol is None else float(tol)
    g = globals_.detach()
    device, dtype = g.mu.device, g.mu.dtype
    k, n = g.num_topics, len(bow)
    phi = g.log_phi.exp()
    out_m = torch.empty(n, k, dtype=dtype, device=device)
    out_v = torch.empty(n, k, dtype=dtype, device=device)
    out_steps = torch.zeros(n, dtype=torch.long)
    out_conv = torch.zeros(n, dtype=torch.bool)
    out_elbo = torch.empty(n, dtype=torch.float64)
    traces = []
    for start in range(0, n, max(int(batch_size), 1)):
        rows = np.arange(start, min(start + int(batch_size), n))
        if method == "newton":                                     # the words present, their columns gathered
            batch = bow.batch(rows, "sparse").to(device).with_columns(phi)
            warm = (None if warm_start is None
                    else (warm_start[0][rows].to(device, dtype), warm_start[1][rows].to(device, dtype)))
            res = _newton_batch(g, batch, len(rows), steps=steps, num_draws=num_draws, tol=tol, seed=seed,
                                init_scale=init_scale, start=warm)
        else:
            batch = bow.batch(rows, representation).to(device).with_columns(phi)
            if batch.dense is not None:
                batch.dense = batch.dense.to(dtype)
            res = _infer_batch(g, phi, batch, len(rows), steps=steps, lr=lr, num_samples=num_samples, tol=tol,
                               window=window, seed=seed, init_scale=init_scale)
        sl = slice(start, start + len(rows))
        out_m[sl], out_v[sl], out_steps[sl], out_conv[sl], out_elbo[sl] = res[:5]
        traces.append(res[5])
    return LocalResult(out_m, out_v, out_steps, out_conv, out_elbo, traces)


def _infer_batch(g: CTMGlobals, phi: torch.Tensor, batch: WordBatch, b: int, *, steps: int, lr: float,
                 num_samples: int, tol: float, window: int, seed: int, init_scale: float):
    """One batch of :func:`infer_local`.  Documents that stop are taken out of the optimisation (their
    rows of ``m``, ``log s``, Adam's moments and the counts are dropped), so a batch costs the sum of
    its documents' steps, not ``B`` times the slowest one's."""
    device, dtype, k = g.mu.device, g.mu.dtype, g.num_topics
    gen = torch.Generator().manual_seed(int(seed))    # drawn on the CPU: the same draws on every device
    prior = PriorTerms(g.mu, g.scale_tril)
    out_m = g.mu.expand(b, k).clone()
    out_log_s = torch.full((b, k), math.log(init_scale), dtype=dtype, device=device)
    stop_step = torch.full((b,), int(steps), dtype=torch.long)
    converged = torch.zeros(b, dtype=torch.bool)
    last = torch.zeros(b, dtype=torch.float64)
    active = torch.arange(b)                                       # batch rows still being optimised
    m, log_s = out_m.clone().requires_grad_(), out_log_s.clone().requires_grad_()
    opt = torch.optim.Adam([m, log_s], lr=lr)
    windows = _Windows(window, tol)
    trace: list[float] = []
    values = torch.zeros(b, dtype=torch.float64)
    for step in range(1, int(steps) + 1):
        eps = torch.randn((num_samples, 1, k), generator=gen, dtype=dtype).to(device)
        opt.zero_grad(set_to_none=True)
        per_doc = local_elbo(m, log_s, eps, prior, phi, batch)
        (-per_doc.sum()).backward()
        opt.step()
        values = per_doc.detach().to(torch.float64).cpu()
        trace.append(float(values.mean()))                         # mean over the documents still running
        done = windows.add(values)
        if done is None or not bool(done.any()):
            continue
        rows, here = active[done].to(device), done.to(device)
        out_m[rows], out_log_s[rows] = m.detach()[here], log_s.detach()[here]
        rows = rows.cpu()
        last[rows], stop_step[rows], converged[rows] = values[done], step, True
        keep = ~done
        if not bool(keep.any()):
            break
        active, values, windows.previous = active[keep], values[keep], windows.previous[keep]
        m, log_s, opt = _keep_rows(opt, m, log_s, keep.to(device), lr)
        batch = batch.rows(keep.to(device))
    if len(active) and not bool(converged[active].all()):          # ran out of steps
        out_m[active.to(device)], out_log_s[active.to(device)] = m.detach(), log_s.detach()
        last[active] = values
    s = out_log_s.exp()
    return out_m, s * s, stop_step, converged, last, trace


def _keep_rows(opt: torch.optim.Adam, m: torch.Tensor, log_s: torch.Tensor, keep: torch.Tensor, lr: float):
    """New ``m``, ``log s`` and Adam holding only the rows ``keep``, with the kept rows' moments and step."""
    new = [p.detach()[keep].clone().requires_grad_() for p in (m, log_s)]
    new_opt = torch.optim.Adam(new, lr=lr)
    for old_p, new_p in zip((m, log_s), new):
        state = opt.state[old_p]
        new_opt.state[new_p] = {name: (value[keep].clone() if name != "step" else value.clone())
                                for name, value in state.items()}
    return new[0], new[1], new_opt


_HALVINGS = 6
"""A Newton step is halved at most this many times looking for a higher bound (then the document stops)."""
_MAX_LOG_S_STEP = 1.0
"""The fixed-point step moves ``log s`` by at most this much per iteration."""
_ACTIVE_TOPICS = 24
"""The Newton system on ``m`` keeps the likelihood's full (Gauss-Newton) curvature on this many topics per
document (those whose curvature is largest against the prior's, :func:`_likelihood_curvature`), its diagonal
on the others; all of them when ``K`` is at most this.  24 of K = 100 on the benchmark: 16 and 32 did as well
to within the timing noise, 48 was slower (docs/critics/topics.md)."""
_PCG_STEPS = 1
"""Conjugate-gradient steps that add the other topics' diagonal curvature to the Newton step on ``m``
(:func:`_newton_steps`)."""
_COARSE_DRAWS = 0
"""A first stage of the Newton path on this many of its draws (:func:`_newton_batch`); 0: none (with 24 draws
a first stage on 8 gained nothing on the benchmark)."""
_COARSE_TOL = 1e-4
"""... to this tolerance (relative predicted gain)."""


def _fixed_draws(num_draws: int, k: int, seed: int, device, dtype) -> torch.Tensor:
    """``num_draws`` standard-normal draws ``(S, K)`` from ``seed`` in antithetic pairs ``(e, -e)`` (``S``
    rounded up to even), moment-matched (:func:`_matched`): their mean is exactly 0, so the bound's gradient
    in ``m`` carries no first-order Monte Carlo error, and every coordinate's mean square exactly 1.  Drawn on
    the CPU and moved to ``device``, so a seed gives the same draws, and the same scores, on every device."""
    gen = torch.Generator().manual_seed(int(seed))
    half = torch.randn(((int(num_draws) + 1) // 2, k), generator=gen, dtype=dtype).to(device)
    return _matched(torch.cat([half, -half]))


def _matched(eps: torch.Tensor) -> torch.Tensor:
    """Draws ``eps (S, K)`` (antithetic pairs) with each coordinate rescaled to mean square exactly 1.

    With ``S`` draws a coordinate's mean square is ``chi^2_S / S`` (sd ``sqrt(2/S)``: 0.35 at 16 draws),
    and the fixed-draw bound's variance term ``~ 1/2 sum_k h_k v_k mean_S(eps_k^2)`` is then off by that
    factor per topic: maximising it fits ``v_k`` too large where the draws are narrow and too small where
    they are wide, a systematic error in ``tr(Sigma^-1 diag v)`` and so in the Latent NLL (measured on the
    benchmark: median 0.09 nats at 64 plain draws, 0.25 at 32).  Rescaling removes it; the mean stays 0."""
    return eps * eps.pow(2).mean(0, keepdim=True).clamp_min(_TINY).rsqrt()


class _Prior:
    """The prior's pieces the Newton path uses: :class:`PriorTerms`, ``Sigma`` and ``Sigma^-1`` ``(K, K)``."""

    def __init__(self, g: CTMGlobals):
        self.terms = PriorTerms(g.mu, g.scale_tril)
        self.mu, self.precision_diag = g.mu, self.terms.precision_diag
        self.precision = self.terms.inv_l.T @ self.terms.inv_l
        self.sigma = g.scale_tril @ g.scale_tril.T


def _bound(m: torch.Tensor, log_s: torch.Tensor, eps: torch.Tensor, prior: _Prior,
           batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each document's ELBO on the fixed draws ``eps (S, K)`` ``(B,)`` -- :func:`local_elbo` on a sparse batch
    with its columns gathered, to rounding -- and its gradients in ``m`` and ``log s`` ``(B, K)``, in closed
    form: with ``theta_s = softmax(m + s eps_s)``, ``p_sw = theta_s . c_w`` and ``a_s = sum_w (n_w / p_sw) c_w``,
    ``d log p(x | z_s) / d z_s = theta_s (a_s - theta_s . a_s)``.  Two batched products over the words present
    (``(B, S, K) x (B, K, L)`` and back) per call; no autograd graph."""
    cols, counts = batch.columns, batch.counts                     # (B, L, K), (B, L)
    s = log_s.exp()
    theta = torch.softmax(m.unsqueeze(1) + s.unsqueeze(1) * eps, -1)  # (B, S, K)
    p = torch.bmm(theta, cols.transpose(1, 2)).clamp_min(_TINY)    # (B, S, L)
    loglik = torch.bmm(p.log(), counts.unsqueeze(-1)).squeeze(-1).mean(1)
    a = torch.bmm(counts.unsqueeze(1) / p, cols)                   # (B, S, K)
    grad_z = theta * (a - (theta * a).sum(-1, keepdim=True))
    resid = m - prior.mu
    v = s * s
    value = loglik - prior.terms.cross_entropy(m, v) + 0.5 * m.shape[-1] * (_LOG_2PI + 1) + log_s.sum(-1)
    grad_m = grad_z.mean(1) - resid @ prior.precision
    grad_log_s = (grad_z * eps).mean(1) * s - v * prior.precision_diag + 1
    return value, grad_m, grad_log_s


def _likelihood_curvature(m: torch.Tensor, prior: _Prior, batch: WordBatch
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Curvature of ``-log p(x_d | z)`` at ``z = m (B, K)``: ``(idx (B, A), J (B, A, A), h (B, K) or None)``.

    On each document's ``A = min(K, _ACTIVE_TOPICS)`` active topics ``idx`` the Gauss-Newton matrix
    ``J = sum_w n_dw g_w g_w^T``, with ``g_w = grad_z log p_w = r_w - theta``, ``r_w = theta c_w / p_w`` the
    word's topic responsibilities, ``p_w = theta . c_w``, ``c_w`` the column of ``phi`` of word ``w`` (the
    words present only), positive semi-definite.  The active topics are those with the largest ``u_k /
    Sigma^-1_kk``, ``u_k = t_k (1 - 2 theta_k) + N theta_k^2 >= J_kk`` (``t_k = sum_w n_w r_wk`` the words
    drawn to topic ``k``, ``N`` the document's length): one product over the words to choose them.

    On the other topics (``h``, zero on ``idx``; ``None`` when ``K <= A``) the diagonal of the exact
    ``-Hessian``, ``N theta_k (1 - theta_k) - t_k + sum_w n_w r_wk^2``, without its last term (small where
    few words are drawn to ``k``; it cost 10% of the speed for no measured gain): ``h_k = N theta_k (1 -
    theta_k) - t_k``, floored at 0.  Gauss-Newton alone misses it: on a topic with few of the document's
    words ``J_kk ~ N theta_k^2`` while ``h_k ~ N theta_k``, and with only the prior's curvature there the
    Newton step overshot along the inactive topics (measured: 2x too long, the full step refused in 60% of
    late iterations); with ``h`` the step gains ~90% of what the exact Newton step on the bound does."""
    theta = torch.softmax(m, -1)
    cols, counts = batch.columns, batch.counts
    b, k = m.shape
    p = torch.bmm(cols, theta.unsqueeze(-1)).squeeze(-1).clamp_min(_TINY)   # (B, L)
    drawn = theta * torch.bmm((counts / p).unsqueeze(1), cols).squeeze(1)              # t (B, K)
    length = counts.sum(-1, keepdim=True)
    excess = length * theta - drawn                                                    # q = N theta - t
    h = None
    if k <= _ACTIVE_TOPICS:
        idx = torch.arange(k, device=m.device).expand(b, k)
    else:
        upper = drawn * (1 - 2 * theta) + length * theta * theta
        idx = (upper / prior.precision_diag).topk(_ACTIVE_TOPICS, -1).indices
        h = (excess - length * theta * theta).clamp_min(0).scatter_(1, idx, 0.0)       # N theta (1 - theta) - t
        cols = cols.gather(2, idx.unsqueeze(1).expand(-1, cols.shape[1], -1))
    theta, excess = theta.gather(1, idx), excess.gather(1, idx)
    g = theta.unsqueeze(1) * (cols / p.unsqueeze(-1) - 1) * counts.sqrt().unsqueeze(-1)   # (B, L, A)
    return idx, g.transpose(1, 2) @ g + torch.diag_embed((excess * (1 - 2 * theta)).clamp_min(0)), h


def _newton_steps(m: torch.Tensor, grad_m: torch.Tensor, grad_log_s: torch.Tensor, prior: _Prior,
                  batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The proposed moves ``(dm, d log s)``, each ``(B, K)``.

    ``dm ~ C^-1 grad_m``, ``C = Sigma^-1 + E J E^T + diag(h)``: a Newton step on ``m`` with the bound's
    curvature taken at the mean, the likelihood's Gauss-Newton matrix on the active topics ``E`` and its
    diagonal elsewhere (:func:`_likelihood_curvature`).  No ``K x K`` matrix per document: ``M = Sigma^-1 +
    E J E^T`` is solved by Woodbury (with ``u = Sigma r``, ``a = E^T x`` solves ``(I + Sigma_AA J) a = u_A``,
    ``A x A``, non-singular as ``J`` is positive semi-definite, factored once, and ``x = u - Sigma E J a``),
    and ``C`` by ``_PCG_STEPS`` steps of conjugate gradients preconditioned by ``M`` from ``M^-1 grad_m``
    (``C p = M p + h p``, so a step costs one solve with ``M``; one step reaches ~98% of the exact solve's
    gain on the benchmark).  ``d log s``: the fixed point ``v_k = 1 / (Sigma^-1_kk - b_k)`` with ``b_k =
    mean_S[d_k log p(x|z) eps_k] / s_k`` (Stein's lemma: the draws' estimate of ``E_q[d^2_k log p(x|z)]``); as
    ``grad_log s_k = 1 - v_k (Sigma^-1_kk - b_k)`` it is ``-1/2 log(1 - grad_log s_k)``, moving ``log s`` by
    at most ``_MAX_LOG_S_STEP``."""
    idx, j, h = _likelihood_curvature(m, prior, batch)
    sigma_aa = prior.sigma[idx.unsqueeze(-1), idx.unsqueeze(1)]    # (B, A, A)
    eye = torch.eye(idx.shape[1], dtype=m.dtype, device=m.device)
    lu, pivots, info = torch.linalg.lu_factor_ex(eye + sigma_aa @ j)
    singular = (info > 0).unsqueeze(-1)

    def solve_m(r: torch.Tensor) -> torch.Tensor:                  # M^-1 r
        u = r @ prior.sigma
        a = torch.linalg.lu_solve(lu, pivots, u.gather(1, idx).unsqueeze(-1))
        ja = (j @ a).squeeze(-1)
        ja = torch.where(singular | ~torch.isfinite(ja), torch.zeros_like(ja), ja)  # rounding: prior only
        return u - torch.zeros_like(m).scatter_(1, idx, ja) @ prior.sigma

    dm = solve_m(grad_m)
    if h is not None and _PCG_STEPS > 0:                           # conjugate gradients on C, preconditioned by M
        r = -h * dm                                                # grad_m - C dm, as M dm = grad_m
        z = solve_m(r)
        p, mp, rz = z, r, (r * z).sum(-1, keepdim=True)
        for i in range(_PCG_STEPS):
            cp = mp + h * p
            pcp = (p * cp).sum(-1, keepdim=True)
            alpha = torch.where(pcp > 0, rz / pcp.clamp_min(_TINY), torch.zeros_like(pcp))
            dm = dm + alpha * p
            if i + 1 == _PCG_STEPS:
                break
            r = r - alpha * cp
            z = solve_m(r)
            rz_new = (r * z).sum(-1, keepdim=True)
            beta = torch.where(rz > 0, rz_new / rz.clamp_min(_TINY), torch.zeros_like(rz))
            p, mp, rz = z + beta * p, r + beta * mp, rz_new
    bound = math.exp(2 * _MAX_LOG_S_STEP)
    d_log_s = -0.5 * torch.log((1 - grad_log_s).clamp(1 / bound, bound))
    return dm, d_log_s


def _line_search(m, log_s, dm, d_log_s, value, eps, prior, batch, pending):
    """Per document of ``pending`` (a ``(B,)`` mask) the first of the steps ``1, 1/2, ..., 2^-_HALVINGS``
    along ``(dm, d log s)`` that does not lower its bound.  Returns the new ``m, log s``, bound and
    gradients (unchanged where no step was taken) and the mask ``moved`` (a step was taken)."""
    out_m, out_log_s, out_value = m.clone(), log_s.clone(), value.clone()
    out_gm, out_gs = torch.zeros_like(m), torch.zeros_like(m)
    moved = torch.zeros(len(m), dtype=torch.bool, device=m.device)
    pending = pending.clone()
    step = 1.0
    for _ in range(_HALVINGS + 1):
        if not bool(pending.any()):
            break
        sub = batch if bool(pending.all()) else batch.rows(pending)
        trial_m, trial_log_s = m[pending] + step * dm[pending], log_s[pending] + step * d_log_s[pending]
        trial, gm, gs = _bound(trial_m, trial_log_s, eps, prior, sub)
        ok = trial >= value[pending]                            # NaN compares False: never taken
        rows = pending.nonzero().squeeze(-1)[ok]
        out_m[rows], out_log_s[rows], out_value[rows] = trial_m[ok], trial_log_s[ok], trial[ok]
        out_gm[rows], out_gs[rows] = gm[ok], gs[ok]
        moved[rows], pending[rows] = True, False
        step /= 2
    return out_m, out_log_s, out_value, out_gm, out_gs, moved


def _newton_batch(g: CTMGlobals, batch: WordBatch, b: int, *, steps: int, num_draws: int, tol: float, seed: int,
                  init_scale: float, start: tuple[torch.Tensor, torch.Tensor] | None = None):
    """One batch of :func:`infer_local` by ``method="newton"``; ``batch`` sparse, its columns gathered.

    The objective is :func:`local_elbo` with its likelihood term on ``num_draws`` fixed draws
    (:func:`_fixed_draws`, the same for every document, iteration and batch): the same ELBO as the Adam
    path with its Monte Carlo draws frozen (common random numbers), so a deterministic function of
    ``m, log s`` whose change can be tested (:func:`_bound`).  :func:`_newton_stage` from ``m = mu``, ``log s =
    log init_scale`` on all ``num_draws`` to ``tol``.  With ``_COARSE_DRAWS`` set (by default 0: not), a first
    stage before it on that many of the draws (half of them antithetic to the others, moment-matched again), to
    tolerance ``_COARSE_TOL``, only to bring each document near its maximum (skipped when ``num_draws <=
    _COARSE_DRAWS``); the result maximises the ``num_draws`` bound either way.  Returns what
    :func:`_infer_batch` does; a document's steps are its iterations in both stages, its convergence the
    last stage's."""
    device, dtype, k = g.mu.device, g.mu.dtype, g.num_topics
    eps = _fixed_draws(num_draws, k, seed, device, dtype)
    prior = _Prior(g)
    if start is None:
        m = g.mu.expand(b, k).clone()
        log_s = torch.full((b, k), math.log(init_scale), dtype=dtype, device=device)
    else:  # a warm start (m, v)
        m, log_s = start[0].clone(), 0.5 * start[1].log()
    used = torch.zeros(b, dtype=torch.long)
    trace: list[float] = []
    if 2 <= _COARSE_DRAWS < len(eps):
        half, pairs = len(eps) // 2, _COARSE_DRAWS // 2
        coarse = _matched(torch.cat([eps[:pairs], eps[half:half + pairs]]))
        m, log_s, used, _, _, trace = _newton_stage(m, log_s, coarse, prior, batch, steps=steps,
                                                    tol=max(tol, _COARSE_TOL))
    m, log_s, stop_step, converged, last, fine = _newton_stage(m, log_s, eps, prior, batch, steps=steps, tol=tol)
    s = log_s.exp()
    return m, s * s, used + stop_step, converged, last, trace + fine


def _newton_stage(m: torch.Tensor, log_s: torch.Tensor, eps: torch.Tensor, prior: _Prior, batch: WordBatch, *,
                  steps: int, tol: float):
    """Maximise each document's bound on the draws ``eps`` from ``m, log s (B, K)``.  Each iteration proposes
    a Newton step on ``m`` and a fixed-point step on ``v`` (:func:`_newton_steps`) and backtracks until the
    bound does not fall (:func:`_line_search`).  A document stops, converged, before a step whose predicted
    gain (the Newton decrement of the quadratic model, ``1/2 g_m . dm`` plus ``1/4 |g_log s|^2`` for
    curvature ``-2`` in ``log s``) is at most ``tol |F|``; unconverged when no step raises its bound or
    after ``steps`` iterations.  Stopped documents leave the batch (converged ones before the line search, so
    that its first trial takes every row without copying the batch).  Returns ``m, log s``, per document
    the iteration at which it stopped, whether it converged and its bound, and the trace (mean bound of
    the documents still running, per iteration)."""
    b = len(m)
    out_m, out_log_s = m.clone(), log_s.clone()
    stop_step = torch.full((b,), int(steps), dtype=torch.long)
    converged = torch.zeros(b, dtype=torch.bool)
    last = torch.zeros(b, dtype=torch.float64)
    active = torch.arange(b)                                       # batch rows still being optimised
    device = m.device
    value, grad_m, grad_log_s = _bound(m, log_s, eps, prior, batch)
    trace: list[float] = []
    for step in range(1, int(steps) + 1):
        dm, d_log_s = _newton_steps(m, grad_m, grad_log_s, prior, batch)
        gain = 0.5 * (grad_m * dm).sum(-1) + 0.25 * grad_log_s.pow(2).sum(-1)
        done = gain <= tol * value.abs()
        running, total = len(m), float(value[done].double().sum())  # the trace: mean over the documents running
        if bool(done.any()):                                       # converged: they leave before the line search
            rows = active[done.cpu()]
            out_m[rows.to(device)], out_log_s[rows.to(device)] = m[done], log_s[done]
            last[rows], stop_step[rows], converged[rows] = value[done].double().cpu(), step, True
            keep = ~done
            if not bool(keep.any()):
                trace.append(total / running)
                break
            active, m, log_s, value, grad_m, grad_log_s, dm, d_log_s = (
                t[keep.to(t.device)] for t in (active, m, log_s, value, grad_m, grad_log_s, dm, d_log_s))
            batch = batch.rows(keep)
        everyone = torch.ones(len(m), dtype=torch.bool, device=device)
        m, log_s, value, grad_m, grad_log_s, moved = _line_search(m, log_s, dm, d_log_s, value, eps, prior, batch,
                                                                  everyone)
        trace.append((total + float(value.double().sum())) / running)
        stop = ~moved if step < steps else everyone
        if not bool(stop.any()):
            continue
        rows = active[stop.cpu()]
        out_m[rows.to(device)], out_log_s[rows.to(device)] = m[stop], log_s[stop]
        last[rows], stop_step[rows] = value[stop].double().cpu(), step
        keep = ~stop
        if not bool(keep.any()):
            break
        active, m, log_s, value, grad_m, grad_log_s = (t[keep.to(t.device)] for t in
                                                       (active, m, log_s, value, grad_m, grad_log_s))
        batch = batch.rows(keep)
    return out_m, out_log_s, stop_step, converged, last, trace


# --------------------------------------------------------------------------- simulation


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
