"""Tables of the code-mixing study: the summary from the result objects, table 10's top words, the mixed share."""

from __future__ import annotations

import numpy as np

from critic.results import CriticismResult
from experiments.tables import cell, interval


def mixed_share(weights: list[list[float]], threshold: float = 0.9) -> float | None:
    """Share of documents whose posterior mean's largest topic weight is below ``threshold``."""
    if not weights:
        return None
    return float(np.mean([max(w) < threshold for w in weights]))


def table10(words: list[list[str]], languages: list[str | None]) -> str:
    """Paper table 10: a column per topic (with its majority language), the top words in rows."""
    head = "| rank | " + " | ".join(f"topic {k} ({lang or '—'})" for k, lang in enumerate(languages)) + " |"
    lines = [head, "|---:|" + "---|" * len(words)]
    for r in range(max(len(w) for w in words)):
        lines.append(f"| {r + 1} | " + " | ".join(w[r] if r < len(w) else "" for w in words) + " |")
    return "\n".join(lines)


def summary_table(result: CriticismResult) -> str:
    """A row per set: n (skipped), Latent NLL [95% CI], Latent PPL, mixed share."""
    lines = ["| set | n (skipped) | Latent NLL ↓ [95% CI] | Latent PPL | mixed share |", "|---|---:|---|---:|---:|"]
    for s in result.sets:
        lines.append(f"| {s.name} | {s.n} ({s.n_skipped}) | {cell(s.latent_nll, '.3f')} "
                     f"{interval(s.latent_nll_ci, '.3f')} | {cell(s.latent_ppl, '.3g')} | "
                     f"{cell(s.statistics.get('mixed_share'), '.3f')} |")
    return "\n".join(lines)
