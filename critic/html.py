"""The HTML report: one self-contained page a researcher opens from disk, and a page per flagged document.

Everything is inline: CSS in a ``<style>``, figures as ``<svg>`` elements, a few lines of plain
JavaScript for sorting and filtering the outlier table.  The wide tables (summary, outliers) scroll sideways
inside their own box, so the page keeps its column at any window width.  Nothing is fetched: no CDN, no font, no server.
The outlier table's filter lives in the page's fragment (``index.html#filter=TEXT&min=K``: rows whose
set, id or critics contain TEXT and that K or more critics flag), so a filtered view is a link.

Pages: ``index.html`` (warnings, summary table of every critic and set, each critic's figures, the
outlier table) and ``documents/K.html`` for the K-th flagged document (its text, and what each critic
found in it: its reasons, :meth:`critic.critic.Critic.reasons`, then the critic's view).  The outlier table's
"why" column gives each flagging critic's reasons.
"""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .document import Document
from .labels import HEADLINES, STATISTICS, TWO_SIDED_NOTE

if TYPE_CHECKING:  # annotations only: the result objects render here, they do not depend on it
    from .panel import Flag, PanelResult
    from .results import CriticismResult

__all__ = ["render_index", "render_document", "report_warnings", "summary_html", "number", "DocumentView"]

DocumentView = Callable[[Document, Any], "str | None"]
"""A critic's drill-down view (:meth:`critic.views.CriticView.document_view`): ``view(document,
document_result) -> HTML fragment`` (``None``: nothing beyond the numbers)."""

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;
color:#1d232a;background:#fff}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #d8dee4;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-variant-numeric:tabular-nums}
th,td{padding:.25rem .6rem;border-bottom:1px solid #e4e8ec;text-align:right;vertical-align:top;white-space:nowrap}
table.extras td,td.why{white-space:normal}td.why{min-width:16rem;max-width:32rem}ul.reasons{margin:.3rem 0}
th{background:#f3f5f7;cursor:default}th.sort{cursor:pointer}th.sort:after{content:" \\21C5";color:#8a939c}
td.l,th.l{text-align:left}.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:.5rem .8rem;margin:.4rem 0}
.muted{color:#6a737d}.flag{display:inline-block;background:#fde2e1;color:#a1110a;border-radius:3px;padding:0 .35rem;
margin-right:.25rem;font-size:.85em}figure{margin:1rem 0}figure svg{max-width:100%;height:auto}
pre.doc{white-space:pre-wrap;background:#f7f8fa;padding:.8rem;border-radius:4px}
.section-title{font-weight:600;margin-top:1rem}input,select{font:inherit;padding:.2rem .4rem}
.scroll{overflow-x:auto;max-width:100%}.scroll>table{margin:.6rem 0}
"""

_JS = """
(function(){
  var table=document.getElementById('outliers');if(!table)return;
  var body=table.tBodies[0],text=document.getElementById('filter-text'),min=document.getElementById('filter-min');
  function apply(){
    var q=text.value.toLowerCase(),k=parseInt(min.value||'1',10),shown=0;
    Array.prototype.forEach.call(body.rows,function(r){
      var ok=r.getAttribute('data-search').indexOf(q)>=0&&parseInt(r.getAttribute('data-critics'),10)>=k;
      r.style.display=ok?'':'none';if(ok)shown++;});
    document.getElementById('filter-count').textContent=shown+' of '+body.rows.length+' shown';
  }
  function fromHash(){
    var h=location.hash.replace(/^#/,'').split('&');
    h.forEach(function(kv){var p=kv.split('=');if(p[0]==='filter')text.value=decodeURIComponent(p[1]||'');
      if(p[0]==='min')min.value=p[1];});
    apply();
  }
  text.addEventListener('input',apply);min.addEventListener('change',apply);
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,col){
    if(!th.classList.contains('sort'))return;
    th.addEventListener('click',function(){
      var dir=th.getAttribute('data-dir')==='asc'?'desc':'asc';th.setAttribute('data-dir',dir);
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){var x=a.cells[col].getAttribute('data-v'),y=b.cells[col].getAttribute('data-v');
        var nx=parseFloat(x),ny=parseFloat(y),c=(isNaN(nx)||isNaN(ny))?x.localeCompare(y):nx-ny;
        return dir==='asc'?c:-c;});
      rows.forEach(function(r){body.appendChild(r);});});
  });
  window.addEventListener('hashchange',fromHash);fromHash();
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def number(value: float | None, fmt: str = ".3f") -> str:
    """``value`` formatted, ``—`` for ``None`` or a non-finite number (the report's and the critics' views')."""
    return "—" if value is None or not math.isfinite(value) else format(value, fmt)


def _ci(ci: tuple[float, float] | None, fmt: str = ".3f") -> str:
    if ci is None or not all(v is not None and math.isfinite(v) for v in ci):
        return "—"
    return f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _page(title: str, body: str, *, script: bool = False) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n{body}\n"
            + (f"<script>{_JS}</script>" if script else "") + "</body></html>\n")


