"""Why a document is flagged: each flagging critic's reasons (Critic.reasons, checked by Critic.explain) are
computed once per flag, kept in documents.jsonl and read back, and shown in report.md, the HTML report (a real
headless browser, every host blocked) and `critic outliers`."""

from __future__ import annotations

import html
import json
import re

import pytest

from critic.cli import main
from critic.critic import MAX_REASONS, Critic
from critic.document import DocumentError, write_jsonl
from critic.panel import criticize_panel, explain_flags, load_results
from critic.report import write_report
from critic.results import DocumentResult, markdown_cell
from critics.sections import SectionTransitionCritic


class Odd(SectionTransitionCritic):
    """A section critic whose first reason holds markup and a table separator, to be shown as text."""

    def reasons(self, result, document):
        return [f"<b>{result.id}</b> | a & b", *super().reasons(result, document)]


class Says(SectionTransitionCritic):
    """Gives back whatever reasons it is told to, to test the contract."""

    said: object = []

    def reasons(self, result, document):
        return self.said


@pytest.fixture(scope="module")
def odd_panel(sets):
    critics, reference, candidates = sets
    both = {"odd": Odd(delta=0.001).fit(reference), "smooth": critics["smooth"]}
    panel = criticize_panel(both, reference, candidates, level=0.2, top=5, n_bootstrap=20, n_permutations=20)
    return both, panel


def flagged_pairs(panel) -> set[tuple[str, str, str]]:
    return {(f.set, f.id, label) for f in panel.flagged() for label in f.by}


def with_reasons(panel) -> set[tuple[str, str, str]]:
    return {(s.name, d.id, label) for label, r in panel.results.items() for s in r.sets for d in s.documents
            if d.reasons is not None}


def test_each_flagging_critic_explains_each_flag_once_and_no_other_document(sets, panel):
    critics, reference, candidates = sets
    docs = {name: {d.id: d for d in ds} for name, ds in {"reference": reference, **candidates}.items()}
    assert with_reasons(panel) == flagged_pairs(panel) and flagged_pairs(panel)
    for f in panel.flagged():
        assert set(f.reasons) == set(f.by)  # the section critics always find a least likely transition
        for label, d in f.by.items():
            assert d.reasons == critics[label].explain(d, docs[f.set][f.id])
            assert 1 <= len(d.reasons) <= MAX_REASONS and all(" -> " in line for line in d.reasons)


def test_explain_checks_what_a_critic_returns(sets, panel):
    critics, reference, _ = sets
    flag = panel.flagged()[0]
    result = next(iter(flag.by.values()))
    says = Says(delta=1.0).fit(reference)
    assert Critic.reasons(says, result, None) == []  # the default: no reasons
    for bad, error, match in ((("a", 2), TypeError, "list of strings"), ("a reason", TypeError, "list of strings"),
                              (["two\nlines"], ValueError, "one non-empty line"), ([" "], ValueError, "non-empty"),
                              (["r"] * (MAX_REASONS + 1), ValueError, f"at most {MAX_REASONS}")):
        says.said = bad
        with pytest.raises(error, match=match):
            says.explain(result)
    says.said = ("fine",)
    assert says.explain(result) == ["fine"]
    other = next(d for d in reference if d.id != result.id)
    with pytest.raises(ValueError, match="not the one the result describes"):
        says.explain(result, other)
    with pytest.raises(KeyError, match="no fitted critic for"):
        explain_flags(panel, {"smooth": critics["smooth"]}, {})


