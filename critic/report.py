"""Reports: set results as JSON, per-document results as JSONL, Markdown, figures.

``results.json`` follows :mod:`critic.results` (schema version, the critic's
name, params and state hash, the inputs with their hashes, the configuration)
plus the environment: Python, package versions and the git hash of the code,
so a number can always be traced to what produced it.

:func:`write_report` writes a report directory atomically: it is complete or
absent, never a ``results.json`` of one run beside figures of another.
"""

from __future__ import annotations

import functools
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .conformal import FLAG_FDR
from .critic import Critic
from .document import Document
from .html import DocumentView
from .io import atomic_directory, atomic_open, atomic_write_text, check_replaceable
from .panel import Flag, PanelResult
from .results import CriticismResult, json_ready, markdown_cell, markdown_table, outliers_table
from .views import document_view, report_figures

__all__ = ["environment", "write_results_json", "write_documents_jsonl", "write_report", "write_panel_report",
           "REPORT_FILES"]

_PACKAGES = ("critic", "numpy", "scipy", "torch", "torch-struct", "pyro-ppl", "gensim", "kenlm", "transformers")

REPORT_FILES = ("results.json", "documents.jsonl", "report.md", "index.html")
"""Files every report directory has (a directory with ``results.json`` is a report)."""


def _git_hash() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    """Python version, versions of the relevant installed packages, the git hash and torch's threads."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    import torch

    return {"python": platform.python_version(), "packages": versions, "git": _git_hash(),
            "torch_threads": torch.get_num_threads()}


def write_results_json(result: CriticismResult, path: str | Path, *, extra: dict | None = None) -> Path:
    """``results.json``: the result's schema, the environment and ``extra`` keys (atomically)."""
    payload = result.to_dict()
    payload["environment"] = environment()
    if extra:
        payload.update(json_ready(extra))
    return atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def _document_rows(result: CriticismResult, critic: str | None = None):
    """``documents.jsonl`` rows of one result (each led by ``critic`` when given); ``reasons`` only in the rows
    of documents that have them (the flagged ones)."""
    lead = {} if critic is None else {"critic": critic}
    for s in result.sets:
        for d in s.documents:
            row = {k: v for k, v in d.__dict__.items() if k != "reasons" or v is not None}
            yield json_ready({**lead, "set": s.name, **row})
        for doc_id, reason in s.skipped.items():
            yield {**lead, "set": s.name, "id": doc_id, "skipped": reason}


def write_documents_jsonl(result: CriticismResult | PanelResult, path: str | Path) -> Path:
    """One line per document (and critic, for a panel): set, id, T(x), M(x), T/M, outlier p-value,
    unknowns, extras and, for a flagged document, the critic's reasons; or why it was skipped."""
    path = Path(path)
    parts = (result.results.items() if isinstance(result, PanelResult) else [(None, result)])
    with atomic_open(path) as fh:
        for label, one in parts:
            for row in _document_rows(one, label):
                fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def _png_markup(path: Path) -> str:
    """A PNG figure inlined as a data URI (the report stays one self-contained folder of pages)."""
    import base64

    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{path.stem}" src="data:image/png;base64,{data}">'


def flagged_per_step(flags: Sequence[Flag], label: str) -> list[float]:
    """``T(x)/M(x)`` under critic ``label`` of each document it flags (what its histogram marks)."""
    return [f.by[label].latent_nll_per_step for f in flags if label in f.by]


def _write_html(panel: PanelResult, directory: Path, *, documents: Mapping[str, Sequence[Document]] | None,
                figures: Mapping[str, Mapping[str, str]], views: Mapping[str, DocumentView] | None) -> None:
    """``index.html`` and ``documents/K.html`` for each flagged document, into ``directory``."""
    from .html import render_document, render_index
    from .plots import latent_nll_histogram_figure, svg_markup

    flags = panel.flagged()
    shown = {label: {"T(x)/M(x) per set, reference filled; marked: the documents this critic flags":
                     svg_markup(latent_nll_histogram_figure(result, flagged=flagged_per_step(flags, label))),
                     **figures.get(label, {})}
             for label, result in panel.results.items()}
    atomic_write_text(directory / "index.html", render_index(panel, flags, shown))
    by_id = {name: {d.id: d for d in docs} for name, docs in (documents or {}).items()}
    (directory / "documents").mkdir(exist_ok=True)
    for k, flag in enumerate(flags):
        doc = by_id.get(flag.set, {}).get(flag.id)
        atomic_write_text(directory / "documents" / f"{k}.html", render_document(flag, doc, views))


