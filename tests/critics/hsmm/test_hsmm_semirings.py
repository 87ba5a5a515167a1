"""The recursion over torch-struct's semirings against brute-force enumeration, on mixed-length batches."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.stats import chisquare
from torch_struct import LogSemiring, MaxSemiring, SampledSemiring

from critics.hsmm import semimarkov as sm
from hsmm_brute import brute_marginals, brute_posterior, enumerate_paths


def _factors(seed, B, T, K, C, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * scale  # noqa: E731
    return r(C), r(C, C), r(C, K), r(B, T, K, C)


sizes = st.tuples(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3))


def _mixed(size, data):
    seed, B, T, K, C = size
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    return _factors(seed, B, T, K, C), lengths


@settings(max_examples=20, deadline=None)
@given(size=sizes, data=st.data())
def test_log_and_max_semirings_match_enumeration(size, data):
    (init, trans, dur, emit), lengths = _mixed(size, data)
    log_z = LogSemiring.unconvert(sm.semiring_sum(LogSemiring, init, trans, dur, emit, lengths))
    best = MaxSemiring.unconvert(sm.semiring_sum(MaxSemiring, init, trans, dur, emit, lengths))
    for b in range(len(lengths)):
        scores = torch.stack([s for s, _ in enumerate_paths(init, trans, dur, emit[b], int(lengths[b]))])
        assert float(log_z[b]) == pytest.approx(float(torch.logsumexp(scores, 0)), abs=1e-10)
        assert float(best[b]) == pytest.approx(float(scores.max()), abs=1e-10)


@settings(max_examples=20, deadline=None)
@given(size=sizes, data=st.data())
def test_entropy_matches_enumeration(size, data):
    (init, trans, dur, emit), lengths = _mixed(size, data)
    h = sm.entropy(init, trans, dur, emit, lengths)
    assert h.shape == lengths.shape and h.dtype == torch.float64
    for b in range(len(lengths)):
        p = torch.tensor([q for _, q in brute_posterior(init, trans, dur, emit[b], int(lengths[b])).values()], dtype=torch.float64)
        assert float(h[b]) == pytest.approx(float(-torch.special.xlogy(p, p).sum()), abs=1e-10)


@pytest.mark.parametrize("k", [1, 4, 9])
@settings(max_examples=15, deadline=None)
@given(size=sizes, data=st.data())
def test_kbest_scores_and_segmentations_match_enumeration(k, size, data):
    """The k best in order; -inf and no segmentation past the number a sequence has (k = 9 > C^1 at length 1)."""
    (init, trans, dur, emit), lengths = _mixed(size, data)
    scores, segmentations = sm.kbest(k, init, trans, dur, emit, lengths)
    assert scores.shape == (k, len(lengths))
    for b in range(len(lengths)):
        ranked = sorted(enumerate_paths(init, trans, dur, emit[b], int(lengths[b])), key=lambda p: -float(p[0]))[:k]
        want = [float(s) for s, _ in ranked] + [-math.inf] * (k - len(ranked))
        assert scores[:, b].tolist() == pytest.approx(want, abs=1e-10)
        assert segmentations[b] == [segs for _, segs in ranked]  # continuous random scores: no ties


def test_kbest_below_torch_structs_padding():
    """Scores far below -1e5 (long documents): torch-struct's -1e5 padding would outrank them; -inf does not."""
    init, trans, dur, emit = _factors(3, 2, 4, 2, 2)
    emit = emit - 1e5
    lengths = torch.tensor([4, 1])
    scores, segmentations = sm.kbest(6, init, trans, dur, emit, lengths)
    for b in range(2):
        ranked = sorted(enumerate_paths(init, trans, dur, emit[b], int(lengths[b])), key=lambda p: -float(p[0]))[:6]
        assert scores[: len(ranked), b].tolist() == pytest.approx([float(s) for s, _ in ranked], rel=1e-14)
        assert segmentations[b] == [segs for _, segs in ranked]
    assert scores[2:, 1].tolist() == [-math.inf] * 4  # length 1, C = 2: two segmentations


def test_semiring_marginals_log_and_max():
    """LogSemiring's gradients are the segment marginals; MaxSemiring's the Viterbi segments."""
    init, trans, dur, emit = _factors(8, 3, 5, 3, 2)
    lengths = torch.tensor([5, 2, 4])
    marg = sm.semiring_marginals(LogSemiring, init, trans, dur, emit, lengths)
    best = sm.semiring_marginals(MaxSemiring, init, trans, dur, emit, lengths)
    viterbi = sm.segments_from_path(*sm.viterbi(init, trans, dur, emit, lengths)[1:])
    for b in range(3):
        assert torch.allclose(marg[b], brute_marginals(init, trans, dur, emit[b], int(lengths[b]))[4], atol=1e-12)
        assert sm.segments_from_indicator(best[b]) == viterbi[b]


def _chi2_pvalue(draws: list[tuple], exact: dict[tuple, tuple[float, float]]) -> float:
    """Pearson's chi-square of the draws against ``exact`` probabilities, outcomes expecting < 5 pooled."""
    n, counts = len(draws), Counter(draws)
    assert set(counts) <= set(exact)  # every draw is a segmentation of the sequence
    big = [z for z, (_, p) in exact.items() if n * p >= 5]
    small = [z for z in exact if z not in big]
    obs = [counts[z] for z in big] + [sum(counts[z] for z in small)]
    exp = [n * exact[z][1] for z in big] + [n * sum(exact[z][1] for z in small)]
    return float(chisquare(obs, exp).pvalue)


def _draws(indicators: torch.Tensor, b: int) -> list[tuple]:
    return [tuple(sm.segments_from_indicator(x[b])) for x in indicators]


def test_samples_follow_the_exact_posterior():
    """3200 MultiSampledSemiring draws per sequence (mixed lengths) pass a chi-square test against the enumerated
    posterior (p > 1e-3, fixed seed) and fail it against a slightly different model's posterior (p < 1e-6)."""
    init, trans, dur, emit = _factors(21, 3, 4, 3, 2)
    lengths = torch.tensor([4, 2, 3])
    with torch.random.fork_rng():
        torch.manual_seed(0)
        z = sm.sample(3200, init, trans, dur, emit, lengths)
    assert z.shape == (3200, 3, 4, 3, 2)
    wrong = trans + 0.5 * torch.randn(2, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for b in range(3):
        draws = _draws(z, b)
        assert _chi2_pvalue(draws, brute_posterior(init, trans, dur, emit[b], int(lengths[b]))) > 1e-3
        if lengths[b] > 1:  # a single segment has no transition to get wrong
            assert _chi2_pvalue(draws, brute_posterior(init, wrong, dur, emit[b], int(lengths[b]))) < 1e-6


def test_sampled_semiring_draws_one_posterior_sample():
    """SampledSemiring: one draw per backward pass, same test with 800 draws."""
    init, trans, dur, emit = _factors(5, 2, 3, 2, 2)
    lengths = torch.tensor([3, 2])
    with torch.random.fork_rng():
        torch.manual_seed(0)
        z = torch.stack([sm.semiring_marginals(SampledSemiring, init, trans, dur, emit, lengths) for _ in range(800)])
    assert set(z.unique().tolist()) == {0.0, 1.0}
    for b in range(2):
        assert _chi2_pvalue(_draws(z, b), brute_posterior(init, trans, dur, emit[b], int(lengths[b]))) > 1e-3
