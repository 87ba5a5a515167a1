"""Agreement of a metric with human judgments: Pearson, Spearman and Kendall correlations (scipy) and
the R-squared of regressing the judgments on one or more metrics (seed 000, sec. 4.5, which regresses
average human ratings on tau, Acc and WLCS-l; seeds 001 and 003 report Spearman, Kendall and Pearson).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["correlations", "r_squared"]


def correlations(metric: Sequence[float], judgments: Sequence[float]) -> dict[str, float]:
    """Pearson r, Spearman rho and Kendall tau-b of ``metric`` against ``judgments`` with p-values."""
    from scipy import stats  # imported when used: scipy.stats takes 0.4 s, which `critic --help` need not pay

    x = np.asarray(metric, dtype=float)
    y = np.asarray(judgments, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise ValueError("need two equal-length 1-d sequences of at least 3 values")
    out = {}
    for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)):
        res = fn(x, y)
        out[name] = float(res.statistic)
        out[f"{name}_p"] = float(res.pvalue)
    out["n"] = len(x)
    return out


def r_squared(metrics, judgments: Sequence[float]) -> float:
    """R^2 of the ordinary least-squares regression judgments ~ 1 + metrics.

    ``metrics``: one sequence (simple regression, R^2 = Pearson r^2) or a (n, k) array of k metrics.
    R^2 = 1 - SS_res / SS_tot.
    """
    y = np.asarray(judgments, dtype=float)
    x = np.asarray(metrics, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] != len(y):
        raise ValueError("metrics and judgments differ in length")
    design = np.column_stack([np.ones(len(y)), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0:
        raise ValueError("judgments are constant")
    return 1.0 - float(resid @ resid) / ss_tot
