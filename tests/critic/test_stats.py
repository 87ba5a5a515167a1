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
    [(lo, hi)] = stats.bootstrap_cis(values, [stats.MEAN], n_resamples=500, seed=7)
    idx = np.random.default_rng(7).integers(0, 40, size=(500, 40))
    means = values[idx].mean(1)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    assert lo < values.mean() < hi


def test_bootstrap_ci_covers_the_mean_at_the_nominal_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(200):
        sample = rng.exponential(size=60)
        [(lo, hi)] = stats.bootstrap_cis(sample, [stats.MEAN], n_resamples=400, seed=trial)
        hits += lo <= 1.0 <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_latent_ppl_ci_resamples_documents_jointly():
    nll = np.array([1.0, 10.0, 2.0, 8.0])
    steps = np.array([1.0, 10.0, 2.0, 8.0])  # T/M = 1 for every document: the PPL is e whatever the resample
    [(lo, hi)] = stats.bootstrap_cis(stats.document_rows(nll, steps), [stats.LATENT_PPL], n_resamples=300, seed=3)
    assert lo == pytest.approx(math.e) and hi == pytest.approx(math.e)


def _brute_force_p(a: np.ndarray, b: np.ndarray, statistic) -> tuple[float, float]:
    """The difference s(b) - s(a) and the share of all splits of the pooled rows into sets of a's and b's sizes
    whose |difference| is at least the observed one (itertools, direct sums)."""
    pooled = np.concatenate([a, b])
    observed = statistic(b) - statistic(a)
    extreme = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(b)):
        mask = np.zeros(len(pooled), bool)
        mask[list(idx)] = True
        d = statistic(pooled[mask]) - statistic(pooled[~mask])
        extreme += abs(d) >= abs(observed) - 1e-9
        total += 1
    return observed, extreme / total


@pytest.mark.parametrize("sizes", [(5, 4), (3, 6), (4, 4)])
def test_tiny_sets_get_the_exact_permutation_p_value(sizes):
    """At most n_permutations splits: every split is enumerated and p is the exact share, for the mean and for
    log PPL (sum T / sum M), whichever set is the smaller (integer T: ties count as extreme)."""
    rng = np.random.default_rng(sum(sizes))
    a = stats.document_rows(rng.integers(0, 6, sizes[0]), rng.integers(1, 4, sizes[0]))
    b = stats.document_rows(rng.integers(2, 8, sizes[1]), rng.integers(1, 4, sizes[1]))
    tests = stats.permutation_tests(a, b, [stats.MEAN, stats.LOG_LATENT_PPL], n_permutations=2000, seed=0)
    for test, statistic in zip(tests, [lambda r: r[:, 0].mean(), lambda r: r[:, 0].sum() / r[:, 1].sum()]):
        diff, exact = _brute_force_p(a, b, statistic)
        assert test.exact and test.difference == pytest.approx(diff, rel=1e-12)
        assert test.p_value == pytest.approx(exact, rel=1e-12)


def test_monte_carlo_permutation_p_value_approaches_exact_enumeration():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.0, 1.0, 9), rng.normal(0.8, 1.0, 8)  # C(17, 8) = 24,310 splits > 5,000 permutations
    diff, exact = _brute_force_p(a, b, np.mean)
    [test] = stats.permutation_tests(a, b, [stats.MEAN], n_permutations=5000, seed=0)
    assert not test.exact and test.difference == pytest.approx(diff)
    expected = (1 + 5000 * exact) / 5001  # E[(1 + #extreme) / (1 + n_permutations)]
    assert abs(test.p_value - expected) < 4 * math.sqrt(exact * (1 - exact) / 5000) + 1e-4


def test_resampling_in_blocks_gives_the_numbers_of_one_block(monkeypatch):
    """Blocks draw the next rows of the same stream: a block of 1 row and one of everything agree exactly, for
    every resampling statistic (the working memory is bounded by the block, not by R x n)."""
    from critic import stats as st

    rng = np.random.default_rng(11)
    t, m = rng.gamma(2.0, 3.0, size=57), rng.integers(1, 9, size=57).astype(float)
    u = rng.gamma(2.5, 3.0, size=31)

    def all_of_them():
        rows_a, rows_b = stats.document_rows(t, m), stats.document_rows(u, np.ones(31))
        both = [st.MEAN, st.LATENT_PPL]
        return (st.bootstrap_cis(rows_a, both, n_resamples=300, seed=4),
                st.permutation_tests(rows_a, rows_b, [st.MEAN, st.LOG_LATENT_PPL], n_permutations=301, seed=4),
                st.bootstrap_difference_cis(rows_a, rows_b, both, n_resamples=300, seed=4))

    whole = all_of_them()
    monkeypatch.setattr(st, "BLOCK_BYTES", 1)  # one resample per block
    assert st._blocks(300, 57 * 16) == [1] * 300
    assert all_of_them() == whole
    monkeypatch.setattr(st, "BLOCK_BYTES", 57 * 16 * 7)  # 7 rows a block, a ragged last one
    assert st._blocks(300, 57 * 16)[-1] == 300 % 7 and all_of_them() == whole


def test_each_statistic_of_one_draw_equals_its_own_draw():
    """One draw of resamples serves several statistics: each CI equals the CI drawn for it alone."""
    rng = np.random.default_rng(2)
    rows = stats.document_rows(rng.gamma(2.0, 3.0, 40), rng.integers(1, 9, 40))
    both = stats.bootstrap_cis(rows, [stats.MEAN, stats.LATENT_PPL], n_resamples=200, seed=9)
    assert both == [stats.bootstrap_cis(rows, [s], n_resamples=200, seed=9)[0] for s in (stats.MEAN, stats.LATENT_PPL)]
    idx = np.random.default_rng(9).integers(0, 40, size=(200, 40))
    ppl = np.exp(rows[idx, 0].sum(1) / rows[idx, 1].sum(1))
    assert both[1] == pytest.approx(tuple(np.quantile(ppl, [0.025, 0.975])), rel=1e-12)


def test_a_large_permutation_test_neither_computes_a_huge_binomial_nor_enumerates():
    """C(2n, n) for n = 10^5 has 60,000 digits: the split count stops as soon as it passes n_permutations."""
    assert stats._splits_at_most(200_000, 100_000, 2000) is None
    assert stats._splits_at_most(9, 4, 126) == 126 and stats._splits_at_most(9, 4, 125) is None


def test_what_grows_with_the_resamples_is_64_bytes_each(monkeypatch):
    """The memory check of criticize() budgets 64 bytes a resample (both sides' column sums, the statistics and their difference)
    beside one block: the traced peak of a difference CI with many resamples stays within it."""
    import tracemalloc

    monkeypatch.setattr(stats, "BLOCK_BYTES", 2**20)
    rng = np.random.default_rng(0)
    a, b = stats.document_rows(rng.gamma(2, 3, 10), np.ones(10)), stats.document_rows(rng.gamma(2, 3, 12), np.ones(12))
    n_resamples = 1_000_000
    tracemalloc.start()
    stats.bootstrap_difference_cis(a, b, [stats.MEAN, stats.LATENT_PPL], n_resamples=n_resamples, seed=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert 32 * n_resamples < peak <= 64 * n_resamples + 2 * 2**20
