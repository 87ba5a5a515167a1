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


def test_size_matched_p_values_by_hand():
    """Four bins of 50 reference documents cut at the size quartiles: each value against its own bin's values."""
    rng = np.random.default_rng(4)
    ref_sizes = rng.permutation(np.arange(200))  # quartile edges at 49.75, 99.5, 149.25
    ref = rng.normal(size=200) + ref_sizes / 50.0
    sizes, values = np.array([0, 60, 120, 199, 50]), np.array([0.5, 1.5, 3.0, 4.0, 2.0])
    got = stats.size_matched_p_values(ref, ref_sizes, values, sizes, min_per_bin=50)
    bins = [(0, 49), (50, 99), (100, 149), (150, 199)]
    for p, size, value in zip(got, sizes, values):
        lo, hi = next(b for b in bins if b[0] <= size <= b[1])
        same = ref[(ref_sizes >= lo) & (ref_sizes <= hi)]
        assert len(same) == 50 and p == pytest.approx((1 + np.sum(same >= value)) / 51, abs=1e-15)
    # fewer than two bins' worth of reference documents: the plain p-value
    small = stats.size_matched_p_values(ref[:60], ref_sizes[:60], values, sizes, min_per_bin=50)
    np.testing.assert_array_equal(small, stats.empirical_p_values(ref[:60], values))


def test_size_matched_p_values_are_uniform_within_length_tertiles_where_plain_ones_are_not():
    """Real documents whose T/M grows with length: the plain p-values flag the long ones (not uniform within
    length tertiles: KS p < 1e-6), the size-matched ones are uniform in every tertile (KS p > 0.01)."""
    from scipy.stats import kstest

    rng = np.random.default_rng(0)

    def real(n):
        words = rng.integers(20, 400, size=n)
        return words, 0.01 * words + rng.normal(size=n)

    ref_words, ref = real(3000)
    words, values = real(3000)
    plain = stats.empirical_p_values(ref, values)
    matched = stats.size_matched_p_values(ref, ref_words, values, words)
    tertile = np.searchsorted(np.quantile(words, [1 / 3, 2 / 3]), words, side="right")
    for t in range(3):
        assert kstest(matched[tertile == t], "uniform").pvalue > 0.01
    assert min(kstest(plain[tertile == t], "uniform").pvalue for t in range(3)) < 1e-6


def test_size_model_p_values_are_residuals_against_the_whole_reference():
    """By an independent least-squares fit (numpy.linalg.lstsq on the raw powers of log size): the location is
    the cubic, the scale exp of the quadratic fitted to log |residual|, and each p-value the empirical right tail
    of the value's standardised residual among the reference's; sizes beyond the reference's are clipped."""
    rng = np.random.default_rng(5)
    ref_sizes = rng.integers(10, 500, size=400)
    x = np.log(ref_sizes)
    ref = 2.0 + 0.5 * x + np.exp(-1.0 + 0.3 * x) * rng.normal(size=400)
    sizes, values = np.array([12, 100, 480, 5, 2000]), np.array([3.0, 6.0, 8.0, 1.0, 9.0])
    got = stats.size_model_p_values(ref, ref_sizes, values, sizes)

    def fit(y, degree):
        coef = np.linalg.lstsq(np.vander(x, degree + 1), y, rcond=None)[0]
        return lambda t: np.vander(np.atleast_1d(t), degree + 1) @ coef

    loc = fit(ref, 3)
    res = ref - loc(x)
    scale = fit(np.log(np.abs(res) + 1e-12 * np.abs(res).mean()), 2)
    z_ref = res / np.exp(scale(x))
    q = np.clip(np.log(sizes), x.min(), x.max())
    z = (values - loc(q)) / np.exp(scale(q))
    expected = np.array([(1 + np.sum(z_ref >= v)) / (len(z_ref) + 1) for v in z])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    # too small a reference, or one size only: the plain p-value
    np.testing.assert_array_equal(stats.size_model_p_values(ref[:20], ref_sizes[:20], values, sizes),
                                  stats.empirical_p_values(ref[:20], values))
    np.testing.assert_array_equal(stats.size_model_p_values(ref, np.full(400, 50), values, sizes),
                                  stats.empirical_p_values(ref, values))


def test_size_model_p_values_are_uniform_at_every_length_where_bins_are_not():
    """Real documents whose statistic shifts and widens with length: against a reference of 300 (10 bins of 30) the
    binned p-values of the shortest tertile are off (a trend inside the shortest bin; KS p < 0.01 over the
    pooled 200 trials' shortest tertile), the location-scale residuals are uniform in every tertile (KS p > 0.01)
    and reach p-values below the bins' floor of 1/31."""
    from scipy.stats import kstest

    rng = np.random.default_rng(1)

    def real(n):
        words = np.exp(rng.uniform(np.log(10), np.log(400), size=n))
        return words, 3.0 * np.log(words) + (0.5 + 0.2 * np.log(words)) * rng.normal(size=n)

    pooled = {"bins": [[], [], []], "model": [[], [], []]}
    for _ in range(200):
        ref_words, ref = real(300)
        words, values = real(60)
        tertile = np.searchsorted(np.quantile(words, [1 / 3, 2 / 3]), words, side="right")
        for name, fn in (("bins", stats.size_matched_p_values), ("model", stats.size_model_p_values)):
            p = fn(ref, ref_words, values, words)
            for t in range(3):
                pooled[name][t].extend(p[tertile == t])
    assert all(kstest(pooled["model"][t], "uniform").pvalue > 0.01 for t in range(3))
    assert kstest(pooled["bins"][0], "uniform").pvalue < 0.01
    assert min(map(min, pooled["model"])) < 1 / 31 <= min(map(min, pooled["bins"]))


def test_broken_ties_make_a_discrete_statistic_s_p_values_uniform():
    """A value exchangeable with a reference of n values from {0, 1, 2}: its tie-broken p-value is uniform on
    {1..n+1}/(n+1) (the mean of the averaged exact distribution over many references is 1/(n+1) per atom),
    while without breaking ties it is conservative (its mean is well above 1/2)."""
    rng = np.random.default_rng(0)
    n, trials = 9, 20_000
    pooled = rng.integers(0, 3, size=(trials, n + 1)).astype(float)  # value and reference exchangeable
    broken = np.array([stats.empirical_p_values(row[1:], row[:1], tie_break=rng.random(1))[0] for row in pooled])
    plain = np.array([stats.empirical_p_values(row[1:], row[:1])[0] for row in pooled])
    counts = np.bincount(np.rint(broken * (n + 1)).astype(int) - 1, minlength=n + 1)
    expected = trials / (n + 1)
    assert counts.sum() == trials and np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
    assert abs(broken.mean() - (n + 2) / (2 * (n + 1))) < 0.01 and plain.mean() > broken.mean() + 0.1
    ids = stats.id_uniforms(["a", "b", "a"], "0:x")
    assert ids[0] == ids[2] != ids[1] and np.all((ids >= 0) & (ids < 1))
