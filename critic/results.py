"""Result objects of a criticism and their JSON schema.

:func:`critic.criticism.criticize` builds them; :mod:`critic.report` and
:mod:`critic.plots` read them (they depend on this module, never the other
way).  ``CriticismResult.to_dict()`` is the ``results.json`` schema, in the
manner of lm-evaluation-harness results files::

    {"schema_version": 1,
     "critic": {"name", "params", "state_sha256"},
     "inputs": [{"name", "path", "sha256", "n_documents"}],
     "config": {...},
     "reference": SET, "candidates": {name: SET},
     "null_reasons": {"reference.latent_nll_ci": "...", ...}}

    SET = {"name", "n", "latent_nll", "latent_nll_ci", "latent_nll_mc_stderr", "latent_ppl",
           "latent_ppl_ci", "estimator", "comparison": {"difference", "difference_ci", "p_value"},
           "n_skipped", "skipped", "n_unknown", "warnings", "higher_is_better": {statistic: bool},
           STATISTIC: value, ...}

STATISTIC: the statistics a study adds beside Latent NLL (``word_ppl``, ``mauve``, ``pdd``, ...; see
:meth:`CriticismResult.add_statistic`), written at the set's top level.  A statistic a set cannot
have (the data row has no word perplexity) is ``null`` with its reason under ``null_reasons``.

JSON has no NaN or Infinity: :func:`json_ready` writes ``null`` and records
why under ``null_reasons`` (dotted path -> reason).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA_VERSION", "HIGHER_IS_BETTER", "STATISTICS", "DocumentResult", "Comparison", "SetResult",
           "CriticismResult", "json_ready", "markdown_table", "outliers_table"]

SCHEMA_VERSION = 1

HIGHER_IS_BETTER = {
    "latent_nll": False,
    "latent_ppl": False,
    "difference": False,   # candidate minus reference Latent NLL
    "p_value": True,       # permutation test of equal means: small p = the candidate differs
    "outlier_p_value": True,
}

STATISTICS = {
    # name: (higher is better, Markdown column heading)
    "word_ppl": (False, "word PPL"),
    "mauve": (True, "MAUVE"),
    "pdd": (False, "PDD"),
}
"""Known set statistics beside Latent NLL; :meth:`CriticismResult.add_statistic` accepts others too."""


@dataclass
class DocumentResult:
    """One projected document: ``T(x)``, ``M(x)``, ``T/M``, its outlier p-value and the
    projection's extras for it (MAP latents, topic weights) as plain JSON values."""

    id: str
    latent_nll: float
    latent_steps: float
    latent_nll_per_step: float
    outlier_p_value: float
    unknown: int = 0
    latent_nll_stderr: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """Candidate minus reference Latent NLL, its CI and the permutation p-value."""

    difference: float
    difference_ci: tuple[float, float]
    p_value: float


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
    estimator: str = "exact"
    latent_nll_mc_stderr: float | None = None
    warnings: list[str] = field(default_factory=list)
    statistics: dict[str, float | None] = field(default_factory=dict)
    """Other statistics of the set (word PPL, MAUVE, PDD), by name."""

    @property
    def p_value(self) -> float | None:
        return None if self.comparison is None else self.comparison.p_value

    def to_dict(self, *, documents: bool = False) -> dict:
        out = asdict(self)
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

    def outliers(self, name: str | None = None, top: int = 10) -> list[tuple[str, DocumentResult]]:
        """The ``top`` documents with the smallest outlier p-value (ties: larger T/M first)."""
        pool = [(s.name, d) for s in self.sets if name is None or s.name == name for d in s.documents]
        pool.sort(key=lambda item: (item[1].outlier_p_value, -item[1].latent_nll_per_step))
        return pool[:top]

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

    def __str__(self) -> str:
        return markdown_table(self)


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


def markdown_table(result: CriticismResult) -> str:
    """Markdown table of every set; arrows say lower is better; ⚠ marks sets with warnings."""
    mc = any(s.latent_nll_mc_stderr is not None for s in result.sets)
    stats = list(dict.fromkeys(k for s in result.sets for k in s.statistics))

    def heading(name: str) -> str:
        higher, label = STATISTICS.get(name, (None, name))
        return label + ("" if higher is None else " ↑" if higher else " ↓")

    head = "| set | n | Latent NLL ↓ | 95% CI |" + (" MC s.e. |" if mc else "") + \
        " Latent PPL ↓ | 95% CI |" + "".join(f" {heading(k)} |" for k in stats) + \
        " Δ NLL vs ref | p-value | skipped | unknown |"
    lines = [f"Critic: `{result.critic_name}`", "", head,
             "|---|---:|---:|---|" + ("---:|" if mc else "") + "---:|---|" + "---:|" * len(stats)
             + "---:|---:|---:|---:|"]
    for s in result.sets:
        diff = "—" if s.comparison is None else _num(s.comparison.difference, "+.3f")
        p = "—" if s.comparison is None else _num(s.comparison.p_value, ".4f")
        flag = " ⚠" if s.warnings else ""
        se = f" {_num(s.latent_nll_mc_stderr, '.4f')} |" if mc else ""
        extra = "".join(f" {_num(s.statistics.get(k))} |" for k in stats)
        lines.append(f"| {s.name}{flag} | {s.n} | {_num(s.latent_nll)} | {_ci(s.latent_nll_ci)} |{se} "
                     f"{_num(s.latent_ppl)} | {_ci(s.latent_ppl_ci)} |{extra} {diff} | {p} | {s.n_skipped} | "
                     f"{s.n_unknown} |")
    notes = [f"- ⚠ `{s.name}`: {w}" for s in result.sets for w in s.warnings]
    if mc:
        notes.append(f"- Latent NLL by {result.reference.estimator}; MC s.e. is the Monte-Carlo standard error of "
                     "the set mean.")
    return "\n".join(lines + ([""] + notes if notes else []))


def outliers_table(result: CriticismResult, top: int = 10, name: str | None = None) -> str:
    """Markdown table of the ``top`` flagged documents (smallest outlier p-value first)."""
    lines = ["| rank | set | document | T(x) | M(x) | T/M | outlier p ↓ |", "|---:|---|---|---:|---:|---:|---:|"]
    for rank, (set_name, d) in enumerate(result.outliers(name=name, top=top), start=1):
        lines.append(f"| {rank} | {set_name} | {d.id} | {d.latent_nll:.3f} | {d.latent_steps:g} | "
                     f"{d.latent_nll_per_step:.3f} | {d.outlier_p_value:.4f} |")
    return "\n".join(lines)
