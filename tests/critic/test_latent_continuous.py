"""Exact cross-entropies of the topic critics' continuous latents.

Diagonal Gaussian and full Gaussian posteriors under a full Gaussian prior (CTM, paper sec. 6),
Dirichlet under Dirichlet (LDA code-mixing, app. C), and the variational-mean point mass (the
authors' CTM scoring).  Each closed form is checked against Monte Carlo (torch and scipy densities,
within 3 standard errors), against scipy's entropies plus an independently written KL, and against
high-precision mpmath at extreme parameters.
"""

import math

import mpmath
import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st
import torch
from torch.distributions import Dirichlet, Gamma, Independent, MultivariateNormal, Normal

from critic.latent import (
    PointMass,
    _lookup,
    cross_entropy,
    diagonal_normal_mvn_cross_entropy,
    dirichlet_cross_entropy,
    monte_carlo_cross_entropy,
    mvn_cross_entropy,
)

B = 4
SIZES = (2, 5, 20)
S = 40_000


# --------------------------------------------------------------------------- random parameters


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def random_prior(k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated covariance from random factors: Sigma = F F^T / k + 0.05 I."""
    g = _gen(seed)
    factors = torch.randn(k, k, generator=g, dtype=torch.float64)
    cov = factors @ factors.T / k + 0.05 * torch.eye(k, dtype=torch.float64)
    mu = torch.randn(k, generator=g, dtype=torch.float64)
    return mu, cov


def random_diag_posterior(k: int, seed: int, b: int = B) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed + 1000)
    m = torch.randn(b, k, generator=g, dtype=torch.float64)
    s = (0.5 * torch.randn(b, k, generator=g, dtype=torch.float64)).exp() * 0.6
    return m, s


def random_full_posterior(k: int, seed: int, b: int = B) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed + 2000)
    m = torch.randn(b, k, generator=g, dtype=torch.float64)
    f = torch.randn(b, k, k, generator=g, dtype=torch.float64)
    cov = f @ f.transpose(-1, -2) / k + 0.1 * torch.eye(k, dtype=torch.float64)
    return m, cov


def random_concentrations(shape, seed: int, low: float, high: float) -> torch.Tensor:
    g = _gen(seed + 3000)
    return low + (high - low) * torch.rand(*shape, generator=g, dtype=torch.float64)


def diag_pair(k: int, seed: int):
    mu, cov = random_prior(k, seed)
    m, s = random_diag_posterior(k, seed)
    return Independent(Normal(m, s), 1), MultivariateNormal(mu, covariance_matrix=cov)


def full_pair(k: int, seed: int):
    mu, cov = random_prior(k, seed)
    m, qcov = random_full_posterior(k, seed)
    return MultivariateNormal(m, covariance_matrix=qcov), MultivariateNormal(mu, covariance_matrix=cov)


DIRICHLET_RANGES = {"below_one": (0.15, 0.95), "above_one": (1.2, 9.0), "mixed": (0.2, 4.0)}


def dirichlet_pair(k: int, seed: int, regime: str):
    low, high = DIRICHLET_RANGES[regime]
    gamma = random_concentrations((B, k), seed, low, high)
    alpha = random_concentrations((k,), seed + 7, low, high)
    return Dirichlet(gamma), Dirichlet(alpha)


# --------------------------------------------------------------------------- independent references (numpy / scipy)


def np_gaussian_kl(mq, cq, mp, cp) -> float:
    """KL(N(mq, cq) || N(mp, cp)), written out with numpy."""
    k = len(mq)
    solve = np.linalg.solve(cp, cq)
    d = mp - mq
    _, logdet_p = np.linalg.slogdet(cp)
    _, logdet_q = np.linalg.slogdet(cq)
    return 0.5 * (np.trace(solve) + d @ np.linalg.solve(cp, d) - k + logdet_p - logdet_q)


def np_dirichlet_kl(g, a) -> float:
    """KL(Dir(g) || Dir(a)) with scipy.special."""
    g0, a0 = g.sum(), a.sum()
    return (sp.gammaln(g0) - sp.gammaln(g).sum() - sp.gammaln(a0) + sp.gammaln(a).sum()
            + ((g - a) * (sp.digamma(g) - sp.digamma(g0))).sum())


def within_3se(exact, samples_log_p):
    """``-mean log p`` of the samples (axis 0) is within 3 standard errors of ``exact``."""
    samples_log_p = np.asarray(samples_log_p, dtype=np.float64)
    est = -samples_log_p.mean(0)
    se = samples_log_p.std(0, ddof=1) / math.sqrt(samples_log_p.shape[0])
    exact = np.asarray(exact, dtype=np.float64)
    assert np.all(se > 0)
    assert np.all(np.abs(exact - est) <= 3 * se), (exact, est, se)


# --------------------------------------------------------------------------- dispatch


def test_lookup_picks_the_closed_forms_and_cross_entropy_returns_them():
    assert _lookup(Independent, MultivariateNormal) is diagonal_normal_mvn_cross_entropy
    assert _lookup(MultivariateNormal, MultivariateNormal) is mvn_cross_entropy
    assert _lookup(Dirichlet, Dirichlet) is dirichlet_cross_entropy
    for q, p, fn in [(*diag_pair(5, 0), diagonal_normal_mvn_cross_entropy),
                     (*full_pair(5, 0), mvn_cross_entropy),
                     (*dirichlet_pair(5, 0, "mixed"), dirichlet_cross_entropy)]:
        assert torch.equal(cross_entropy(q, p), fn(q, p))


def test_diagonal_gaussian_under_mvn_had_no_fallback():
    """torch has no KL(Independent || MultivariateNormal): without the registration this pair was Monte Carlo.
    (Checked in a fresh interpreter: importing Pyro, as the CTM tests do, registers one in torch's table.)"""
    import subprocess
    import sys

    probe = ("import torch\nfrom torch.distributions import Independent, MultivariateNormal, Normal, kl_divergence\n"
             "q = Independent(Normal(torch.zeros(3), torch.ones(3)), 1)\n"
             "p = MultivariateNormal(torch.zeros(3), torch.eye(3))\n"
             "try:\n    kl_divergence(q, p)\nexcept NotImplementedError:\n    print('no KL')\n")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout == "no KL\n"
    q, p = diag_pair(3, 1)
    assert cross_entropy(q, p).shape == (B,)


def test_other_independent_falls_through_to_not_implemented():
    """An Independent that is not a diagonal Normal matches the registered types but not the formula."""
    p = MultivariateNormal(torch.zeros(3, dtype=torch.float64), torch.eye(3, dtype=torch.float64))
    gamma_q = Independent(Gamma(torch.ones(B, 3, dtype=torch.float64), torch.ones(B, 3, dtype=torch.float64)), 1)
    with pytest.raises(NotImplementedError, match="monte_carlo_cross_entropy"):
        cross_entropy(gamma_q, p)
    with pytest.raises(NotImplementedError):
        diagonal_normal_mvn_cross_entropy(gamma_q, p)
    # Normal base, but two dimensions reinterpreted: an event of shape (B, 3), not (3,)
    q2 = Independent(Normal(torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)), 2)
    with pytest.raises(NotImplementedError):
        diagonal_normal_mvn_cross_entropy(q2, p)


def test_diagonal_independent_under_diagonal_independent_still_uses_torch():
    """The registration does not capture Independent x Independent: torch's exact H + KL remains."""
    m, s = random_diag_posterior(4, 2)
    q = Independent(Normal(m, s), 1)
    p = Independent(Normal(torch.zeros(4, dtype=torch.float64), torch.full((4,), 2.0, dtype=torch.float64)), 1)
    want = (0.5 * math.log(2 * math.pi * 4.0) + (m ** 2 + s ** 2) / 8.0).sum(-1)
    torch.testing.assert_close(cross_entropy(q, p), want, rtol=1e-13, atol=0)


# --------------------------------------------------------------------------- Monte Carlo agreement


@pytest.mark.parametrize("k", SIZES)
def test_diagonal_gaussian_agrees_with_monte_carlo(k):
    q, p = diag_pair(k, 10 + k)
    exact = cross_entropy(q, p)
    assert exact.shape == (B,) and exact.dtype == torch.float64
    mc, se = monte_carlo_cross_entropy(q, p, num_samples=S, seed=k)
    assert torch.all((exact - mc).abs() <= 3 * se), (exact, mc, se)
    # direct: reparameterised draws, log-density written out with the covariance inverse
    g = np.random.default_rng(100 + k)
    m, s = q.base_dist.loc.numpy(), q.base_dist.scale.numpy()
    mu, cov = p.loc.numpy(), p.covariance_matrix.numpy()
    z = m + s * g.standard_normal((S, B, k))
    d = z - mu
    prec = np.linalg.inv(cov)
    log_p = -0.5 * (k * math.log(2 * math.pi) + np.linalg.slogdet(cov)[1] + np.einsum("sbi,ij,sbj->sb", d, prec, d))
    within_3se(exact.numpy(), log_p)
    # scipy's density
    log_p_scipy = st.multivariate_normal(mean=mu, cov=cov).logpdf(z.reshape(-1, k)).reshape(S, B)
    np.testing.assert_allclose(log_p_scipy, log_p, rtol=1e-9)
    within_3se(exact.numpy(), log_p_scipy)


@pytest.mark.parametrize("k", SIZES)
def test_full_gaussian_agrees_with_monte_carlo(k):
    q, p = full_pair(k, 20 + k)
    exact = cross_entropy(q, p)
    assert exact.shape == (B,)
    mc, se = monte_carlo_cross_entropy(q, p, num_samples=S, seed=k)
    assert torch.all((exact - mc).abs() <= 3 * se), (exact, mc, se)
    g = np.random.default_rng(200 + k)
    rv = st.multivariate_normal(mean=p.loc.numpy(), cov=p.covariance_matrix.numpy())
    log_p = np.stack([rv.logpdf(g.multivariate_normal(q.loc[b].numpy(), q.covariance_matrix[b].numpy(), size=S))
                      for b in range(B)], axis=1)
    within_3se(exact.numpy(), log_p)


@pytest.mark.parametrize("regime", sorted(DIRICHLET_RANGES))
@pytest.mark.parametrize("k", SIZES)
def test_dirichlet_agrees_with_monte_carlo(k, regime):
    q, p = dirichlet_pair(k, 30 + k, regime)
    exact = cross_entropy(q, p)
    assert exact.shape == (B,) and exact.dtype == torch.float64
    mc, se = monte_carlo_cross_entropy(q, p, num_samples=S, seed=k)
    assert torch.all((exact - mc).abs() <= 3 * se), (exact, mc, se)
    # scipy's density on numpy's draws; and the density written out
    g = np.random.default_rng(300 + k)
    gamma, alpha = q.concentration.numpy(), p.concentration.numpy()
    z = np.stack([g.dirichlet(gamma[b], size=S) for b in range(B)], axis=1)  # (S, B, K)
    log_p = np.stack([st.dirichlet.logpdf(z[:, b].T, alpha) for b in range(B)], axis=1)
    within_3se(exact.numpy(), log_p)
    direct = sp.gammaln(alpha.sum()) - sp.gammaln(alpha).sum() + ((alpha - 1) * np.log(z)).sum(-1)
    np.testing.assert_allclose(direct, log_p, rtol=1e-9)


# --------------------------------------------------------------------------- exact identities: H(q, p) = H(q) + KL(q || p)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", SIZES)
def test_diagonal_gaussian_is_scipy_entropy_plus_kl(k, seed):
    q, p = diag_pair(k, seed)
    exact = cross_entropy(q, p).numpy()
    mu, cov = p.loc.numpy(), p.covariance_matrix.numpy()
    for b in range(B):
        m, v = q.base_dist.loc[b].numpy(), q.base_dist.scale[b].numpy() ** 2
        want = st.multivariate_normal(mean=m, cov=np.diag(v)).entropy() + np_gaussian_kl(m, np.diag(v), mu, cov)
        assert exact[b] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", SIZES)
def test_full_gaussian_is_scipy_entropy_plus_kl(k, seed):
    q, p = full_pair(k, seed)
    exact = cross_entropy(q, p).numpy()
    mu, cov = p.loc.numpy(), p.covariance_matrix.numpy()
    for b in range(B):
        m, c = q.loc[b].numpy(), q.covariance_matrix[b].numpy()
        want = st.multivariate_normal(mean=m, cov=c).entropy() + np_gaussian_kl(m, c, mu, cov)
        assert exact[b] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("regime", sorted(DIRICHLET_RANGES))
@pytest.mark.parametrize("k", SIZES)
def test_dirichlet_is_scipy_entropy_plus_kl(k, regime):
    q, p = dirichlet_pair(k, 40 + k, regime)
    exact = cross_entropy(q, p).numpy()
    alpha = p.concentration.numpy()
    for b in range(B):
        gamma = q.concentration[b].numpy()
        want = st.dirichlet(gamma).entropy() + np_dirichlet_kl(gamma, alpha)
        assert exact[b] == pytest.approx(want, rel=1e-9)


# --------------------------------------------------------------------------- precision at extreme parameters (mpmath, 50 digits)


def mp_gaussian_cross_entropy(m, v_or_cov, mu, cov) -> float:
    mpmath.mp.dps = 50
    k = len(mu)
    S_ = mpmath.matrix(cov.tolist())
    Q = mpmath.matrix(np.diag(v_or_cov).tolist() if v_or_cov.ndim == 1 else v_or_cov.tolist())
    d = mpmath.matrix((np.asarray(m) - mu).tolist())
    Sinv = S_ ** -1
    trace = sum((Sinv * Q)[i, i] for i in range(k))
    maha = (d.T * Sinv * d)[0, 0]
    return float((k * mpmath.log(2 * mpmath.pi) + mpmath.log(mpmath.det(S_)) + trace + maha) / 2)


def mp_dirichlet_cross_entropy(gamma, alpha) -> float:
    mpmath.mp.dps = 50
    g = [mpmath.mpf(float(x)) for x in gamma]
    a = [mpmath.mpf(float(x)) for x in alpha]
    g0 = mpmath.fsum(g)
    return float(-mpmath.loggamma(mpmath.fsum(a)) + mpmath.fsum(mpmath.loggamma(x) for x in a)
                 - mpmath.fsum((ak - 1) * (mpmath.digamma(gk) - mpmath.digamma(g0)) for ak, gk in zip(a, g)))


def test_concentrated_dirichlet_posterior_is_accurate():
    """A long document's gamma (thousands to a million) under a sparse prior: no cancellation of log B(gamma)."""
    alpha = torch.tensor([0.05, 0.3, 0.5, 0.1, 2.0], dtype=torch.float64)
    gamma = torch.tensor([[1e6, 3e5, 0.2, 4e4, 50.0],
                          [2500.0, 1200.0, 30.0, 0.06, 800.0],
                          [0.3, 0.4, 0.9, 0.5, 0.7]], dtype=torch.float64)
    got = cross_entropy(Dirichlet(gamma), Dirichlet(alpha))
    for b in range(3):
        assert got[b].item() == pytest.approx(mp_dirichlet_cross_entropy(gamma[b], alpha), rel=1e-12)


def test_concentrated_and_ill_conditioned_gaussians_are_accurate():
    """Posterior variances down to 1e-12 under a prior with condition number ~1e6."""
    k = 5
    g = _gen(7)
    u, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))
    cov = u @ torch.diag(torch.logspace(-3, 3, k, dtype=torch.float64)) @ u.T
    cov = (cov + cov.T) / 2
    mu = torch.randn(k, generator=g, dtype=torch.float64)
    m = torch.randn(2, k, generator=g, dtype=torch.float64)
    s = torch.tensor([[1e-6] * k, [1e-2, 1.0, 1e-4, 3.0, 1e-3]], dtype=torch.float64)
    p = MultivariateNormal(mu, covariance_matrix=cov)
    diag = cross_entropy(Independent(Normal(m, s), 1), p)
    full = cross_entropy(MultivariateNormal(m, scale_tril=torch.diag_embed(s)), p)
    for b in range(2):
        want = mp_gaussian_cross_entropy(m[b].numpy(), (s[b] ** 2).numpy(), mu.numpy(), cov.numpy())
        assert diag[b].item() == pytest.approx(want, rel=1e-10)
        assert full[b].item() == pytest.approx(want, rel=1e-10)


