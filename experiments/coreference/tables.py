"""Tables of the coreference study: table 7 from the result objects, tables 6 and 15-17 from the chains."""

from __future__ import annotations

import math

from critic.results import CriticismResult
from experiments.tables import cell, comparison_line, interval


def diagnostic_tables(critic, sets: dict[str, list[tuple[str, ...]]], settings: dict) -> list[str]:
    """Markdown blocks: tables 6, 15, 16 and 17 for every candidate set against ``data``."""
    from critics.coref.diagnostics import (contribution_table, difference_tables, implausible_table,
                                           ngram_rows_markdown)

    prior = critic.prior_
    pad, order = prior.pad, prior.order
    ref = sets["data"]
    blocks = []
    for name, chains in sets.items():
        if name == "data" or not chains:
            continue
        rows = percent_rows(contribution_table(prior, ref, chains, top=settings["top"]))
        blocks += [f"## `{name}` against the data", "",
                   "### Table 6: windows ranked by their share of the Latent NLL difference (per chain token)", "",
                   ngram_rows_markdown(rows, [("P̂ data %", "p_ref_pct", ".2f"), (f"P̂ {name} %", "p_cand_pct", ".2f"),
                                              ("log P_c", "log_prob", ".2f"), ("share (nats)", "contribution", ".4f")],
                                       pad=pad, order=order)]
        rows = implausible_table(prior, chains, threshold=settings["threshold"], top=15)
        blocks += [f"### Table 15: windows with log P_c < {settings['threshold']}", "",
                   ngram_rows_markdown(rows, [("log P_c", "log_prob", ".2f"), ("count", "count", "d"),
                                              ("argmax z*", "argmax", ""), ("log P_c(z*)", "argmax_log_prob", ".2f")],
                                       pad=pad, order=order) if rows else "none\n"]
        largest, smallest = difference_tables(critic.fit_prior, ref, chains, min_count=settings["min_count"])
        cols = [("P data", "p_ref", ".2f"), (f"P {name}", "p_cand", ".2f"), ("count data", "count_ref", "d"),
                (f"count {name}", "count_cand", "d")]
        for title, rows in (("16: largest", largest), ("17: smallest", smallest)):
            blocks += [f"### Table {title} log P_{name} - log P_data (windows seen >= {settings['min_count']} "
                       "times in both)", "",
                       ngram_rows_markdown(rows, cols, pad=pad, order=order) if rows else "none\n"]
    return blocks


def percent_rows(rows: list[dict]) -> list[dict]:
    return [{**r, "p_ref_pct": 100 * r["p_ref"], "p_cand_pct": 100 * r["p_cand"]} for r in rows]


def originals_latent_ppl(result, corruptions: list[str]) -> dict[str, float | None]:
    """Per corruption set, the Latent PPL of the same documents uncorrupted (the data set's T and M of the
    documents the corruption could change): the paired baseline of that set."""
    t = {d.id: (d.latent_nll, d.latent_steps) for d in result.reference.documents}
    out: dict[str, float | None] = {"data": None, "lm": None}
    for name in corruptions:
        pairs = [t[d.id.rsplit("#", 1)[0]] for d in result.set(name).documents if d.id.rsplit("#", 1)[0] in t]
        out[name] = math.exp(sum(a for a, _ in pairs) / sum(b for _, b in pairs)) if pairs else None
    return out


def table7(results: dict[str, CriticismResult], between: dict[str, dict | None] | None = None) -> str:
    """Table 7 layout: a row per set; per prior, Latent PPL [95% CI] (n), the permutation p-value of its per-document
    mean Latent NLL against the data's and, for a corruption, the Latent PPL of the same documents uncorrupted; the
    LMs' word PPL.  Below it, per prior, the second LM against the first (``between``: prior ->
    :func:`experiments.tables.set_comparison`, ``None`` with one LM)."""
    first = next(iter(results.values()))
    head = ("| set |" + "".join(f" Latent PPL ↓ ({p}) [95% CI] (n) | p vs data ({p}) | same documents uncorrupted ({p}) |"
                                for p in results) + " word PPL ↓ |")
    lines = [head, "|---|" + "---|---:|---:|" * len(results) + "---:|"]
    for name in (s.name for s in first.sets):
        row = f"| {name} |"
        for res in results.values():
            s = res.set(name)
            row += (f" {cell(s.latent_ppl, '.3f')} {interval(s.latent_ppl_ci, '.3f')} ({s.n}) |"
                    f" {cell(s.p_value, '.4f')} | {cell(s.statistics.get('originals_latent_ppl'), '.3f')} |")
        lines.append(row + f" {cell(first.set(name).statistics.get('word_ppl'))} |")
    lines += [""] + [f"- {prior}: " + comparison_line(f"{c['candidate']} minus {c['reference']}", c)
                     for prior, c in (between or {}).items() if c]
    return "\n".join(lines).rstrip()
