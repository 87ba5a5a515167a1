"""What the topic critics show in the HTML report (drawn for their view, :mod:`critics.topics.view`).

- CTM (:class:`~critics.topics.ctm_critic.CorrelatedTopicCritic`): paper fig. 6 per candidate set, its
  aggregated-posterior topic covariance beside the reference's in the reference's clustered topic order
  (:func:`ctm_figures`; the covariances kept while the sets were scored, :func:`set_covariance`); a flagged
  document's heaviest topics with their weights, their z-scores under the prior's marginal (``|z| > 2``
  marked) and each topic's top words (:func:`ctm_view`).
- LDA (:class:`~critics.topics.lda.LdaCodeMixCritic`): paper fig. 7, one posterior sample per document of
  each set on the topic simplex (3 topics; else each set's mean topic weights as bars) (:func:`lda_figures`);
  a flagged document's topic weights against the prior's mean, with each topic's top words (:func:`lda_view`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from critic.document import Document

from ..report_html import bar, note, paragraph, table, view

__all__ = ["topic_table", "set_covariance", "ctm_figures", "ctm_view", "lda_figures", "lda_view", "TOP_WORDS"]

TOP_WORDS = 8
"""Words shown per topic."""


def topic_table(topics: Sequence[int], weights: Sequence[float], words: Sequence[Sequence[str]], *,
                column: str, values: Sequence[str], marked: Sequence[bool] | None = None) -> str:
    """One row per topic: its number, its weight as a bar, one more ``column`` (``values``) and its top
    ``words``; rows ``marked`` get the class ``far``.  Each row carries ``data-topic`` and ``data-weight``."""
    rows = [[f"topic {k}", bar(w, f"{w:.3f}"), v, " ".join(words[k])] for k, w, v in zip(topics, weights, values)]
    classes = [("far" if m else None) for m in marked] if marked is not None else None
    attrs = [{"data-topic": int(k), "data-weight": repr(float(w))} for k, w in zip(topics, weights)]
    return table(["topic", "weight", column, "top words"], rows, align="llrw", row_classes=classes, row_attrs=attrs,
                 css="topic-mix")


def _extras(result: Any) -> dict:
    return getattr(result, "extras", None) or {}


# ---------------------------------------------------------------------------------------------- CTM


def set_covariance(critic, result_set: Any, docs: Sequence[Document]) -> np.ndarray | None:
    """A set's aggregated-posterior covariance ``(K, K)``: kept while the set was scored
    (``result_set.posterior_summary``, :class:`~critics.topics.ctm_plots.SetCovariance`), else -- a result read back
    from a report -- its documents ``docs`` projected again; ``None`` when fewer than 2 documents project."""
    from .ctm_plots import SetCovariance, aggregated_covariance

    kept = getattr(result_set, "posterior_summary", None)
    if isinstance(kept, SetCovariance):
        return kept.covariance
    try:
        return aggregated_covariance(critic, docs)
    except ValueError:  # fewer than 2 projected documents
        return None


def ctm_figures(critic, result: Any, documents: Mapping[str, Sequence[Document]], *, clamp: float = 5.0
                ) -> dict[str, Any]:
    """Fig. 6 for each candidate set whose documents are given (caption -> figure).  The covariances are
    those of the sets' aggregated posteriors (:func:`set_covariance`): kept while the sets were scored, else
    their documents projected again."""
    from .ctm_plots import clustered_order, covariance_heatmaps_figure

    reference = result.reference.name
    if reference not in documents:
        return {}
    ref_cov = set_covariance(critic, result.reference, documents[reference])
    if ref_cov is None:
        return {}
    order = clustered_order(ref_cov)
    nll = {s.name: s.latent_nll for s in result.sets}
    out = {}
    for name in result.candidates:
        if name not in documents:
            continue
        cov = set_covariance(critic, result.candidates[name], documents[name])
        if cov is None:
            continue
        fig = covariance_heatmaps_figure({reference: ref_cov, name: cov}, reference=reference, order=order,
                                         clamp=clamp, latent_nll=nll)
        caption = (f"Topic covariance of '{name}' beside '{reference}' (paper fig. 6): the covariance of each set's "
                   f"aggregated posterior over the {critic.num_topics} topic coefficients, topics in the order of a "
                   f"hierarchical clustering of '{reference}', values clamped to [-{clamp:g}, {clamp:g}].")
        out[caption] = fig
    return out


def ctm_view(critic, doc: Document, result: Any) -> str:
    """The document's heaviest topics (extras ``top_topics`` and ``top_topic_z``, else projected again)."""
    extras = _extras(result)
    top, z = extras.get("top_topics"), extras.get("top_topic_z")
    if top is None or z is None:
        projection = critic.project([doc])
        if not len(projection):
            return view(note(f"The critic cannot project this document: {projection.failures.get(doc.id)}."),
                        kind="ctm")
        top, z = projection.extras["top_topics"][0], projection.extras["top_topic_z"][0]
    topics, weights = [int(k) for k, _ in top], [float(w) for _, w in top]
    far = [abs(float(v)) > critic.far_z for v in z]
    summary = (f"The document's {len(topics)} heaviest topics of {critic.num_topics}: weights softmax(m) of its "
               f"posterior mean m (together {sum(weights):.3f} of 1); z = (m_k - mu_k) / sqrt(Sigma_kk), the topic's "
               f"coefficient under the prior's marginal N(mu_k, Sigma_kk); highlighted: |z| > {critic.far_z:g} "
               f"({sum(far)} of {len(topics)}).")
    return view(paragraph(summary),
                topic_table(topics, weights, critic.topic_words(TOP_WORDS), column="z under the prior",
                            values=[f"{float(v):+.2f}" for v in z], marked=far), kind="ctm")