def report_warnings(panel: PanelResult) -> list[str]:
    """Degenerate situations a reader must see before any number: a degenerate critic (its
    ``fit_warnings``), a set mostly skipped (with the main reasons), a set too small for a CI, lines the
    reader skipped."""
    out = []
    power = panel.power()
    for label, result in panel.results.items():
        out += [f"{label}: {w}" for w in result.critic.get("warnings", [])]
        out += [f"{label}: {line}" for line in power[label] if line.startswith("cannot flag")]
        for s in result.sets:
            total = s.n + s.n_skipped
            if total and s.n_skipped * 2 > total:
                reasons: dict[str, int] = {}
                for why in s.skipped.values():
                    reasons[why] = reasons.get(why, 0) + 1
                main = "; ".join(f"{why} ({k})" for why, k in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
                out.append(f"{label}: {s.n_skipped} of {total} documents of '{s.name}' could not be scored "
                           f"— {main}")
            out += [f"{label}: '{s.name}': {w}" for w in s.warnings]
    for name, read in panel.reads.items():
        skipped = read.get("skipped") or {}
        if skipped:
            out.append(f"reading '{name}' ({read.get('path')}): skipped "
                       + ", ".join(f"{k} {why}" for why, k in skipped.items()))
        out += [f"reading '{name}' ({read.get('path')}): {warning}" for warning in read.get("warnings") or []]
    return out


def _summary_rows(label: str, result: CriticismResult) -> list[str]:
    headline = result.headline
    rows = []
    for s in result.sets:
        value, ci = (s.latent_ppl, s.latent_ppl_ci) if headline == "latent_ppl" else (s.latent_nll, s.latent_nll_ci)
        c = s.headline_comparison(headline)
        skipped_title = "; ".join(f"{k}: {v}" for k, v in list(s.skipped.items())[:20])
        rows.append(
            f"<tr data-critic=\"{_e(label)}\" data-set=\"{_e(s.name)}\"><td class=\"l\">{_e(label)}</td>"
            f"<td class=\"l\">{_e(s.name)}</td><td>{s.n}</td><td class=\"l\">{HEADLINES[headline]}</td>"
            f"<td>{number(value)}</td><td>{_ci(ci)}</td>"
            f"<td>{'—' if c is None else number(c.difference, '+.3f')}</td>"
            f"<td>{'—' if c is None else _ci(c.difference_ci, '+.3f')}</td>"
            f"<td>{'—' if c is None else number(c.p_value, '.4f') + (' (exact)' if c.p_value_exact else '')}</td>"
            f"<td title=\"{_e(skipped_title)}\">{s.n_skipped}</td><td>{s.n_unknown}</td>"
            f"<td class=\"l\">{_statistics(result, s)}</td></tr>")
    return rows


def _statistics(result: CriticismResult, s) -> str:
    """The set's other statistics (word PPL, MAUVE, ...) as ``name value``; a missing one with its reason."""
    key = "reference" if s is result.reference else f"candidates.{s.name}"
    cells = []
    for name, value in s.statistics.items():
        label = STATISTICS.get(name, (None, name))[1]
        why = result.null_reasons.get(f"{key}.{name}", "")
        cells.append(f"{_e(label)} {number(value)}" if value is not None
                     else f"<span title=\"{_e(why)}\">{_e(label)} —</span>")
    return "; ".join(cells)


def summary_html(results: Mapping[str, CriticismResult]) -> str:
    """The summary table of every critic (by label) and set (the report's, and a notebook's ``_repr_html_``)."""
    head = ("<tr><th class=\"l\">critic</th><th class=\"l\">set</th><th>n</th><th class=\"l\">statistic</th>"
            "<th>value</th><th>95% CI</th><th>Δ vs reference</th><th>95% CI</th><th>p-value</th><th>skipped</th>"
            "<th>unknown</th><th class=\"l\">other statistics</th></tr>")
    rows = [row for label, result in results.items() for row in _summary_rows(label, result)]
    return (f"<div class=\"scroll\"><table id=\"summary\"><thead>{head}</thead><tbody>{''.join(rows)}</tbody>"
            "</table></div>"
            "<p class=\"muted\">Each critic's statistic is the one that fits its latent: Latent PPL for discrete "
            f"chains, Latent NLL for continuous latents. {_e(TWO_SIDED_NOTE)}</p>")


def _outlier_table(panel: PanelResult, flags: list[Flag]) -> str:
    labels = list(panel.results)
    head = ("<tr><th class=\"l sort\">set</th><th class=\"l sort\">document</th><th class=\"sort\">critics</th>"
            "<th class=\"sort\">min q</th><th class=\"sort\">min p</th>"
            + "".join(f"<th class=\"sort\">p ({_e(lb)})</th>" for lb in labels) + "<th class=\"l\">why</th></tr>")
    rows = []
    for k, f in enumerate(flags):
        why = "".join(f"<div data-critic=\"{_e(lb)}\"><span class=\"muted\">{_e(lb)}:</span> {_e('; '.join(lines))}</div>"
                      for lb, lines in f.reasons.items())
        search = " ".join([f.set, f.id, *f.by]).lower()
        cells = "".join(
            f"<td data-v=\"{f.by[lb].outlier_p_value:.6g}\">{number(f.by[lb].outlier_p_value, '.4f')}</td>"
            if lb in f.by else "<td data-v=\"2\">—</td>" for lb in labels)
        badges = "".join(f"<span class=\"flag\">{_e(lb)}</span>" for lb in f.by)
        rows.append(f"<tr data-search=\"{_e(search)}\" data-critics=\"{len(f.by)}\">"
                    f"<td class=\"l\" data-v=\"{_e(f.set)}\">{_e(f.set)}</td>"
                    f"<td class=\"l\" data-v=\"{_e(f.id)}\"><a href=\"documents/{k}.html\">{_e(f.id)}</a></td>"
                    f"<td data-v=\"{len(f.by)}\">{len(f.by)} {badges}</td>"
                    f"<td data-v=\"{f.min_q_value:.6g}\">{number(f.min_q_value, '.4f')}</td>"
                    f"<td data-v=\"{f.min_p_value:.6g}\">{number(f.min_p_value, '.4f')}</td>{cells}"
                    f"<td class=\"l why\">{why}</td></tr>")
    controls = ("<p><label>filter <input id=\"filter-text\" type=\"search\" placeholder=\"set, id or critic\"></label> "
                "<label>flagged by at least <select id=\"filter-min\">"
                + "".join(f"<option value=\"{k}\">{k}</option>" for k in range(1, len(labels) + 1))
                + "</select> critic(s)</label> <span id=\"filter-count\" class=\"muted\"></span></p>")
    scores = sorted({r.outlier_note for r in panel.results.values()})
    rule = (f"A flag: {panel.rule} (at most {panel.top} per critic and set, the least likely). Outlier p: "
            f"{'; '.join(scores)}. Documents flagged by several critics come first, then by their smallest q-value. "
            "Why: what each critic's prior finds least likely in the document, most important first.")
    return (controls + f"<div class=\"scroll\"><table id=\"outliers\"><thead>{head}</thead><tbody>{''.join(rows)}"
            "</tbody></table></div>"
            f"<p class=\"muted\">{_e(rule)}</p>")


def _power_html(panel: PanelResult) -> str:
    """Per critic: how many documents it flags in each set, and what its outlier p-values compare with."""
    counts = panel.flag_counts()
    items = []
    for label, lines in panel.power().items():
        flagged = ", ".join(f"{_e(name)} {k}" for name, k in counts[label].items())
        items.append(f"<li><b>{_e(label)}</b>: flagged {flagged}. " + " ".join(_e(line) + "." for line in lines)
                     + "</li>")
    return f"<p>Flags: {_e(panel.rule)}.</p><ul id=\"power\">{''.join(items)}</ul>"


def render_index(panel: PanelResult, flags: list[Flag], figures: Mapping[str, Mapping[str, str]]) -> str:
    """``index.html``: warnings, the summary table, each critic's figures (label -> caption -> ``<svg>``
    markup) and the outlier table of ``flags`` (linking to ``documents/K.html``)."""
    parts = ["<h1>Criticism report</h1>",
             f"<p class=\"muted\">Critics: {', '.join(_e(lb) for lb in panel.results)}. Sets: "
             f"{', '.join(_e(n) for n in panel.set_names)} (reference: {_e(panel.reference_name)}).</p>"]
    warnings = report_warnings(panel)
    if warnings:
        parts.append("<div id=\"warnings\">" + "".join(f"<div class=\"warn\">⚠ {_e(w)}</div>" for w in warnings)
                     + "</div>")
    parts += ["<h2>Summary</h2>", summary_html(panel.results), _power_html(panel)]
    for label, captions in figures.items():
        parts.append(f"<h2>{_e(label)}</h2>")
        parts += [f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>" for caption, svg in captions.items()]
    parts += [f"<h2>{_e(panel.heading())}</h2>", _outlier_table(panel, flags)]
    return _page("Criticism report", "\n".join(parts), script=True)


def _document_text(doc: Document | None) -> str:
    if doc is None:
        return "<p class=\"muted\">The document's text is not part of this report.</p>"
    out = []
    for k, section in enumerate(doc.sections):
        title = section.title if section.title is not None else ("(untitled)" if len(doc.sections) > 1 else None)
        if title is not None:
            out.append(f"<div class=\"section-title\">§{k + 1} {_e(title)}</div>")
        out.append(f"<pre class=\"doc\">{_e(section.text)}</pre>")
    return "".join(out)


def _extras(result: Any) -> str:
    if not result.extras:
        return "<p class=\"muted\">This critic gives no per-document details beyond the numbers above.</p>"
    rows = "".join(f"<tr><td class=\"l\">{_e(k)}</td><td class=\"l\">{_e(json.dumps(v, ensure_ascii=False)[:2000])}"
                   "</td></tr>" for k, v in result.extras.items())
    return f"<table class=\"extras\">{rows}</table>"


def render_document(flag: Flag, doc: Document | None, views: Mapping[str, DocumentView] | None = None) -> str:
    """``documents/K.html``: the flagged document's text and each flagging critic's findings: its reasons
    (``DocumentResult.reasons``) as a list, then its view when it has one (``views``: label ->
    :data:`DocumentView`), else its numbers and extras."""
    views = views or {}
    parts = ["<p><a href=\"../index.html\">← report</a></p>",
             f"<h1>{_e(flag.id)} <span class=\"muted\">({_e(flag.set)})</span></h1>",
             "<table id=\"critics\"><thead><tr><th class=\"l\">critic</th><th>T(x)</th><th>M(x)</th><th>T/M</th>"
             "<th>outlier p</th></tr></thead><tbody>"
             + "".join(f"<tr><td class=\"l\">{_e(lb)}</td><td>{number(d.latent_nll)}</td><td>{d.latent_steps:g}</td>"
                       f"<td>{number(d.latent_nll_per_step)}</td><td>{number(d.outlier_p_value, '.4f')}</td></tr>"
                       for lb, d in flag.by.items())
             + "</tbody></table>"]
    for label, result in flag.by.items():
        view = views.get(label)
        shown = view(doc, result) if view is not None and doc is not None else None
        parts.append(f"<h2>What {_e(label)} found</h2>")
        if result.reasons:
            parts.append(f"<ul class=\"reasons\" data-critic=\"{_e(label)}\">"
                         + "".join(f"<li>{_e(line)}</li>" for line in result.reasons) + "</ul>")
        parts.append(f"<div class=\"view\" data-critic=\"{_e(label)}\">{shown}</div>" if shown is not None
                     else _extras(result))
    parts += ["<h2>Text</h2>", _document_text(doc)]
    return _page(f"{flag.id} — criticism report", "\n".join(parts))

