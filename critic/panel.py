"""Several critics over the same sets of documents: one result, one list of flagged documents.

A researcher criticises a model's generations with every critic that applies (section order,
coreference, topics, language mix) and wants to see them together: the set statistics of each critic
side by side, and the documents that one critic or several flag as outliers.  :func:`criticize_panel`
runs :func:`critic.criticism.criticize` once per critic (each set projected once per critic) and
returns a :class:`PanelResult`; :func:`load_results` reads any report directory back into result
objects.

A document is **flagged** by a critic when the Benjamini-Hochberg q-value of its outlier p-value among its set's
documents is at most ``fdr`` (0.1 by default: at most 10% of a set's flags are expected to be real documents;
:func:`critic.conformal.bh_q_values`), or -- the per-document rule, without multiplicity control -- its outlier
p-value is at most ``level`` when one is given instead; at most ``top`` per critic and set (the least likely).
Flags are grouped by document, so a generation several critics flag is listed once, with every critic's reason,
ranked by how many critics flag it, then by its smallest q-value.  :meth:`PanelResult.power` says, per critic
and set, whether flags can fire at all with the real documents the p-values compare with.
:func:`criticize_panel` asks each flagging critic, while it is at hand, why it finds the document unlikely
(:meth:`Critic.explain`, once per flag and critic: :func:`explain_flags`); the lines are kept on the
document's result (``DocumentResult.reasons``), so ``documents.jsonl`` holds them and :func:`load_results`
gives them back.

``results.json`` of a panel::

    {"schema_version": 1, "kind": "panel", "critics": {LABEL: <a CriticismResult's results.json>},
     "reads": {SET: {"path", "format", "n_read", "skipped", ...}}, "flags": {"fdr", "level", "top"}}
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .conformal import bh_q_values
from .critic import Critic
from .criticism import criticize
from .document import Document, DocumentError, iter_json_lines
from .settings import FLAG_FDR, FLAG_TOP
from .results import SCHEMA_VERSION, CriticismResult, DocumentResult, json_ready, markdown_table
from .views import set_statistics

__all__ = ["Flag", "PanelResult", "criticize_panel", "explain_flags", "explain_outliers", "add_set_statistics",
           "load_results", "flag_power", "FLAG_FDR", "FLAG_TOP", "MAUVE_MIN_DOCUMENTS"]

MAUVE_MIN_DOCUMENTS = 50
"""MAUVE of a set with fewer documents (on either side) is not reported: its quantisation is not trusted."""


@dataclass
class Flag:
    """One flagged document: its set, id, and each flagging critic's result for it (label -> result)."""

    set: str
    id: str
    by: dict[str, DocumentResult]

    @property
    def min_p_value(self) -> float:
        return min(d.outlier_p_value for d in self.by.values())

    @property
    def min_q_value(self) -> float:
        return min(float("nan") if d.q_value is None else d.q_value for d in self.by.values())

    @property
    def reasons(self) -> dict[str, list[str]]:
        """Each flagging critic's reasons (label -> lines, most important first), for the critics that gave any."""
        return {label: d.reasons for label, d in self.by.items() if d.reasons}