# ---------------------------------------------------------------------------------------------- LDA


def _set_points(critic, result: Any, documents: Mapping[str, Sequence[Document]], *, mean: bool, seed: int
                ) -> dict[str, np.ndarray]:
    """Per set: one posterior sample (or the mean) per scored document, from the extras' ``gamma``; a set
    without them is projected again from ``documents`` (left out when they are not given)."""
    from .lda_plots import gamma_points, posterior_points

    points = {}
    for s in result.sets:
        gammas = [d.extras["gamma"] for d in s.documents if "gamma" in d.extras]
        if len(gammas) == len(s.documents):
            points[s.name] = (gamma_points(np.asarray(gammas, dtype=np.float64), mean=mean, seed=seed) if gammas
                              else np.zeros((0, critic.num_topics)))
        elif s.name in documents:
            points[s.name] = posterior_points(critic, documents[s.name], mean=mean, seed=seed)[0]
    return points


def lda_figures(critic, result: Any, documents: Mapping[str, Sequence[Document]], *, seed: int = 0
                ) -> dict[str, Any]:
    """Fig. 7 (3 topics) or each set's mean topic weights (caption -> figure)."""
    from .lda import topic_labels
    from .lda_plots import mean_weights_figure, simplex_scatter

    labels = topic_labels(critic)
    if critic.num_topics == 3:
        points = _set_points(critic, result, documents, mean=False, seed=seed)
        if not points:
            return {}
        caption = ("Topic posteriors on the simplex (paper fig. 7): one sample z ~ Dirichlet(gamma(x)) per scored "
                   "document of each set; each corner is one topic (its three most probable words). Monolingual "
                   "text piles up at the corners, code-mixed text spreads along the edges and inside.")
        few = max(len(p) for p in points.values()) < 200  # the paper's faint dots vanish when there are few
        return {caption: simplex_scatter(points, labels=labels, title="LDA topic posterior (1 sample per document)",
                                         alpha=0.8 if few else 0.3, size=14.0 if few else 6.0)}
    points = _set_points(critic, result, documents, mean=True, seed=seed)
    means = {name: p.mean(0) if len(p) else np.zeros(critic.num_topics) for name, p in points.items()}
    if not means:
        return {}
    caption = (f"Mean topic weights of each set (the posterior means gamma / sum gamma of its scored documents, "
               f"averaged); {critic.num_topics} topics, so no simplex (paper fig. 7 needs 3).")
    return {caption: mean_weights_figure(means, labels=labels, title="LDA: mean topic weights per set")}


def lda_view(critic, doc: Document, result: Any, *, show: int = 10) -> str:
    """The document's topic weights (extras ``topic_weights``, else projected again) beside the prior's mean
    ``alpha / sum alpha``: every topic, or the ``show`` heaviest of many."""
    from .lda import top_words

    weights = _extras(result).get("topic_weights")
    if weights is None:
        projection = critic.project([doc])
        if not len(projection):
            return view(note(f"The critic cannot project this document: {projection.failures.get(doc.id)}."),
                        kind="lda")
        weights = projection.extras["topic_weights"][0]
    weights = [float(w) for w in weights]
    alpha = critic.alpha_
    prior_mean = alpha / alpha.sum()
    topics = list(range(len(weights)))
    if len(topics) > show:
        topics = sorted(topics, key=lambda k: -weights[k])[:show]
    summary = ("The document's topic weights: the mean gamma / sum gamma of its posterior Dirichlet(gamma)"
               + (f" ({len(topics)} heaviest of {len(weights)})" if len(topics) < len(weights) else "")
               + "; beside them the prior's mean alpha / sum alpha. With alpha_k < 1 the prior favours documents "
               "in one topic (one language): weight spread over several topics is what raises T(x).")
    return view(paragraph(summary),
                topic_table(topics, [weights[k] for k in topics], top_words(critic, TOP_WORDS), column="prior mean",
                            values=[f"{float(prior_mean[k]):.3f}" for k in topics]), kind="lda")
