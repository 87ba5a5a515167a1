"""The topic critics in the HTML report: the CTM's fig. 6 per candidate and a document's heaviest topics with
their z-scores under the prior; the LDA's fig. 7 (or mean weights) and a document's topic weights."""

from __future__ import annotations

import html

import numpy as np
import pytest

from critic import criticize
from critic.document import Document, Section
from critic.plots import svg_markup
from critic.views import document_view, report_figures
from critics.topics.lda import LdaCodeMixCritic, top_words
from tests.critics.view_html import rows

from .test_ctm_critic import documents

# ---------------------------------------------------------------------------------------------- CTM


@pytest.fixture(scope="module")
def ctm_sets(ctm):
    words = ctm.topic_words(10)
    one_topic = [Document(f"one{k}", (Section(None, " ".join(words[k % 4] * (20 + k))),)) for k in range(8)]
    return {"reference": documents(30, 2, "ref"), "one-topic": one_topic + documents(4, 3, "mix")}


@pytest.fixture(scope="module")
def ctm_result(ctm, ctm_sets):
    return criticize(ctm, ctm_sets["reference"], {"one-topic": ctm_sets["one-topic"]}, n_bootstrap=20,
                     n_permutations=20)


def test_ctm_view_shows_the_extras_weights_and_z_under_the_prior(ctm, ctm_sets, ctm_result, monkeypatch):
    docs = {d.id: d for d in ctm_sets["one-topic"]}
    results = ctm_result.candidates["one-topic"].documents
    projection = ctm.project([docs[d.id] for d in results])
    g = ctm.globals_
    mu = g.mu.double().numpy()
    sd = np.sqrt(np.diag(g.scale_tril.double().numpy() @ g.scale_tril.double().numpy().T))
    m = projection.posterior.mean.numpy()
    z_all = np.concatenate([[abs(v) for v in d.extras["top_topic_z"]] for d in results])
    monkeypatch.setattr(ctm, "far_z", float(np.median(z_all)))  # a threshold that splits the rows
    words = ctm.topic_words(8)
    marked = 0
    for d, m_doc in zip(results, m):
        view = document_view(ctm, docs[d.id], d)
        table = rows(view, "topic-mix")
        assert [[int(r["attrs"]["data-topic"]), float(r["attrs"]["data-weight"])] for r in table] == \
            d.extras["top_topics"]
        z = (m_doc - mu) / sd  # by hand, from the posterior mean
        want = [z[k] for k, _ in d.extras["top_topics"]]
        np.testing.assert_allclose(d.extras["top_topic_z"], want, rtol=0, atol=1e-6)
        assert [r["cells"][2] for r in table] == [f"{v:+.2f}" for v in d.extras["top_topic_z"]]
        assert [r["class"] == "far" for r in table] == [abs(v) > ctm.far_z for v in d.extras["top_topic_z"]]
        assert [r["cells"][3] for r in table] == [" ".join(words[k]) for k, _ in d.extras["top_topics"]]
        marked += sum(r["class"] == "far" for r in table)
        again = rows(document_view(ctm, docs[d.id], None), "topic-mix")  # without extras: projected again
        assert [int(r["attrs"]["data-topic"]) for r in again] == [int(r["attrs"]["data-topic"]) for r in table]
        np.testing.assert_allclose([float(r["attrs"]["data-weight"]) for r in again],   # alone, not in a batch:
                                   [float(r["attrs"]["data-weight"]) for r in table], atol=1e-5)  # the same to 1e-5
    assert 0 < marked < sum(len(d.extras["top_topics"]) for d in results)


def test_ctm_fig6_per_candidate(ctm, ctm_sets, ctm_result):
    figures = report_figures(ctm, ctm_result, ctm_sets)
    assert len(figures) == 1
    caption, fig = next(iter(figures.items()))
    assert "'one-topic' beside 'reference'" in caption and "fig. 6" in caption
    assert svg_markup(fig).startswith("<svg")
    assert [ax.get_title() for ax in fig.axes[:2]] == [
        f"{s.name} (Latent NLL {s.latent_nll:.2f})" for s in (ctm_result.reference, ctm_result.candidates["one-topic"])]
    assert report_figures(ctm, ctm_result, {"one-topic": ctm_sets["one-topic"]}) == {}