@dataclass
class PanelResult:
    """The results of several critics (label -> :class:`CriticismResult`) over the same named sets."""

    results: dict[str, CriticismResult]
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """How each set was read (path, format, documents read, skipped lines by reason), by set name."""
    fdr: float | None = FLAG_FDR
    """Flag documents whose q-value is at most this (set to ``None`` when ``level`` is given)."""
    level: float | None = None
    """When given, replaces ``fdr``: flag documents whose outlier p-value is at most this (no multiplicity
    control)."""
    top: int = FLAG_TOP

    def __post_init__(self) -> None:
        if not self.results:
            raise ValueError("a panel needs at least one critic's result")
        self.fdr = None if self.level is not None else self.fdr
        _check_rule(self.fdr, self.level)
        names = {label: [s.name for s in r.sets] for label, r in self.results.items()}
        first = next(iter(names.values()))
        for label, sets in names.items():
            if sets != first:
                raise ValueError(f"critic {label!r} has the sets {sets}, the others {first}: a panel compares "
                                 "the same sets")

    @property
    def set_names(self) -> list[str]:
        return [s.name for s in next(iter(self.results.values())).sets]

    @property
    def result(self) -> CriticismResult:
        """The one critic's result of a panel of one (``critic compare``'s, a study's); a ``ValueError`` naming the
        critics when there are several."""
        if len(self.results) != 1:
            raise ValueError(f"a panel of {len(self.results)} critics ({', '.join(self.results)}): take one of "
                             "them from .results[label]")
        return next(iter(self.results.values()))

    @property
    def reference_name(self) -> str:
        return self.set_names[0]

    @property
    def rule(self) -> str:
        """What a flag means, in the report's words."""
        if self.fdr is not None:
            return (f"q-value at most {self.fdr:g} (Benjamini-Hochberg over each set's outlier p-values): at most "
                    f"{self.fdr:.0%} of a set's flags are expected to be real documents")
        return (f"outlier p-value at most {self.level:g}, document by document (no multiplicity control: among n "
                f"real documents about {self.level:g} n are flagged by chance)")

    def is_flagged(self, document: DocumentResult) -> bool:
        """Whether this panel's rule flags a candidate document: its q-value at most ``fdr``, or its outlier p-value
        at most ``level`` (``top`` aside; the reference's documents are never flagged)."""
        if self.fdr is not None:
            return document.q_value is not None and document.q_value <= self.fdr
        return document.outlier_p_value <= self.level

    def _flags(self, documents: list[DocumentResult]) -> list[DocumentResult]:
        """The documents of one set that one critic flags, least likely first (all of them, before ``top``)."""
        chosen = [d for d in documents if self.is_flagged(d)]
        return sorted(chosen, key=lambda d: (d.outlier_p_value, -d.latent_nll_per_step, d.id))

    def heading(self) -> str:
        """``"Flagged documents (239; 30 listed)"``: every flagged document, and those listed when ``top`` cuts."""
        listed, every = len(self.flagged()), len(self.flagged(listed=False))
        return f"Flagged documents ({every}" + (f"; {listed} listed)" if listed < every else ")")

    def flag_counts(self) -> dict[str, dict[str, int]]:
        """How many documents each critic flags in each candidate set (label -> set -> count), ``top`` aside."""
        return {label: {s.name: len(self._flags(s.documents)) for s in result.candidates.values()}
                for label, result in self.results.items()}

    def flagged(self, *, listed: bool = True) -> list[Flag]:
        """The candidate documents flagged by at least one critic (``listed``: at most ``top`` per critic and set,
        the ones the report lists; else all of them); most critics first, then smallest q-value and p-value, then
        set and id (see the module docstring)."""
        by_doc: dict[tuple[str, str], dict[str, DocumentResult]] = defaultdict(dict)
        for label, result in self.results.items():
            for s in result.candidates.values():
                for d in self._flags(s.documents)[:self.top if listed else None]:
                    by_doc[(s.name, d.id)][label] = d
        flags = [Flag(set_name, doc_id, by) for (set_name, doc_id), by in by_doc.items()]
        order = {name: k for k, name in enumerate(self.set_names)}
        flags.sort(key=lambda f: (-len(f.by), f.min_q_value, f.min_p_value, order[f.set], f.id))
        return flags

    def power(self) -> dict[str, list[str]]:
        """Per critic (label -> lines): the real documents its outlier p-values compare with, the smallest p-value
        they allow, and -- as warnings, starting ``"cannot flag"`` -- each candidate set in which flags cannot fire
        at this panel's rule, with how many real documents would fix it (:func:`flag_power`)."""
        threshold = self.fdr if self.fdr is not None else self.level
        return {label: flag_power(result, threshold, by_fdr=self.fdr is not None)
                for label, result in self.results.items()}

    def add_statistic(self, name: str, values: dict[str, float | None], *,
                      reasons: dict[str, str] | None = None) -> None:
        """Attach a set statistic that does not depend on the critic (word PPL, MAUVE) to every critic's
        result: see :meth:`~critic.results.CriticismResult.add_statistic`."""
        for result in self.results.values():
            result.add_statistic(name, values, reasons=reasons)

    def to_dict(self) -> dict:
        """The ``results.json`` payload of the panel."""
        return json_ready({"schema_version": SCHEMA_VERSION, "kind": "panel",
                           "critics": {label: r.to_dict() for label, r in self.results.items()},
                           "reads": self.reads, "flags": {"fdr": self.fdr, "level": self.level, "top": self.top,
                                                          "counts": self.flag_counts()}})

    def to_pandas(self) -> Any:
        """A pandas DataFrame, a row per document and critic (``documents.jsonl``'s rows): ``critic`` (the label),
        ``set``, ``id``, T(x) ``latent_nll``, M(x) ``latent_steps``, ``latent_nll_per_step``, ``outlier_p_value``,
        ``q_value``, ``flagged`` (by this panel's rule, ``top`` aside: :meth:`is_flagged`), ``skipped`` (why a
        document could not be projected; its numbers NaN) and the other fields of
        :class:`~critic.results.DocumentResult` (:func:`critic.frame.result_rows`)."""
        from . import frame

        rows = [row for label, result in self.results.items()
                for row in frame.result_rows(result, label, flag=self.is_flagged)]
        return frame.frame(rows, frame.DOCUMENT_COLUMNS)

    def summary(self) -> Any:
        """A pandas DataFrame, a row per critic and set (``results.json``'s set statistics): ``n``, the critic's
        ``headline`` statistic, Latent PPL and Latent NLL with their CIs and comparisons with the reference
        (``*_difference`` with its CI, ``*_p_value``), ``flagged`` (how many documents; 0 for the reference), the
        skipped and unknown counts, the statistics beside them and the warnings (:func:`critic.frame.set_summary`)."""
        from . import frame

        counts = self.flag_counts()
        rows = [row for label, result in self.results.items()
                for row in frame.result_summary_rows(result, label, flagged=counts[label])]
        return frame.frame(rows, frame.SUMMARY_COLUMNS)

    def __str__(self) -> str:
        return "\n\n".join(markdown_table(r, label) for label, r in self.results.items())

    __repr__ = __str__  # the tables, not every document's result


