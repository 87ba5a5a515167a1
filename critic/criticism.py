"""``criticize()``: the two-sample check in latent space.

For a fitted critic, a reference set (real held-out text) and named candidate
sets (model samples, corruptions), compute for each set

- per-document ``T(x)``, ``M(x)`` and an outlier score: the right-tail empirical
  p-value of ``T(x)/M(x)`` against the reference set's values;
- the Latent NLL (mean of ``T(x)``) with a bootstrap CI;
- the Latent PPL ``exp(sum T / sum M)`` with a bootstrap CI;
- for candidates, the comparison against the reference: difference of Latent
  NLLs (candidate - reference) with a bootstrap CI and a permutation p-value;
- counts of documents that could not be projected (with reasons) and of
  latent values mapped to the unknown state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .critic import Critic, Scores
from .document import Document
from . import stats

__all__ = ["DocumentResult", "Comparison", "SetResult", "CriticismResult", "criticize", "summarize"]


@dataclass
class DocumentResult:
    id: str
    latent_nll: float
    latent_steps: float
    latent_nll_per_step: float
    outlier_p_value: float
    unknown: int = 0


@dataclass
class Comparison:
    """Candidate minus reference Latent NLL, its CI and the permutation p-value."""

    difference: float
    difference_ci: tuple[float, float]
    p_value: float


@dataclass
class SetResult:
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

    @property
    def p_value(self) -> float | None:
        return None if self.comparison is None else self.comparison.p_value

    def to_dict(self, *, documents: bool = False) -> dict:
        out = asdict(self)
        out["latent_nll_ci"] = list(self.latent_nll_ci)
        out["latent_ppl_ci"] = list(self.latent_ppl_ci)
        if self.comparison is not None:
            out["comparison"]["difference_ci"] = list(self.comparison.difference_ci)
            out["p_value"] = self.comparison.p_value
        if not documents:
            out.pop("documents")
        return out


@dataclass
class CriticismResult:
    critic: str
    reference: SetResult
    candidates: dict[str, SetResult]
    config: dict

    @property
    def sets(self) -> list[SetResult]:
        return [self.reference, *self.candidates.values()]

    def outliers(self, name: str | None = None, top: int = 10) -> list[tuple[str, DocumentResult]]:
        """The ``top`` documents with the smallest outlier p-value (ties: larger T/M first)."""
        pool = [(s.name, d) for s in self.sets if name is None or s.name == name for d in s.documents]
        pool.sort(key=lambda item: (item[1].outlier_p_value, -item[1].latent_nll_per_step))
        return pool[:top]

    def to_dict(self) -> dict:
        return {
            "critic": self.critic,
            "config": self.config,
            "reference": self.reference.to_dict(),
            "candidates": {k: v.to_dict() for k, v in self.candidates.items()},
        }

    def __str__(self) -> str:
        from .report import markdown_table

        return markdown_table(self)


def summarize(
    name: str,
    scores: Scores,
    *,
    reference_per_step: np.ndarray | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> SetResult:
    """Set statistics of one set's :class:`Scores` (see module docstring)."""
    per_step = scores.latent_nll / np.maximum(scores.latent_steps, 1e-12)
    ref = per_step if reference_per_step is None else reference_per_step
    p_values = stats.empirical_p_values(ref, per_step) if scores.n else np.zeros(0)
    docs = [
        DocumentResult(
            id=doc_id,
            latent_nll=float(t),
            latent_steps=float(m),
            latent_nll_per_step=float(r),
            outlier_p_value=float(p),
            unknown=int(scores.unknown.get(doc_id, 0)),
        )
        for doc_id, t, m, r, p in zip(scores.doc_ids, scores.latent_nll, scores.latent_steps, per_step, p_values)
    ]
    return SetResult(
        name=name,
        n=scores.n,
        latent_nll=float(scores.latent_nll.mean()) if scores.n else float("nan"),
        latent_nll_ci=stats.bootstrap_ci(scores.latent_nll, n_resamples=n_bootstrap, level=level, seed=seed),
        latent_ppl=stats.latent_ppl(scores.latent_nll, scores.latent_steps),
        latent_ppl_ci=stats.bootstrap_latent_ppl_ci(
            scores.latent_nll, scores.latent_steps, n_resamples=n_bootstrap, level=level, seed=seed
        ),
        n_skipped=len(scores.skipped),
        skipped=dict(scores.skipped),
        n_unknown=scores.n_unknown,
        documents=docs,
    )


def _compare(reference: Scores, candidate: Scores, *, n_bootstrap: int, n_permutations: int,
             level: float, seed: int) -> Comparison:
    diff, p = stats.permutation_test(reference.latent_nll, candidate.latent_nll,
                                     n_permutations=n_permutations, seed=seed)
    if reference.n == 0 or candidate.n == 0:
        return Comparison(diff, (float("nan"), float("nan")), p)
    rng = np.random.default_rng(seed + 1)
    ia = rng.integers(0, reference.n, size=(n_bootstrap, reference.n))
    ib = rng.integers(0, candidate.n, size=(n_bootstrap, candidate.n))
    boot = candidate.latent_nll[ib].mean(1) - reference.latent_nll[ia].mean(1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return Comparison(diff, (float(lo), float(hi)), p)


def criticize(
    critic: Critic,
    reference: Sequence[Document],
    candidates: Mapping[str, Sequence[Document]] | None = None,
    *,
    reference_name: str = "reference",
    n_bootstrap: int = 1000,
    n_permutations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> CriticismResult:
    """Criticise candidate sets against a reference set with a fitted critic."""
    candidates = dict(candidates or {})
    if reference_name in candidates:
        raise ValueError(f"candidate name {reference_name!r} clashes with the reference set")
    ref_scores = critic.score(reference, progress=progress)
    if ref_scores.n == 0:
        raise ValueError("no reference document could be projected: "
                         + "; ".join(f"{k}: {v}" for k, v in list(ref_scores.skipped.items())[:5]))
    ref_per_step = ref_scores.latent_nll / ref_scores.latent_steps
    kwargs = dict(n_bootstrap=n_bootstrap, level=level, seed=seed)
    ref_result = summarize(reference_name, ref_scores, **kwargs)
    results = {}
    for name, docs in candidates.items():
        scores = critic.score(docs, progress=progress)
        result = summarize(name, scores, reference_per_step=ref_per_step, **kwargs)
        result.comparison = _compare(ref_scores, scores, n_bootstrap=n_bootstrap,
                                     n_permutations=n_permutations, level=level, seed=seed)
        results[name] = result
    config = {"n_bootstrap": n_bootstrap, "n_permutations": n_permutations, "level": level, "seed": seed,
              "latent_nll_estimator": ref_scores.estimator}
    return CriticismResult(critic=critic.name, reference=ref_result, candidates=results, config=config)