@pytest.mark.parametrize("mean_only, batch_size", [(False, None), (True, None), (False, 7)])
def test_ctm_fig6_reads_the_covariances_scoring_kept_and_projects_nothing(ctm, ctm_sets, monkeypatch, mean_only,
                                                                          batch_size):
    """Issue 40: criticize keeps each set's aggregated-posterior covariance (``K x K``, nothing per document) from
    the projections that scored it, equal to the one of the set projected again (the very numbers when the set is
    one batch, to rounding when several are merged); fig. 6 reads it without projecting, and is the figure a
    result read back (no covariance kept) draws by projecting the sets again."""
    import math

    from critic.results import CriticismResult
    from critics.topics.ctm_plots import SetCovariance, aggregated_covariance, posterior_moments

    monkeypatch.setattr(ctm, "mean_only", mean_only)
    if batch_size is not None:
        monkeypatch.setattr(ctm, "batch_size", batch_size)
    batches = sum(math.ceil(len(docs) / ctm.batch_size) for docs in ctm_sets.values())
    calls = []
    project = type(ctm).project

    def counted(self, docs):
        calls.append([d.id for d in docs])
        return project(self, docs)

    monkeypatch.setattr(type(ctm), "project", counted)
    result = criticize(ctm, ctm_sets["reference"], {"one-topic": ctm_sets["one-topic"]}, n_bootstrap=20,
                       n_permutations=20)
    assert len(calls) == batches == (2 if batch_size is None else 7)  # each set projected once
    assert "project" not in vars(ctm)  # the scoring's observer is gone
    figures = {caption: svg_markup(fig) for caption, fig in report_figures(ctm, result, ctm_sets).items()}
    assert len(calls) == batches and len(figures) == 1  # drawn without projecting
    for s in result.sets:
        kept = s.posterior_summary
        assert isinstance(kept, SetCovariance) and kept.n == s.n and kept.covariance.shape == (4, 4)
        _, m, v = posterior_moments(ctm, ctm_sets[s.name])  # projected again, independently
        assert (v == 0).all() == mean_only
        want = np.cov(m, rowvar=False, bias=True) + np.diag(v.mean(0))
        if batch_size is None:
            np.testing.assert_array_equal(kept.covariance, want)
            np.testing.assert_array_equal(kept.covariance, aggregated_covariance(ctm, ctm_sets[s.name]))
        else:
            np.testing.assert_allclose(kept.covariance, want, rtol=1e-12, atol=1e-14)
        assert "posterior_summary" not in s.to_dict(documents=True)  # never written
    read_back = CriticismResult.from_dict(result.to_dict(), {s.name: s.documents for s in result.sets})
    assert read_back.reference.posterior_summary is None
    before = len(calls)
    again = {caption: svg_markup(fig) for caption, fig in report_figures(ctm, read_back, ctm_sets).items()}
    assert len(calls) == before + batches  # without kept covariances: each set projected again
    if batch_size is None:
        assert again == figures


def test_ctm_view_of_an_unprojectable_document_says_why(ctm):
    doc = Document("x", (Section("<script>", "the and of <b>"),))
    view = document_view(ctm, doc, None)
    assert f"cannot project this document: {ctm.project([doc]).failures['x']}." in html.unescape(view)
    assert "vocabulary" in view and "<b>" not in view and "<script>" not in view


# ---------------------------------------------------------------------------------------------- LDA


@pytest.fixture(scope="module")
def pages(fixture_manpages):
    return fixture_manpages


@pytest.fixture(scope="module", params=[3, 4])
def lda(request, pages):
    critic = LdaCodeMixCritic(num_topics=request.param, passes=2).fit(pages["train"])
    sets = {"reference": pages["test"], "other": pages["valid"]}
    return critic, sets, criticize(critic, sets["reference"], {"other": sets["other"]}, n_bootstrap=20,
                                   n_permutations=20)


def test_lda_view_shows_the_extras_weights_beside_the_prior_mean(lda):
    critic, sets, result = lda
    docs = {d.id: d for d in sets["other"]}
    alpha = critic.alpha_
    words = top_words(critic, 8)
    for d in result.candidates["other"].documents:
        view = document_view(critic, docs[d.id], d)
        table = rows(view, "topic-mix")
        assert [float(r["attrs"]["data-weight"]) for r in table] == d.extras["topic_weights"]
        assert [int(r["attrs"]["data-topic"]) for r in table] == list(range(critic.num_topics))
        gamma = np.asarray(d.extras["gamma"])
        np.testing.assert_allclose(d.extras["topic_weights"], gamma / gamma.sum(), rtol=1e-12)
        assert [r["cells"][1] for r in table] == [f"{w:.3f}" for w in d.extras["topic_weights"]]
        assert [r["cells"][2] for r in table] == [f"{a:.3f}" for a in alpha / alpha.sum()]
        assert [r["cells"][3] for r in table] == [" ".join(w) for w in words]
        assert document_view(critic, docs[d.id], None) == view


def test_lda_figure_is_fig7_with_three_topics_else_mean_weights(lda):
    critic, sets, result = lda
    figures = report_figures(critic, result, {})  # from the extras: no document needed
    assert len(figures) == 1
    caption, fig = next(iter(figures.items()))
    assert svg_markup(fig).startswith("<svg")
    if critic.num_topics == 3:
        assert "fig. 7" in caption
        assert [ax.get_title() for ax in fig.axes] == [f"{s.name} (n={s.n})" for s in result.sets]
    else:
        assert "Mean topic weights" in caption
        heights = [[p.get_height() for p in c] for c in fig.axes[0].containers]
        for s, h in zip(result.sets, heights):
            mean = np.mean([d.extras["topic_weights"] for d in s.documents], axis=0)
            np.testing.assert_allclose(h, mean, rtol=1e-12)