def _check_rule(fdr: float | None, level: float | None) -> None:
    if fdr is None and level is None:
        raise ValueError("flag by a false discovery rate (fdr) or by a per-document level (level): both are None")
    for name, value in (("fdr", fdr), ("level", level)):
        if value is not None and not 0.0 < value <= 1.0:
            raise ValueError(f"flag {name} must lie in (0, 1], got {value!r}")


def flag_power(result: CriticismResult, threshold: float, *, by_fdr: bool = True) -> list[str]:
    """What bounds one critic's flags: a line on the real documents its p-values compare with
    (``result.config["calibration"]``) and the smallest p-value ``p_min = 1 / (n_g + 1)`` they allow a document
    of the smallest length group (``n_g`` documents); then a line starting ``"cannot flag"`` for each candidate
    set where flags cannot fire.  At a false discovery rate ``a`` over a set of ``m`` documents
    (Benjamini-Hochberg), ``k`` documents at ``p_min`` are flagged when ``m p_min / k <= a``: none can be when
    even the largest group's smallest p-value is above ``a``, those of the small groups none when ``p_min > a``,
    and a lone outlier cannot be when ``p_min > a / m`` (groups of ``m / a - 1`` documents would allow it: an
    informational line).  At a per-document level ``a`` likewise without the lone outlier's line."""
    about = result.config.get("calibration")
    if not about:
        return []
    sources = ", ".join(f"{v} {k}" for k, v in about["sources"].items())
    p_min, groups = about["smallest_p"], about["groups"]
    p_best = 1.0 / (about.get("largest_group", about["smallest_group"]) + 1.0)  # the largest group's smallest p
    lines = [f"p-values against {about['n']} real documents ({sources}) in {groups} length group(s) of at least "
             f"{about['smallest_group']}: the smallest p-value is {p_min:.3g}"]

    def needed(p: float) -> str:
        per_group = int(np.ceil(1.0 / p - 1.0))
        return f"{per_group} real documents per length group (about {per_group * groups} in all)"

    for s in result.candidates.values():
        m = s.n
        if not m:
            continue
        rule = f"FDR {threshold:g}" if by_fdr else f"level {threshold:g}"
        fix = (f"it needs {needed(threshold)}: fit the critic with calibration documents (critic fit cross-fits its "
               "training documents) or give a larger reference")
        if p_best > threshold:
            lines.append(f"cannot flag any document of {s.name!r} at {rule}: the smallest p-value {p_best:.3g} is "
                         f"above it; {fix}")
        elif p_min > threshold:
            lines.append(f"cannot flag the documents of {s.name!r} in length groups of fewer than "
                         f"{int(np.ceil(1.0 / threshold - 1.0))} real documents at {rule} (the smallest has "
                         f"{about['smallest_group']}: p >= {p_min:.3g}); {fix}")
        elif by_fdr and p_min > threshold / m:
            lines.append(f"in {s.name!r} a lone outlier needs p <= {threshold / m:.3g} ({m} documents at FDR "
                         f"{threshold:g}): at least {int(np.ceil(m * p_min / threshold))} documents must reach the "
                         f"smallest p-value together ({needed(threshold / m)} would flag one alone)")
    return lines


