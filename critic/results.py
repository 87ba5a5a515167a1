"""Result objects of a criticism and their JSON schema.

:func:`critic.criticism.criticize` builds them; :mod:`critic.report` and
:mod:`critic.plots` read them (they depend on this module, never the other
way).  ``CriticismResult.to_dict()`` is the ``results.json`` schema, in the
manner of lm-evaluation-harness results files::

    {"schema_version": 1,
     "critic": {"name", "params", "state_sha256", "headline"},
     "inputs": [{"name", "path", "sha256", "n_documents"}],
     "config": {...},
     "reference": SET, "candidates": {name: SET},
     "null_reasons": {"reference.latent_nll_ci": "...", ...}}

    SET = {"name", "n", "latent_nll", "latent_nll_ci", "latent_nll_mc_stderr", "latent_ppl",
           "latent_ppl_ci", "estimator", "comparison": COMPARISON, "ppl_comparison": COMPARISON,
           "n_skipped", "skipped", "n_unknown", "warnings", "higher_is_better": {statistic: bool},
           STATISTIC: value, ...}

    COMPARISON = {"statistic", "difference", "difference_ci", "p_value", "p_value_exact"}: candidate minus
    reference on "mean_latent_nll" (``comparison``) or "latent_ppl" (``ppl_comparison``; its p-value tests log
    PPL); ``p_value_exact``: every split of the two sets enumerated (tiny sets), else Monte Carlo

``headline`` names the statistic that fits the critic's latent (Latent PPL for discrete chains, Latent NLL
for continuous latents): tables show it first, with the comparison of that same statistic.

STATISTIC: the statistics a study adds beside Latent NLL (``word_ppl``, ``mauve``, ``pdd``, ...; see
:meth:`CriticismResult.add_statistic`), written at the set's top level.  A statistic a set cannot
have (the data row has no word perplexity) is ``null`` with its reason under ``null_reasons``.

JSON has no NaN or Infinity: :func:`json_ready` writes ``null`` and records
why under ``null_reasons`` (dotted path -> reason).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

from .labels import (COMBINED_NOTE, HEADLINES, HIGHER_IS_BETTER, OUTLIER_SCORE_NOTES, SIZE_MODEL_NOTES, STATISTICS,
                     TWO_SIDED_NOTE)
from .terminal import printable

__all__ = ["SCHEMA_VERSION", "HIGHER_IS_BETTER", "STATISTICS", "HEADLINES", "DocumentResult", "Comparison",
           "SetResult", "CriticismResult", "Outliers", "json_ready", "markdown_table", "markdown_cell", "outliers_table"]


def _number(value: Any) -> float:
    """A JSON number back as a float; ``null`` (a NaN or infinity on the way out) as NaN."""
    return float("nan") if value is None else float(value)


def _pair(value: Any) -> tuple[float, float]:
    return (float("nan"), float("nan")) if value is None else (_number(value[0]), _number(value[1]))

SCHEMA_VERSION = 1



@dataclass
class DocumentResult:
    """One projected document: ``T(x)``, ``M(x)``, ``T/M``, its outlier p-values and the
    projection's extras for it (MAP latents, topic weights) as plain JSON values.

    ``outlier_p_value`` is the score documents are ranked by: the conformal p-value of ``T/M`` -- combined with
    the critic's statistics beside it (``config["outlier_statistics"]``) by their ranks -- against real documents
    (the critic's calibration documents and the reference's; :class:`critic.outliers.OutlierPool`), those of
    similar length (``config["outlier_score"] == "length"``; ``words`` the document's word count,
    ``config["size_model"]`` how) or all of them (``"plain"``, which ``plain_p_value`` always holds).
    ``p_values`` holds each statistic's own p-value (``latent_nll_per_step`` and every statistic) for a critic
    with statistics beside ``T/M``, ``None`` otherwise.  ``q_value``: the Benjamini-Hochberg q-value of
    ``outlier_p_value`` among its set's documents; flags are ``q_value <= fdr`` (:mod:`critic.panel`).

    ``reasons``: why the critic finds the document unlikely (:meth:`critic.critic.Critic.reasons`), a few
    plain-text lines, most important first; computed for flagged documents (:func:`critic.panel.explain_flags`)
    and for those ``critic outliers`` lists, ``None`` for the others."""

    id: str
    latent_nll: float
    latent_steps: float
    latent_nll_per_step: float
    outlier_p_value: float
    unknown: int = 0
    latent_nll_stderr: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    plain_p_value: float | None = None
    words: int | None = None
    p_values: dict[str, float] | None = None
    reasons: list[str] | None = None
    q_value: float | None = None

    @classmethod
    def from_dict(cls, row: dict) -> "DocumentResult":
        """A row of ``documents.jsonl`` (or of a set's ``documents``) back as a result."""
        plain, each, reasons = row.get("plain_p_value"), row.get("p_values"), row.get("reasons")
        if reasons is not None and not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)):
            raise ValueError(f"reasons must be a list of strings, got {reasons!r:.200}")
        return cls(id=row["id"], latent_nll=_number(row["latent_nll"]), latent_steps=_number(row["latent_steps"]),
                   latent_nll_per_step=_number(row["latent_nll_per_step"]),
                   outlier_p_value=_number(row["outlier_p_value"]), unknown=int(row.get("unknown", 0)),
                   latent_nll_stderr=row.get("latent_nll_stderr"), extras=dict(row.get("extras") or {}),
                   plain_p_value=None if plain is None else _number(plain), words=row.get("words"),
                   p_values=None if each is None else {k: _number(v) for k, v in each.items()},
                   reasons=reasons, q_value=None if row.get("q_value") is None else _number(row["q_value"]))


