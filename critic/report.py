"""The one report writer: a criticism (:class:`~critic.panel.PanelResult`, one critic or several) as a folder of
``results.json``, ``documents.jsonl``, ``report.md`` and ``index.html`` with a page per flagged document.

Every entry point writes its report here (``critic compare``, ``critic report``, ``critic run`` configs and the
studies, through :mod:`critic.workflows`); a study adds its own Markdown sections and figures.  ``results.json``
is the panel's (:mod:`critic.panel`: each critic's :mod:`critic.results` schema: its name, params and state
hash, the inputs with their hashes, the configuration) plus the environment: Python, package versions and the
git hash of the code, so a number can always be traced to what produced it.

:func:`write_report` writes a report directory atomically: it is complete or absent, never a ``results.json`` of
one run beside figures of another.
"""

from __future__ import annotations

import functools
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .critic import Critic
from .document import Document
from .html import DocumentView
from .io import atomic_directory, atomic_open, atomic_write_text, check_replaceable
from .panel import Flag, PanelResult
from .results import CriticismResult, json_ready, markdown_cell, markdown_table, outliers_table
from .views import document_view, report_figures

__all__ = ["environment", "write_documents_jsonl", "write_report", "REPORT_FILES"]

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


def _png_markup(path: Path, caption: str | None = None) -> str:
    """A PNG figure inlined as a data URI (the report stays one self-contained folder of pages), described by its
    caption (else its name)."""
    import base64
    import html

    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(caption or path.stem, quote=True)}" src="data:image/png;base64,{data}">'


def _run_figures(drawn: Mapping[str, Path], folder: Path) -> dict[str, str]:
    """A run's own figures, caption -> markup: each under the caption kept in its file
    (:func:`critic.plots.figure_caption`), else its name, linking to its file in the report ``folder``."""
    import html
    from urllib.parse import quote

    from .plots import figure_caption

    shown = {}
    for name, path in drawn.items():
        caption = figure_caption(path)
        link = quote(path.relative_to(folder).as_posix()) if path.is_relative_to(folder) else None
        markup = _png_markup(path, caption)
        shown[caption or name] = (f'<a href="{html.escape(link, quote=True)}">{markup}</a>' if link else markup)
    return shown


def flagged_per_step(flags: Sequence[Flag], label: str) -> list[float]:
    """``T(x)/M(x)`` under critic ``label`` of each document it flags (what its histogram marks)."""
    return [f.by[label].latent_nll_per_step for f in flags if label in f.by]


def _write_html(panel: PanelResult, directory: Path, *, documents: Mapping[str, Sequence[Document]] | None,
                figures: Mapping[str, Mapping[str, str]], views: Mapping[str, DocumentView] | None) -> None:
    """``index.html`` and ``documents/K.html`` for each flagged document, into ``directory``: each critic's
    histogram and ``figures`` (heading -> caption -> markup: a critic's under its label, a run's own under theirs)."""
    from .html import render_document, render_index
    from .plots import latent_nll_histogram_figure, svg_markup

    flags = panel.flagged()
    shown = {label: {"T(x)/M(x) per set, reference filled; marked: the documents this critic flags":
                     svg_markup(latent_nll_histogram_figure(result, flagged=flagged_per_step(flags, label))),
                     **figures.get(label, {})}
             for label, result in panel.results.items()}
    shown.update({heading: own for heading, own in figures.items() if heading not in panel.results})
    atomic_write_text(directory / "index.html", render_index(panel, flags, shown))
    by_id = {name: {d.id: d for d in docs} for name, docs in (documents or {}).items()}
    (directory / "documents").mkdir(exist_ok=True)
    for k, flag in enumerate(flags):
        doc = by_id.get(flag.set, {}).get(flag.id)
        atomic_write_text(directory / "documents" / f"{k}.html", render_document(flag, doc, views))


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


def write_report(panel: PanelResult, out_dir: str | Path, *, documents: Mapping[str, Sequence[Document]] | None = None,
                 critics: Mapping[str, Critic] | None = None, extra: Mapping[str, Any] | None = None,
                 sections: Sequence[str] = (), figures: Callable[[Path], Mapping[str, Path]] | None = None
                 ) -> dict[str, Path]:
    """Write a criticism's report directory and return its files by kind.

    - ``results.json``: every critic's results, the reads, the flag rule, the environment and ``extra`` keys;
    - ``documents.jsonl``: one row per document and critic (:func:`write_documents_jsonl`);
    - ``report.md``: each critic's set table and its ``panel.top`` least likely documents, the flags (what a
      flag means, what bounds them) with the critics' reasons, then ``sections`` (Markdown blocks of a study);
    - ``index.html`` with ``documents/K.html`` per flagged document (its text from ``documents``, set name ->
      documents).

    With the fitted ``critics`` (label -> critic) each draws its own figures and its view of each flagged
    document (:mod:`critic.views`).  ``figures(folder)`` draws a study's own figures into the folder and returns
    them by name (kept as files beside ``report.md`` and shown in ``index.html``).  The directory is built aside
    and swapped in whole; an existing one is replaced only if it is a report (holds ``results.json``) or empty.
    """
    critics = dict(critics or {})
    shown = critic_figures(critics, panel, documents or {})
    document_views = {label: functools.partial(document_view, critic) for label, critic in critics.items()}
    out = Path(out_dir)
    check_replaceable(out, "report")
    written = {"results": "results.json", "documents": "documents.jsonl", "report": "report.md", "html": "index.html"}
    with atomic_directory(out, "report") as tmp:
        payload = {**panel.to_dict(), "environment": environment(), **json_ready(dict(extra or {}))}
        atomic_write_text(tmp / "results.json",
                          json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
        write_documents_jsonl(panel, tmp / "documents.jsonl")
        atomic_write_text(tmp / "report.md", "\n".join([*_markdown(panel), *(b for s in sections for b in ("", s))])
                          + "\n")
        drawn = {name: Path(path) for name, path in (figures(tmp) if figures is not None else {}).items()}
        written.update({name: path.relative_to(tmp).as_posix() for name, path in drawn.items()})
        if drawn:
            shown["Figures of this run"] = _run_figures(drawn, tmp)
        _write_html(panel, tmp, documents=documents, figures=shown, views=document_views)
    return {kind: out / name for kind, name in written.items()}


def _markdown(panel: PanelResult) -> list[str]:
    """``report.md``'s lines: each critic's table, least likely documents and unprojected documents, then the
    flags."""
    lines = ["# Criticism report", ""]
    for label, result in panel.results.items():
        lines += [f"## {markdown_cell(label)}", "", markdown_table(result, label), "",
                  f"### Least likely documents (top {panel.top})", "", outliers_table(result, top=panel.top), ""]
        skipped = [(s.name, k, v) for s in result.sets for k, v in s.skipped.items()]
        if skipped:
            lines += ["### Documents that could not be projected", ""]
            lines += [f"- {markdown_cell(name)} / {markdown_cell(doc)}: {markdown_cell(why)}"
                      for name, doc, why in skipped] + [""]
    lines += _flag_lines(panel)
    lines += ["", "| set | document | critics | min q | min outlier p | why |", "|---|---|---|---:|---:|---|"]
    lines += [f"| {markdown_cell(f.set)} | {markdown_cell(f.id)} | {', '.join(map(markdown_cell, f.by))} | "
              f"{f.min_q_value:.4f} | {f.min_p_value:.4f} | "
              + "<br>".join(markdown_cell(f"{label}: {'; '.join(why)}") for label, why in f.reasons.items())
              + " |" for f in panel.flagged()]
    return lines
