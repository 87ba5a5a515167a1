"""Tables of the topic-correlation study: table 9 from the result objects, table 14's outliers with their topics."""

from __future__ import annotations

from critic.document import Document
from critic.results import CriticismResult, SetResult
from experiments.tables import cell, interval


def snippet(text: str, n: int = 240) -> str:
    text = " ".join(text.split())
    return (text[:n] + " …" if len(text) > n else text).replace("|", "\\|")


def outlier_tables(critic, result, sets: dict[str, list[Document]], top: int, *, flagged: bool = False
                   ) -> tuple[list[str], dict]:
    """Table 14: per set, the ``top`` documents with the highest ``T(x)`` (the paper's ranking) with their three
    heaviest topics; with ``flagged``, instead the ``top`` documents the report flags first: smallest outlier
    p-value (``result.config.outlier_score``: length-matched by default, combined with the critic's outlier
    statistics), ties by ``T(x)``, highest first (issue 22)."""
    from critics.topics.ctm_plots import outlier_topics

    if flagged:
        order = (lambda d: (d.outlier_p_value, -d.latent_nll))
        how = (f"the smallest outlier p-value ({result.config.get('outlier_score', 'plain')} score; "
               f"statistics: T(x), {', '.join(critic.outlier_statistics) or 'none else'})")
    else:
        order, how = (lambda d: -d.latent_nll), "the highest T(x)"
    blocks, rows_by_set = [], {}
    for name, docs in sets.items():
        ranked = sorted(result.set(name).documents, key=order)[:top]
        rows = outlier_topics(critic, docs, [d.id for d in ranked], n_topics=3, n_words=6)
        by_id = {d.id: d for d in docs}
        found = {d.id: d for d in ranked}
        for r in rows:
            r["outlier_p_value"] = found[r["id"]].outlier_p_value
            r["p_values"] = found[r["id"]].p_values
            r["text"] = snippet(by_id[r["id"]].text)
        rows_by_set[name] = rows
        extra = " | u(x) p" if flagged else ""
        lines = [f"### Table 14 (`{name}`): the {len(rows)} documents with {how}", "",
                 f"| document | T(x) | p{extra} | top topics (weight: words) | text |",
                 "|---|---:|---:|" + ("---:|" if flagged else "") + "---|---|"]
        for r in rows:
            topics = "<br>".join(f"{t['topic']} ({t['weight']:.2f}): {' '.join(t['words'])}" for t in r["topics"])
            oov = f" | {(r['p_values'] or {}).get('oov_share', float('nan')):.4f}" if flagged else ""
            lines.append(f"| `{r['id']}` | {r['latent_nll']:.2f} | {r['outlier_p_value']:.4f}{oov} | {topics} | "
                         f"{r['text']} |")
        blocks += lines + [""]
    return blocks, rows_by_set


def nll_cell(s: SetResult) -> str:
    return f"{cell(s.latent_nll)} {interval(s.latent_nll_ci)}"


def table9(results: dict[str, CriticismResult]) -> str:
    """Table 9 layout: a row per set; per scoring, Latent NLL [95% CI], the difference to the data [95% CI]
    and its permutation p-value; the documents scored and skipped."""
    first = next(iter(results.values()))
    head = "| set |" + "".join(f" Latent NLL ↓ ({k}) [95% CI] | − data ({k}) [95% CI], p |" for k in results) \
        + " n scored | not projected |"
    lines = [head, "|---|" + "---|---|" * len(results) + "---:|---:|"]
    for name in (s.name for s in first.sets):
        row = f"| {name} |"
        for res in results.values():
            s = res.set(name)
            c = s.comparison
            if c is None:
                diff = "—"
            else:
                lo, hi = c.difference_ci
                diff = f"{cell(c.difference, '+.2f')} [{cell(lo, '+.2f')}, {cell(hi, '+.2f')}], " \
                       f"p = {cell(c.p_value, '.4f')}"
            row += f" {nll_cell(s)} | {diff} |"
        s = first.set(name)
        lines.append(row + f" {s.n} | {s.n_skipped} |")
    return "\n".join(lines)