@dataclass
class Comparison:
    """Candidate minus reference value of one set statistic, its bootstrap CI and the permutation
    p-value of that same statistic: ``statistic`` is ``"mean_latent_nll"`` (the per-document mean of
    T(x)) or ``"latent_ppl"`` (the set-level Latent PPL, a ratio of sums; tested on its log).
    ``p_value_exact``: the p-value enumerates every split of the two sets (possible for tiny sets), else it
    is a Monte Carlo permutation test (see :func:`critic.stats.permutation_tests`)."""

    difference: float
    difference_ci: tuple[float, float]
    p_value: float
    statistic: str = "mean_latent_nll"
    p_value_exact: bool = False

    @classmethod
    def from_dict(cls, obj: dict) -> "Comparison":
        return cls(_number(obj["difference"]), _pair(obj["difference_ci"]), _number(obj["p_value"]),
                   obj.get("statistic", "mean_latent_nll"), bool(obj.get("p_value_exact", False)))


@dataclass
class SetResult:
    """Set statistics of one set of documents (see :mod:`critic.criticism`)."""

    name: str
    n: int
    latent_nll: float
    latent_nll_ci: tuple[float, float]
    latent_ppl: float
    latent_ppl_ci: tuple[float, float]
    n_skipped: int
    skipped: dict[str, str]
    n_unknown: int
    documents: list[DocumentResult] = field(repr=False)
    comparison: Comparison | None = None
    """Against the reference: the per-document mean Latent NLL (difference, CI, p-value)."""
    ppl_comparison: Comparison | None = None
    """Against the reference: the set-level Latent PPL (difference of PPLs, CI, p-value on log PPL)."""
    estimator: str = "exact"
    latent_nll_mc_stderr: float | None = None
    warnings: list[str] = field(default_factory=list)
    statistics: dict[str, float | None] = field(default_factory=dict)
    """Other statistics of the set (word PPL, MAUVE, PDD), by name."""
    posterior_summary: Any = field(default=None, repr=False, compare=False)
    """What the critic's view kept of the set's posteriors while the set was scored (:meth:`critic.views.CriticView.
    posterior_summary`: the CTM's aggregated-posterior covariance), so that its figures need not project the set
    again; for this run only: never written (``None`` in a result read back)."""

    @property
    def p_value(self) -> float | None:
        return None if self.comparison is None else self.comparison.p_value

    def headline_comparison(self, headline: str) -> Comparison | None:
        """The comparison of the statistic ``headline`` (``"latent_ppl"`` or ``"latent_nll"``)."""
        return self.ppl_comparison if headline == "latent_ppl" else self.comparison

    def to_pandas(self) -> Any:
        """A pandas DataFrame, a row per document of the set (``documents.jsonl``'s fields; a document that could not
        be projected has its reason under ``skipped`` and no numbers): :func:`critic.frame.set_rows`."""
        from . import frame

        return frame.frame(frame.set_rows(self), frame.DOCUMENT_COLUMNS)

    def to_dict(self, *, documents: bool = False) -> dict:
        out = asdict(replace(self, posterior_summary=None))
        out.pop("posterior_summary")
        if not documents:
            out.pop("documents")
        statistics = out.pop("statistics")
        out["higher_is_better"] = {k: v for k, v in HIGHER_IS_BETTER.items()
                                   if k != "outlier_p_value" or documents}
        for name, value in statistics.items():
            out[name] = value
            if name in STATISTICS:
                out["higher_is_better"][name] = STATISTICS[name][0]
        return out

    @classmethod
    def from_dict(cls, obj: dict, documents: list[DocumentResult] | None = None) -> "SetResult":
        """A set of ``results.json`` back as a result; its per-document results come from
        ``documents.jsonl`` (``documents``), since ``results.json`` does not hold them."""
        fields = set(cls.__dataclass_fields__) | {"higher_is_better"}
        comparison, ppl_comparison = obj.get("comparison"), obj.get("ppl_comparison")
        return cls(name=obj["name"], n=int(obj["n"]), latent_nll=_number(obj["latent_nll"]),
                   latent_nll_ci=_pair(obj["latent_nll_ci"]), latent_ppl=_number(obj["latent_ppl"]),
                   latent_ppl_ci=_pair(obj["latent_ppl_ci"]), n_skipped=int(obj["n_skipped"]),
                   skipped=dict(obj["skipped"]), n_unknown=int(obj["n_unknown"]), documents=list(documents or []),
                   comparison=None if comparison is None else Comparison.from_dict(comparison),
                   ppl_comparison=None if ppl_comparison is None else Comparison.from_dict(ppl_comparison),
                   estimator=obj.get("estimator", "exact"), latent_nll_mc_stderr=obj.get("latent_nll_mc_stderr"),
                   warnings=list(obj.get("warnings", [])),
                   statistics={k: v for k, v in obj.items() if k not in fields})


