"""Figures and tables of the CTM critic: fig. 6 (topic covariance heatmaps) and table 14 (outliers' topics).

- :func:`aggregated_covariance`: the covariance of a set's *aggregated posterior*
  ``q_agg(z) = (1/N) sum_d N(m_d, diag v_d)``, exactly (no sampling), by the law of total covariance::

      Cov[q_agg] = Cov_d(m_d) + diag(mean_d v_d)

  (``Cov_d`` the empirical covariance of the posterior means over the set, divisor ``N``).  With a
  ``mean_only`` critic the posterior is a point mass and it is ``Cov_d(m_d)``.  ``centred=True``
  gives ``C Cov C`` (``C = I - 11^T/K``), the part that softmax identifies.
  :class:`AggregatedCovariance` computes the same from the projections that score a set, in ``O(K^2)`` memory
  (the report's :meth:`~critic.views.CriticView.posterior_summary`), so the report's fig. 6 does not project the
  set again.
- :func:`clustered_order`: topics ordered by average-linkage hierarchical clustering of the rows of
  the *reference* covariance (``scipy.cluster.hierarchy``, optimal leaf ordering), used for every set.
- :func:`covariance_heatmaps`: one heatmap per set, side by side, values clamped to ``[-5, 5]``
  (app. F), the same colour scale for all (:func:`covariance_heatmaps_figure` returns the figure).
- :func:`top_words` and :func:`outlier_topics` (table 14: for flagged documents, their top topics
  and those topics' top words).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from critic.document import Document
from critic.latent import PointMass
from critic.plots import new_figure, save_figure
from critic.views import PosteriorSummary

from .ctm import centre

__all__ = ["aggregated_covariance", "AggregatedCovariance", "SetCovariance", "clustered_order", "covariance_heatmaps",
           "covariance_caption", "covariance_heatmaps_figure", "top_words", "outlier_topics", "posterior_moments", "projection_moments",
           "moments_covariance"]


def projection_moments(projection) -> tuple[np.ndarray, np.ndarray]:
    """``(m (B, K), v (B, K))`` of a projection's posteriors (``v = 0`` for a point mass), float64 as projected."""
    q = projection.posterior
    if isinstance(q, PointMass):
        m = q.value.detach().cpu().numpy()
        return m, np.zeros_like(m)
    return q.mean.detach().cpu().numpy(), q.variance.detach().cpu().numpy()


def posterior_moments(critic, docs: Sequence[Document]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(ids, m (N, K), v (N, K))`` of the documents that project (``v = 0`` for a point-mass posterior)."""
    ids, ms, vs = [], [], []
    for start in range(0, len(docs), critic.batch_size):
        projection = critic.project(docs[start:start + critic.batch_size])
        if not len(projection):
            continue
        ids += projection.doc_ids
        m, v = projection_moments(projection)
        ms.append(m)
        vs.append(v)
    k = critic.num_topics
    return ids, (np.concatenate(ms) if ms else np.zeros((0, k))), (np.concatenate(vs) if vs else np.zeros((0, k)))


def moments_covariance(m: np.ndarray, v: np.ndarray, *, centred: bool = False) -> np.ndarray:
    """``Cov_d(m_d) + diag(mean_d v_d)`` of posterior moments ``m, v (N, K)``: ``(K, K)``; a ``ValueError`` for
    fewer than 2 documents."""
    if len(m) < 2:
        raise ValueError(f"need at least 2 projected documents for a covariance, got {len(m)}")
    cov = np.cov(m, rowvar=False, bias=True) + np.diag(v.mean(0))
    return centre(cov, covariance=True) if centred else cov


def aggregated_covariance(critic, docs: Sequence[Document], *, centred: bool = False) -> np.ndarray:
    """``Cov_d(m_d) + diag(mean_d v_d)`` over the documents of ``docs`` that project: ``(K, K)``."""
    _, m, v = posterior_moments(critic, docs)
    return moments_covariance(m, v, centred=centred)


@dataclass(frozen=True)
class SetCovariance:
    """A set's aggregated-posterior covariance as :class:`AggregatedCovariance` keeps it: ``n`` documents
    projected, ``covariance (K, K)`` (``None`` when ``n < 2``)."""

    n: int
    covariance: np.ndarray | None


class AggregatedCovariance(PosteriorSummary):
    """:func:`aggregated_covariance` of a set from the projections that score it (the CTM view's
    :meth:`~critic.views.CriticView.posterior_summary`), in ``O(K^2)`` memory however many documents the set has:
    each batch's mean, covariance and summed variances, merged into the running ones (Chan et al.'s pairwise
    update).  :meth:`result` gives a :class:`SetCovariance`.  A set scored in one batch (the CTM's ``batch_size`` is
    4,096 documents) gets the very numbers of :func:`aggregated_covariance`; one of several batches the same to
    rounding (``~1e-15`` relative)."""

    def __init__(self) -> None:
        self.n = 0
        self._mean: np.ndarray | None = None
        self._cov: np.ndarray | None = None  # divisor n
        self._v_sum: np.ndarray | None = None

    def add(self, projection) -> None:
        if not len(projection):
            return
        m, v = projection_moments(projection)
        b = len(m)
        mean, cov, v_sum = m.mean(0), np.cov(m, rowvar=False, bias=True), v.sum(0)
        if self._mean is None:
            self.n, self._mean, self._cov, self._v_sum = b, mean, cov, v_sum
            return
        n = self.n + b
        delta = mean - self._mean
        self._cov = (self.n * self._cov + b * cov + np.outer(delta, delta) * (self.n * b / n)) / n
        self._mean = self._mean + delta * (b / n)
        self._v_sum = self._v_sum + v_sum
        self.n = n

    def result(self) -> SetCovariance:
        if self.n < 2:
            return SetCovariance(self.n, None)
        return SetCovariance(self.n, self._cov + np.diag(self._v_sum / self.n))


def clustered_order(reference_cov: np.ndarray, *, method: str = "average") -> np.ndarray:
    """A permutation of the topics: leaves of a hierarchical clustering of the covariance's rows."""
    from scipy.cluster.hierarchy import leaves_list, linkage, optimal_leaf_ordering
    from scipy.spatial.distance import pdist

    cov = np.asarray(reference_cov, dtype=np.float64)
    if cov.shape[0] < 3:
        return np.arange(cov.shape[0])
    dist = pdist(cov)
    tree = linkage(dist, method=method)
    return leaves_list(optimal_leaf_ordering(tree, dist))