# --------------------------------------------------------------------------- special cases


@pytest.mark.parametrize("k", SIZES)
def test_q_equal_p_gives_the_entropy(k):
    mu, cov = random_prior(k, 50 + k)
    p = MultivariateNormal(mu, covariance_matrix=cov)
    h = st.multivariate_normal(mean=mu.numpy(), cov=cov.numpy()).entropy()
    assert mvn_cross_entropy(p, p).item() == pytest.approx(h, rel=1e-12)
    assert cross_entropy(p, p).item() == pytest.approx(p.entropy().item(), rel=1e-12)
    # diagonal posterior equal to a diagonal-covariance prior
    v = torch.diagonal(cov)
    pd = MultivariateNormal(mu, covariance_matrix=torch.diag(v))
    qd = Independent(Normal(mu, v.sqrt()), 1)
    hd = st.multivariate_normal(mean=mu.numpy(), cov=np.diag(v.numpy())).entropy()
    assert cross_entropy(qd, pd).item() == pytest.approx(hd, rel=1e-12)
    for regime in DIRICHLET_RANGES:
        alpha = random_concentrations((k,), 60 + k, *DIRICHLET_RANGES[regime])
        d = Dirichlet(alpha)
        assert cross_entropy(d, d).item() == pytest.approx(st.dirichlet(alpha.numpy()).entropy(), rel=1e-10)


