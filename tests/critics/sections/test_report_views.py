"""The section critics in the HTML report: fig. 4 per candidate, and a flagged document's chain with each
transition's log P recomputed from the fitted counts, the unlikely ones (P < 0.01) marked, text in place."""

from __future__ import annotations

import html
import math

import pytest

from critic import criticize
from critic.corpora.manpages import build_manpages
from critic.corrupt import corrupt_all
from critic.document import Document, Section, read_jsonl
from critic.plots import svg_markup
from critic.views import document_view, report_figures
from critics.report_html import excerpt
from critics.sections import ClassifierSectionCritic, SectionTransitionCritic, TitleNormalizer, UNKNOWN
from critics.sections.analysis import section_paths
from critics.sections.normalize import DEFAULT_DROP_TITLES
from tests.critics.view_html import rows

DELTA = 0.01
NORMALIZE = TitleNormalizer()
DROP = {NORMALIZE(t) for t in DEFAULT_DROP_TITLES}


@pytest.fixture(scope="module")
def pages(fixture_manpages):
    return fixture_manpages


@pytest.fixture(scope="module")
def critic(pages):
    return SectionTransitionCritic(delta=DELTA).fit(pages["train"])


@pytest.fixture(scope="module")
def sets(pages):
    test = pages["test"] + pages["valid"]
    return {"reference": test, "permuted": corrupt_all(test, "permuted", seed=0),
            "repeated": corrupt_all(test, "repeated", seed=1)}


def hand_log_prob(critic, previous: str, current: str) -> float:
    """log P(current | previous) by the add-delta formula on the fitted counts."""
    start, trans, end = critic.counts_
    k = len(critic.vocab_)
    if previous == "<bos>":
        return math.log((start[critic.index_[current]] + DELTA) / (start.sum() + DELTA * k))
    i = critic.index_[previous]
    row = trans[i].sum() + end[i] + DELTA * (k + 1)
    count = end[i] if current == "<eos>" else trans[i, critic.index_[current]]
    return math.log((count + DELTA) / row)


def check_chain(critic, doc: Document, view: str, types: list[str]) -> list[dict]:
    """The view's transition rows are <bos> -> types -> <eos>, with the hand-computed log P, marked
    unlikely exactly when P < 0.01; returns the rows."""
    table = rows(view, "sections-chain")
    steps = [r for r in table if "data-logp" in r["attrs"]]
    path = ["<bos>", *types, "<eos>"]
    assert [(r["attrs"]["data-from"], r["attrs"]["data-to"]) for r in steps] == list(zip(path, path[1:]))
    for r in steps:
        want = hand_log_prob(critic, r["attrs"]["data-from"], r["attrs"]["data-to"])
        assert float(r["attrs"]["data-logp"]) == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert (r["class"] == "unlikely") == (math.exp(want) < 0.01), r
        assert r["cells"][r["cells"].index(f"{r['attrs']['data-from']} → {r['attrs']['data-to']}") + 1] == \
            f"{want:.3f}"
    return table


def test_given_title_view_recomputes_each_transition_and_marks_the_unlikely(critic, sets):
    result = criticize(critic, sets["reference"], {"permuted": sets["permuted"]}, n_bootstrap=20, n_permutations=20)
    by_id = {d.id: d for d in sets["permuted"]}
    marked = total = 0
    for d in result.candidates["permuted"].documents:
        doc = by_id[d.id]
        view = document_view(critic, doc, d)
        types = section_paths(critic, [doc])[0]
        table = check_chain(critic, doc, view, types)
        marked += sum(r["class"] == "unlikely" for r in table)
        total += len(types) + 1
        # every section in place, in order: number, title, its first 200 characters; boilerplate dropped
        section_rows = [r for r in table if r["cells"][0]]
        assert [r["cells"][1] for r in section_rows] == [s.title for s in doc.sections]
        assert [r["cells"][-1] for r in section_rows] == [excerpt(s.text) for s in doc.sections]
        dropped = [r["cells"][1] for r in section_rows if r["class"] == "dropped"]
        assert dropped == [s.title for s in doc.sections if NORMALIZE(s.title) in DROP]
        assert -sum(float(r["attrs"]["data-logp"]) for r in table if "data-logp" in r["attrs"]) == \
            pytest.approx(d.latent_nll, rel=1e-12)
    assert 0 < marked < total  # the threshold splits the transitions: the check above can fail both ways


