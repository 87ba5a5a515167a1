"""Reports: set results as JSON, per-document results as JSONL, Markdown, figures.

``results.json`` follows :mod:`critic.results` (schema version, the critic's
name, params and state hash, the inputs with their hashes, the configuration)
plus the environment: Python, package versions and the git hash of the code,
so a number can always be traced to what produced it.

:func:`write_report` writes a report directory atomically: it is complete or
absent, never a ``results.json`` of one run beside figures of another.
"""

from __future__ import annotations

import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from .io import atomic_directory, atomic_open, atomic_write_text, check_replaceable
from .results import CriticismResult, json_ready, markdown_table, outliers_table

__all__ = ["environment", "write_results_json", "write_documents_jsonl", "write_report", "REPORT_FILES"]

_PACKAGES = ("critic", "numpy", "scipy", "torch", "torch-struct", "pyro-ppl", "gensim", "kenlm", "transformers")

REPORT_FILES = ("results.json", "documents.jsonl", "report.md")
"""Files every report directory has (a directory with ``results.json`` is a report)."""


def _git_hash() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    """Python version, versions of the relevant installed packages and the git hash."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "packages": versions, "git": _git_hash()}


def write_results_json(result: CriticismResult, path: str | Path, *, extra: dict | None = None) -> Path:
    """``results.json``: the result's schema, the environment and ``extra`` keys (atomically)."""
    payload = result.to_dict()
    payload["environment"] = environment()
    if extra:
        payload.update(json_ready(extra))
    return atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def write_documents_jsonl(result: CriticismResult, path: str | Path) -> Path:
    """One line per document: set, id, T(x), M(x), T/M, outlier p-value, unknowns; or why it was skipped."""
    path = Path(path)
    with atomic_open(path) as fh:
        for s in result.sets:
            for d in s.documents:
                row = json_ready({"set": s.name, **d.__dict__})
                fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
            for doc_id, reason in s.skipped.items():
                fh.write(json.dumps({"set": s.name, "id": doc_id, "skipped": reason}, ensure_ascii=False) + "\n")
    return path


def write_report(result: CriticismResult, out_dir: str | Path, *, top: int = 10, extra: dict | None = None,
                 plot: bool = True, sections: Sequence[str] = (),
                 figures: Callable[[Path], dict[str, Path]] | None = None) -> dict[str, Path]:
    """Write a report directory: ``results.json``, ``documents.jsonl``, ``report.md`` and figures.

    ``sections`` are Markdown blocks appended to ``report.md``; ``figures(dir)``
    draws a critic's own figures into ``dir`` and returns them by name.  The
    directory is built aside and swapped in whole; an existing directory is
    replaced only if it is a report (holds ``results.json``) or empty.
    """
    out = Path(out_dir)
    check_replaceable(out, "results.json", "a report directory")
    names: dict[str, str] = {}
    with atomic_directory(out) as tmp:
        write_results_json(result, tmp / "results.json", extra=extra)
        write_documents_jsonl(result, tmp / "documents.jsonl")
        report = ["# Criticism report", "", markdown_table(result), "", f"## Top {top} outliers", "",
                  outliers_table(result, top=top)]
        skipped = [(s.name, k, v) for s in result.sets for k, v in s.skipped.items()]
        if skipped:
            report += ["", "## Documents that could not be projected", ""]
            report += [f"- `{name}` / `{doc}`: {why}" for name, doc, why in skipped]
        report += [block for s in sections for block in ("", s)]
        atomic_write_text(tmp / "report.md", "\n".join(report) + "\n")
        names = {"results": "results.json", "documents": "documents.jsonl", "report": "report.md"}
        if plot:
            from .plots import latent_nll_histogram

            latent_nll_histogram(result, tmp / "latent_nll_hist.png", top=top)
            names["histogram"] = "latent_nll_hist.png"
        if figures is not None:
            names.update({k: Path(p).relative_to(tmp).as_posix() for k, p in figures(tmp).items()})
    return {k: out / v for k, v in names.items()}
