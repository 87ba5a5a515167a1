"""Agreement with judgments: correlations against scipy, R^2 against numpy."""

import numpy as np
import pytest
from scipy import stats

from critics.metrics import correlations, r_squared


def test_correlations_match_scipy_and_hand_values():
    x = [1.0, 2.0, 3.0, 4.0]
    y = [1.0, 3.0, 2.0, 4.0]
    out = correlations(x, y)
    assert out["pearson"] == pytest.approx(0.8)  # cov 1.25 / (var 1.25)
    assert out["spearman"] == pytest.approx(0.8)
    assert out["kendall"] == pytest.approx(2 / 3)  # 5 concordant, 1 discordant of 6
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=50), rng.normal(size=50)
    out = correlations(a, b)
    assert out["pearson"] == pytest.approx(stats.pearsonr(a, b).statistic)
    assert out["spearman"] == pytest.approx(stats.spearmanr(a, b).statistic)
    assert out["kendall_p"] == pytest.approx(stats.kendalltau(a, b).pvalue)


def test_r_squared():
    rng = np.random.default_rng(4)
    x = rng.normal(size=40)
    y = 2 * x + rng.normal(scale=0.5, size=40)
    assert r_squared(x, y) == pytest.approx(stats.pearsonr(x, y).statistic ** 2)
    # perfect linear fit
    assert r_squared([1, 2, 3], [3, 5, 7]) == pytest.approx(1.0)
    # two regressors against numpy's least squares
    x2 = rng.normal(size=40)
    design = np.column_stack([np.ones(40), x, x2])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    want = 1 - np.sum((y - design @ coef) ** 2) / np.sum((y - y.mean()) ** 2)
    assert r_squared(np.column_stack([x, x2]), y) == pytest.approx(want)
    # hand case: y = [1, 2, 2, 3] on x = [0, 1, 2, 3]: slope 0.6, fitted 1.1 1.7 2.3 2.9
    assert r_squared([0, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(1 - 0.2 / 2.0)