def test_view_escapes_titles_and_text(critic):
    doc = Document("x", (Section("NAME", "a <b>bold</b> & more"), Section("<script>alert(1)</script>", "<i>")))
    view = document_view(critic, doc, None)
    assert "<script>" not in view and "<b>" not in view and "<i>" not in view
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view and "a &lt;b&gt;bold&lt;/b&gt; &amp; more" in view
    table = rows(view, "sections-chain")
    assert table[1]["cells"][1:3] == ["<script>alert(1)</script>", UNKNOWN]  # unseen title: <unk>
    assert "cannot read this document's sections: document has no sections" in \
        html.unescape(document_view(critic, Document("e", ()), None))


def test_one_fig4_per_candidate(critic, sets):
    result = criticize(critic, sets["reference"], {k: v for k, v in sets.items() if k != "reference"},
                       n_bootstrap=20, n_permutations=20)
    figures = report_figures(critic, result, sets)
    assert len(figures) == 2
    for name, (caption, fig) in zip(("permuted", "repeated"), figures.items()):
        assert f"'{name}' against 'reference'" in caption and "fig. 4" in caption
        assert svg_markup(fig).startswith("<svg")
    assert report_figures(critic, result, {"permuted": sets["permuted"]}) == {}  # no reference documents
    assert len(report_figures(critic, result, {"reference": sets["reference"], "permuted": sets["permuted"]})) == 1


def test_classifier_view_shows_its_map_types_and_their_probabilities(pages, sets):
    critic = ClassifierSectionCritic(delta=DELTA).fit(pages["train"], validation=pages["valid"])
    untitled = [d.replace_sections([Section(None, s.text) for s in d.sections]) for d in sets["permuted"]]
    result = criticize(critic, sets["reference"], {"untitled": untitled}, n_bootstrap=20, n_permutations=20)
    for d, doc in zip(result.candidates["untitled"].documents, untitled):
        assert d.id == doc.id
        view = document_view(critic, doc, d)
        log_probs = critic.classifier_.log_proba([s.text for s in doc.sections])
        best, index = log_probs.max(-1)
        types = [critic.vocab_[j] for j in index.tolist()]
        assert d.extras["labels"] == types
        table = check_chain(critic, doc, view, types)
        section_rows = [r for r in table if r["cells"][0]]
        assert [r["cells"][1] for r in section_rows] == ["(untitled)"] * len(doc.sections)
        assert [r["cells"][3] for r in section_rows] == [f"{p:.3f}" for p in best.exp().tolist()]
        assert document_view(critic, doc, None) == view  # without extras: the document classified again
    with_title = document_view(critic, Document("t", (Section("<script>", "x"),)), None)
    assert "&lt;script&gt;" in with_title and "<script>" not in with_title


def test_classifier_pdd_and_fig4_read_the_labels_scoring_kept(pages, sets, monkeypatch):
    """Issue 40: the classifier critic's PDD and fig. 4 take each scored document's MAP types from its extras (the
    scoring classified it once); they equal those of the sets classified again, as a result without extras gets."""
    from critic.panel import PanelResult, add_set_statistics

    critic = ClassifierSectionCritic(delta=DELTA).fit(pages["train"], validation=pages["valid"])
    untitled = [d.replace_sections([Section(None, s.text) for s in d.sections]) for d in sets["permuted"]]
    empty = Document("empty", (Section("x", " "),))  # skipped: a blank section
    candidates = {"permuted": sets["permuted"], "untitled": untitled + [empty]}  # ids shared with the reference
    documents = {"reference": sets["reference"], **candidates}
    classified = []
    classify = type(critic)._classify

    def counted(self, docs):
        classified.append([d.id for d in docs])
        return classify(self, docs)

    monkeypatch.setattr(type(critic), "_classify", counted)
    panel = PanelResult({"c": criticize(critic, sets["reference"], candidates, n_bootstrap=20, n_permutations=20)})
    add_set_statistics(panel, sets["reference"], candidates, critics={"c": critic})
    figures = {caption: svg_markup(fig)
               for caption, fig in report_figures(critic, panel.results["c"], documents).items()}
    assert len(figures) == 2
    assert [ids for ids in classified if ids != ["empty"]] == [[d.id for d in docs] for docs in (
        sets["reference"], sets["permuted"], untitled)]  # each set once (the skipped document alone again: cheap)

    bare = PanelResult({"c": criticize(critic, sets["reference"], candidates, n_bootstrap=20, n_permutations=20)})
    for s in bare.results["c"].sets:  # a result without the labels: the sets classified again
        for d in s.documents:
            d.extras.pop("labels")
    before = len(classified)
    add_set_statistics(bare, sets["reference"], candidates, critics={"c": critic})
    assert len(classified) > before
    got, want = panel.results["c"], bare.results["c"]
    assert [s.statistics["pdd"] for s in got.sets] == [s.statistics["pdd"] for s in want.sets]
    assert got.set("permuted").statistics["pdd"] > 0
    assert figures == {caption: svg_markup(fig) for caption, fig in report_figures(critic, want, documents).items()}