def test_batch_shapes():
    k = 3
    mu, cov = random_prior(k, 1)
    m, s = random_diag_posterior(k, 1, b=6)
    p = MultivariateNormal(mu, covariance_matrix=cov)
    flat = cross_entropy(Independent(Normal(m, s), 1), p)
    assert flat.shape == (6,)
    # (2, 3) documents: same numbers, reshaped
    grid = cross_entropy(Independent(Normal(m.reshape(2, 3, k), s.reshape(2, 3, k)), 1), p)
    assert grid.shape == (2, 3)
    torch.testing.assert_close(grid.reshape(6), flat, rtol=1e-14, atol=0)
    # one document
    one = cross_entropy(Independent(Normal(m[0], s[0]), 1), p)
    assert one.shape == () and one.item() == pytest.approx(flat[0].item(), rel=1e-14)
    # a batched prior: one per document, or broadcast from (1,)
    mus = torch.stack([mu + i for i in range(6)])
    per_doc = cross_entropy(Independent(Normal(m, s), 1), MultivariateNormal(mus, covariance_matrix=cov.expand(6, k, k)))
    assert per_doc.shape == (6,)
    for i in range(6):
        single = cross_entropy(Independent(Normal(m[i], s[i]), 1), MultivariateNormal(mus[i], covariance_matrix=cov))
        assert per_doc[i].item() == pytest.approx(single.item(), rel=1e-13)
    bcast = cross_entropy(Independent(Normal(m, s), 1), MultivariateNormal(mu[None], covariance_matrix=cov[None]))
    assert bcast.shape == (6,)
    torch.testing.assert_close(bcast, flat, rtol=1e-13, atol=0)
    # the same for full Gaussians and Dirichlets
    full = cross_entropy(MultivariateNormal(m, scale_tril=torch.diag_embed(s)), p)
    assert full.shape == (6,)
    torch.testing.assert_close(full, flat, rtol=1e-13, atol=0)
    gamma = random_concentrations((2, 3, k), 2, 0.3, 3.0)
    alpha = random_concentrations((k,), 3, 0.3, 3.0)
    d = cross_entropy(Dirichlet(gamma), Dirichlet(alpha))
    assert d.shape == (2, 3)
    torch.testing.assert_close(d.reshape(6), cross_entropy(Dirichlet(gamma.reshape(6, k)), Dirichlet(alpha)))
    per_doc_alpha = cross_entropy(Dirichlet(gamma.reshape(6, k)), Dirichlet(alpha.expand(6, k)))
    torch.testing.assert_close(per_doc_alpha, d.reshape(6), rtol=1e-14, atol=0)
    # an empty batch (no document projected) gives an empty result, not an error
    empty = torch.zeros(0, k, dtype=torch.float64)
    assert cross_entropy(Independent(Normal(empty, torch.ones_like(empty)), 1), p).shape == (0,)
    assert cross_entropy(MultivariateNormal(empty, torch.eye(k, dtype=torch.float64), validate_args=False), p).shape == (0,)
    assert cross_entropy(Dirichlet(empty + 1.0, validate_args=False), Dirichlet(alpha)).shape == (0,)


