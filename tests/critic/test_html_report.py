"""The HTML report in a real headless browser (Debian's chromium, every host blocked): it renders, has one
summary row per critic and set and one page per flagged document, its filter works, and nothing is fetched."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

from critic.report import write_report

CDN = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.I)


@pytest.fixture(scope="module")
def report(sets, panel, tmp_path_factory):
    critics, reference, candidates = sets
    out = tmp_path_factory.mktemp("report") / "r"
    write_report(panel, out, documents={"reference": reference, **candidates}, critics=critics)
    return panel, out


class Rows(HTMLParser):
    """Rows of the table with id ``table`` in a DOM, each as its attributes (``style`` included)."""

    def __init__(self, table: str):
        super().__init__()
        self.table, self.rows, self._open = table, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._open.append(attrs.get("id"))
        elif tag == "tr" and self._open and self._open[-1] == self.table and ("data-set" in attrs or "data-search" in attrs):
            self.rows.append(attrs)

    def handle_endtag(self, tag):
        if tag == "table" and self._open:
            self._open.pop()


def rows(dom: str, table: str) -> list[dict]:
    parser = Rows(table)
    parser.feed(dom)
    return parser.rows


def visible(row: dict) -> bool:
    return "display: none" not in (row.get("style") or "")


def test_the_report_renders_with_a_row_per_critic_and_set_and_fetches_nothing(report, browser, tmp_path):
    panel, out = report
    dom = browser.dom(out / "index.html")
    summary = rows(dom, "summary")
    assert sorted((r["data-critic"], r["data-set"]) for r in summary) == sorted(
        (label, s) for label in panel.results for s in panel.set_names)
    flags = panel.flagged()
    outliers = rows(dom, "outliers")
    assert len(outliers) == len(flags) > 0 and all(visible(r) for r in outliers)
    assert f"{len(flags)} of {len(flags)} shown" in dom  # the script ran
    png = browser.screenshot(out / "index.html", tmp_path / "index.png")
    assert not browser.is_blank(png)
    assert browser.requests == []


def test_the_filter_in_the_address_shows_exactly_the_matching_rows(report, browser):
    panel, out = report
    flags = panel.flagged()
    for text, least in (("permuted", 1), ("", 2), ("sharp", 1), ("nothing-matches", 1)):
        want = sorted(f"{f.set} {f.id} {' '.join(f.by)}".lower() for f in flags
                      if text in " ".join([f.set, f.id, *f.by]).lower() and len(f.by) >= least)
        dom = browser.dom(out / "index.html", f"filter={text}&min={least}")
        shown = sorted(r["data-search"] for r in rows(dom, "outliers") if visible(r))
        assert shown == want
        assert f"{len(want)} of {len(flags)} shown" in dom
    assert any(len(f.by) >= 2 for f in flags) and any(len(f.by) == 1 for f in flags)  # the filter had work to do
    assert browser.requests == []


def test_each_flagged_document_has_its_page_with_its_text(report, browser):
    panel, out = report
    flags = panel.flagged()
    pages = sorted(p.name for p in (out / "documents").iterdir())
    assert pages == sorted(f"{k}.html" for k in range(len(flags)))
    for k in (0, len(flags) - 1):
        dom = browser.dom(out / "documents" / f"{k}.html")
        assert flags[k].id in dom and all(f"<td class=\"l\">{label}</td>" in dom for label in flags[k].by)
        assert "<pre class=\"doc\">" in dom
    assert browser.requests == []


def test_no_file_of_the_report_points_at_a_server(report):
    _, out = report
    pages = [out / "index.html", *(out / "documents").iterdir()]
    assert all(not CDN.search(page.read_text()) for page in pages)
    assert CDN.search('<script src="https://cdn.example.com/x.js">') and CDN.search("<link href=//cdn.x/y.css>")


MEASURE = """<script>(function(){
  var t=document.getElementById('summary'),box=t.parentElement,b=document.body,cs=getComputedStyle(b);
  var heads=t.tHead.rows[0].cells,last=heads[heads.length-1];
  var r={viewport:window.innerWidth,page:document.documentElement.scrollWidth,
         content:b.getBoundingClientRect().right-parseFloat(cs.paddingRight),table:t.getBoundingClientRect().right,
         box:box.getBoundingClientRect().right,overflow:getComputedStyle(box).overflowX,
         scroll:box.scrollWidth,client:box.clientWidth};
  box.scrollLeft=box.scrollWidth;
  r.last=last.getBoundingClientRect().right;r.boxAfter=box.getBoundingClientRect().right;
  b.setAttribute('data-measure',JSON.stringify(r));
})();</script>"""


def _measured(browser, page, tmp_path, width: int) -> dict:
    """The summary table's geometry in chromium at ``width`` px: the page, the body's content box, the table, the box
    it sits in (its scroll and overflow), and the last column's right edge once that box is scrolled to its end."""
    import json

    copy = tmp_path / "measured.html"
    copy.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = browser._run(copy, "", ["--dump-dom", f"--window-size={width},900"], 5000)
    found = re.search(r'data-measure="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(found.group(1).replace("&quot;", '"'))


def test_a_wide_summary_table_scrolls_inside_its_box_at_1400_px(sets, panel, browser, tmp_path):
    """Issue 41: the summary table was wider than its column at 1400 px, its last column clipped.  Now its box
    scrolls: the box stays within the body's column, the page does not scroll sideways, and the last column is
    reached by scrolling the box.  The table is made wider than the column (long statistics beside the headline),
    so the check has work to do."""
    import copy

    critics, reference, candidates = sets
    wide = copy.deepcopy(panel)
    for label in wide.results:
        wide.add_statistic("a_statistic_with_a_long_name_shown_beside_the_headline",
                           {name: 1234.5678 for name in wide.set_names})
    out = tmp_path / "wide"
    write_report(wide, out, documents={"reference": reference, **candidates}, critics=critics)
    m = _measured(browser, out / "index.html", tmp_path, 1400)
    assert m["viewport"] == 1400
    assert m["scroll"] > m["client"] and m["table"] > m["content"] + 1  # wider than its column: it must scroll
    assert m["overflow"] in ("auto", "scroll")
    assert m["box"] <= m["content"] + 0.5 and m["page"] <= m["viewport"]
    assert m["last"] <= m["boxAfter"] + 0.5  # the last column in view once scrolled
    assert browser.requests == []


def test_figure_titles_and_captions_name_the_same_sets(sets, panel):
    """Issue 41: fig. 4's title said P_data where its caption said P_reference; the title and the caption of each
    critic's figure now name the same two sets."""
    from critic.views import report_figures

    critics, reference, candidates = sets
    documents = {"reference": reference, **candidates}
    for label, critic in critics.items():
        figures = report_figures(critic, panel.results[label], documents)
        assert len(figures) == len(candidates)
        for caption, fig in figures.items():
            name = next(n for n in candidates if f"of '{n}' against 'reference'" in caption)
            difference = f"P_{name}(z_m | z_m-1) - P_reference(z_m | z_m-1)"
            assert difference in caption and difference in fig.axes[0].get_title()


def test_a_run_s_figure_files_are_shown_under_their_captions(sets, panel, tmp_path):
    """Issue 41: the heatmaps a run draws were captioned with their file's stem (transitions_permuted); each is
    shown under the caption saved with it (critic.plots.figure_caption), its stem only when it has none."""
    import html

    from critic.plots import new_figure, save_figure
    from critics.sections.analysis import section_paths
    from critics.sections.plots import heatmap_caption, transition_difference_heatmap

    critics, reference, candidates = sets
    critic = critics["sharp"]

    def figures(folder):
        plain = new_figure(figsize=(2, 2))
        plain.subplots().plot([0, 1])
        return {"transitions_permuted": transition_difference_heatmap(
                    critic, section_paths(critic, reference), section_paths(critic, candidates["permuted"]),
                    folder / "transitions_permuted.png", name="permuted", reference_name="reference"),
                "uncaptioned": save_figure(plain, folder / "uncaptioned.png")}

    out = tmp_path / "r"
    write_report(panel, out, documents={"reference": reference, **candidates}, figures=figures)
    page = (out / "index.html").read_text()
    caption = heatmap_caption("permuted", "reference")
    assert "P_permuted(z_m | z_m-1) - P_reference(z_m | z_m-1)" in caption
    assert f"<figcaption>{html.escape(caption, quote=True)}</figcaption>" in page
    assert "<figcaption>transitions_permuted</figcaption>" not in page
    assert '<a href="transitions_permuted.png"><img alt="Section transitions of' in page  # the file beside it
    assert "<figcaption>uncaptioned</figcaption>" in page  # a file without a caption keeps its name


def test_the_new_critics_document_pages_render_their_views_and_fetch_nothing(fixture_manpages, browser, tmp_path):
    """A looped page's page marks the repeated paragraph (repetition view) and shows the entity grid as a table,
    in a real browser with every host blocked."""
    from critic.corrupt import corrupt_all
    from critic.registry import get_critic
    from critic.settings import CriticismSettings
    from critic.workflows import criticise

    pages = fixture_manpages
    critics = {name: get_critic(name)().fit(pages["train"]) for name in ("repetition", "entity-grid")}
    reference = pages["train"] + pages["valid"]
    looped = corrupt_all(pages["test"], "looped-paragraph", seed=1)
    panel = criticise(critics, reference, {"looped": looped},
                      CriticismSettings(flag_level=0.5, n_bootstrap=20, n_permutations=20))
    out = tmp_path / "r"
    write_report(panel, out, documents={"reference": reference, "looped": looped}, critics=critics)
    flags = panel.flagged()
    both = [k for k, flag in enumerate(flags) if set(flag.by) == {"repetition", "entity-grid"}]
    assert both, [flag.by for flag in flags]
    dom = browser.dom(out / "documents" / f"{both[0]}.html")
    flag = flags[both[0]]
    info = next(d for d in looped if d.id == flag.id).metadata["corruption"]
    paragraph = next(d for d in pages["test"] if flag.id.startswith(d.id + "#")).sections[info["section"]].text[
        info["start"]:info["end"]]
    marks = re.findall(r'<mark class="(loop|copy)"[^>]*>(.*?)</mark>', dom, re.S)
    looped_text = " ".join(paragraph.split())
    assert any(kind == "loop" and " ".join(html.unescape(text).split()[:8]) in looped_text
               for kind, text in marks), marks[:3]
    assert dom.count("<table") >= 2 and any(f">{role}<" in dom for role in "SOX")  # the grid's roles
    assert browser.requests == []