@dataclass
class CriticismResult:
    """The outcome of :func:`critic.criticism.criticize`: reference and candidate sets."""

    critic: dict[str, Any]
    reference: SetResult
    candidates: dict[str, SetResult]
    config: dict
    inputs: list[dict[str, Any]] = field(default_factory=list)
    null_reasons: dict[str, str] = field(default_factory=dict)
    """Why a value is ``null`` in ``results.json`` (dotted path -> reason), beside NaN ones."""

    @property
    def critic_name(self) -> str:
        return self.critic["name"]

    @property
    def headline(self) -> str:
        """The statistic that fits the critic's latent: ``"latent_ppl"`` for discrete chains,
        ``"latent_nll"`` for continuous latents (where a PPL over M(x) = 1 means nothing)."""
        return self.critic.get("headline", "latent_ppl")

    @property
    def outlier_note(self) -> str:
        """What the documents' outlier p-values are, in the tables' words (the outlier score, and the critic's
        statistics combined with ``T/M`` where it has any)."""
        beside = self.config.get("outlier_statistics") or []
        note = OUTLIER_SCORE_NOTES[self.outlier_score]
        if self.outlier_score == "length":
            note += SIZE_MODEL_NOTES[self.config.get("size_model", "bins")]
        return note + (COMBINED_NOTE.format(", ".join(beside)) if beside else "")

    @property
    def outlier_score(self) -> str:
        """What the documents' ``outlier_p_value`` compares them with: ``"length"`` (reference documents of
        similar length) or ``"plain"`` (the whole reference set; results written before the choice existed)."""
        return self.config.get("outlier_score", "plain")

    def set(self, name: str) -> SetResult:
        """The set called ``name`` (the reference or a candidate); KeyError naming the sets there are."""
        for s in self.sets:
            if s.name == name:
                return s
        raise KeyError(f"no set {name!r}: the sets are {', '.join(s.name for s in self.sets)}")

    def add_statistic(self, name: str, values: dict[str, float | None], *,
                      reasons: dict[str, str] | None = None) -> None:
        """Attach statistic ``name`` to sets: ``values`` maps set name -> value.

        A set given ``None`` (or NaN) must have a reason in ``reasons``: it is
        written as ``null`` with that reason, never as a finding.  Names that
        clash with the set's own fields are refused.
        """
        reserved = {f for f in SetResult.__dataclass_fields__} | {"higher_is_better"}
        if name in reserved:
            raise ValueError(f"statistic name {name!r} clashes with a field of every set")
        reasons = reasons or {}
        for set_name, value in values.items():
            target = self.set(set_name)
            if value is None or not math.isfinite(value):
                if set_name not in reasons:
                    raise ValueError(f"{name} of set {set_name!r} is {value}: give the reason it has none")
                key = "reference" if target is self.reference else f"candidates.{set_name}"
                self.null_reasons[f"{key}.{name}"] = reasons[set_name]
                value = None
            target.statistics[name] = None if value is None else float(value)

    @property
    def sets(self) -> list[SetResult]:
        return [self.reference, *self.candidates.values()]

    def outliers(self, name: str | None = None, top: int = 10) -> Outliers:
        """The ``top`` documents with the smallest outlier p-value (ties: larger T/M first), as ``(set name,
        DocumentResult)`` pairs that print as a table (:func:`outliers_table`)."""
        pool = [(s.name, d) for s in self.sets if name is None or s.name == name for d in s.documents]
        pool.sort(key=lambda item: (item[1].outlier_p_value, -item[1].latent_nll_per_step))
        return Outliers(pool[:top], note=self.outlier_note)

    def to_pandas(self) -> Any:
        """A pandas DataFrame, a row per document of every set, led by ``critic`` (the critic's name) and ``set``:
        ``documents.jsonl``'s numbers (:func:`critic.frame.result_rows`)."""
        from . import frame

        return frame.frame(frame.result_rows(self, self.critic_name), frame.DOCUMENT_COLUMNS)

    def summary(self) -> Any:
        """A pandas DataFrame, a row per set: ``results.json``'s statistics, each CI as two columns and both
        comparisons with the reference (:func:`critic.frame.set_summary`)."""
        from . import frame

        return frame.frame(frame.result_summary_rows(self, self.critic_name), frame.SUMMARY_COLUMNS)

    def to_dict(self) -> dict:
        """The ``results.json`` payload (NaN and infinities already replaced, see :func:`json_ready`)."""
        payload = {
            "schema_version": SCHEMA_VERSION,
            "critic": self.critic,
            "inputs": self.inputs,
            "config": self.config,
            "reference": self.reference.to_dict(),
            "candidates": {k: v.to_dict() for k, v in self.candidates.items()},
        }
        if self.null_reasons:
            payload["null_reasons"] = dict(self.null_reasons)
        return json_ready(payload)

    @classmethod
    def from_dict(cls, payload: dict, documents: dict[str, list[DocumentResult]] | None = None) -> "CriticismResult":
        """``results.json``'s payload back as a result; ``documents`` maps set name -> its per-document
        results (from ``documents.jsonl``).  Keys the writer added beside the schema (``environment``,
        ``run``) are not part of the result and are left out."""
        if payload.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"results schema version {payload.get('schema_version')!r}: this version of critic "
                             f"reads version {SCHEMA_VERSION}")
        documents = documents or {}

        def one(obj: dict) -> SetResult:
            return SetResult.from_dict(obj, documents.get(obj["name"]))

        return cls(critic=dict(payload["critic"]), reference=one(payload["reference"]),
                   candidates={name: one(obj) for name, obj in payload["candidates"].items()},
                   config=dict(payload.get("config", {})), inputs=list(payload.get("inputs", [])),
                   null_reasons=dict(payload.get("null_reasons", {})))

    def __str__(self) -> str:
        return markdown_table(self)

    __repr__ = __str__  # the table, not every document's result


