"""Paper fig. 7: samples from the topic posterior on the 2-simplex, one panel per set of documents.

The paper plots "samples from the topic posterior ``E_{P_x} P_c(z|x)``": the posterior averaged over a
set's documents, i.e. for each document ``x`` of the set, draws ``z ~ P_c(z|x) = Dirichlet(gamma(x))``.
:func:`posterior_points` draws ``samples`` such points per document (seeded; ``mean=True`` gives the
posterior means ``gamma / sum gamma`` instead), and :func:`simplex_scatter` draws any sets of points on
the simplex of ``M = 3`` topics in its ternary projection: topic ``k``'s corner is where a document is all
in topic ``k`` (one language); points inside the triangle are mixed documents.  Monolingual text piles
up at the corners; code-mixed text spreads along the edges and inside.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from critic.document import Document
from critic.plots import new_figure, save_figure

from .lda import LdaCodeMixCritic, topic_labels

__all__ = ["posterior_points", "gamma_points", "ternary", "simplex_scatter", "mean_weights_figure",
           "code_mixing_figure", "CORNERS"]

CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3) / 2]])
"""Plane positions of the three topics' corners (topic 0 bottom left, 1 bottom right, 2 top)."""


def ternary(points: np.ndarray) -> np.ndarray:
    """Points ``(n, 3)`` of the simplex as plane coordinates ``(n, 2)`` (rows renormalised to sum 1)."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"a ternary plot needs points of 3 topics, got shape {points.shape}")
    points = points / points.sum(1, keepdims=True)
    return points @ CORNERS


def posterior_points(critic: LdaCodeMixCritic, docs: Sequence[Document], *, samples: int = 1, mean: bool = False,
                     seed: int = 0) -> tuple[np.ndarray, dict[str, str]]:
    """``(points (n * samples, M), failures)``: ``samples`` draws from each projected document's posterior
    (seeded; the global RNG is left alone), or its posterior mean once with ``mean=True``."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    chunks, failures = [], {}
    for k, start in enumerate(range(0, len(docs), critic.batch_size)):
        p = critic.project(docs[start:start + critic.batch_size])
        failures.update(p.failures)
        if not len(p):
            continue
        chunks.append(gamma_points(p.posterior.concentration, samples=samples, mean=mean, seed=seed + k))
    return (np.concatenate(chunks) if chunks else np.zeros((0, critic.num_topics))), failures


def gamma_points(gamma, *, samples: int = 1, mean: bool = False, seed: int = 0) -> np.ndarray:
    """``(n * samples, M)`` draws from ``Dirichlet(gamma)`` for each row of ``gamma (n, M)`` (seeded; the global
    RNG is left alone), a document's ``samples`` draws together; or the means ``gamma / sum gamma``."""
    gamma = torch.as_tensor(gamma, dtype=torch.float64)
    if mean:
        return (gamma / gamma.sum(-1, keepdim=True)).detach().cpu().numpy()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        z = torch.distributions.Dirichlet(gamma, validate_args=bool(len(gamma))).sample((samples,))  # (S, n, M)
    return z.transpose(0, 1).reshape(-1, gamma.shape[-1]).detach().cpu().numpy()


def simplex_scatter(sets: Mapping[str, np.ndarray], path: str | Path | None = None, *,
                    labels: Sequence[str] | None = None, title: str | None = None, alpha: float = 0.3,
                    size: float = 6.0):
    """One ternary panel per set of points ``(n, 3)`` (fig. 7); saves a PNG at ``path`` when given.
    Returns the figure.  ``labels``: the three corners' names (default ``topic 0..2``)."""
    if not sets:
        raise ValueError("no set of points to plot")
    labels = list(labels) if labels is not None else [f"topic {k}" for k in range(3)]
    if len(labels) != 3:
        raise ValueError(f"a ternary plot needs 3 corner labels, got {len(labels)}")
    fig = new_figure(figsize=(3.6 * len(sets), 3.8))
    axes = fig.subplots(1, len(sets), squeeze=False)[0]
    for ax, (name, points) in zip(axes, sets.items()):
        xy = ternary(points) if len(points) else np.zeros((0, 2))
        ax.plot(*np.vstack([CORNERS, CORNERS[:1]]).T, color="black", linewidth=0.8)
        ax.scatter(xy[:, 0], xy[:, 1], s=size, alpha=alpha, linewidths=0)
        for (x, y), label, dy in zip(CORNERS, labels, (-0.06, -0.06, 0.04)):
            ax.text(x, y + dy, label, ha="center", va="top" if dy < 0 else "bottom", fontsize=7)
        ax.set_title(f"{name} (n={len(points)})", fontsize=9)
        ax.set_xlim(-0.12, 1.12)
        ax.set_ylim(-0.14, 1.0)
        ax.set_aspect("equal")
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def mean_weights_figure(means: Mapping[str, np.ndarray], *, labels: Sequence[str] | None = None,
                        title: str | None = None):
    """Grouped bars: each set's mean topic weights (``name -> (M,)``), one group per topic; returns the
    figure (for ``M != 3``, where no simplex can be drawn)."""
    if not means:
        raise ValueError("no set of topic weights to plot")
    m = len(next(iter(means.values())))
    labels = list(labels) if labels is not None else [f"topic {k}" for k in range(m)]
    fig = new_figure(figsize=(max(5.0, 0.5 * m * max(len(means), 1) + 2.0), 3.8))
    ax = fig.subplots()
    width = 0.8 / len(means)
    for k, (name, values) in enumerate(means.items()):
        ax.bar(np.arange(m) + (k - (len(means) - 1) / 2) * width, np.asarray(values, dtype=np.float64), width,
               label=name)
    ax.set_xticks(range(m), labels, rotation=45 if m > 3 else 0, ha="right" if m > 3 else "center", fontsize=7)
    ax.set_ylabel("mean topic weight")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def code_mixing_figure(critic: LdaCodeMixCritic, sets: Mapping[str, Sequence[Document]], path: str | Path, *,
                       samples: int = 1, mean: bool = False, seed: int = 0,
                       labels: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """Fig. 7 for a fitted 3-topic critic: posterior samples of each set's documents (one panel per set)
    saved at ``path``.  Corner labels default to each topic's three most probable words.  Returns the
    documents of each set that could not be projected, with why (they are not plotted)."""
    if critic.num_topics != 3:
        raise ValueError(f"the simplex figure needs a 3-topic critic, this one has {critic.num_topics} topics")
    points, failures = {}, {}
    for name, docs in sets.items():
        points[name], failures[name] = posterior_points(critic, docs, samples=samples, mean=mean, seed=seed)
    what = "posterior means" if mean else f"{samples} posterior sample{'s' if samples > 1 else ''} per document"
    simplex_scatter(points, path, labels=labels if labels is not None else topic_labels(critic),
                    title=f"LDA topic posterior ({what})")
    return failures
