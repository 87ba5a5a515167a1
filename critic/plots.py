"""Figures: the T(x) posterior-predictive histogram, and the figure helpers critics use.

Figures are drawn with matplotlib's object API on an Agg canvas
(:func:`new_figure`): no ``pyplot``, no global backend switch, no state left
behind.  :func:`save_figure` writes the PNG atomically, with its caption in the file (PNG ``Description`` text,
SVG ``dc:description``) where one is given: :func:`figure_caption` reads it back, and a report shows a figure file
under its caption rather than its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .io import atomic_open
from .results import CriticismResult

__all__ = ["new_figure", "save_figure", "figure_caption", "svg_markup", "latent_nll_histogram",
           "latent_nll_histogram_figure"]


def new_figure(figsize: tuple[float, float] = (7, 4), dpi: int = 120):
    """A matplotlib ``Figure`` on its own Agg canvas (no pyplot, no backend change)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: str | Path, *, caption: str | None = None) -> Path:
    """Save ``fig`` at ``path``, atomically: SVG for a ``.svg`` name, else PNG; ``caption`` (one sentence or a few
    saying what the figure shows) kept in the file, for :func:`figure_caption`."""
    path = Path(path)
    svg = path.suffix == ".svg"
    metadata = {"Description": caption} if caption else {}
    if svg:
        metadata["Date"] = None
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="svg" if svg else "png", metadata=metadata)
    return path


def figure_caption(path: str | Path) -> str | None:
    """The caption :func:`save_figure` kept in the figure file at ``path`` (a PNG's ``Description`` text, an SVG's
    ``dc:description``); ``None`` for a file without one, of another kind, or unreadable."""
    path = Path(path)
    try:
        if path.suffix == ".svg":
            import html
            import re

            found = re.search(r"<dc:description>(.*?)</dc:description>", path.read_text(encoding="utf-8"), re.S)
            return html.unescape(found.group(1)) if found else None
        with open(path, "rb") as fh:
            if fh.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
        from PIL import Image

        with Image.open(path) as image:
            return image.text.get("Description") or None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


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