def criticize_panel(critics: Mapping[str, Critic], reference: Sequence[Document],
                    candidates: Mapping[str, Sequence[Document]], *, reads: Mapping[str, dict] | None = None,
                    fdr: float | None = FLAG_FDR, level: float | None = None, top: int = FLAG_TOP,
                    **criticize_kwargs) -> PanelResult:
    """:func:`~critic.criticism.criticize` with each critic (label -> fitted critic) over the same sets, flags at
    false discovery rate ``fdr`` (or, given ``level``, at that per-document p-value level instead);
    ``criticize_kwargs`` (``reference_name``, ``paths``, ``n_bootstrap``, ``seed``, ...) go to each call."""
    if not critics:
        raise ValueError("give at least one critic")
    _check_rule(fdr, level)  # before any document is scored
    results = {label: criticize(critic, reference, candidates, **criticize_kwargs) for label, critic in critics.items()}
    panel = PanelResult(results, reads=dict(reads or {}), fdr=fdr, level=level, top=top)
    explain_flags(panel, critics, {panel.reference_name: reference, **candidates})
    return panel


def explain_flags(panel: PanelResult, critics: Mapping[str, Critic], documents: Mapping[str, Sequence[Document]]
                  ) -> None:
    """Set ``reasons`` on the result of every flagged document under each critic that flags it: that critic's
    :meth:`Critic.explain` of the result and the document (``documents``: set name -> documents; a document
    not among them is explained from its result alone).  ``critics`` maps the panel's labels to the fitted
    critics; a flagging critic missing from it is a ``KeyError`` naming the label."""
    flags = panel.flagged()
    missing = sorted({label for flag in flags for label in flag.by} - set(critics))
    if missing:
        raise KeyError(f"no fitted critic for {', '.join(map(repr, missing))} to explain its flags (critics: "
                       f"{', '.join(critics) or 'none'})")
    by_id = {name: {d.id: d for d in docs} for name, docs in documents.items()}
    for flag in flags:
        for label, result in flag.by.items():
            result.reasons = critics[label].explain(result, by_id.get(flag.set, {}).get(flag.id))


def explain_outliers(result: CriticismResult, critic: Critic, documents: Mapping[str, Sequence[Document]], *,
                     top: int, name: str | None = None) -> None:
    """Set ``reasons`` on the ``top`` outliers of one critic's result (of set ``name``, or of every set): the
    documents a report or ``critic outliers`` lists, each explained once by ``critic``."""
    by_id = {set_name: {d.id: d for d in docs} for set_name, docs in documents.items()}
    for set_name, result_doc in result.outliers(name=name, top=top):
        if result_doc.reasons is None:  # a flag's, explained already
            result_doc.reasons = critic.explain(result_doc, by_id.get(set_name, {}).get(result_doc.id))


