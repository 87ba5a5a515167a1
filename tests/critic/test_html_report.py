"""The HTML report in a real headless browser (Debian's chromium, every host blocked): it renders, has one
summary row per critic and set and one page per flagged document, its filter works, and nothing is fetched."""

from __future__ import annotations

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
