"""Several critics, one result: flags against a plain-Python reading of the per-document results, results read
back into the same objects, and the report folder's files (the HTML in a real browser: test_html_report.py)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from critic.panel import PanelResult, criticize_panel, load_results
from critic.report import write_panel_report, write_report


def flags_by_hand(panel: PanelResult) -> dict[tuple[str, str], set[str]]:
    """(set, id) -> the critics flagging it: each critic's 5 smallest p-values per candidate set (ties: larger
    T/M, then id), kept when p <= 0.2."""
    out: dict[tuple[str, str], set[str]] = {}
    for label, result in panel.results.items():
        for name, s in result.candidates.items():
            rows = sorted(((d.outlier_p_value, -d.latent_nll_per_step, d.id) for d in s.documents))[:5]
            for p, _, doc_id in rows:
                if p <= 0.2:
                    out.setdefault((name, doc_id), set()).add(label)
    return out


def test_flags_group_each_document_under_every_critic_that_flags_it(panel):
    flags = panel.flagged()
    want = flags_by_hand(panel)
    assert {(f.set, f.id): set(f.by) for f in flags} == want
    assert len(flags) == len(want) and any(len(by) == 2 for by in want.values())
    keys = [(-len(f.by), f.min_p_value) for f in flags]
    assert keys == sorted(keys)  # most critics first, then the smallest p-value
    for f in flags:
        for label, d in f.by.items():
            assert d is next(x for x in panel.results[label].set(f.set).documents if x.id == f.id)


def test_panel_needs_the_same_sets_under_every_critic(sets, panel):
    critics, reference, candidates = sets
    other = criticize_panel({"x": critics["smooth"]}, reference, {"permuted": candidates["permuted"]},
                            n_bootstrap=20, n_permutations=20)
    with pytest.raises(ValueError, match="a panel compares the same sets"):
        PanelResult({**panel.results, **other.results})
    with pytest.raises(ValueError, match="flag level"):
        criticize_panel(critics, reference, candidates, level=0.0)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows: dict[str, int] = {}
        self.links: list[str] = []
        self.urls: list[str] = []
        self._table: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table.append(attrs.get("id") or "")
        if tag == "tr" and self._table and ("data-set" in attrs or "data-search" in attrs):
            self.rows[self._table[-1]] = self.rows.get(self._table[-1], 0) + 1
        for key in ("src", "href"):
            if attrs.get(key):
                (self.links if tag == "a" else self.urls).append(attrs[key])

    def handle_endtag(self, tag):
        if tag == "table":
            self._table.pop()


def test_panel_report_folder_reads_back_as_the_same_results(sets, panel, tmp_path):
    critics, reference, candidates = sets
    out = tmp_path / "report"
    written = write_panel_report(panel, out, documents={"reference": reference, **candidates})
    assert set(written) == {"results", "documents", "report", "html"}
    back = load_results(out)
    assert isinstance(back, PanelResult) and back.to_dict() == panel.to_dict()
    for label, result in panel.results.items():
        for s in result.sets:
            assert back.results[label].set(s.name).documents == s.documents
    rows = [json.loads(line) for line in (out / "documents.jsonl").read_text().splitlines()]
    assert len(rows) == sum(s.n + s.n_skipped for r in panel.results.values() for s in r.sets)
    assert {r["critic"] for r in rows} == {"smooth", "sharp"}

    page = _Collect()
    page.feed((out / "index.html").read_text())
    flags = panel.flagged()
    assert page.rows["summary"] == 2 * 3  # one row per critic and set
    assert page.rows["outliers"] == len(flags)
    assert page.links == [f"documents/{k}.html" for k in range(len(flags))]
    assert sorted(p.name for p in (out / "documents").iterdir()) == sorted(f"{k}.html" for k in range(len(flags)))
    assert not [u for u in page.urls if not u.startswith(("data:", "#"))]  # nothing to fetch
    text = (out / "index.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text) and "<svg" in text
    first = (out / "documents" / "0.html").read_text()
    doc = next(d for d in {"reference": reference, **candidates}[flags[0].set] if d.id == flags[0].id)
    assert all(section.title in first for section in doc.sections if section.title)


def test_one_critic_report_also_writes_the_html_and_reads_back(sets, panel, tmp_path):
    critics, reference, candidates = sets
    result = panel.results["sharp"]
    write_report(result, tmp_path / "one", top=5, documents={"reference": reference, **candidates})
    assert (tmp_path / "one" / "index.html").is_file()
    back = load_results(tmp_path / "one" / "results.json")
    assert back.to_dict() == result.to_dict()
    assert [d for s in back.sets for d in s.documents] == [d for s in result.sets for d in s.documents]


def test_load_results_names_what_is_wrong(tmp_path):
    from critic.document import DocumentError

    with pytest.raises(DocumentError, match="no such file .*a report directory"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(DocumentError, match="results.json: not a results file"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": 1, "kind": "panel", "critics": {"a": {}}}))
    with pytest.raises(DocumentError, match="results.json: results schema version None: .* reads version 1"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": 1, "kind": "panel", "critics": {"a": {
        "schema_version": 1, "critic": {}}}}))
    with pytest.raises(DocumentError, match="results.json: not a results file .*'reference'"):
        load_results(tmp_path)


def test_a_notebook_shows_the_summary_table(panel):
    table = _Collect()
    table.feed(panel._repr_html_())
    assert table.rows == {"summary": 6}
    one = panel.results["sharp"]
    html = one._repr_html_()
    assert html.count('<tr data-critic="sections"') == 3  # alone, a result is labelled by its critic's name
    for s in one.sets:  # the headline (a PPL: a chain critic) with its CI, as the report prints it
        assert f"<td>{s.latent_ppl:.3f}</td><td>[{s.latent_ppl_ci[0]:.3f}, {s.latent_ppl_ci[1]:.3f}]</td>" in html


def test_the_report_histogram_marks_exactly_the_documents_each_critic_flags(panel):
    from critic.plots import latent_nll_histogram_figure
    from critic.report import flagged_per_step

    by_hand = flags_by_hand(panel)
    for label, result in panel.results.items():
        want = sorted(d.latent_nll_per_step for s in result.candidates.values() for d in s.documents
                      if label in by_hand.get((s.name, d.id), ()))
        fig = latent_nll_histogram_figure(result, flagged=flagged_per_step(panel.flagged(), label))
        line = next(x for x in fig.axes[0].get_lines() if x.get_label().endswith(" flagged"))
        assert want and sorted(line.get_xdata()) == want and line.get_label() == f"{len(want)} flagged"
