import itertools
import math

import numpy as np
import pytest

from critic import stats


def test_latent_ppl_by_hand():
    nll = np.array([2.0, 3.0, 7.0])
    steps = np.array([2, 3, 5])
    assert stats.latent_ppl(nll, steps) == pytest.approx(math.exp(12 / 10), rel=1e-15)


def test_bootstrap_ci_matches_explicit_resampling():
    values = np.random.default_rng(1).normal(size=40)
    lo, hi = stats.bootstrap_ci(values, n_resamples=500, seed=7)
    idx = np.random.default_rng(7).integers(0, 40, size=(500, 40))
    means = values[idx].mean(1)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    assert lo < values.mean() < hi


def test_bootstrap_ci_covers_the_mean_at_the_nominal_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(200):
        sample = rng.exponential(size=60)
        lo, hi = stats.bootstrap_ci(sample, n_resamples=400, seed=trial)
        hits += lo <= 1.0 <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_latent_ppl_ci_resamples_documents_jointly():
    nll = np.array([1.0, 10.0, 2.0, 8.0])
    steps = np.array([1.0, 10.0, 2.0, 8.0])  # T/M = 1 for every document: the PPL is e whatever the resample
    lo, hi = stats.bootstrap_latent_ppl_ci(nll, steps, n_resamples=300, seed=3)
    assert lo == pytest.approx(math.e) and hi == pytest.approx(math.e)


def test_permutation_p_value_approaches_exact_enumeration():
    a = np.array([1.0, 2.5, 0.3, 1.7, 2.2])
    b = np.array([2.9, 3.1, 1.8, 4.0])
    observed = b.mean() - a.mean()
    pooled = np.concatenate([a, b])
    extreme = total = 0
    for idx in itertools.combinations(range(9), 4):
        mask = np.zeros(9, bool)
        mask[list(idx)] = True
        d = pooled[mask].mean() - pooled[~mask].mean()
        extreme += abs(d) >= abs(observed) - 1e-12
        total += 1
    exact = extreme / total
    diff, p = stats.permutation_test(a, b, n_permutations=20_000, seed=0)
    assert diff == pytest.approx(observed)
    se = math.sqrt(exact * (1 - exact) / 20_000)
    assert abs(p - exact) < 4 * se + 1e-4


def test_empirical_p_values_brute_force():
    rng = np.random.default_rng(5)
    ref = rng.integers(0, 6, size=30).astype(float)  # ties on purpose
    vals = np.array([-1.0, 0.0, 2.0, 5.0, 9.0])
    want = [(1 + np.sum(ref >= v)) / 31 for v in vals]
    np.testing.assert_allclose(stats.empirical_p_values(ref, vals), want, rtol=0, atol=1e-15)


def test_resampling_in_blocks_gives_the_numbers_of_one_block(monkeypatch):
    """Blocks draw the next rows of the same stream: a block of 1 row and one of everything agree exactly, for
    every resampling statistic (the working memory is bounded by the block, not by R x n)."""
    from critic import stats as st

    rng = np.random.default_rng(11)
    t, m = rng.gamma(2.0, 3.0, size=57), rng.integers(1, 9, size=57).astype(float)
    u = rng.gamma(2.5, 3.0, size=31)

    def all_of_them():
        rows_a, rows_b = np.stack([t, m], 1), np.stack([u, np.ones(31)], 1)
        return (st.bootstrap_ci(t, n_resamples=300, seed=4), st.bootstrap_latent_ppl_ci(t, m, n_resamples=300, seed=4),
                st.permutation_test(t, u, n_permutations=301, seed=4),
                st.permutation_test(rows_a, rows_b, statistic=st.log_ppl_statistic, n_permutations=301, seed=4),
                st.bootstrap_difference_ci(t, u, n_resamples=300, seed=4))

    whole = all_of_them()
    monkeypatch.setattr(st, "BLOCK_BYTES", 1)  # one resample per block
    assert st._blocks(300, 57 * 16) == [1] * 300
    assert all_of_them() == whole
    monkeypatch.setattr(st, "BLOCK_BYTES", 57 * 16 * 7)  # 7 rows a block, a ragged last one
    assert st._blocks(300, 57 * 16)[-1] == 300 % 7 and all_of_them() == whole
