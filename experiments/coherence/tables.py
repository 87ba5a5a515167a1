"""Tables of the coherence study: table 2 from the result objects."""

from __future__ import annotations

from critic.results import CriticismResult
from experiments.tables import cell, comparison_line, interval


def label_indices(critic, paths: list[list[str] | None]) -> list[list[int]]:
    return [[critic.index_[t] for t in p] for p in paths if p]


TITLES_KEY = "w_title_vs_wo_title"
"""Where the report's ``results.json`` keeps the W/ Title against W/O Title comparison, under ``run``
(:func:`experiments.tables.set_comparison` of ``lm_w_title`` against ``lm_wo_title``)."""


def titles_line(titles: dict) -> str:
    """The paper's question, does training with titles help: W/ Title against W/O Title in one sentence."""
    return comparison_line("W/ Title minus W/O Title", titles)


def table2(results: dict[str, CriticismResult], titles: dict[str, dict] | None = None) -> str:
    """The paper's table 2 layout (plus MAUVE and PDD): a row per set, a column group per corpus; below it, per
    corpus, the W/ against W/O Title comparison (``titles``: corpus -> its :data:`TITLES_KEY`)."""
    names = {"data": "Data", "lm_w_title": "LM W/ Title", "lm_wo_title": "LM W/O Title"}
    head = "| set |" + "".join(f" {c}: word PPL ↓ | {c}: Latent PPL ↓ [95% CI] | {c}: MAUVE ↑ | {c}: PDD ↓ |"
                               for c in results)
    lines = [head, "|---|" + "---:|---|---:|---:|" * len(results)]
    for key, label in names.items():
        row = f"| {label} |"
        for res in results.values():
            s = res.set(key)
            row += (f" {cell(s.statistics.get('word_ppl'))} | {cell(s.latent_ppl)} {interval(s.latent_ppl_ci)} "
                    f"(n={s.n}) |"
                    f" {cell(s.statistics.get('mauve'), '.3f')} | {cell(s.statistics.get('pdd'), '.4f')} |")
        lines.append(row)
    lines += [""] + [f"- {corpus}: {titles_line(t)}" for corpus, t in (titles or {}).items()]
    return "\n".join(lines).rstrip()
