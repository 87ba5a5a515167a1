"""Tables of the coherence study: table 2 from the result objects."""

from __future__ import annotations

from critic.results import CriticismResult
from experiments.tables import cell, interval


def label_indices(critic, paths: list[list[str] | None]) -> list[list[int]]:
    return [[critic.index_[t] for t in p] for p in paths if p]


def table2(results: dict[str, CriticismResult]) -> str:
    """The paper's table 2 layout (plus MAUVE and PDD): a row per set, a column group per corpus."""
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
    return "\n".join(lines)
