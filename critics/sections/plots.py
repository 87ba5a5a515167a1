"""Paper fig. 4 as a heatmap: where a candidate set's section transitions differ from real data.

Cell (i, j) shows P_cand(z_m = j | z_{m-1} = i) - P_ref(z_m = j | z_{m-1} = i), the empirical
transition distributions of the two sets (rows are normalised counts); cells whose transition
the fitted prior finds unlikely (P_c < ``threshold``) are outlined in red, as in the paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from critic.document import Document
from critic.plots import new_figure, save_figure

from .analysis import transition_counts
from .critic import SectionTransitionCritic

__all__ = ["empirical_transitions", "transition_difference_heatmap"]


def empirical_transitions(critic: SectionTransitionCritic, docs: Sequence[Document], labels: list[str]) -> np.ndarray:
    """Row-normalised transition frequencies over ``labels`` (rows with no count stay zero)."""
    index = {t: i for i, t in enumerate(labels)}
    counts = np.zeros((len(labels), len(labels)))
    for (a, b), n in transition_counts(critic, docs).items():
        if a in index and b in index:
            counts[index[a], index[b]] += n
    rows = counts.sum(1, keepdims=True)
    return np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)


def transition_difference_heatmap(critic: SectionTransitionCritic, reference: Sequence[Document],
                                  candidate: Sequence[Document], path: str | Path, *, name: str = "candidate",
                                  top: int = 20, threshold: float = 0.05) -> Path:
    """Heatmap of ``P_cand - P_ref`` over ``<bos>``, the ``top`` most frequent types and ``<eos>``,
    saved as PNG at ``path`` (atomically, on its own Agg canvas)."""
    from matplotlib.patches import Rectangle

    labels = ["<bos>", *[t for t in critic.vocab_ if t != "<unk>"][:top], "<eos>"]
    diff = empirical_transitions(critic, candidate, labels) - empirical_transitions(critic, reference, labels)
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
    ax.set_title(f"P_{name}(z_m | z_m-1) - P_real; red: P_c < {threshold}", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    return save_figure(fig, path)