def test_float32_inputs_give_float64_outputs():
    """Every formula widens to float64 first: float32 parameters give float64 results equal to the
    float64 computation on the same (float32-rounded) numbers."""
    k = 5
    q, p = diag_pair(k, 3)
    q32 = Independent(Normal(q.base_dist.loc.float(), q.base_dist.scale.float()), 1)
    p32 = MultivariateNormal(p.loc.float(), covariance_matrix=p.covariance_matrix.float())
    got = cross_entropy(q32, p32)
    assert got.dtype == torch.float64
    # same as float64 with the float32 numbers (p32's own float32 Cholesky factor is what it scores with)
    q64 = Independent(Normal(q32.base_dist.loc.double(), q32.base_dist.scale.double()), 1)
    p64 = MultivariateNormal(p32.loc.double(), scale_tril=p32.scale_tril.double())
    torch.testing.assert_close(got, cross_entropy(q64, p64), rtol=1e-13, atol=0)
    torch.testing.assert_close(got, cross_entropy(q, p), rtol=1e-5, atol=0)
    full32 = MultivariateNormal(q32.base_dist.loc, scale_tril=torch.diag_embed(q32.base_dist.scale))
    assert cross_entropy(full32, p32).dtype == torch.float64
    torch.testing.assert_close(cross_entropy(full32, p32), got, rtol=1e-12, atol=0)
    qd, pd = dirichlet_pair(k, 4, "mixed")
    d32 = cross_entropy(Dirichlet(qd.concentration.float()), Dirichlet(pd.concentration.float()))
    assert d32.dtype == torch.float64
    d64 = cross_entropy(Dirichlet(qd.concentration.float().double()), Dirichlet(pd.concentration.float().double()))
    torch.testing.assert_close(d32, d64, rtol=1e-14, atol=0)


