"""Several critics, one result: flags against a plain-Python reading of the per-document results, results read
back into the same objects, and the report folder's files (the HTML in a real browser: test_html_report.py)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from critic.panel import PanelResult, criticize_panel, load_results
from critic.report import write_report


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
    with pytest.raises(ValueError, match=r"flag level must lie in \(0, 1\], got 0.0"):
        criticize_panel(critics, reference, candidates, level=0.0)
    with pytest.raises(ValueError, match=r"flag fdr must lie in \(0, 1\], got 1.5"):
        criticize_panel(critics, reference, candidates, fdr=1.5)
    with pytest.raises(ValueError, match="both are None"):
        criticize_panel(critics, reference, candidates, fdr=None)


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
    written = write_report(panel, out, documents={"reference": reference, **candidates})
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
    write_report(PanelResult({"sharp": result}, top=5), tmp_path / "one", documents={"reference": reference, **candidates})
    assert (tmp_path / "one" / "index.html").is_file()
    back = load_results(tmp_path / "one" / "results.json").result
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
    from IPython.core.interactiveshell import InteractiveShell

    from critic.notebook import register

    shell = InteractiveShell()  # a real IPython shell, its display formatters as a notebook's
    assert register(shell)
    show = lambda obj: shell.display_formatter.format(obj)[0]["text/html"]  # noqa: E731
    table = _Collect()
    table.feed(show(panel))
    assert table.rows == {"summary": 6}
    one = panel.results["sharp"]
    html = show(one)
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


def bh_by_hand(p_values: list[float], fdr: float) -> set[int]:
    """The Benjamini-Hochberg step-up procedure, literally: reject the k* smallest, k* = max{k : p_(k) <= k fdr / m}."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values)
    k_star = max((k for k in range(1, m + 1) if p_values[order[k - 1]] <= k * fdr / m), default=0)
    return set(order[:k_star])


def test_flags_at_a_false_discovery_rate_are_benjamini_hochberg_s_rejections(sets):
    """The default rule: each critic flags, in each candidate set, the documents BH rejects at 0.3 over the set's
    outlier p-values (at most ``top`` of them, the least likely); flag_counts counts them all; flags sort by the
    number of critics, then the smallest q-value."""
    critics, reference, candidates = sets
    panel = criticize_panel(critics, reference, candidates, fdr=0.3, top=3, n_bootstrap=20, n_permutations=20)
    assert panel.fdr == 0.3 and panel.level is None
    want: dict[tuple[str, str], set[str]] = {}
    for label, result in panel.results.items():
        for name, s in result.candidates.items():
            rejected = bh_by_hand([d.outlier_p_value for d in s.documents], 0.3)
            assert panel.flag_counts()[label][name] == len(rejected)
            chosen = sorted((s.documents[i] for i in rejected),
                            key=lambda d: (d.outlier_p_value, -d.latent_nll_per_step, d.id))[:3]
            for d in chosen:
                want.setdefault((name, d.id), set()).add(label)
    flags = panel.flagged()
    assert {(f.set, f.id): set(f.by) for f in flags} == want and flags
    keys = [(-len(f.by), f.min_q_value) for f in flags]
    assert keys == sorted(keys)
    assert "q-value at most 0.3 (Benjamini-Hochberg over each set's outlier p-values): at most 30% of a set's " \
           "flags are expected to be real documents" == panel.rule
    default = criticize_panel(critics, reference, candidates, n_bootstrap=20, n_permutations=20)
    assert default.fdr == 0.1 and default.to_dict()["flags"]["fdr"] == 0.1


