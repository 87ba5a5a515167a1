"""Views beside critics: registered for a class (or lazily by "module:Class"), found through the bases, the default
showing nothing; the report shows a registered view on a flagged document's page (the guide's example)."""

from __future__ import annotations

import sys
import types

import pytest

from critic import criticize
from critic.document import Document, Section
from critic.panel import PanelResult
from critic.report import write_report
from critic.views import _VIEWS, CriticView, document_view, register_view, report_figures, set_statistics, view_for


@pytest.fixture
def views(monkeypatch):
    monkeypatch.setattr("critic.views._VIEWS", dict(_VIEWS))


def docs(counts, prefix):
    return [Document(f"{prefix}{i}", tuple(Section(f"s{k}", "text") for k in range(n))) for i, n in enumerate(counts)]


def test_a_view_is_found_by_class_and_bases_and_lazily(tutorial, views, monkeypatch):
    critic = tutorial.SectionCountCritic().fit(docs([3, 4, 5], "t"))
    assert type(view_for(critic)) is CriticView and document_view(critic, docs([2], "x")[0], None) is None
    assert report_figures(critic, None, {}) == {} and set_statistics(critic, None, {}) == {}

    class CountView(CriticView):
        def document_view(self, critic, doc, result):
            return f"<p>{len(doc.sections)} sections</p>"

    module = types.ModuleType("my_views")
    module.CountView = CountView
    monkeypatch.setitem(sys.modules, "my_views", module)
    register_view(tutorial.SectionCountCritic, "my_views:CountView")  # imported on first use
    assert document_view(critic, docs([2], "x")[0], None) == "<p>2 sections</p>"

    class Finer(tutorial.SectionCountCritic):
        pass

    assert isinstance(view_for(Finer()), CountView)  # a subclass shows its base's view
    register_view(Finer, CriticView())
    assert type(view_for(Finer())) is CriticView  # unless it registers its own


def test_the_report_shows_a_registered_view_on_a_flag_s_page(tutorial, views, tmp_path):
    critic = tutorial.SectionCountCritic().fit(docs([3, 4, 5, 4, 4, 2, 6], "t"))

    class CountView(CriticView):
        def document_view(self, critic, doc, result):
            return f'<p class="count">{len(doc.sections)} sections</p>'

    register_view(tutorial.SectionCountCritic, CountView())
    reference, odd = docs([3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5], "r"), docs([12, 4], "c")
    result = criticize(critic, reference, {"odd": odd}, n_bootstrap=50, n_permutations=99, seed=0)
    panel = PanelResult({"count": result}, top=5, level=0.5)
    assert [f.id for f in panel.flagged()] == ["c0"]
    write_report(panel, tmp_path / "r", documents={"reference": reference, "odd": odd},
                       critics={"count": critic})
    assert '<p class="count">12 sections</p>' in (tmp_path / "r" / "documents" / "0.html").read_text()


def test_a_view_keeps_what_it_needs_of_the_posteriors_while_a_set_is_scored(tutorial, views):
    """Issue 40: a view's posterior summary is given each projection that scores a set (the set's only projection)
    and its result is kept on the set's result, never written; the scoring is untouched, and a critic's own
    ``project`` (a wrapper of the instance) is kept."""
    from critic.views import PosteriorSummary, posterior_summary

    critic = tutorial.SectionCountCritic().fit(docs([3, 4, 5, 4, 4, 2, 6], "t"))
    reference, odd = docs([3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5], "r"), docs([12, 4], "c")
    plain = criticize(critic, reference, {"odd": odd}, n_bootstrap=20, n_permutations=20)
    assert posterior_summary(critic) is None and all(s.posterior_summary is None for s in plain.sets)

    class Steps(PosteriorSummary):  # what a figure might need: the documents' M(x), summed
        def __init__(self):
            self.ids, self.total = [], 0.0

        def add(self, projection):
            self.ids += projection.doc_ids
            self.total += float(projection.latent_steps.sum())

        def result(self):
            return self.ids, self.total

    class StepsView(CriticView):
        def posterior_summary(self, critic):
            return Steps()

    register_view(tutorial.SectionCountCritic, StepsView())
    calls = []

    def own(batch, _project=critic.project):
        calls.append(len(batch))
        return _project(batch)

    critic.project = own
    result = criticize(critic, reference, {"odd": odd}, n_bootstrap=20, n_permutations=20)
    assert vars(critic)["project"] is own and calls == [len(reference), len(odd)]
    for s, want in zip(result.sets, (reference, odd)):
        assert s.posterior_summary == ([d.id for d in want], sum(d.latent_steps for d in s.documents))
        assert "posterior_summary" not in s.to_dict(documents=True)
    assert result.to_dict() == plain.to_dict()  # the same numbers, the same results.json

    del critic.project
    broken = docs([3, 0], "b")  # a projection that raises leaves no observer on the critic
    critic.project = lambda batch: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        criticize(critic, broken, n_bootstrap=20, n_permutations=20)
    assert vars(critic)["project"].__name__ == "<lambda>"
    del critic.project
    result = criticize(critic, reference, n_bootstrap=20, n_permutations=20)
    assert "project" not in vars(critic) and result.reference.posterior_summary[0] == [d.id for d in reference]
