"""Figures: the T(x) posterior-predictive histogram, and the figure helpers critics use.

Figures are drawn with matplotlib's object API on an Agg canvas
(:func:`new_figure`): no ``pyplot``, no global backend switch, no state left
behind.  :func:`save_figure` writes the PNG atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .io import atomic_open
from .results import CriticismResult

__all__ = ["new_figure", "save_figure", "svg_markup", "latent_nll_histogram", "latent_nll_histogram_figure"]


def new_figure(figsize: tuple[float, float] = (7, 4), dpi: int = 120):
    """A matplotlib ``Figure`` on its own Agg canvas (no pyplot, no backend change)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: str | Path) -> Path:
    """Save ``fig`` at ``path``, atomically: SVG for a ``.svg`` name, else PNG."""
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="svg" if path.suffix == ".svg" else "png")
    return path


def svg_markup(fig) -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML: no XML prolog, no DOCTYPE, glyphs as paths
    (nothing to fetch), ids and metadata deterministic (no date)."""
    import io

    from matplotlib import rc_context

    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": "critic"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})  # the same figure, the same bytes
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def latent_nll_histogram(result: CriticismResult, path: str | Path, *, top: int = 10,
                         bins: int = 30) -> Path:
    """:func:`latent_nll_histogram_figure` saved at ``path`` (PNG, or SVG for ``.svg``)."""
    return save_figure(latent_nll_histogram_figure(result, top=top, bins=bins), path)


def latent_nll_histogram_figure(result: CriticismResult, *, top: int = 10, bins: int = 30,
                                flagged: Sequence[float] | None = None):
    """Histogram of ``T(x)/M(x)`` per set (reference filled, candidates outlined), with the ``top``
    outliers of :meth:`CriticismResult.outliers` marked on the axis -- or, given ``flagged`` (their
    ``T(x)/M(x)``), exactly the documents a report flags."""
    per_set = {s.name: np.array([d.latent_nll_per_step for d in s.documents]) for s in result.sets}
    finite = np.concatenate([v[np.isfinite(v)] for v in per_set.values() if v.size] or [np.zeros(1)])
    edges = np.histogram_bin_edges(finite, bins=bins)
    fig = new_figure()
    ax = fig.subplots()
    for k, (name, values) in enumerate(per_set.items()):
        style = dict(alpha=0.5) if k == 0 else dict(histtype="step", linewidth=1.6)
        shown = values[np.isfinite(values)]
        if not shown.size:  # a density of no values is 0/0: list the empty set in the legend only
            ax.plot([], [], label=f"{name} (n=0)")
            continue
        ax.hist(shown, bins=edges, density=True, label=f"{name} (n={values.size})", **style)
    if flagged is None:
        marked, label = [d.latent_nll_per_step for _, d in result.outliers(top=top)], "top {} outliers"
    else:
        marked, label = list(flagged), "{} flagged"
    ax.plot(marked, np.zeros(len(marked)), "rv", markersize=8, label=label.format(len(marked)))
    ax.set_xlabel("Latent NLL per latent step, T(x)/M(x)")
    ax.set_ylabel("density")
    ax.set_title(f"Posterior predictive check: {result.critic_name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
