"""The CTM's pieces: its globals (:class:`CTMGlobals`), a document's log-likelihood under them, the Gaussian prior's
terms (:class:`PriorTerms`), the local ELBO, and centring (softmax sees ``z`` only up to a shift along ``1``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .words import _LOG_2PI, _PHI_FLOOR, _TINY, WordBatch

__all__ = ["CTMGlobals", "PriorTerms", "log_likelihood", "local_elbo", "centre"]


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