def test_reasons_round_trip_through_documents_jsonl_and_show_in_report_md(sets, odd_panel, tmp_path):
    critics, reference, candidates = sets
    both, panel = odd_panel
    out = tmp_path / "r"
    write_report(panel, out, documents={"reference": reference, **candidates}, critics=both)
    rows = [json.loads(line) for line in (out / "documents.jsonl").read_text().splitlines()]
    assert {(r["set"], r["id"], r["critic"]) for r in rows if "reasons" in r} == flagged_pairs(panel)
    back = load_results(out)
    assert with_reasons(back) == flagged_pairs(panel)
    assert [f.reasons for f in back.flagged()] == [f.reasons for f in panel.flagged()]
    md = (out / "report.md").read_text()
    assert "| set | document | critics | min q | min outlier p | why |" in md
    for f in panel.flagged():
        why = "<br>".join(markdown_cell(f"{label}: {'; '.join(lines)}") for label, lines in f.reasons.items())
        assert f"| {f.set} | {markdown_cell(f.id)} | {', '.join(f.by)} | {f.min_q_value:.4f} | {f.min_p_value:.4f} | " \
               f"{why} |" in md
    # Markdown keeps the text: the cell separator and HTML's brackets are escaped (shown, never rendered)
    assert "<b>" not in md and "\\<b\\>" in md and " \\| a & b" in md
    lines = (out / "documents.jsonl").read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '"reasons"' in line)
    row = json.loads(lines[k])
    lines[k] = json.dumps({**row, "reasons": "one string"})
    (out / "documents.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DocumentError, match=f"documents.jsonl:{k + 1}: .*reasons must be a list of strings"):
        load_results(out)


def test_the_html_report_shows_each_flags_reasons_as_text_and_fetches_nothing(sets, odd_panel, browser, tmp_path):
    critics, reference, candidates = sets
    both, panel = odd_panel
    out = tmp_path / "r"
    write_report(panel, out, documents={"reference": reference, **candidates}, critics=both)
    flags = panel.flagged()
    dom = browser.dom(out / "index.html")
    body = dom.split('<table id="outliers">', 1)[1].split("</table>", 1)[0]
    table_rows = re.findall(r"<tr data-search=.*?</tr>", body, re.S)
    assert len(table_rows) == len(flags) > 0
    for f, row in zip(flags, table_rows):
        assert f'href="documents/{flags.index(f)}.html">{html.escape(f.id)}<' in row
        for label, lines in f.reasons.items():
            assert f'<div data-critic="{label}"><span class="muted">{label}:</span> ' \
                   f'{html.escape("; ".join(lines), quote=False)}</div>' in row
    odd = [f for f in flags if "odd" in f.by]
    assert odd and "<b>" not in body and f"&lt;b&gt;{html.escape(odd[0].id)}&lt;/b&gt; | a &amp; b" in body
    for k in (0, len(flags) - 1):
        page = browser.dom(out / "documents" / f"{k}.html")
        for label, lines in flags[k].reasons.items():
            items = "".join(f"<li>{html.escape(line, quote=False)}</li>" for line in lines)
            assert f'<ul class="reasons" data-critic="{label}">{items}</ul>' in page
    assert browser.requests == []


def test_critic_outliers_prints_why_each_listed_document_is_unlikely(sets, tmp_path, capsys):
    critics, reference, candidates = sets
    critic = critics["sharp"]
    critic.save(tmp_path / "model")
    write_jsonl(reference, tmp_path / "reference.jsonl")
    write_jsonl(candidates["permuted"], tmp_path / "input.jsonl")
    capsys.readouterr()
    assert main(["outliers", str(tmp_path / "model"), "--reference", str(tmp_path / "reference.jsonl"),
                 "--input", str(tmp_path / "input.jsonl"), "--top", "4"]) == 0
    printed = capsys.readouterr().out
    assert "| rank | set | document | T(x) | M(x) | T/M | outlier p ↓ | q | why |" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "| input |" in line]
    docs = {d.id: d for d in candidates["permuted"]}
    assert len(rows) == 4
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        doc_id, why = cells[2], cells[-1]
        d = DocumentResult(doc_id, float(cells[3]), float(cells[4]), float(cells[5]), float(cells[6]))
        assert why == markdown_cell("; ".join(critic.explain(d, docs[doc_id]))) and " -\\> " in why


def test_critic_compare_writes_the_listed_outliers_reasons(sets, tmp_path):
    """``critic compare``'s report explains the documents its outlier table lists (top k over every set), and
    only those: in documents.jsonl and in report.md's "why" column."""
    critics, reference, candidates = sets
    critic = critics["sharp"]
    critic.save(tmp_path / "model")
    write_jsonl(reference, tmp_path / "reference.jsonl")
    write_jsonl(candidates["permuted"], tmp_path / "permuted.jsonl")
    assert main(["compare", str(tmp_path / "model"), "--reference", str(tmp_path / "reference.jsonl"), "--candidate",
                 f"permuted={tmp_path / 'permuted.jsonl'}", "--top", "3", "--n-bootstrap", "20",
                 "--out", str(tmp_path / "r")]) == 0
    panel = load_results(tmp_path / "r")
    result = panel.result
    listed = {(name, d.id) for name, d in result.outliers(top=3)} | {(f.set, f.id) for f in panel.flagged()}
    explained = {(s.name, d.id) for s in result.sets for d in s.documents if d.reasons is not None}
    assert explained == listed and len(listed) >= 3
    docs = {"reference": {d.id: d for d in reference}, "permuted": {d.id: d for d in candidates["permuted"]}}
    report = (tmp_path / "r" / "report.md").read_text()
    for name, d in result.outliers(top=3):
        assert d.reasons == critic.explain(d, docs[name][d.id]) and markdown_cell("; ".join(d.reasons)) in report
