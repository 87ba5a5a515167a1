"""The prior over copy factorisations: each distribution sums to 1, the whole process too (a forward sum over every
factorisation up to a length), and log P(z) is the sum of its factors computed by hand."""

import math

import numpy as np
import pytest
import torch

from critic.latent import PAD
from critics.repetition.prior import COPY, NEW, CopySemiMarkov, LogBinned, log2_bin

WEIGHTS = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
TRANSITION = torch.tensor([[0.0, 0.6, 0.4], [0.5, 0.2, 0.3]], dtype=torch.float64)  # NEW -> NEW impossible
LAMBDA = 0.2


def prior(min_copy=1):
    with np.errstate(divide="ignore"):
        return CopySemiMarkov(TRANSITION.log(), WEIGHTS.log(), math.log(LAMBDA), min_copy)


def test_log2_bins_are_exact_at_powers_of_two():
    d = torch.tensor([1, 2, 3, 4, 7, 8, 2**20 - 1, 2**20, 2**40 - 1, 2**40])
    assert log2_bin(d, 64).tolist() == [0, 1, 1, 2, 2, 3, 19, 20, 39, 40]
    assert log2_bin(d, 3).tolist() == [0, 1, 1, 2, 2, 3, 3, 3, 3, 3]


def harmonic(first: int, last: int) -> float:
    return sum(1 / d for d in range(first, last + 1))


def test_binned_distribution_by_hand_and_normalised():
    binned = LogBinned(WEIGHTS.log())  # B = 3: bins {1}, {2, 3}, {4..7} (mass ~ 1/d), d >= 8 geometric, q = 1/8
    d = torch.arange(1, 3001)
    h1, h2 = harmonic(2, 3), harmonic(4, 7)
    for row in range(3):
        p = binned.log_prob(torch.full_like(d, row), d).exp()
        w = WEIGHTS[row].tolist()
        want = [w[0], w[1] / (2 * h1), w[1] / (3 * h1), w[2] / (4 * h2), w[2] / (5 * h2), w[2] / (6 * h2),
                w[2] / (7 * h2), w[3] / 8, w[3] / 8 * 7 / 8]
        np.testing.assert_allclose(p[:9].numpy(), want, rtol=1e-12)
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)  # the tail beyond 3000 is (7/8)^2993


def test_offsets_of_a_copy_are_normalised_and_a_loop_is_uniform_over_its_periods():
    p = prior()
    for d in (1, 2, 5, 40):
        o = torch.arange(1, 5001)
        probs = p.log_offset(torch.full_like(o, d), o).exp()
        assert float(probs.sum()) == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(probs[:d].numpy(), LAMBDA / d, rtol=1e-12)
        gap = LogBinned(WEIGHTS.log()).log_prob(torch.tensor([2]), torch.tensor([3])).exp().item()
        assert probs[d + 2].item() == pytest.approx((1 - LAMBDA) * gap, rel=1e-12)  # o = d + 3: gap 3


def test_the_whole_process_sums_to_one():
    """Sum of P(z) over every factorisation of at most N units, offsets summed out (they sum to 1 above), by a
    forward pass: ``alive[t, c]``, the mass of the factorisations of exactly ``t`` units so far whose last segment
    is in state ``c``; a COPY lasts at least ``min_copy = 3`` units."""
    p, n = prior(min_copy=3), 800
    k = torch.arange(1, n + 1)
    duration = np.stack([p.log_duration(torch.full_like(k, c), k).exp().numpy() for c in (NEW, COPY)], 1)  # (N, 2)
    assert (duration[:2, COPY] == 0).all()
    enter = TRANSITION.numpy()
    start = np.zeros((n + 1, 2))  # mass entering a segment at unit t in each state
    start[0] = [1.0, 0.0]  # pi: the first segment is NEW
    alive = np.zeros((n + 1, 2))
    for t in range(1, n + 1):
        alive[t] = (start[t - 1::-1] * duration[:t]).sum(0)  # a segment of k units entered at t - k
        start[t] = alive[t] @ enter[:, :2]
    total = (alive[1:] @ enter[:, 2]).sum()
    assert total == pytest.approx(1.0, abs=1e-10)


def test_log_prob_is_the_sum_of_its_factors_by_hand():
    """z = NEW(2) COPY(5, offset 2: a loop) COPY(3, offset 20: distant) NEW(1), min_copy 2."""
    p = prior(min_copy=2)
    w = WEIGHTS.numpy()
    new = {1: w[0, 0], 2: w[0, 1] / (2 * harmonic(2, 3))}
    copy = {4: w[1, 2] / (4 * harmonic(4, 7)), 2: w[1, 1] / (2 * harmonic(2, 3))}  # 5 and 3 read from min_copy
    gap = w[2, 4 - 1] / 8 * (7 / 8) ** (17 - 8)  # distant copy: 20 - 3 = 17 units between, in the tail
    factors = [
        math.log(new[2]),  # pi(NEW) = 1
        math.log(0.6 * copy[4] * LAMBDA / 5),
        math.log(0.2 * copy[2] * (1 - LAMBDA) * gap),
        math.log(0.5 * new[1]),
        math.log(0.4),  # NEW -> END
    ]
    z = torch.tensor([[NEW, 2, 0], [COPY, 5, 2], [COPY, 3, 20], [NEW, 1, 0]])
    np.testing.assert_allclose(p.segment_log_probs(z).numpy(), factors, rtol=1e-12)
    assert p.log_prob(z).item() == pytest.approx(sum(factors), rel=1e-12)
    # in a padded batch, beside a shorter factorisation, each row keeps its own value
    batch = torch.full((2, 4, 3), PAD)
    batch[0], batch[1, :1] = z, torch.tensor([[NEW, 1, 0]])
    np.testing.assert_allclose(p.log_prob(batch).numpy(), [sum(factors), math.log(new[1] * 0.4)], rtol=1e-12)


def test_impossible_factorisations_have_probability_zero():
    p = prior(min_copy=3)
    assert p.log_prob(torch.tensor([[COPY, 3, 1]])).item() == -math.inf  # a document cannot start with a copy
    assert p.log_prob(torch.tensor([[NEW, 1, 0], [NEW, 2, 0]])).item() == -math.inf  # NEW after NEW
    assert p.log_prob(torch.tensor([[NEW, 1, 0], [COPY, 2, 1]])).item() == -math.inf  # shorter than min_copy