def add_set_statistics(panel: PanelResult, reference: Sequence[Document], candidates: Mapping[str, Sequence[Document]],
                       *, critics: Mapping[str, Critic] | None = None, word_ppl: Mapping[str, float] | None = None,
                       mauve: bool = False, seed: int = 0) -> None:
    """Statistics of the sets beside the Latent NLL: each critic's own (its view's, :mod:`critic.views`, e.g.
    PDD), ``word_ppl`` (candidate -> a word perplexity measured elsewhere, e.g. ``critic lm ppl``) and MAUVE
    of each candidate against the reference (the ``mauve_text`` metric: offline MiniLM document vectors;
    ``null`` with the reason under :data:`MAUVE_MIN_DOCUMENTS`)."""
    documents = {panel.reference_name: reference, **candidates}
    for label, critic in (critics or {}).items():
        for name, (values, reasons) in set_statistics(critic, panel.results[label], documents).items():
            panel.results[label].add_statistic(name, values, reasons=reasons)
    if word_ppl:
        missing = {n: "not given (--word-ppl NAME=VALUE)" for n in candidates if n not in word_ppl}
        panel.add_statistic("word_ppl", {"reference": None, **{n: word_ppl.get(n) for n in candidates}},
                            reasons={"reference": "real text: no model to score", **missing})
    if mauve:
        from .registry import get_metric

        mauve_text = get_metric("mauve_text").fn
        texts = [d.text for d in reference]
        values, reasons = {"reference": None}, {"reference": "the reference is what MAUVE compares with"}
        for name, docs in candidates.items():
            if min(len(docs), len(texts)) >= MAUVE_MIN_DOCUMENTS:
                values[name] = mauve_text([d.text for d in docs], texts, seed=seed)
            else:
                values[name] = None
                reasons[name] = (f"{len(docs)} documents against {len(texts)} (< {MAUVE_MIN_DOCUMENTS}): too few for "
                                 "MAUVE's quantisation to be trusted")
        panel.add_statistic("mauve", values, reasons=reasons)


def _documents(path: Path) -> dict[tuple[str | None, str], list[DocumentResult]]:
    """``documents.jsonl`` as (critic label or None, set) -> per-document results (skips left out: they
    are in ``results.json``)."""
    out: dict[tuple[str | None, str], list[DocumentResult]] = defaultdict(list)
    if not path.is_file():
        return out
    for where, row in iter_json_lines(path):
        if "skipped" in row:
            continue
        try:
            out[(row.get("critic"), row["set"])].append(DocumentResult.from_dict(
                {k: v for k, v in row.items() if k not in ("critic", "set")}))
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"{where}: not a per-document result ({type(exc).__name__}: {exc})") from None
    return out


def load_results(path: str | Path) -> CriticismResult | PanelResult:
    """A report directory (or its ``results.json``) back as result objects: a :class:`PanelResult` for a
    panel, a :class:`CriticismResult` for one critic; per-document results from ``documents.jsonl``."""
    path = Path(path)
    directory = path if path.is_dir() else path.parent
    results_path = directory / "results.json" if path.is_dir() else path
    try:
        payload = json.loads(results_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DocumentError(f"{results_path}: no such file (is {directory} a report directory?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{results_path}: not a results file ({exc})") from None
    documents = _documents(directory / "documents.jsonl")
    for docs in documents.values():  # results written before q-values existed: Benjamini-Hochberg within the set
        if any(d.q_value is None for d in docs):
            for d, q in zip(docs, bh_q_values([d.outlier_p_value for d in docs])):
                d.q_value = float(q)
    try:
        if payload.get("kind") == "panel":
            results = {label: CriticismResult.from_dict(obj, {s: d for (c, s), d in documents.items() if c == label})
                       for label, obj in payload["critics"].items()}
            flags = payload.get("flags", {})
            fdr = flags.get("fdr") if "fdr" in flags else None  # written before FDR flags: a level of 0.01
            level = flags.get("level") if "fdr" in flags else flags.get("level", 0.01)
            return PanelResult(results, reads=dict(payload.get("reads", {})), fdr=fdr, level=level,
                               top=flags.get("top", FLAG_TOP))
        return CriticismResult.from_dict(payload, {s: d for (_, s), d in documents.items()})
    except (KeyError, TypeError) as exc:
        raise DocumentError(f"{results_path}: not a results file (missing or malformed {exc})") from None
    except ValueError as exc:
        raise DocumentError(f"{results_path}: {exc}") from None
