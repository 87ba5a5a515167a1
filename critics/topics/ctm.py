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

Fitting (:func:`fit_ctm`): stochastic variational inference with Pyro's
``Trace_ELBO`` (its ``differentiable_loss``, on our own tensors: nothing goes
into Pyro's global parameter store), a diagonal Gaussian guide
``q(z_d) = N(m_d, diag v_d)`` per document, documents subsampled by
``pyro.plate(..., subsample=idx)`` (the ELBO is scaled by ``N / B``).  The
per-document parameters are rows of ``(N, K)`` tables read through a sparse
embedding lookup and updated by ``SparseAdam`` (lazy Adam: only the rows of the
minibatch move); the globals by ``Adam``.  Stop after ``steps`` steps or when
the mean ELBO of the last ``window`` steps changes by less than ``tol``
(relative) from the window before.

Inference for new documents (:func:`infer_local`): the globals are frozen and
only ``m, log s`` of a batch of documents are fitted, many documents at once, to

    ELBO_d = E_q[log p(x_d | z)] - H(q_d, N(mu, Sigma)) + H(q_d)

with the two Gaussian terms in closed form and the likelihood term by Monte Carlo over
standard-normal draws shared by all documents (common random numbers); every batch starts from the
same seed, so a document's ``m, v`` do not depend on which other documents share its batch: fitting
documents one at a time gives the same numbers (the benchmark checks it).  Each document stops on
its own and leaves the batch.  Two methods:

* ``adam`` (default): ``num_samples`` fresh draws per step and Adam, up to 300 steps, a document
  stopped when its mean ELBO over a window of steps changes by less than ``tol`` relative; the noisy
  estimates often fail the test, and the iterate keeps Adam's jitter.
* ``newton``: the draws are ``num_draws`` (64) fixed ones in antithetic pairs, the same at every
  iteration, so the ELBO is a deterministic function of ``m, log s`` (the same estimator with its
  draws frozen).  An iteration takes a Newton step on ``m`` with the curvature ``Sigma^-1 + J(m)``
  (``J`` the likelihood's Gauss-Newton matrix at the mean, kept on the 48 topics where it is largest
  against the prior's, solved without a ``K x K`` matrix per document) and a fixed-point step
  ``v_k = 1 / (Sigma^-1_kk - E[d^2_k log p])`` (Stein's lemma on the draws), halved until the bound
  does not fall.  Bound and gradients are computed in closed form over the words present only.  A
  document has converged when the step's predicted gain (Newton decrement ``1/2 g_m^T dm + 1/4
  |g_log s|^2``) is at most ``tol`` (1e-5) times its bound; it then stops within about ``tol |bound|`` of
  the maximum.  Two stages: first on 8 of the draws (to ``1e-4``), then from there on all 64; the result
  maximises the 64-draw bound.  On the benchmark 1.4-1.7x ``adam``'s documents/s, short of the 3x goal.

Fixing the draws changes which bound is maximised, not the model: with 64 draws the posterior means
and Latent NLLs differ from Adam's, in median, as much as two Adam runs with different seeds differ
from each other; the largest differences are larger (docs/critics/topics.md).

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

__all__ = ["BagOfWords", "WordBatch", "CTMGlobals", "FitResult", "LocalResult", "fit_ctm", "infer_local",
           "log_likelihood", "local_elbo", "PriorTerms", "sample_documents", "centre"]

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


def fit_ctm(bow: BagOfWords, num_topics: int, *, steps: int = 2000, batch_size: int = 256, lr: float = 0.05,
            num_particles: int = 1, tol: float = 1e-5, window: int = 50, seed: int = 0,
            topic_concentration: float | None = None, representation: str = "auto",
            device: str | torch.device = "cpu") -> FitResult:
    """Fit the CTM to ``bow`` by SVI (Pyro ``Trace_ELBO``); see the module docstring.

    ``batch_size`` documents per step (``pyro.plate`` subsampling; the whole corpus when it is
    smaller), ``num_particles`` vectorised ELBO particles, Adam / SparseAdam with ``lr``.  Seeded:
    the same ``seed`` gives the same fit; the global RNG is left as it was.
    """
    import pyro
    import pyro.distributions as dist
    from pyro.infer import Trace_ELBO

    n, k = len(bow), int(num_topics)
    if n == 0:
        raise ValueError("fit_ctm needs at least one document")
    if k < 2:
        raise ValueError(f"num_topics must be at least 2, got {num_topics}")
    if topic_concentration is not None and topic_concentration <= 0:
        raise ValueError(f"topic_concentration must be > 0, got {topic_concentration}")
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    b = min(int(batch_size), n)

    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        eta = _initial_log_phi(bow, k, rng).to(device)
        eta = (eta + 0.01 * torch.randn(eta.shape, device=device)).requires_grad_()
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
        opt_global = torch.optim.Adam([eta, mu, raw_l], lr=lr)
        opt_local = torch.optim.SparseAdam([loc, log_scale], lr=lr)
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
                tol: float | None = None, lr: float = 0.05, num_samples: int = 4, num_draws: int = 64,
                batch_size: int = 512, window: int = 25, seed: int = 0, init_scale: float = 0.3,
                representation: str = "auto") -> LocalResult:
    """Fit ``q(z_d) = N(m_d, diag v_d)`` to each document of ``bow`` with the globals frozen.

    Documents go ``batch_size`` at a time, ``m`` started at ``mu`` and ``log s`` at ``log init_scale``,
    each document stopping on its own.  ``method``:

    * ``"adam"`` (default): stochastic optimisation with ``num_samples`` fresh draws per step, Adam with
      ``lr`` (:func:`_infer_batch`); a document stops once its mean ELBO over a ``window`` of steps changes
      by less than ``tol`` (default ``1e-4``; ``0``: exactly ``steps`` steps, default 300) relative to the
      window before.
    * ``"newton"``: maximise each document's ELBO (:func:`local_elbo`) on ``num_draws`` fixed
      standard-normal draws (:func:`_newton_batch`), a deterministic bound, by Newton steps on ``m`` and
      fixed-point steps on ``v``; a document stops, converged, when the step's predicted gain is at most
      ``tol`` (default ``1e-5``) times its bound, or after ``steps`` iterations (default 100).

    Computes on the globals' device, in their dtype.
    """
    if method not in _METHOD_DEFAULTS:
        raise ValueError(f"method must be 'newton' or 'adam', got {method!r}")
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
            res = _newton_batch(g, batch, len(rows), steps=steps, num_draws=num_draws, tol=tol, seed=seed,
                                init_scale=init_scale)
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
    gen = torch.Generator(device=device).manual_seed(int(seed))
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
        eps = torch.randn((num_samples, 1, k), generator=gen, device=device, dtype=dtype)
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
_ACTIVE_TOPICS = 48
"""The Newton system on ``m`` keeps the likelihood's curvature on this many topics per document (those whose
curvature is largest against the prior's, :func:`_likelihood_curvature`); all of them when ``K`` is at most this."""
_COARSE_DRAWS = 8
"""The first stage of the Newton path maximises the bound on this many of its draws (:func:`_newton_batch`)."""
_COARSE_TOL = 1e-4
"""... to this tolerance (relative predicted gain)."""


def _fixed_draws(num_draws: int, k: int, seed: int, device, dtype) -> torch.Tensor:
    """``num_draws`` standard-normal draws ``(S, K)`` from ``seed`` in antithetic pairs ``(e, -e)`` (``S``
    rounded up to even): their mean is exactly 0, so the bound's gradient in ``m`` carries no first-order
    Monte Carlo error."""
    gen = torch.Generator(device=device).manual_seed(int(seed))
    half = torch.randn(((int(num_draws) + 1) // 2, k), generator=gen, device=device, dtype=dtype)
    return torch.cat([half, -half])


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


def _likelihood_curvature(m: torch.Tensor, prior: _Prior, batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Newton curvature of ``log p(x_d | z)`` at ``z = m (B, K)`` on each document's active topics:
    ``(idx (B, A), J (B, A, A))``.  In full ``J = sum_w n_dw g_w g_w^T`` with ``g_w = grad_z log p_w =
    r_w - theta``, ``r_w = theta c_w / p_w`` the word's topic responsibilities, ``p_w = theta . c_w``, ``c_w``
    the column of ``phi`` of word ``w`` (the words present only): ``-Hessian`` without the terms in the word
    probabilities' own second derivatives, positive semi-definite.  Its rows are kept for the
    ``A = min(K, _ACTIVE_TOPICS)`` topics with the largest ``u_k / Sigma^-1_kk``, ``u_k = t_k (1 - 2 theta_k)
    + N theta_k^2 >= J_kk`` (``t_k = sum_w n_w r_wk`` the words drawn to topic ``k``, ``N`` the document's
    length): one product over the words to choose them.  The other topics' curvature is small against the
    prior's (few words drawn to them and ``theta_k`` small), and dropping it only lengthens the Newton
    step along them; the line search guards the step."""
    theta = torch.softmax(m, -1)
    cols, counts = batch.columns, batch.counts
    b, k = m.shape
    p = torch.bmm(cols, theta.unsqueeze(-1)).squeeze(-1).clamp_min(_TINY)   # (B, L)
    if k <= _ACTIVE_TOPICS:
        idx = torch.arange(k, device=m.device).expand(b, k)
    else:
        drawn = theta * torch.bmm((counts / p).unsqueeze(1), cols).squeeze(1)          # t (B, K)
        upper = drawn * (1 - 2 * theta) + counts.sum(-1, keepdim=True) * theta * theta
        idx = (upper / prior.precision_diag).topk(_ACTIVE_TOPICS, -1).indices
        cols, theta = cols.gather(2, idx.unsqueeze(1).expand(-1, cols.shape[1], -1)), theta.gather(1, idx)
    g = theta.unsqueeze(1) * (cols / p.unsqueeze(-1) - 1) * counts.sqrt().unsqueeze(-1)   # (B, L, A)
    return idx, g.transpose(1, 2) @ g


def _newton_steps(m: torch.Tensor, grad_m: torch.Tensor, grad_log_s: torch.Tensor, prior: _Prior,
                  batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The proposed moves ``(dm, d log s)``, each ``(B, K)``.

    ``dm = (Sigma^-1 + E J E^T)^-1 grad_m``: a Newton step on ``m`` with the bound's curvature taken at the
    mean, the likelihood's on the active topics ``E`` (:func:`_likelihood_curvature`).  No ``K x K`` matrix per
    document: with ``u = Sigma grad_m``, ``a = E^T dm`` solves ``(I + Sigma_AA J) a = u_A`` (``A x A``,
    non-singular as ``J`` is positive semi-definite) and ``dm = u - Sigma E J a``.  ``d log s``: the fixed
    point ``v_k = 1 / (Sigma^-1_kk - b_k)`` with ``b_k = mean_S[d_k log p(x|z) eps_k] / s_k`` (Stein's lemma:
    the draws' estimate of ``E_q[d^2_k log p(x|z)]``); as ``grad_log s_k = 1 - v_k (Sigma^-1_kk - b_k)`` it is
    ``-1/2 log(1 - grad_log s_k)``, moving ``log s`` by at most ``_MAX_LOG_S_STEP``."""
    idx, j = _likelihood_curvature(m, prior, batch)
    u = grad_m @ prior.sigma
    sigma_aa = prior.sigma[idx.unsqueeze(-1), idx.unsqueeze(1)]    # (B, A, A)
    eye = torch.eye(idx.shape[1], dtype=m.dtype, device=m.device)
    a, info = torch.linalg.solve_ex(eye + sigma_aa @ j, u.gather(1, idx).unsqueeze(-1))
    ja = (j @ a).squeeze(-1)
    ja = torch.where((info > 0).unsqueeze(-1) | ~torch.isfinite(ja), torch.zeros_like(ja), ja)  # rounding: prior only
    dm = u - torch.zeros_like(m).scatter_(1, idx, ja) @ prior.sigma
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
                  init_scale: float):
    """One batch of :func:`infer_local` by ``method="newton"``; ``batch`` sparse, its columns gathered.

    The objective is :func:`local_elbo` with its likelihood term on ``num_draws`` fixed draws
    (:func:`_fixed_draws`, the same for every document, iteration and batch): the same ELBO as the Adam
    path with its Monte Carlo draws frozen (common random numbers), so a deterministic function of
    ``m, log s`` whose change can be tested (:func:`_bound`).  Two stages of :func:`_newton_stage`, from
    ``m = mu``, ``log s = log init_scale``: first on the first ``_COARSE_DRAWS`` of those draws (half of
    them antithetic to the others), to tolerance ``_COARSE_TOL``, at a fraction of the cost; then, from
    there, on all ``num_draws`` to ``tol``.  The result maximises the ``num_draws`` bound; the first stage
    only brings each document near its maximum (skipped when ``num_draws <= _COARSE_DRAWS``).  Returns what
    :func:`_infer_batch` does; a document's steps are its iterations in both stages, its convergence
    the second stage's."""
    device, dtype, k = g.mu.device, g.mu.dtype, g.num_topics
    eps = _fixed_draws(num_draws, k, seed, device, dtype)
    prior = _Prior(g)
    m = g.mu.expand(b, k).clone()
    log_s = torch.full((b, k), math.log(init_scale), dtype=dtype, device=device)
    used = torch.zeros(b, dtype=torch.long)
    trace: list[float] = []
    if len(eps) > _COARSE_DRAWS:
        half, pairs = len(eps) // 2, _COARSE_DRAWS // 2
        coarse = torch.cat([eps[:pairs], eps[half:half + pairs]])
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
    after ``steps`` iterations.  Stopped documents leave the batch.  Returns ``m, log s``, per document
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
        m, log_s, value, grad_m, grad_log_s, moved = _line_search(m, log_s, dm, d_log_s, value, eps, prior, batch,
                                                                  ~done)
        stop = (done | ~moved) if step < steps else torch.ones_like(done)
        trace.append(float(value.double().mean()))                 # mean over the documents still running
        if not bool(stop.any()):
            continue
        rows = active[stop.cpu()]
        out_m[rows.to(device)], out_log_s[rows.to(device)] = m[stop], log_s[stop]
        last[rows], stop_step[rows], converged[rows] = value[stop].double().cpu(), step, done[stop].cpu()
        keep = ~stop
        if not bool(keep.any()):
            break
        active, m, log_s, value, grad_m, grad_log_s = (t[keep.to(t.device)] for t in
                                                       (active, m, log_s, value, grad_m, grad_log_s))
        batch = batch.rows(keep)
    return out_m, out_log_s, stop_step, converged, last, trace


# --------------------------------------------------------------------------- simulation


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