def test_mismatched_pairs_raise_clear_errors():
    p = MultivariateNormal(torch.zeros(4, dtype=torch.float64), torch.eye(4, dtype=torch.float64))
    q = Independent(Normal(torch.zeros(B, 3, dtype=torch.float64), torch.ones(B, 3, dtype=torch.float64)), 1)
    with pytest.raises(ValueError, match="event size 3 .* event size 4"):
        cross_entropy(q, p)
    qf = MultivariateNormal(torch.zeros(B, 3, dtype=torch.float64), torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="event size 3 .* event size 4"):
        cross_entropy(qf, p)
    with pytest.raises(ValueError, match="event size 3 .* event size 4"):
        cross_entropy(Dirichlet(torch.ones(B, 3)), Dirichlet(torch.ones(4)))
    # batch shapes that do not broadcast
    p5 = MultivariateNormal(torch.zeros(5, 3, dtype=torch.float64), torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="does not broadcast"):
        cross_entropy(q, p5)
    with pytest.raises(ValueError, match="does not broadcast"):
        cross_entropy(Dirichlet(torch.ones(B, 3)), Dirichlet(torch.ones(5, 3)))


def test_gradients_flow_through_the_closed_forms():
    """A Pyro/SVI projection may differentiate T(x): gradcheck the closed forms in float64."""
    k = 3
    mu, cov = random_prior(k, 5)
    L = torch.linalg.cholesky(cov)
    m, s = random_diag_posterior(k, 5, b=2)

    def diag(m_, s_, mu_, L_):
        return diagonal_normal_mvn_cross_entropy(Independent(Normal(m_, s_), 1),
                                                 MultivariateNormal(mu_, scale_tril=L_.tril()))

    args = [t.clone().requires_grad_(True) for t in (m, s, mu, L)]
    assert torch.autograd.gradcheck(diag, args)
    gamma = random_concentrations((2, k), 6, 0.3, 3.0).requires_grad_(True)
    alpha = random_concentrations((k,), 7, 0.3, 3.0).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda g_, a_: dirichlet_cross_entropy(Dirichlet(g_), Dirichlet(a_)),
                                    (gamma, alpha))


