"""Several critics over the same sets of documents: one result, one list of flagged documents.

A researcher criticises a model's generations with every critic that applies (section order,
coreference, topics, language mix) and wants to see them together: the set statistics of each critic
side by side, and the documents that one critic or several flag as outliers.  :func:`criticize_panel`
runs :func:`critic.criticism.criticize` once per critic (each set projected once per critic) and
returns a :class:`PanelResult`; :func:`load_results` reads any report directory back into result
objects.

A document is **flagged** by a critic when it is among that critic's ``top`` least likely documents
of its set (smallest outlier p-value) and its outlier p-value is at most ``level``.  Flags are grouped
by document, so a generation several critics flag is listed once, with every critic's reason.
:func:`criticize_panel` asks each flagging critic, while it is at hand, why it finds the document unlikely
(:meth:`Critic.explain`, once per flag and critic: :func:`explain_flags`); the lines are kept on the
document's result (``DocumentResult.reasons``), so ``documents.jsonl`` holds them and :func:`load_results`
gives them back.

``results.json`` of a panel::

    {"schema_version": 1, "kind": "panel", "critics": {LABEL: <a CriticismResult's results.json>},
     "reads": {SET: {"path", "format", "n_read", "skipped", ...}}, "flags": {"level", "top"}}
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .critic import Critic
from .criticism import criticize
from .document import Document, DocumentError, iter_json_lines
from .results import SCHEMA_VERSION, CriticismResult, DocumentResult, json_ready

__all__ = ["Flag", "PanelResult", "criticize_panel", "explain_flags", "explain_outliers", "add_set_statistics",
           "load_results", "FLAG_LEVEL", "FLAG_TOP", "MAUVE_MIN_DOCUMENTS"]

FLAG_LEVEL = 0.01
"""Default outlier p-value at or below which a document can be flagged."""
FLAG_TOP = 20
"""Default number of least likely documents per critic and set that can be flagged."""
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
    def reasons(self) -> dict[str, list[str]]:
        """Each flagging critic's reasons (label -> lines, most important first), for the critics that gave any."""
        return {label: d.reasons for label, d in self.by.items() if d.reasons}


@dataclass
class PanelResult:
    """The results of several critics (label -> :class:`CriticismResult`) over the same named sets."""

    results: dict[str, CriticismResult]
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """How each set was read (path, format, documents read, skipped lines by reason), by set name."""
    level: float = FLAG_LEVEL
    top: int = FLAG_TOP

    def __post_init__(self) -> None:
        if not self.results:
            raise ValueError("a panel needs at least one critic's result")
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
    def reference_name(self) -> str:
        return self.set_names[0]

    def flagged(self) -> list[Flag]:
        """The candidate documents flagged by at least one critic; most critics first, then smallest
        p-value, then set and id (see the module docstring)."""
        by_doc: dict[tuple[str, str], dict[str, DocumentResult]] = defaultdict(dict)
        for label, result in self.results.items():
            for s in result.candidates.values():
                least = sorted(s.documents, key=lambda d: (d.outlier_p_value, -d.latent_nll_per_step, d.id))
                for d in least[:self.top]:
                    if d.outlier_p_value <= self.level:
                        by_doc[(s.name, d.id)][label] = d
        flags = [Flag(set_name, doc_id, by) for (set_name, doc_id), by in by_doc.items()]
        order = {name: k for k, name in enumerate(self.set_names)}
        flags.sort(key=lambda f: (-len(f.by), f.min_p_value, order[f.set], f.id))
        return flags

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
                           "reads": self.reads, "flags": {"level": self.level, "top": self.top}})

    def __str__(self) -> str:
        return "\n\n".join(str(r) for r in self.results.values())

    def _repr_html_(self) -> str:
        """A notebook shows the report's summary table."""
        from .html import summary_html

        return summary_html(self.results)


def criticize_panel(critics: Mapping[str, Critic], reference: Sequence[Document],
                    candidates: Mapping[str, Sequence[Document]], *, reads: Mapping[str, dict] | None = None,
                    level: float = FLAG_LEVEL, top: int = FLAG_TOP, **criticize_kwargs) -> PanelResult:
    """:func:`~critic.criticism.criticize` with each critic (label -> fitted critic) over the same sets;
    ``criticize_kwargs`` (``reference_name``, ``paths``, ``n_bootstrap``, ``seed``, ...) go to each call."""
    if not critics:
        raise ValueError("give at least one critic")
    if not 0.0 < level <= 1.0:
        raise ValueError(f"flag level must lie in (0, 1], got {level!r}")
    results = {label: criticize(critic, reference, candidates, **criticize_kwargs) for label, critic in critics.items()}
    panel = PanelResult(results, reads=dict(reads or {}), level=level, top=top)
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
    documents a single-critic report or ``critic outliers`` lists, each explained once by ``critic``."""
    by_id = {set_name: {d.id: d for d in docs} for set_name, docs in documents.items()}
    for set_name, result_doc in result.outliers(name=name, top=top):
        result_doc.reasons = critic.explain(result_doc, by_id.get(set_name, {}).get(result_doc.id))


def add_set_statistics(panel: PanelResult, reference: Sequence[Document], candidates: Mapping[str, Sequence[Document]],
                       *, critics: Mapping[str, Critic] | None = None, word_ppl: Mapping[str, float] | None = None,
                       mauve: bool = False, seed: int = 0) -> None:
    """Statistics of the sets beside the Latent NLL: each critic's own (:meth:`Critic.set_statistics`, e.g.
    PDD), ``word_ppl`` (candidate -> a word perplexity measured elsewhere, e.g. ``critic lm ppl``) and MAUVE
    of each candidate against the reference (the ``mauve_text`` metric: offline MiniLM document vectors;
    ``null`` with the reason under :data:`MAUVE_MIN_DOCUMENTS`)."""
    documents = {panel.reference_name: reference, **candidates}
    for label, critic in (critics or {}).items():
        for name, (values, reasons) in critic.set_statistics(panel.results[label], documents).items():
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
    try:
        if payload.get("kind") == "panel":
            results = {label: CriticismResult.from_dict(obj, {s: d for (c, s), d in documents.items() if c == label})
                       for label, obj in payload["critics"].items()}
            flags = payload.get("flags", {})
            return PanelResult(results, reads=dict(payload.get("reads", {})),
                               level=flags.get("level", FLAG_LEVEL), top=flags.get("top", FLAG_TOP))
        return CriticismResult.from_dict(payload, {s: d for (_, s), d in documents.items()})
    except (KeyError, TypeError) as exc:
        raise DocumentError(f"{results_path}: not a results file (missing or malformed {exc})") from None
    except ValueError as exc:
        raise DocumentError(f"{results_path}: {exc}") from None