def test_flag_power_says_when_flags_cannot_fire_and_what_would_fix_it():
    """From the calibration the result records: no flag at all when the smallest p-value is above the FDR;
    a lone outlier among m documents needs p <= fdr / m; each with the real documents per length group needed."""
    from critic.panel import flag_power
    from critic.results import CriticismResult, SetResult

    def result(smallest_group: int, groups: int, m: int) -> CriticismResult:
        about = {"n": smallest_group * groups, "sources": {"reference": smallest_group * groups}, "groups": groups,
                 "smallest_group": smallest_group, "smallest_p": 1 / (smallest_group + 1)}
        def one(name, n):
            return SetResult(name=name, n=n, latent_nll=1.0, latent_nll_ci=(0.0, 2.0), latent_ppl=2.0,
                             latent_ppl_ci=(1.0, 3.0), n_skipped=0, skipped={}, n_unknown=0, documents=[])
        return CriticismResult(critic={"name": "sections"}, reference=one("reference", 10),
                               candidates={"lm": one("lm", m)}, config={"calibration": about})

    few = flag_power(result(8, 2, 80), 0.1)
    assert few[0] == ("p-values against 16 real documents (16 reference) in 2 length group(s) of at least 8: the "
                      "smallest p-value is 0.111")
    assert few[1] == ("cannot flag any document of 'lm' at FDR 0.1: the smallest p-value 0.111 is above it; it "
                      "needs 9 real documents per length group (about 18 in all): fit the critic with calibration "
                      "documents (critic fit cross-fits its training documents) or give a larger reference")
    lone = flag_power(result(99, 10, 80), 0.1)
    assert lone[1] == ("in 'lm' a lone outlier needs p <= 0.00125 (80 documents at FDR 0.1): at least 8 documents "
                       "must reach the smallest p-value together (799 real documents per length group (about 7990 "
                       "in all) would flag one alone)")
    assert flag_power(result(999, 10, 80), 0.1)[1:] == []
    uneven = result(8, 2, 80)
    uneven.config["calibration"]["largest_group"] = 30  # its other group allows 1/31 < 0.1
    assert flag_power(uneven, 0.1)[1] == (
        "cannot flag the documents of 'lm' in length groups of fewer than 9 real documents at FDR 0.1 (the smallest "
        "has 8: p >= 0.111); it needs 9 real documents per length group (about 18 in all): fit the critic with "
        "calibration documents (critic fit cross-fits its training documents) or give a larger reference")
    assert flag_power(result(8, 2, 80), 0.2, by_fdr=False)[1:] == []  # per document at 0.2: 1/9 is below it


def test_results_written_before_fdr_flags_load_with_their_level(sets, tmp_path):
    critics, reference, candidates = sets
    panel = criticize_panel(critics, reference, candidates, n_bootstrap=20, n_permutations=20)
    write_report(panel, tmp_path / "r")
    payload = json.loads((tmp_path / "r" / "results.json").read_text())
    assert payload["flags"] == {"fdr": 0.1, "level": None, "top": 20, "counts": panel.flag_counts()}
    back = load_results(tmp_path / "r")
    assert back.fdr == 0.1 and back.level is None and back.flagged() == panel.flagged()
    payload["flags"] = {"level": 0.01, "top": 20}  # an older report: flags at a p-value level
    (tmp_path / "r" / "results.json").write_text(json.dumps(payload))
    old = load_results(tmp_path / "r")
    assert old.fdr is None and old.level == 0.01


def test_the_heading_counts_every_flag_and_says_how_many_are_listed(sets):
    critics, reference, candidates = sets
    panel = criticize_panel(critics, reference, candidates, level=0.5, top=2, n_bootstrap=20, n_permutations=20)
    every = {(f.set, f.id) for f in panel.flagged(listed=False)}
    assert every == {(name, d.id) for result in panel.results.values() for name, s in result.candidates.items()
                     for d in s.documents if d.outlier_p_value <= 0.5}
    listed = panel.flagged()
    assert len(listed) < len(every) and panel.heading() == f"Flagged documents ({len(every)}; {len(listed)} listed)"
    assert criticize_panel(critics, reference, candidates, level=0.5, top=1000, n_bootstrap=20,
                           n_permutations=20).heading() == f"Flagged documents ({len(every)})"
