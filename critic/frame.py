"""Result objects as pandas DataFrames: the numbers of ``documents.jsonl`` and ``results.json`` as tables.

Two shapes, one for each file of a report (:mod:`critic.report`):

- a row per document (and critic): :func:`set_rows` gives ``documents.jsonl``'s fields of each document
  (:class:`~critic.results.DocumentResult`: ``id``, ``latent_nll`` T(x), ``latent_steps`` M(x),
  ``latent_nll_per_step`` T/M, ``outlier_p_value``, ``q_value``, ...) and a row for each document that could not be
  projected, with its reason under ``skipped`` and no numbers (NaN);
- a row per set (and critic): :func:`set_summary` gives ``results.json``'s set statistics with each interval
  as two columns (``latent_ppl_ci_low``, ``latent_ppl_ci_high``) and both comparisons with the reference
  (``latent_ppl_difference`` ... ``latent_ppl_p_value`` and ``latent_nll_difference`` ... ``latent_nll_p_value``:
  candidate minus reference, NaN for the reference).

pandas is optional: it is imported only when a frame is asked for (:func:`pandas`), its absence an
``ImportError`` naming the install command.  The result classes call these functions
(``to_pandas()``, ``summary()``); this module imports none of them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

__all__ = ["pandas", "frame", "set_rows", "result_rows", "set_summary", "result_summary_rows", "outlier_rows",
           "DOCUMENT_COLUMNS", "SUMMARY_COLUMNS"]

DOCUMENT_COLUMNS = ("rank", "critic", "set", "id", "latent_nll", "latent_steps", "latent_nll_per_step",
                    "outlier_p_value", "q_value", "flagged", "skipped")
"""The columns that lead a frame of documents, where it has them (the other fields of a document follow)."""

SUMMARY_COLUMNS = ("critic", "set", "n", "headline", "latent_ppl", "latent_ppl_ci_low", "latent_ppl_ci_high",
                   "latent_ppl_difference", "latent_ppl_difference_ci_low", "latent_ppl_difference_ci_high",
                   "latent_ppl_p_value", "latent_nll", "latent_nll_ci_low", "latent_nll_ci_high",
                   "latent_nll_difference", "latent_nll_difference_ci_low", "latent_nll_difference_ci_high",
                   "latent_nll_p_value", "latent_nll_mc_stderr", "estimator", "flagged", "n_skipped", "n_unknown")
"""The columns that lead a summary frame, where it has them (the sets' other statistics and warnings follow)."""


def pandas() -> Any:
    """The ``pandas`` module; an ``ImportError`` saying how to install it when it is absent."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("results as DataFrames need pandas: pip install pandas") from None
    return pd


def frame(rows: Sequence[dict[str, Any]], leading: Sequence[str]) -> Any:
    """``rows`` as a DataFrame, the ``leading`` columns first (those the rows have), then the others in the order
    they first appear; a key a row lacks is NaN there."""
    pd = pandas()
    seen = list(dict.fromkeys(key for row in rows for key in row))
    order = [c for c in leading if c in seen] + [c for c in seen if c not in leading]
    return pd.DataFrame(list(rows), columns=order)


def set_rows(result_set: Any, *, flag: Callable[[Any], bool] | None = None) -> list[dict[str, Any]]:
    """A row per document of one set (a :class:`~critic.results.SetResult`), as ``documents.jsonl`` has it: its
    name under ``set``, every field of the document's result, ``skipped`` ``None``; then a row per document that
    could not be projected: ``set``, ``id`` and the reason under ``skipped``.  ``flag``: whether a document is
    flagged (column ``flagged``; ``False`` for a skipped one)."""
    rows = []
    for d in result_set.documents:
        rows.append({"set": result_set.name, **vars(d), "skipped": None,
                     **({} if flag is None else {"flagged": bool(flag(d))})})
    for doc_id, why in result_set.skipped.items():
        rows.append({"set": result_set.name, "id": doc_id, "skipped": why,
                     **({} if flag is None else {"flagged": False})})
    return rows


def result_rows(result: Any, label: str, *, flag: Callable[[Any], bool] | None = None) -> list[dict[str, Any]]:
    """:func:`set_rows` of every set of one critic's result (a :class:`~critic.results.CriticismResult`), each led
    by ``critic`` (``label``).  ``flag`` applies to the candidate sets: a reference document is never flagged."""
    never = None if flag is None else (lambda d: False)
    return [{"critic": label, **row} for s in result.sets
            for row in set_rows(s, flag=never if s is result.reference else flag)]


def set_summary(result_set: Any, headline: str) -> dict[str, Any]:
    """One set's statistics (a :class:`~critic.results.SetResult`) as one row: ``n``, the ``headline`` statistic's
    name, Latent PPL and mean Latent NLL with their CIs and their comparisons with the reference (``*_difference``
    with its CI and ``*_p_value``; NaN for the reference), the Monte-Carlo standard error and estimator, the
    skipped and unknown counts, the statistics beside them (word PPL, MAUVE, PDD) and the warnings (a list)."""
    s = result_set
    row = {"set": s.name, "n": s.n, "headline": headline}
    for name, value, ci, comparison in (("latent_ppl", s.latent_ppl, s.latent_ppl_ci, s.ppl_comparison),
                                        ("latent_nll", s.latent_nll, s.latent_nll_ci, s.comparison)):
        row |= {name: value, f"{name}_ci_low": ci[0], f"{name}_ci_high": ci[1], **_comparison(name, comparison)}
    return row | {"latent_nll_mc_stderr": s.latent_nll_mc_stderr, "estimator": s.estimator, "n_skipped": s.n_skipped,
                  "n_unknown": s.n_unknown, **s.statistics, "warnings": list(s.warnings)}


def _comparison(name: str, comparison: Any) -> dict[str, float]:
    """The columns of one comparison with the reference (a :class:`~critic.results.Comparison`, ``None`` for the
    reference: NaN)."""
    if comparison is None:
        return {f"{name}_difference": float("nan"), f"{name}_difference_ci_low": float("nan"),
                f"{name}_difference_ci_high": float("nan"), f"{name}_p_value": float("nan")}
    low, high = comparison.difference_ci
    return {f"{name}_difference": comparison.difference, f"{name}_difference_ci_low": low,
            f"{name}_difference_ci_high": high, f"{name}_p_value": comparison.p_value}


def result_summary_rows(result: Any, label: str, *, flagged: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """:func:`set_summary` of every set of one critic's result, each led by ``critic`` (``label``); ``flagged``:
    how many documents of each candidate set are flagged (column ``flagged``, 0 for the reference)."""
    return [{"critic": label, **set_summary(s, result.headline)}
            | ({} if flagged is None else {"flagged": flagged.get(s.name, 0)}) for s in result.sets]


def outlier_rows(pairs: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    """A row per listed document (``(set name, DocumentResult)`` pairs in rank order): ``rank`` (from 1), ``set``
    and the document's fields."""
    return [{"rank": rank, "set": name, **vars(d)} for rank, (name, d) in enumerate(pairs, start=1)]
