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