# --------------------------------------------------------------------------- the authors' CTM scoring: a point mass at the mean


@pytest.mark.parametrize("k", SIZES)
def test_point_mass_at_the_variational_mean_under_mvn(k):
    q, p = diag_pair(k, 70 + k)
    m = q.base_dist.loc  # (B, K)
    got = cross_entropy(PointMass(m, event_dim=1), p)
    assert got.shape == (B,) and got.dtype == torch.float64
    want = -st.multivariate_normal(mean=p.loc.numpy(), cov=p.covariance_matrix.numpy()).logpdf(m.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    # the limit of the diagonal posterior as its variance vanishes: H = -log p(m) + (1/2) tr(Sigma^-1 diag v)
    tiny = cross_entropy(Independent(Normal(m, torch.full_like(m, 1e-7)), 1), p)
    torch.testing.assert_close(tiny, got, rtol=1e-10, atol=0)
    # and the variational-mean score is below the full cross-entropy by exactly (1/2) tr(Sigma^-1 diag v)
    full = cross_entropy(q, p)
    prec = np.linalg.inv(p.covariance_matrix.numpy())
    half_trace = 0.5 * (np.diag(prec) * q.base_dist.scale.numpy() ** 2).sum(-1)
    np.testing.assert_allclose((full - got).numpy(), half_trace, rtol=1e-9)