def write_report(result: CriticismResult, out_dir: str | Path, *, top: int = 10, extra: dict | None = None,
                 plot: bool = True, sections: Sequence[str] = (),
                 figures: Callable[[Path], dict[str, Path]] | None = None,
                 documents: Mapping[str, Sequence[Document]] | None = None, fdr: float | None = FLAG_FDR,
                 level: float | None = None) -> dict[str, Path]:
    """Write a report directory: ``results.json``, ``documents.jsonl``, ``report.md``, ``index.html``
    (with a page per flagged document) and figures.

    ``sections`` are Markdown blocks appended to ``report.md``; ``figures(dir)``
    draws a critic's own figures into ``dir`` and returns them by name (shown in ``index.html`` too);
    ``documents`` (set name -> documents) puts each flagged document's text on its page; ``fdr`` or ``level``
    is the flag rule (:class:`~critic.panel.PanelResult`).  The
    directory is built aside and swapped in whole; an existing directory is
    replaced only if it is a report (holds ``results.json``) or empty.
    """
    out = Path(out_dir)
    check_replaceable(out, "report")
    names: dict[str, str] = {}
    panel = PanelResult({result.critic_name: result}, top=top, fdr=fdr, level=level)
    with atomic_directory(out, "report") as tmp:
        write_results_json(result, tmp / "results.json", extra={"flags": panel.to_dict()["flags"], **(extra or {})})
        write_documents_jsonl(result, tmp / "documents.jsonl")
        report = ["# Criticism report", "", markdown_table(result), "", *_flag_lines(panel), "",
                  f"## Top {top} outliers", "", outliers_table(result, top=top)]
        skipped = [(s.name, k, v) for s in result.sets for k, v in s.skipped.items()]
        if skipped:
            report += ["", "## Documents that could not be projected", ""]
            report += [f"- `{name}` / `{doc}`: {why}" for name, doc, why in skipped]
        report += [block for s in sections for block in ("", s)]
        atomic_write_text(tmp / "report.md", "\n".join(report) + "\n")
        names = {"results": "results.json", "documents": "documents.jsonl", "report": "report.md",
                 "html": "index.html"}
        if plot:
            from .plots import latent_nll_histogram

            latent_nll_histogram(result, tmp / "latent_nll_hist.png", top=top)
            names["histogram"] = "latent_nll_hist.png"
        drawn = {k: Path(p) for k, p in figures(tmp).items()} if figures is not None else {}
        names.update({k: p.relative_to(tmp).as_posix() for k, p in drawn.items()})
        _write_html(panel, tmp, documents=documents, views=None,
                    figures={result.critic_name: {k: _png_markup(p) for k, p in drawn.items()}})
    return {k: out / v for k, v in names.items()}


def _flag_lines(panel: PanelResult) -> list[str]:
    """``report.md``'s account of the flags: how many, what a flag means, what the p-values compare with and
    what bounds them (:meth:`PanelResult.power`), per critic and set."""
    counts = panel.flag_counts()
    scores = sorted({r.outlier_note for r in panel.results.values()})
    lines = [f"## {panel.heading()}", "", f"A flag: {panel.rule}.", "",
             f"Outlier p: {'; '.join(scores)}.", ""]
    for label, lines_of in panel.power().items():
        flagged = ", ".join(f"{markdown_cell(name)} {k}" for name, k in counts[label].items())
        lines.append(f"- **{markdown_cell(label)}**: flagged {flagged}"
                     + (f" (at most {panel.top} listed per set)" if any(k > panel.top for k in counts[label].values())
                        else "") + "".join(f"; {markdown_cell(line)}" for line in lines_of))
    return lines


def critic_figures(critics: Mapping[str, Critic], panel: PanelResult,
                   documents: Mapping[str, Sequence[Document]]) -> dict[str, dict[str, str]]:
    """Each critic's own figures (its view's :meth:`~critic.views.CriticView.report_figures`) as inline ``<svg>``
    markup, by label."""
    from .plots import svg_markup

    return {label: {caption: svg_markup(fig)
                    for caption, fig in report_figures(critic, panel.results[label], documents).items()}
            for label, critic in critics.items()}


def write_panel_report(panel: PanelResult, out_dir: str | Path, *, extra: dict | None = None,
                       documents: Mapping[str, Sequence[Document]] | None = None,
                       critics: Mapping[str, Critic] | None = None) -> dict[str, Path]:
    """Write a panel's report directory: ``results.json`` (every critic), ``documents.jsonl`` (one row per
    document and critic), ``report.md`` (each critic's table, then the flagged documents with the critics'
    reasons, :attr:`Flag.reasons`) and ``index.html``
    with ``documents/K.html`` per flagged document (its text from ``documents``, set name -> documents).
    With the fitted ``critics`` (label -> critic), each draws its own figures and its view of each flagged
    document (its view, :mod:`critic.views`).  Built aside and swapped in
    whole."""
    critics = dict(critics or {})
    figures = critic_figures(critics, panel, documents or {})
    document_views = {label: functools.partial(document_view, critic) for label, critic in critics.items()}
    out = Path(out_dir)
    check_replaceable(out, "report")
    with atomic_directory(out, "report") as tmp:
        payload = panel.to_dict()
        payload["environment"] = environment()
        if extra:
            payload.update(json_ready(extra))
        atomic_write_text(tmp / "results.json",
                          json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
        write_documents_jsonl(panel, tmp / "documents.jsonl")
        flags = panel.flagged()
        lines = ["# Criticism report", ""]
        for label, result in panel.results.items():
            lines += [f"## {label}", "", markdown_table(result, label), ""]
        lines += _flag_lines(panel)
        lines += ["", "| set | document | critics | min q | min outlier p | why |", "|---|---|---|---:|---:|---|"]
        lines += [f"| {markdown_cell(f.set)} | {markdown_cell(f.id)} | {', '.join(map(markdown_cell, f.by))} | "
                  f"{f.min_q_value:.4f} | {f.min_p_value:.4f} | "
                  + "<br>".join(markdown_cell(f"{label}: {'; '.join(why)}") for label, why in f.reasons.items())
                  + " |" for f in flags]
        atomic_write_text(tmp / "report.md", "\n".join(lines) + "\n")
        _write_html(panel, tmp, documents=documents, figures=figures, views=document_views)
    return {"results": out / "results.json", "documents": out / "documents.jsonl", "report": out / "report.md",
            "html": out / "index.html"}
