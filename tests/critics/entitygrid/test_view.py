"""The entity-grid critic's view in a report: the document's grid (entities by sentences, least likely first) with
each chain's -log P and its excess over the orders, read back from the HTML, and every text escaped."""

from __future__ import annotations

import html
import itertools

import numpy as np
import pytest

from critic import criticize
from critic.corrupt import corrupt_all
from critic.views import document_view
from critics.entitygrid import EntityGrid, document_sentences
from critics.report_html import excerpt
from tests.critics.view_html import rows

from .texts import CHAINS, ENTITIES, SECTIONS, document


def test_the_view_shows_the_grid_least_likely_entities_first(fitted):
    doc = document("d", *SECTIONS)
    view = document_view(fitted, doc, None)
    table = rows(view, "entity-grid")
    (grid,) = fitted.grids([doc])
    nll = fitted.entity_nll(grid)
    order = sorted(range(len(ENTITIES)), key=lambda e: (-nll[e], e))
    assert [r["cells"][0] for r in table] == [ENTITIES[e] for e in order]
    assert ["".join(r["cells"][1:7]) for r in table] == [CHAINS[e] for e in order]
    assert sum(float(r["attrs"]["data-nll"]) for r in table) == pytest.approx(fitted.score([doc]).latent_nll[0],
                                                                               rel=1e-12)
    # the excess over all 720 orders, recomputed by permuting the grid's columns one order at a time
    per_order = np.array([fitted.entity_nll(EntityGrid(grid.entities, grid.roles[:, list(o)]))
                          for o in itertools.permutations(range(6))])
    excess = nll - per_order.mean(0)
    for r, e in zip(table, order):
        assert float(r["cells"][8]) == pytest.approx(excess[e], abs=5e-4)
        assert (r["class"] == "unlikely") == (excess[e] > 0)
    assert 0 < sum(r["class"] == "unlikely" for r in table) < len(table)
    sentences = rows(view, "entity-grid-sentences")
    assert [r["cells"] for r in sentences] == [[str(n + 1), excerpt(s)] for n, s in enumerate(document_sentences(doc))]
    assert "10 entities (noun-phrase heads) in 6 sentences" in html.unescape(view)


def test_the_view_escapes_entities_and_text(fitted):
    doc = document("x", "The company sold <b>kernels</b> to the government. AT&T bought the company.")
    view = document_view(fitted, doc, None)
    assert "<b>" not in view and "</b>" not in view and "&lt;b&gt;kernels&lt;/b&gt;" in view
    assert 'data-entity="at&amp;t"' in view and 'data-entity="kernels&lt;/b"' in view
    names = [r["cells"][0] for r in rows(view, "entity-grid")]
    assert "at&t" in names and "kernels</b" in names
    assert "cannot read this document's entity grid: document has no sentences" in \
        html.unescape(document_view(fitted, document("e"), None))
    assert "no entities (noun-phrase heads) in its 1 sentence(s)" in \
        html.unescape(document_view(fitted, document("p", "It is."), None))


def test_a_long_grid_shows_its_least_likely_entities(fitted, manpages):
    doc = max(manpages["test"], key=lambda d: len(fitted.grids([d])[0].entities))
    (grid,) = fitted.grids([doc])
    table = rows(document_view(fitted, doc, None), "entity-grid")
    nll = fitted.entity_nll(grid)
    assert len(grid.entities) > 40 and len(table) == 40
    assert [float(r["attrs"]["data-nll"]) for r in table] == pytest.approx(sorted(nll, reverse=True)[:40], rel=1e-12)
    assert f"{len(grid.entities) - 40} more entities are not shown" in html.unescape(document_view(fitted, doc, None))


def test_a_report_shows_the_grid_of_a_flagged_document(fitted, manpages, tmp_path):
    from critic.panel import PanelResult
    from critic.report import write_report

    reference = manpages["valid"] + manpages["test"]
    shuffled = corrupt_all(reference, "shuffled-document", seed=0)
    result = criticize(fitted, reference, {"shuffled": shuffled}, n_bootstrap=20, n_permutations=20, seed=0)
    panel = PanelResult({"entity-grid": result}, top=3, level=0.5)
    assert panel.flagged()
    write_report(panel, tmp_path / "report", critics={"entity-grid": fitted},
                 documents={"reference": reference, "shuffled": shuffled})
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "report" / "documents").glob("*.html")]
    assert len(pages) == len(panel.flagged()) and all('<table class="entity-grid">' in page for page in pages)
    assert all("sentence order: " in page for page in pages)  # the reasons beside the grid
