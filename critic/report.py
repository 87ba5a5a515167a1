"""Reports: set results as JSON, per-document results as JSONL, a Markdown table.

``results.json`` carries the configuration, seed, package versions and the
git hash of the code, so a number can always be traced to what produced it.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .criticism import CriticismResult

__all__ = ["environment", "write_results_json", "write_documents_jsonl", "markdown_table",
           "outliers_table", "write_report"]

_PACKAGES = ("critic", "numpy", "scipy", "torch", "torch-struct", "pyro-ppl", "gensim", "kenlm", "transformers")


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


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_results_json(result: "CriticismResult", path: str | Path, *, extra: dict | None = None) -> Path:
    path = Path(path)
    payload = result.to_dict()
    payload["environment"] = environment()
    if extra:
        payload.update(extra)
    path.write_text(json.dumps(_finite(payload), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_documents_jsonl(result: "CriticismResult", path: str | Path) -> Path:
    """One line per projected document: set, id, T(x), M(x), T/M, outlier p-value, unknowns."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as fh:
        for s in result.sets:
            for d in s.documents:
                row = {"set": s.name, **d.__dict__}
                fh.write(json.dumps(_finite(row), ensure_ascii=False) + "\n")
            for doc_id, reason in s.skipped.items():
                fh.write(json.dumps({"set": s.name, "id": doc_id, "skipped": reason}, ensure_ascii=False) + "\n")
    return path


def _pm(value: float, ci: tuple[float, float]) -> str:
    half = (ci[1] - ci[0]) / 2
    return f"{value:.3f} ± {half:.3f}"


def markdown_table(result: "CriticismResult") -> str:
    """Markdown table of every set; arrows say lower is better, ± is half the CI width."""
    lines = [
        f"Critic: `{result.critic}`",
        "",
        "| set | n | Latent NLL ↓ | 95% CI | Latent PPL ↓ | 95% CI | Δ NLL vs ref | p-value | skipped | unknown |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for s in result.sets:
        diff = "—" if s.comparison is None else f"{s.comparison.difference:+.3f}"
        p = "—" if s.comparison is None else f"{s.comparison.p_value:.4f}"
        lines.append(
            f"| {s.name} | {s.n} | {_pm(s.latent_nll, s.latent_nll_ci)} | "
            f"[{s.latent_nll_ci[0]:.3f}, {s.latent_nll_ci[1]:.3f}] | {s.latent_ppl:.3f} | "
            f"[{s.latent_ppl_ci[0]:.3f}, {s.latent_ppl_ci[1]:.3f}] | {diff} | {p} | {s.n_skipped} | {s.n_unknown} |"
        )
    return "\n".join(lines)


def outliers_table(result: "CriticismResult", top: int = 10, name: str | None = None) -> str:
    lines = ["| rank | set | document | T(x) | M(x) | T/M | outlier p ↓ |", "|---:|---|---|---:|---:|---:|---:|"]
    for rank, (set_name, d) in enumerate(result.outliers(name=name, top=top), start=1):
        lines.append(f"| {rank} | {set_name} | {d.id} | {d.latent_nll:.3f} | {d.latent_steps:g} | "
                     f"{d.latent_nll_per_step:.3f} | {d.outlier_p_value:.4f} |")
    return "\n".join(lines)


def write_report(result: "CriticismResult", out_dir: str | Path, *, top: int = 10,
                 extra: dict | None = None, plot: bool = True) -> dict[str, Path]:
    """Write ``results.json``, ``documents.jsonl``, ``report.md`` and the T(x) histogram PNG."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "results": write_results_json(result, out / "results.json", extra=extra),
        "documents": write_documents_jsonl(result, out / "documents.jsonl"),
    }
    report = ["# Criticism report", "", markdown_table(result), "", f"## Top {top} outliers", "",
              outliers_table(result, top=top)]
    skipped = [(s.name, k, v) for s in result.sets for k, v in s.skipped.items()]
    if skipped:
        report += ["", "## Documents that could not be projected", ""]
        report += [f"- `{name}` / `{doc}`: {why}" for name, doc, why in skipped]
    paths["report"] = out / "report.md"
    paths["report"].write_text("\n".join(report) + "\n", encoding="utf-8")
    if plot:
        from .plots import latent_nll_histogram

        paths["histogram"] = latent_nll_histogram(result, out / "latent_nll_hist.png", top=top)
    return paths