def json_ready(obj: Any) -> dict:
    """``obj`` with every NaN/infinite float replaced by ``None``; the reasons under ``null_reasons``.

    The reason names the value (``nan``, ``inf``) and, for a set, points at
    its ``warnings`` (where the cause -- too few documents -- is spelled out).
    """
    reasons: dict[str, str] = {}

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            reasons[where] = f"not a finite number ({value}): undefined for this set, see its warnings"
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    out = clean(obj, "")
    if isinstance(out, dict):
        merged = dict(out.get("null_reasons") or {})
        merged.update(reasons)
        if merged:
            out["null_reasons"] = merged
    return out


# ------------------------------------------------------------------ Markdown


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "—" if value is None or not math.isfinite(value) else format(value, fmt)


def _ci(ci: tuple[float, float]) -> str:
    return "—" if not all(math.isfinite(v) for v in ci) else f"[{ci[0]:.3f}, {ci[1]:.3f}]"




def markdown_table(result: CriticismResult, label: str | None = None) -> str:
    """Markdown table of every set: the critic's headline statistic (:attr:`CriticismResult.headline`) with
    its CI, the difference to the reference on that statistic with its CI and p-value, then the mean Latent
    NLL beside a PPL headline; ⚠ marks sets with warnings.  ``label``: the critic's name in a report of several
    (its registered name follows in parentheses where it differs), as the HTML and documents.jsonl name it."""
    headline = result.headline
    mc = any(s.latent_nll_mc_stderr is not None for s in result.sets)
    stats = list(dict.fromkeys(k for s in result.sets for k in s.statistics))

    def heading(name: str) -> str:
        higher, text = STATISTICS.get(name, (None, name))
        return text + ("" if higher is None else " ↑" if higher else " ↓")

    title = HEADLINES[headline]
    nll_beside = headline == "latent_ppl"
    head = (f"| set | n | {title} | 95% CI | Δ {title} vs ref | 95% CI | p |"
            + (" Latent NLL | 95% CI |" if nll_beside else "") + (" MC s.e. |" if mc else "")
            + "".join(f" {heading(k)} |" for k in stats) + " skipped | unknown |")
    name = result.critic_name
    shown = f"`{name}`" if label in (None, name) else f"`{markdown_cell(label)}` ({name})"
    lines = [f"Critic: {shown}", "", head,
             "|---|---:|---:|---|---:|---|---:|" + ("---:|---|" if nll_beside else "") + ("---:|" if mc else "")
             + "---:|" * len(stats) + "---:|---:|"]
    for s in result.sets:
        value, ci = (s.latent_ppl, s.latent_ppl_ci) if nll_beside else (s.latent_nll, s.latent_nll_ci)
        c = s.headline_comparison(headline)
        diff = ("— | — | —" if c is None
                else f"{_num(c.difference, '+.3f')} | {_ci(c.difference_ci)} | {_num(c.p_value, '.4f')}"
                   + (" (exact)" if c.p_value_exact else ""))
        flag = " ⚠" if s.warnings else ""
        beside = f" {_num(s.latent_nll)} | {_ci(s.latent_nll_ci)} |" if nll_beside else ""
        se = f" {_num(s.latent_nll_mc_stderr, '.4f')} |" if mc else ""
        extra = "".join(f" {_num(s.statistics.get(k))} |" for k in stats)
        lines.append(f"| {markdown_cell(s.name)}{flag} | {s.n} | {_num(value)} | {_ci(ci)} | {diff} |{beside}{se}{extra} "
                     f"{s.n_skipped} | {s.n_unknown} |")
    notes = [f"- ⚠ critic: {w}" for w in result.critic.get("warnings", [])]
    notes += [f"- ⚠ `{s.name}`: {w}" for s in result.sets for w in s.warnings]
    notes.append(f"- {TWO_SIDED_NOTE}")
    if mc:
        notes.append(f"- Latent NLL by {result.reference.estimator}; MC s.e. is the Monte-Carlo standard error of "
                     "the set mean.")
    return "\n".join(lines + [""] + notes)


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table: control characters escaped (:func:`critic.terminal.printable`),
    ``|``, ``<`` and ``>`` backslash-escaped (a viewer shows ``<img onerror=...>`` from an id as text, never as
    HTML), line breaks as spaces."""
    return re.sub(r"([|<>])", r"\\\1", " ".join(printable(text).split()))


class Outliers(list):
    """The least likely documents of a result, ``(set name, DocumentResult)`` pairs in rank order
    (:meth:`CriticismResult.outliers`): a list that prints as the Markdown table of :func:`outliers_table`."""

    def __init__(self, pairs: Sequence[tuple[str, DocumentResult]] = (), *, note: str = "") -> None:
        super().__init__(pairs)
        self.note = note

    def __str__(self) -> str:
        return _outliers_markdown(self, self.note)

    __repr__ = __str__

    def to_pandas(self) -> Any:
        """A pandas DataFrame, a row per listed document: ``rank``, ``set`` and the document's fields
        (:func:`critic.frame.outlier_rows`)."""
        from . import frame

        return frame.frame(frame.outlier_rows(self), frame.DOCUMENT_COLUMNS)


def outliers_table(result: CriticismResult, top: int = 10, name: str | None = None) -> str:
    """Markdown table of the ``top`` least likely documents (smallest outlier p-value first) with their q-values
    within their sets, and what the p-value is; a "why" column with each document's reasons
    (:attr:`DocumentResult.reasons`) when any has them."""
    return str(result.outliers(name=name, top=top))


def _outliers_markdown(listed: Sequence[tuple[str, DocumentResult]], note: str) -> str:
    why = any(d.reasons for _, d in listed)
    lines = [f"Outlier p: {note}.", "",
             "| rank | set | document | T(x) | M(x) | T/M | outlier p ↓ | q |" + (" why |" if why else ""),
             "|---:|---|---|---:|---:|---:|---:|---:|" + ("---|" if why else "")]
    for rank, (set_name, d) in enumerate(listed, start=1):
        q = "—" if d.q_value is None else f"{d.q_value:.4f}"
        lines.append(f"| {rank} | {markdown_cell(set_name)} | {markdown_cell(d.id)} | {d.latent_nll:.3f} | "
                     f"{d.latent_steps:g} | {d.latent_nll_per_step:.3f} | {d.outlier_p_value:.4f} | {q} |"
                     + (f" {markdown_cell('; '.join(d.reasons or []))} |" if why else ""))
    return "\n".join(lines)
