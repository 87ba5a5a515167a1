"""Paper fig. 4: where a candidate set's section transitions differ from real data.

Both figures compare the empirical transition distributions of two sets of *paths* (the
section types each document goes through, see :func:`critics.sections.analysis.section_paths`):

    D(i -> j) = P_cand(z_m = j | z_{m-1} = i) - P_ref(z_m = j | z_{m-1} = i),

each row the normalised transition counts of its set.  Transitions the fitted prior finds
unlikely (``P_c(j | i) < threshold``, the paper: 0.05) are marked red.

* :func:`transition_difference_graph` -- the paper's figure: the ``top`` most frequent section
  types as nodes on a circle, an arrow per transition whose difference is large, labelled
  with D, width proportional to |D|; nodes left without an edge are removed.
* :func:`transition_difference_heatmap` -- every cell of D at once.

Each ``*_figure`` function returns the matplotlib figure (for the HTML report); the function of the
same name without it saves that figure as a PNG with its caption (:func:`graph_caption`,
:func:`heatmap_caption`: what a report shows under it).  Titles and captions name both sets,
``P_NAME(z_m | z_m-1) - P_REFERENCE(z_m | z_m-1)`` (``name``, ``reference_name``: the sets' names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from critic.plots import new_figure, save_figure

from .analysis import transition_counts
from .critic import UNKNOWN, SectionTransitionCritic

__all__ = ["empirical_transitions", "TransitionDifference", "transition_differences",
           "transition_difference_graph", "transition_difference_graph_figure", "transition_difference_heatmap",
           "transition_difference_heatmap_figure", "graph_caption", "heatmap_caption"]


def graph_caption(name: str, reference: str, *, top: int = 20, threshold: float = 0.05,
                  min_difference: float = 0.02) -> str:
    """What :func:`transition_difference_graph_figure` shows, as its caption."""
    return (f"Section transitions of '{name}' against '{reference}' (paper fig. 4): among the {top} most "
            f"frequent section types, an arrow for each transition whose share differs by at least "
            f"{min_difference}, labelled P_{name}(z_m | z_m-1) - P_{reference}(z_m | z_m-1), its width "
            f"growing with the difference; red: transitions the fitted prior finds unlikely "
            f"(P_c < {threshold}).")


def heatmap_caption(name: str, reference: str, *, top: int = 20, threshold: float = 0.05) -> str:
    """What :func:`transition_difference_heatmap_figure` shows, as its caption."""
    return (f"Section transitions of '{name}' against '{reference}' (paper fig. 4 as a heatmap): "
            f"P_{name}(z_m | z_m-1) - P_{reference}(z_m | z_m-1) for every transition among <bos>, the {top} most "
            f"frequent section types and <eos> (row: z_m-1, column: z_m); red: more frequent in '{name}', blue: "
            f"less; boxed in red: transitions the fitted prior finds unlikely (P_c < {threshold}).")


def empirical_transitions(paths: Iterable[Sequence[str] | None], labels: list[str]) -> np.ndarray:
    """``(L, L)`` row-normalised transition frequencies over ``labels`` (rows with no count stay zero).

    Rows count every transition out of a label, including those to labels not shown, so a row is
    the set's full conditional distribution restricted to ``labels``.
    """
    index = {t: i for i, t in enumerate(labels)}
    counts = np.zeros((len(labels), len(labels)))
    totals = np.zeros(len(labels))
    for (a, b), n in transition_counts(paths).items():
        if a in index:
            totals[index[a]] += n
            if b in index:
                counts[index[a], index[b]] += n
    return np.divide(counts, totals[:, None], out=np.zeros_like(counts), where=totals[:, None] > 0)


def _top_types(critic: SectionTransitionCritic, top: int) -> list[str]:
    """The ``top`` most frequent section types of the critic's training data (``vocab_`` order)."""
    return [t for t in critic.vocab_ if t != UNKNOWN][:top]


@dataclass(frozen=True)
class TransitionDifference:
    previous: str
    current: str
    difference: float     # P_cand(current | previous) - P_ref(current | previous)
    prior: float          # P_c(current | previous) under the fitted prior
    unlikely: bool        # prior < threshold (red in the figure)


def transition_differences(critic: SectionTransitionCritic, reference: Iterable[Sequence[str] | None],
                           candidate: Iterable[Sequence[str] | None], *, top: int = 20, threshold: float = 0.05,
                           min_difference: float = 0.02, max_edges: int = 40) -> list[TransitionDifference]:
    """The edges of fig. 4: transitions among the ``top`` types with ``|D| >= min_difference``,
    the ``max_edges`` largest ``|D|`` first (ties: by names)."""
    labels = _top_types(critic, top)
    diff = empirical_transitions(candidate, labels) - empirical_transitions(reference, labels)
    rows, cols = np.nonzero(np.abs(diff) >= min_difference)
    edges = []
    for i, j in zip(rows.tolist(), cols.tolist()):
        prior = critic.transition_probability(labels[i], labels[j])
        edges.append(TransitionDifference(labels[i], labels[j], float(diff[i, j]), prior, prior < threshold))
    edges.sort(key=lambda e: (-abs(e.difference), e.previous, e.current))
    return edges[:max_edges]


def transition_difference_graph(critic: SectionTransitionCritic, reference: Iterable[Sequence[str] | None],
                                candidate: Iterable[Sequence[str] | None], path: str | Path, *,
                                name: str = "candidate", reference_name: str = "reference", top: int = 20,
                                threshold: float = 0.05, min_difference: float = 0.02, max_edges: int = 40) -> Path:
    """:func:`transition_difference_graph_figure` saved as PNG at ``path`` (atomically), with its caption."""
    return save_figure(transition_difference_graph_figure(
        critic, reference, candidate, name=name, reference_name=reference_name, top=top, threshold=threshold,
        min_difference=min_difference, max_edges=max_edges), path,
        caption=graph_caption(name, reference_name, top=top, threshold=threshold, min_difference=min_difference))


