"""Figures: the T(x) posterior-predictive histogram (more per critic in ``critics``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .criticism import CriticismResult

__all__ = ["latent_nll_histogram"]


def latent_nll_histogram(result: "CriticismResult", path: str | Path, *, top: int = 10,
                         bins: int = 30) -> Path:
    """Histogram of ``T(x)/M(x)`` per set (reference filled, candidates outlined),
    with the ``top`` flagged outliers marked on the axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_set = {s.name: np.array([d.latent_nll_per_step for d in s.documents]) for s in result.sets}
    finite = np.concatenate([v[np.isfinite(v)] for v in per_set.values() if v.size] or [np.zeros(1)])
    edges = np.histogram_bin_edges(finite, bins=bins)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for k, (name, values) in enumerate(per_set.items()):
        style = dict(alpha=0.5) if k == 0 else dict(histtype="step", linewidth=1.6)
        ax.hist(values[np.isfinite(values)], bins=edges, density=True, label=f"{name} (n={values.size})", **style)
    flagged = [d.latent_nll_per_step for _, d in result.outliers(top=top)]
    ax.plot(flagged, np.zeros(len(flagged)), "rv", markersize=8, label=f"top {len(flagged)} outliers")
    ax.set_xlabel("Latent NLL per latent step, T(x)/M(x)")
    ax.set_ylabel("density")
    ax.set_title(f"Posterior predictive check: {result.critic}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