def test_a_critic_fitted_on_one_section_type_says_it_cannot_tell_documents_apart(tmp_path, capsys):
    import json as _json

    from critic.cli import main
    from critic.document import write_jsonl

    one = [Document(f"d{i}", (Section("text", f"words {i}"),)) for i in range(6)]
    two = one + [Document("e", (Section("name", "x"), Section("text", "y")))]
    assert SectionTransitionCritic(delta=0.1).fit(two).fit_warnings() == []
    critic = SectionTransitionCritic(delta=0.1).fit(one)
    assert critic.fit_warnings() == ["fitted on a single section type ('text'): every document's chain scores the "
                                     "same for its length, so this critic cannot tell documents apart"]
    train = write_jsonl(one, tmp_path / "train.jsonl")
    assert main(["fit", "sections", "--train", str(train), "--out", str(tmp_path / "c"), "--params",
                 '{"delta": 0.1}']) == 0
    assert "critic: warning: fitted on a single section type ('text')" in capsys.readouterr().err
    assert main(["report", "--critic", str(tmp_path / "c"), "--reference", str(train), "--candidate",
                 f"same={train}", "--n-bootstrap", "20", "--out", str(tmp_path / "r")]) == 0
    saved = _json.loads((tmp_path / "r" / "results.json").read_text())
    assert saved["critics"]["c"]["critic"]["warnings"] == critic.fit_warnings()
    assert "⚠ c: fitted on a single section type" in (tmp_path / "r" / "index.html").read_text()


def test_the_report_gives_pdd_of_section_types_against_the_reference(fixture_manpage_root, tmp_path):
    """PDD by hand: each set's section types (given titles, normalised) as label sequences, 5 positional bins."""
    from critic.panel import PanelResult, add_set_statistics
    from critics.metrics.pdd import pdd
    from critics.sections.analysis import section_paths

    build_manpages(tmp_path, root=fixture_manpage_root, install=False)
    train, test = read_jsonl(tmp_path / "train.jsonl"), read_jsonl(tmp_path / "test.jsonl")
    reference = train + test
    permuted = corrupt_all(reference, "permuted", seed=4)
    critic = SectionTransitionCritic(delta=0.1).fit(train)
    panel = PanelResult({"s": criticize(critic, reference, {"permuted": permuted, "same": reference},
                                        n_bootstrap=10, n_permutations=10)})
    add_set_statistics(panel, reference, {"permuted": permuted, "same": reference}, critics={"s": critic})
    got = panel.results["s"]

    def by_hand(docs):
        return [[critic.index_[t] for t in p] for p in section_paths(critic, docs) if p]

    want = pdd(by_hand(permuted), by_hand(reference), num_bins=5, num_classes=len(critic.vocab_))
    assert got.set("permuted").statistics["pdd"] == pytest.approx(want, rel=1e-12) and want > 0.01
    assert got.set("same").statistics["pdd"] == pytest.approx(0.0, abs=1e-9)
    assert got.reference.statistics["pdd"] is None
    assert got.null_reasons["reference.pdd"] == "the reference is what PDD compares with"