def transition_difference_graph_figure(critic: SectionTransitionCritic, reference: Iterable[Sequence[str] | None],
                                       candidate: Iterable[Sequence[str] | None], *, name: str = "candidate",
                                       reference_name: str = "reference", top: int = 20, threshold: float = 0.05,
                                       min_difference: float = 0.02, max_edges: int = 40):
    """Fig. 4 as a directed graph: a matplotlib ``Figure`` on its own Agg canvas.

    Nodes: the ``top`` most frequent section types that keep an edge, on a circle.  Edges: see
    :func:`transition_differences`; label D, width ``0.5 + 6 |D|``, red where ``P_c < threshold``,
    a self-loop above its node for a repeated type.
    """
    from matplotlib.patches import Circle, FancyArrowPatch

    reference, candidate = list(reference), list(candidate)
    edges = transition_differences(critic, reference, candidate, top=top, threshold=threshold,
                                   min_difference=min_difference, max_edges=max_edges)
    nodes = [t for t in _top_types(critic, top) if any(t in (e.previous, e.current) for e in edges)]
    angle = {t: math.pi / 2 - 2 * math.pi * k / max(len(nodes), 1) for k, t in enumerate(nodes)}
    pos = {t: (math.cos(a), math.sin(a)) for t, a in angle.items()}
    fig = new_figure(figsize=(9, 9), dpi=110)
    ax = fig.subplots()
    for e in edges:
        color = "#d62728" if e.unlikely else "#555555"
        width = 0.5 + 6 * abs(e.difference)
        label = f"{e.difference:+.2f}"
        x, y = pos[e.previous]
        if e.previous == e.current:  # self-loop outside the circle, in the node's direction
            a = angle[e.previous]
            cx, cy = 1.16 * math.cos(a), 1.16 * math.sin(a)
            ax.add_patch(Circle((cx, cy), 0.09, fill=False, edgecolor=color, linewidth=width))
            ax.text(1.32 * math.cos(a), 1.32 * math.sin(a), label, color=color, fontsize=7, ha="center",
                    va="center")
            continue
        x2, y2 = pos[e.current]
        ax.add_patch(FancyArrowPatch((x, y), (x2, y2), connectionstyle="arc3,rad=0.12", arrowstyle="-|>",
                                     mutation_scale=10 + 4 * width, linewidth=width, color=color,
                                     shrinkA=14, shrinkB=14, alpha=0.8))
        mx, my = (x + x2) / 2, (y + y2) / 2
        nx, ny = (y2 - y) * 0.06, (x - x2) * 0.06  # the arc bends to the right of the direction of travel
        ax.text(mx + nx, my + ny, label, color=color, fontsize=7, ha="center", va="center",
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7})
    for t, (x, y) in pos.items():
        ax.text(x, y, t, fontsize=8, ha="center", va="center", zorder=3,
                bbox={"boxstyle": "round,pad=0.3", "fc": "#e8eef7", "ec": "#3b5b92"})
    ax.set_xlim(-1.55, 1.55)
    ax.set_ylim(-1.55, 1.55)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"P_{name}(z_m | z_m-1) - P_{reference_name}(z_m | z_m-1); width ~ |difference|; "
                 f"red: P_c < {threshold}"
                 + ("" if edges else f" (no transition differs by >= {min_difference})"), fontsize=9)
    fig.tight_layout()
    return fig


def transition_difference_heatmap(critic: SectionTransitionCritic, reference: Iterable[Sequence[str] | None],
                                  candidate: Iterable[Sequence[str] | None], path: str | Path, *,
                                  name: str = "candidate", reference_name: str = "reference", top: int = 20,
                                  threshold: float = 0.05) -> Path:
    """:func:`transition_difference_heatmap_figure` saved as PNG at ``path`` (atomically), with its caption."""
    return save_figure(transition_difference_heatmap_figure(critic, reference, candidate, name=name,
                                                            reference_name=reference_name, top=top,
                                                            threshold=threshold), path,
                       caption=heatmap_caption(name, reference_name, top=top, threshold=threshold))


def transition_difference_heatmap_figure(critic: SectionTransitionCritic,
                                         reference: Iterable[Sequence[str] | None],
                                         candidate: Iterable[Sequence[str] | None], *, name: str = "candidate",
                                         reference_name: str = "reference", top: int = 20, threshold: float = 0.05):
    """Heatmap of ``P_cand - P_ref`` over ``<bos>``, the ``top`` most frequent types and ``<eos>``:
    a matplotlib ``Figure`` on its own Agg canvas."""
    from matplotlib.patches import Rectangle

    labels = ["<bos>", *_top_types(critic, top), "<eos>"]
    diff = empirical_transitions(candidate, labels) - empirical_transitions(reference, labels)
    fig = new_figure(figsize=(1.0 + 0.42 * len(labels), 0.8 + 0.4 * len(labels)), dpi=110)
    ax = fig.subplots()
    bound = max(float(np.abs(diff).max()), 1e-6)
    im = ax.imshow(diff, cmap="RdBu_r", vmin=-bound, vmax=bound)
    for i, a in enumerate(labels[:-1]):
        for j, b in enumerate(labels[1:], start=1):
            if critic.transition_probability(a, b) < threshold and abs(diff[i, j]) > 1e-9:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("z_m")
    ax.set_ylabel("z_{m-1}")
    ax.set_title(f"P_{name}(z_m | z_m-1) - P_{reference_name}(z_m | z_m-1); red: P_c < {threshold}", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig
