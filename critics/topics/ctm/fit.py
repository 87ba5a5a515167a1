"""Fitting a CTM (:func:`fit_ctm`): variational EM from KL-NMF topics with closed-form prior updates, or SVI with
Pyro's ``Trace_ELBO``; see :mod:`critics.topics.ctm`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from critic import progress

from ..nmf import nmf_topics
from .infer import infer_local
from .model import CTMGlobals, _Windows, log_likelihood
from .words import _PHI_FLOOR, _TINY, BagOfWords

__all__ = ["FitResult", "fit_ctm", "closed_form_prior", "covariance_log_prior", "gauge_fixed_prior"]


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
               topic_concentration: float | None, batch_size: int = 64) -> torch.Tensor:
    """The M-step for the topics, ``log phi (K, V)``: with ``z_ds = m_d + s_d eps_s`` on the draws ``eps (S, K)``,
    ``theta_ds = softmax(z_ds)``, each word's topic responsibilities ``r_dwk = mean_s theta_dsk phi_kw /
    (theta_ds . phi_w)`` at the current ``phi``, and ``phi_kw`` proportional to ``sum_d n_dw r_dwk`` (plus
    ``beta - 1`` with a Dirichlet(``beta``) on each topic, floored at 0).  A minorise-maximise step (Jensen on
    ``log theta . phi_w`` per draw), so it does not lower ``E_q[log p(x | z)]`` on those draws."""
    k, vocab = phi.shape
    expected = torch.zeros(k, vocab, dtype=torch.float64, device=phi.device)
    s = v.sqrt()
    for rows in bow.batches(batch_size):                                      # similar widths together
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


