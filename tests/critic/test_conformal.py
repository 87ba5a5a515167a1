"""Conformal outlier p-values and Benjamini-Hochberg q-values against brute force and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from critic import conformal


def augmented_p(pool, pool_ties, x, x_ties, v):
    """The definition, literally: ranks in the augmented set ``pool + [x]`` ((value, u) lexicographic), the
    combined score ``min_j r_j``, and ``x``'s place among the ``n + 1`` scores with ties broken by ``v``."""
    points = [tuple(zip(row, u)) for row, u in zip(pool, pool_ties)] + [tuple(zip(x, x_ties))]
    n1, J = len(points), len(x)
    score = [min(sum(1 for other in range(n1) if other != k and points[other][j] > points[k][j]) for j in range(J))
             for k in range(n1)]
    less = sum(s < score[-1] for s in score[:-1])
    equal = sum(s == score[-1] for s in score[:-1])
    return (1 + less + math.floor(v * (1 + equal))) / n1


@pytest.mark.parametrize("discrete", [True, False])
def test_p_values_equal_the_augmented_set_definition(discrete):
    """Random pools of 1-24 documents and 1-3 statistics (discrete ones full of ties, or continuous; some
    documents equal to a pool document): the O(J^2) shortcut equals the definition computed by brute force."""
    rng = np.random.default_rng(int(discrete))
    for _ in range(150):
        n, J, t = int(rng.integers(1, 25)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        draw = (lambda *s: rng.integers(0, 4, size=s).astype(float)) if discrete else (lambda *s: rng.normal(size=s))
        pool, x = draw(n, J), draw(t, J)
        x[0] = pool[rng.integers(n)]
        pool_ties, x_ties, v = rng.random((n, J)), rng.random((t, J)), rng.random(t)
        got = conformal.ConformalPool(pool, pool_ties).p_values(x, x_ties, v)
        want = [augmented_p(pool, pool_ties, x[i], x_ties[i], v[i]) for i in range(t)]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_own_p_values_are_each_pool_document_against_the_others():
    rng = np.random.default_rng(2)
    for _ in range(60):
        n, J = int(rng.integers(2, 20)), int(rng.integers(1, 4))
        pool, ties, v = rng.integers(0, 3, size=(n, J)).astype(float), rng.random((n, J)), rng.random(n)
        got = conformal.ConformalPool(pool, ties).own_p_values(v)
        want = [augmented_p(np.delete(pool, k, 0), np.delete(ties, k, 0), pool[k], ties[k], v[k]) for k in range(n)]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_one_statistic_gives_the_empirical_p_value():
    """J = 1: p = (1 + #{pool documents above}) / (n + 1), whatever the last tie-break."""
    rng = np.random.default_rng(3)
    pool, x = rng.normal(size=(50, 1)), rng.normal(size=(30, 1))
    p = conformal.ConformalPool(pool, rng.random((50, 1))).p_values(x, rng.random((30, 1)), rng.random(30))
    np.testing.assert_allclose(p, (1 + (pool[:, 0][None] > x)[:, :].sum(axis=1)) / 51, rtol=0, atol=1e-15)


def test_groups_compare_a_document_with_its_own_group_only():
    rng = np.random.default_rng(4)
    pool, groups = rng.normal(size=(40, 2)), rng.integers(0, 3, 40)
    ties = rng.random((40, 2))
    x, x_ties, v, x_groups = rng.normal(size=(12, 2)), rng.random((12, 2)), rng.random(12), rng.integers(0, 3, 12)
    got = conformal.ConformalPool(pool, ties, groups).p_values(x, x_ties, v, x_groups)
    for i in range(12):
        same = groups == x_groups[i]
        assert got[i] == pytest.approx(augmented_p(pool[same], ties[same], x[i], x_ties[i], v[i]), abs=1e-12)


@pytest.mark.parametrize("dependence", ["independent", "identical", "opposed"])
def test_real_documents_p_values_are_uniform_under_any_dependence(dependence):
    """For a document exchangeable with the pool, P(p <= a) = floor(a (n + 1)) / (n + 1) whatever the dependence
    between the statistics (Sidak's combination gave a, 1 - sqrt(1 - a) and 2 (1 - sqrt(1 - a)) here): 20,000
    pools of 39 and one document each."""
    rng = np.random.default_rng(5)
    n, reps = 39, 20_000
    p = np.empty(reps)
    for r in range(reps):
        first = rng.random(n + 1)
        second = {"independent": rng.random(n + 1), "identical": first, "opposed": -first}[dependence]
        z = np.column_stack([first, second])
        pool = conformal.ConformalPool(z[:n], rng.random((n, 2)))
        p[r] = pool.p_values(z[n:], rng.random((1, 2)), rng.random(1))[0]
    for a in (0.025, 0.05, 0.2):
        exact = math.floor(a * (n + 1)) / (n + 1)
        assert np.mean(p <= a) == pytest.approx(exact, abs=4 * math.sqrt(exact / reps))
    # the resolution is 1 / (n + 1) for two statistics as for one
    assert p.min() == pytest.approx(1 / (n + 1))


def test_bh_q_values_give_the_step_up_procedure_at_every_level():
    """q <= a  <=>  the document is among the k* smallest, k* = max{k : p_(k) <= a k / m} (Benjamini & Hochberg)."""
    rng = np.random.default_rng(6)
    for _ in range(200):
        m = int(rng.integers(1, 30))
        p = np.round(rng.random(m) ** 3, 2)  # ties included
        q = conformal.bh_q_values(p)
        for a in (0.0123, 0.0537, 0.1011, 0.2999):  # levels no p m / k hits exactly
            order = np.sort(p)
            passing = [k for k in range(1, m + 1) if order[k - 1] <= a * k / m]
            k_star = max(passing, default=0)
            expected = p <= (order[k_star - 1] if k_star else -1)
            assert np.array_equal(q <= a, expected)
    assert conformal.bh_q_values([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert conformal.bh_q_values([]).shape == (0,)


def test_bh_over_conformal_p_values_controls_the_false_discovery_rate():
    """Bates et al. (2023): BH at 0.1 over conformal p-values of 60 real and 20 shifted documents against one pool
    of 200 real ones: the realised share of real documents among the flags averages at most 0.1 (400 repetitions;
    about 0.1 * 60 / 80 = 0.075 expected), and the shifted ones are found."""
    rng = np.random.default_rng(7)
    shares, found = [], []
    for _ in range(400):
        pool = rng.normal(size=(200, 2))
        docs = np.vstack([rng.normal(size=(60, 2)), rng.normal(size=(20, 2)) + [3.5, 0.0]])
        p = conformal.ConformalPool(pool, rng.random((200, 2))).p_values(docs, rng.random((80, 2)), rng.random(80))
        flagged = conformal.bh_q_values(p) <= 0.1
        shares.append(flagged[:60].sum() / max(flagged.sum(), 1))
        found.append(flagged[60:].mean())
    assert np.mean(shares) <= 0.1 + 3 * np.std(shares) / math.sqrt(400)
    assert np.mean(found) > 0.8


def test_length_groups_cut_the_pool_at_its_quantiles():
    rng = np.random.default_rng(8)
    sizes, other = rng.integers(5, 500, 130), rng.integers(1, 900, 40)
    pool_groups, groups = conformal.length_groups(sizes, other)
    edges = np.quantile(sizes, [0.25, 0.5, 0.75])  # 130 // 30 = 4 groups, [lo, hi)
    assert np.array_equal(pool_groups, np.sum(sizes[:, None] >= edges, axis=1))
    assert np.array_equal(groups, np.sum(other[:, None] >= edges, axis=1))
    assert np.all(conformal.length_groups(sizes[:59], other)[1] == 0)  # under 2 x 30: one group


def test_location_scale_residuals_match_an_independent_least_squares_fit():
    rng = np.random.default_rng(9)
    sizes = rng.integers(10, 2000, 300)
    x = np.log(sizes)
    pool = 1.0 + 0.5 * x + np.exp(0.2 * x) * rng.normal(size=300)
    values, value_sizes = rng.normal(size=20) + 4, rng.integers(1, 5000, 20)
    z_pool, z = conformal.location_scale_residuals(pool, sizes, values, value_sizes)
    design = np.vander(x, 4)
    residual = pool - design @ np.linalg.lstsq(design, pool, rcond=None)[0]
    log_scale = np.vander(x, 3) @ np.linalg.lstsq(np.vander(x, 3), np.log(np.abs(residual) + 1e-12 *
                                                                           np.abs(residual).mean()), rcond=None)[0]
    np.testing.assert_allclose(z_pool, residual / np.exp(log_scale), rtol=1e-6, atol=1e-9)
    xv = np.clip(np.log(value_sizes), x.min(), x.max())
    loc = np.vander(xv, 4) @ np.linalg.lstsq(design, pool, rcond=None)[0]
    scale = np.exp(np.vander(xv, 3) @ np.linalg.lstsq(np.vander(x, 3), np.log(np.abs(residual) + 1e-12 *
                                                                                np.abs(residual).mean()),
                                                      rcond=None)[0])
    np.testing.assert_allclose(z, (values - loc) / scale, rtol=1e-6, atol=1e-9)
    same_pool, same = conformal.location_scale_residuals(pool[:20], sizes[:20], values, value_sizes)
    assert same_pool is not None and np.array_equal(same, values)  # under 30 pool values: as they are


def test_a_pool_needs_documents_and_a_tie_break_each():
    with pytest.raises(ValueError, match="at least one document"):
        conformal.ConformalPool(np.zeros((0, 1)), np.zeros((0, 1)))
    with pytest.raises(ValueError, match="a tie-break per value"):
        conformal.ConformalPool(np.zeros((3, 2)), np.zeros((3, 1)))


def test_smallest_p_value_is_that_of_the_smallest_group():
    assert conformal.smallest_p_value([99, 40, 120]) == pytest.approx(1 / 41)


def test_broken_ties_make_a_discrete_statistic_s_p_values_uniform():
    """A value exchangeable with a pool of n values from {0, 1, 2}: with ties broken by the documents' uniforms
    its p-value is uniform on {1..n+1}/(n+1); counting ties as above (no tie-break) it is conservative (its mean
    is well above 1/2).  Document ids give the same uniform for the same id and key."""
    from critic import stats

    rng = np.random.default_rng(0)
    n, trials = 9, 20_000
    pooled = rng.integers(0, 3, size=(trials, n + 1)).astype(float)  # value and pool exchangeable
    broken = np.array([conformal.ConformalPool(row[1:], rng.random((n, 1))).p_values(row[:1], rng.random((1, 1)),
                                                                                      rng.random(1))[0]
                       for row in pooled])
    counted = (1 + np.sum(pooled[:, 1:] >= pooled[:, :1], axis=1)) / (n + 1)
    counts = np.bincount(np.rint(broken * (n + 1)).astype(int) - 1, minlength=n + 1)
    expected = trials / (n + 1)
    assert counts.sum() == trials and np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
    assert abs(broken.mean() - (n + 2) / (2 * (n + 1))) < 0.01 and counted.mean() > broken.mean() + 0.1
    ids = stats.id_uniforms(["a", "b", "a"], "0:x")
    assert ids[0] == ids[2] != ids[1] and np.all((ids >= 0) & (ids < 1))
