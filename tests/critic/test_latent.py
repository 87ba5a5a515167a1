"""Exact cross-entropies against brute force and against Monte Carlo (within 3 standard errors)."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.distributions import Categorical, Dirichlet, MultivariateNormal, Normal

from critic.latent import (
    PAD,
    FactorisedCategorical,
    MarkovChain,
    PointMass,
    SequencePointMass,
    cross_entropy,
    monte_carlo_cross_entropy,
    register_cross_entropy,
)

PROPERTY = settings(max_examples=15, deadline=None, derandomize=True)


def random_chain(k: int, seed: int) -> MarkovChain:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, k + 1, generator=g, dtype=torch.float64)
    initial = torch.log_softmax(logits[0, :k], -1)
    rows = torch.log_softmax(logits[1:], -1)  # each state: K next states + <eos>
    return MarkovChain(initial, rows[:, :k], rows[:, k])


def brute_log_prob(chain: MarkovChain, seq: list[int]) -> float:
    total = chain.initial[seq[0]].item()
    for a, b in zip(seq, seq[1:]):
        total += chain.transition[a, b].item()
    return total + chain.final[seq[-1]].item()


def test_markov_log_prob_matches_hand_sum_with_padding():
    chain = random_chain(4, 0)
    seqs = [[0, 1, 2, 3, 1], [2], [3, 3]]
    padded = torch.full((3, 5), PAD)
    for i, s in enumerate(seqs):
        padded[i, : len(s)] = torch.tensor(s)
    got = chain.log_prob(padded)
    want = torch.tensor([brute_log_prob(chain, s) for s in seqs], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_markov_chain_mass_per_length_matches_matrix_power():
    """Sum of P(z) over all sequences of length n, by enumeration, equals pi^T A^(n-1) f."""
    chain = random_chain(3, 1)
    pi, A, f = chain.initial.exp(), chain.transition.exp(), chain.final.exp()
    total = 0.0
    for length in range(1, 8):
        mass = sum(math.exp(brute_log_prob(chain, list(seq))) for seq in itertools.product(range(3), repeat=length))
        closed = (pi @ torch.linalg.matrix_power(A, length - 1) @ f).item()
        assert mass == pytest.approx(closed, rel=1e-10)
        total += mass
    # and the masses of all lengths sum to one: pi^T (I - A)^-1 f = 1
    assert (pi @ torch.linalg.solve(torch.eye(3, dtype=torch.float64) - A, f)).item() == pytest.approx(1.0, abs=1e-12)
    # lengths 1..7 hold all the mass but that of lengths >= 8: pi^T A^7 (I - A)^-1 f
    tail = (pi @ torch.linalg.matrix_power(A, 7) @ torch.linalg.solve(torch.eye(3, dtype=torch.float64) - A, f)).item()
    assert 0 < tail and total == pytest.approx(1.0 - tail, rel=1e-12)


@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 4))
@PROPERTY
def test_factorised_under_markov_equals_enumeration(seed, length, k):
    chain = random_chain(k, seed)
    g = torch.Generator().manual_seed(seed + 1)
    probs = torch.softmax(torch.randn(2, length, k, generator=g, dtype=torch.float64), -1)
    lengths = torch.tensor([length, max(1, length - 1)])
    q = FactorisedCategorical(probs, lengths)
    exact = cross_entropy(q, chain)
    for b in range(2):
        n = int(lengths[b])
        brute = 0.0
        for seq in itertools.product(range(k), repeat=n):
            w = math.prod(probs[b, m, z].item() for m, z in enumerate(seq))
            brute -= w * brute_log_prob(chain, list(seq))
        assert exact[b].item() == pytest.approx(brute, rel=1e-10, abs=1e-10)


@given(st.integers(0, 10_000))
@PROPERTY
def test_factorised_under_markov_agrees_with_monte_carlo(seed):
    chain = random_chain(5, seed)
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(3, 6, 5, generator=g, dtype=torch.float64), -1)
    q = FactorisedCategorical(probs, torch.tensor([6, 3, 1]))
    exact = cross_entropy(q, chain)
    mc, se = monte_carlo_cross_entropy(q, chain, num_samples=4000, seed=seed)
    assert torch.all((exact - mc).abs() <= 3 * se), (exact, mc, se)


def test_point_mass_is_negative_log_prob():
    chain = random_chain(4, 3)
    z = torch.tensor([[1, 2, PAD], [0, 0, 3]])
    got = cross_entropy(SequencePointMass(z), chain)
    want = -torch.tensor([brute_log_prob(chain, [1, 2]), brute_log_prob(chain, [0, 0, 3])], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # and it is the limit of a factorised posterior concentrated on the same states
    probs = torch.nn.functional.one_hot(z.clamp_min(0), 4).double()
    q = FactorisedCategorical(probs, torch.tensor([2, 3]))
    torch.testing.assert_close(cross_entropy(q, chain), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(q.map().value, z)


def _pairs(seed: int):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    a = r(3, 3)
    b = r(3, 3)
    yield Normal(r(4), r(4).exp()), Normal(r(4), r(4).exp())
    yield (MultivariateNormal(r(3), a @ a.T + torch.eye(3, dtype=torch.float64)),
           MultivariateNormal(r(3), b @ b.T + torch.eye(3, dtype=torch.float64)))
    yield Dirichlet(r(2, 4).exp() + 0.5), Dirichlet(r(4).exp() + 0.5)
    yield Categorical(logits=r(2, 6)), Categorical(logits=r(6))


@given(st.integers(0, 10_000))
@PROPERTY
def test_exact_pairs_agree_with_monte_carlo(seed):
    for q, p in _pairs(seed):
        exact = cross_entropy(q, p)
        mc, se = monte_carlo_cross_entropy(q, p, num_samples=20_000, seed=seed)
        assert exact.shape == q.batch_shape
        assert torch.all((exact - mc).abs() <= 3 * se + 1e-9), (type(q).__name__, exact, mc, se)


def test_categorical_closed_form():
    q = Categorical(probs=torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64))
    p = Categorical(probs=torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64))
    want = -(0.2 * math.log(0.1) + 0.5 * math.log(0.6) + 0.3 * math.log(0.3))
    assert cross_entropy(q, p).item() == pytest.approx(want, rel=1e-12)


def test_gaussian_closed_form():
    q, p = Normal(torch.tensor(1.0, dtype=torch.float64), 2.0), Normal(torch.tensor(0.0, dtype=torch.float64), 3.0)
    want = 0.5 * math.log(2 * math.pi * 9) + (4 + 1) / (2 * 9)
    assert cross_entropy(q, p).item() == pytest.approx(want, rel=1e-12)


def test_unknown_pair_raises_and_registry_prefers_specific():
    class Odd(PointMass):
        pass

    class Prior(Normal):
        pass

    with pytest.raises(NotImplementedError, match="monte_carlo_cross_entropy"):
        cross_entropy(Normal(0.0, 1.0), Dirichlet(torch.ones(3)))
    value = torch.tensor(0.5, dtype=torch.float64)
    generic = cross_entropy(Odd(value), Prior(0.0, 1.0))
    assert generic.item() == pytest.approx(-Normal(0.0, 1.0).log_prob(value).item())
    register_cross_entropy(Odd, Prior)(lambda q, p: torch.tensor(42.0))
    assert cross_entropy(Odd(value), Prior(0.0, 1.0)).item() == 42.0
    assert cross_entropy(PointMass(value), Prior(0.0, 1.0)).item() == pytest.approx(generic.item())
