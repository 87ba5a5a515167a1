"""The coreference critic in the HTML report: the document's chain mentions marked in its text, exactly the
implausible ones (window log P below the threshold) highlighted, nothing resolved again without clusters."""

from __future__ import annotations

import html

import numpy as np
import pytest

from critic.criticism import criticize
from critic.document import Document, Section
from critic.plots import svg_markup
from critic.views import document_view, report_figures
from critics.coref import neuralcoref
from critics.coref.chains import build_chain
from critics.coref.critic import CorefChainCritic
from critics.coref.resolution import Resolution, from_clusters
from tests.critics.view_html import mentions, rows

from .test_critic import corpus

ODD = "Ann met Bob. <script>x</script> Them smiled at Bob & co. She smiled at her friend."


def odd_document(doc_id: str = "odd") -> Document:
    """A resolved text whose chain has a token never seen in training ('Them' of a person)."""
    def span(word: str, after: int = 0) -> list[int]:
        start = ODD.index(word, after)
        return [start, start + len(word)]

    clusters = [[span("Ann"), span("She"), span("her")],
                [span("Bob"), span("Them"), span("Bob", ODD.index("Bob") + 1)]]
    res = from_clusters(ODD, clusters)
    return Document(doc_id, (Section("abstract", ODD),), metadata={"coref": res.to_dict()})


@pytest.fixture(scope="module")
def critic():
    return CorefChainCritic(smoothing="authors", resolver="auto").fit(corpus(300, 1))


@pytest.fixture(scope="module")
def result(critic):
    return criticize(critic, corpus(40, 2), {"odd": corpus(10, 3) + [odd_document()]}, n_bootstrap=20,
                     n_permutations=20)


@pytest.fixture(autouse=True)
def no_neuralcoref(monkeypatch):
    """A view must never start the neuralcoref worker."""
    def refuse(*args, **kwargs):
        raise AssertionError("the view started neuralcoref")

    monkeypatch.setattr(neuralcoref.NeuralcorefResolver, "__init__", refuse)


def expected(critic, doc: Document, threshold: float):
    """Per mention in text order ``(class, text, entity)``, and the chain positions below ``threshold``, from
    the chain built again and scored by the prior."""
    chain = build_chain(Resolution.from_dict(doc.metadata["coref"], doc.text))
    logp = critic.prior_.position_logprobs([chain.tokens])[0]
    marks = [("mention implausible" if lp < threshold else "mention", doc.text[s[0]:s[1]], t.rpartition(":")[2])
             for t, s, lp in zip(chain.tokens, chain.spans, logp) if s is not None]
    return marks, [i for i, lp in enumerate(logp) if lp < threshold]


@pytest.mark.parametrize("threshold", [-7.0, -1.5])
def test_view_highlights_exactly_the_implausible_mentions(critic, result, threshold, monkeypatch):
    monkeypatch.setattr(critic, "implausible_threshold", threshold)
    docs = {d.id: d for d in corpus(10, 3) + [odd_document()]}
    seen_bad = seen_fine = 0
    for d in result.candidates["odd"].documents:
        doc = docs[d.id]
        view = document_view(critic, doc, d)
        marks, positions = expected(critic, doc, threshold)
        assert mentions(view) == marks
        table = rows(view, "coref-implausible") if positions else []
        assert [int(r["cells"][0]) for r in table] == positions  # sentence starts included, in chain order
        seen_bad += sum(c == "mention implausible" for c, _, _ in marks)
        seen_fine += sum(c == "mention" for c, _, _ in marks)
        if d.id == "odd":
            assert ("mention implausible", "Them", "1") in marks
            assert "&lt;script&gt;x&lt;/script&gt;" in view and "</span> &amp; co." in view and "<script>" not in view
    assert seen_bad and seen_fine


def test_without_extras_clusters_are_read_again_but_neuralcoref_never_started(critic, result):
    d = next(x for x in result.candidates["odd"].documents if x.id == "odd")
    doc = odd_document()
    assert document_view(critic, doc, None) == document_view(critic, doc, d)
    bare = Document("bare", (Section("abstract", ODD),))
    view = document_view(critic, bare, None)
    assert "metadata has no coreference clusters" in html.unescape(view) and mentions(view) == []
    assert getattr(critic, "_worker", None) is None


def test_figure_of_per_token_log_probs(critic, result):
    figures = report_figures(critic, result, {})
    assert len(figures) == 1
    caption, fig = next(iter(figures.items()))
    assert "-7" in caption
    assert svg_markup(fig).startswith("<svg")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    chains = [d.extras["chain"].split() for d in result.candidates["odd"].documents]
    logp = np.concatenate(critic.prior_.position_logprobs(chains))
    assert legend[1] == f"odd ({logp.size} tokens, {np.mean(logp < -7):.1%} below)"