def covariance_heatmaps(covariances: Mapping[str, np.ndarray], path: str | Path, *, reference: str | None = None,
                        clamp: float = 5.0, order: np.ndarray | None = None,
                        latent_nll: Mapping[str, float] | None = None, caption: str | None = None) -> Path:
    """:func:`covariance_heatmaps_figure` saved at ``path`` (PNG, or SVG for ``.svg``; atomically), with ``caption``
    (default: :func:`covariance_caption`)."""
    return save_figure(covariance_heatmaps_figure(covariances, reference=reference, clamp=clamp, order=order,
                                                  latent_nll=latent_nll), path,
                       caption=caption or covariance_caption(list(covariances), reference=reference, clamp=clamp,
                                                             order=order is not None, latent_nll=bool(latent_nll)))


def covariance_caption(names: Sequence[str], *, reference: str | None = None, clamp: float = 5.0,
                       order: bool = False, latent_nll: bool = False) -> str:
    """What :func:`covariance_heatmaps_figure` shows, as its caption."""
    reference = names[0] if reference is None and names else reference
    ordered = ("in the order given" if order else
               f"ordered by a hierarchical clustering of the rows of '{reference}'s covariance")
    sets = ", ".join(f"'{name}'" for name in names)
    return (f"Topic covariance of each set's aggregated posterior (paper fig. 6): one heatmap per set ({sets}), "
            f"topics {ordered}, values clamped to [-{clamp:g}, {clamp:g}] (red: positive, blue: negative)"
            + ("; each set's Latent NLL in its title." if latent_nll else "."))


def covariance_heatmaps_figure(covariances: Mapping[str, np.ndarray], *, reference: str | None = None,
                               clamp: float = 5.0, order: np.ndarray | None = None,
                               latent_nll: Mapping[str, float] | None = None):
    """Fig. 6: one heatmap per set (``name -> (K, K)`` covariance), topics ordered by
    :func:`clustered_order` of the ``reference`` set's covariance (default: the first), values
    clamped to ``[-clamp, clamp]``; ``latent_nll`` (name -> value) goes into the titles.  Returns the
    matplotlib figure (on its own Agg canvas)."""
    names = list(covariances)
    if not names:
        raise ValueError("no covariance to plot")
    reference = names[0] if reference is None else reference
    if order is None:
        order = clustered_order(covariances[reference])
    fig = new_figure(figsize=(4.2 * len(names) + 0.8, 4.2))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    image = None
    for ax, name in zip(axes, names):
        cov = np.clip(np.asarray(covariances[name])[np.ix_(order, order)], -clamp, clamp)
        image = ax.imshow(cov, cmap="RdBu_r", vmin=-clamp, vmax=clamp, interpolation="nearest")
        title = name + (f" (Latent NLL {latent_nll[name]:.2f})" if latent_nll and name in latent_nll else "")
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=list(axes), shrink=0.8)
    return fig


def top_words(critic, n: int = 10) -> list[list[str]]:
    """The ``n`` most probable words of each topic (topic id = list index)."""
    return critic.topic_words(n)


def outlier_topics(critic, docs: Sequence[Document], flagged: Sequence[str] | None = None, *, top: int = 10,
                   n_topics: int = 3, n_words: int = 8) -> list[dict]:
    """Table 14: for each flagged document, its ``n_topics`` heaviest topics (``softmax(m)``) and their words.

    ``flagged``: document ids (as from ``CriticismResult.outliers``); ``None`` scores ``docs`` and
    takes the ``top`` with the highest ``T(x)``.  Each row: ``id``, ``latent_nll`` (``T(x)``) and
    ``topics`` = ``[{"topic", "weight", "words"}]``.
    """
    by_id = {d.id: d for d in docs}
    scores = critic.score(docs if flagged is None else [by_id[i] for i in flagged])
    t = dict(zip(scores.doc_ids, scores.latent_nll.tolist()))
    if flagged is None:
        flagged = sorted(t, key=t.get, reverse=True)[:top]
    flagged = [i for i in flagged if i in t]
    ids, m, _ = posterior_moments(critic, [by_id[i] for i in flagged])
    words = critic.topic_words(n_words)
    weights = torch.softmax(torch.as_tensor(m), -1).numpy()
    rows = []
    for doc_id, w in zip(ids, weights):
        best = np.argsort(-w)[:n_topics]
        rows.append({"id": doc_id, "latent_nll": t[doc_id],
                     "topics": [{"topic": int(k), "weight": float(w[k]), "words": words[k]} for k in best]})
    return rows
