"""``criticize()``: the two-sample check in latent space.

For a fitted critic, a reference set (real held-out text) and named candidate
sets (model samples, corruptions), compute for each set

- per-document ``T(x)``, ``M(x)`` and an outlier p-value: the conformal p-value (:mod:`critic.conformal`) of
  ``T(x)/M(x)`` and the critic's statistics beside it (:attr:`critic.critic.Critic.outlier_statistics`, combined
  by their ranks) against real documents -- the critic's calibration documents (:mod:`critic.calibration`) and
  the reference's -- of similar length (``outlier_score="length"``, the default, so a document is not flagged
  for being short or long) or all of them (``"plain"``, kept beside it either way), with each statistic's own
  p-value beside it and the Benjamini-Hochberg q-value of the combined one within its set (flags:
  :mod:`critic.panel`);
- the Latent NLL (mean of ``T(x)``) with a bootstrap CI and, when ``T(x)`` is
  estimated by Monte Carlo, the standard error of that mean from the samples,
  ``sqrt(sum_x se(x)^2) / n``;
- the Latent PPL ``exp(sum T / sum M)`` with a bootstrap CI;
- for candidates, the comparison against the reference on the mean Latent NLL and on the set-level
  Latent PPL: the difference (candidate - reference) with a bootstrap CI and a permutation p-value of
  that same statistic (the PPL, a ratio of sums, is permuted and resampled by document);
- counts of documents that could not be projected (with reasons) and of
  latent values mapped to the unknown state;
- what the critic's view draws of each set's posteriors beyond the documents' extras (the CTM's fig. 6
  covariance), kept on the set's result from the projections that score it
  (:meth:`critic.views.CriticView.posterior_summary`, ``SetResult.posterior_summary``, never written): each set
  is projected once per critic, the report's figures included.

Numbers that cannot be trusted are not findings: a set with fewer than two
documents has no CI (``NaN``, written as ``null`` with a reason), and a set
with fewer than ``min_documents`` documents carries a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from . import conformal, stats
from .calibration import outlier_columns, word_counts
from .critic import Critic, Scores
from .document import Document, documents_sha256
from .outliers import OUTLIER_SCORES, OutlierPValues, outlier_pool
from .resources import require_memory
from .results import Comparison, CriticismResult, DocumentResult, SetResult
from .terminal import path_text
from .views import posterior_summary

__all__ = ["criticize", "summarize", "compare", "compare_sets", "shape_mismatch", "require_comparable_shapes",
           "UNTITLED_SHARE"]

_NAN_PAIR = (float("nan"), float("nan"))


def _plain(value):
    """A projection extra as a JSON value: tensors and arrays become (nested) lists or numbers."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def summarize(
    name: str,
    scores: Scores,
    *,
    outliers: OutlierPValues,
    statistics: Sequence[str] = (),
    words: np.ndarray | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    min_documents: int = 10,
) -> SetResult:
    """Set statistics of one set's :class:`Scores` (see module docstring), with its documents' outlier p-values
    ``outliers`` (:class:`OutlierPool`) and their Benjamini-Hochberg q-values within the set."""
    per_step = scores.latent_nll / scores.latent_steps
    names = ["latent_nll_per_step", *statistics]
    p_values, plain, components = outliers.p, outliers.plain, outliers.components
    q_values = conformal.bh_q_values(p_values)
    stderr = scores.latent_nll_stderr
    docs = [
        DocumentResult(
            id=doc_id,
            latent_nll=float(scores.latent_nll[i]),
            latent_steps=float(scores.latent_steps[i]),
            latent_nll_per_step=float(per_step[i]),
            outlier_p_value=float(p_values[i]),
            q_value=float(q_values[i]),
            unknown=int(scores.unknown.get(doc_id, 0)),
            latent_nll_stderr=None if stderr is None else float(stderr[i]),
            extras={k: _plain(v[i]) for k, v in scores.extras.items()},
            plain_p_value=float(plain[i]),
            words=None if words is None else int(words[i]),
            p_values=dict(zip(names, components[i].tolist())) if statistics else None,
        )
        for i, doc_id in enumerate(scores.doc_ids)
    ]
    warnings = []
    if scores.n == 0:
        warnings.append("no document could be projected: no statistic is defined")
    elif scores.n < 2:
        warnings.append(f"only {scores.n} document: no confidence interval")
    elif scores.n < min_documents:
        warnings.append(f"only {scores.n} documents (< {min_documents}): the CIs are not reliable")
    rows = scores.rows()
    nll_ci, ppl_ci = (stats.bootstrap_cis(rows, [stats.MEAN, stats.LATENT_PPL], n_resamples=n_bootstrap,
                                          level=level, seed=seed)
                      if scores.n >= 2 else (_NAN_PAIR, _NAN_PAIR))
    return SetResult(
        name=name,
        n=scores.n,
        latent_nll=stats.MEAN(rows) if scores.n else float("nan"),
        latent_nll_ci=nll_ci,
        latent_ppl=stats.LATENT_PPL(rows) if scores.n else float("nan"),
        latent_ppl_ci=ppl_ci,
        n_skipped=len(scores.skipped),
        skipped=dict(scores.skipped),
        n_unknown=scores.n_unknown,
        documents=docs,
        estimator=scores.estimator,
        latent_nll_mc_stderr=(None if stderr is None or scores.n == 0
                              else float(np.sqrt(np.sum(stderr ** 2)) / scores.n)),
        warnings=warnings,
    )


def _score(critic: Critic, docs: Sequence[Document], *, progress: bool, seed: int) -> tuple[Scores, Any]:
    """``critic.score(docs)`` and what the critic's view keeps of the posteriors of the documents that projected
    (:func:`critic.views.posterior_summary`, given each batch's projection; ``None`` when it keeps nothing): the
    set's only projection, so that the report's figures read the posteriors from it instead of projecting the
    set again."""
    summary = posterior_summary(critic)
    scores = critic.score(docs, progress=progress, seed=seed, observe=None if summary is None else summary.add)
    return scores, None if summary is None else summary.result()


def compare(reference: Scores, candidate: Scores, *, n_bootstrap: int, n_permutations: int,
            level: float, seed: int) -> tuple[Comparison, Comparison]:
    """Candidate against reference on the per-document mean Latent NLL and on the set-level Latent PPL:
    each a difference (candidate minus reference), a bootstrap CI of it (each set resampled on its own)
    and a permutation p-value of the same statistic (the PPL's on its log, sum T / sum M).

    Undefined (``NaN``) unless both sets have at least two documents.
    """
    ref_rows, cand_rows = reference.rows(), candidate.rows()
    if reference.n < 2 or candidate.n < 2:
        both = reference.n and candidate.n
        diff = stats.MEAN(cand_rows) - stats.MEAN(ref_rows) if both else float("nan")
        ppl_diff = stats.LATENT_PPL(cand_rows) - stats.LATENT_PPL(ref_rows) if both else float("nan")
        return (Comparison(diff, _NAN_PAIR, float("nan")),
                Comparison(ppl_diff, _NAN_PAIR, float("nan"), statistic="latent_ppl"))
    mean_test, ppl_test = stats.permutation_tests(ref_rows, cand_rows, [stats.MEAN, stats.LOG_LATENT_PPL],
                                                  n_permutations=n_permutations, seed=seed)
    mean_ci, ppl_ci = stats.bootstrap_difference_cis(ref_rows, cand_rows, [stats.MEAN, stats.LATENT_PPL],
                                                     n_resamples=n_bootstrap, level=level, seed=seed + 1)
    ppl_diff = stats.LATENT_PPL(cand_rows) - stats.LATENT_PPL(ref_rows)
    return (Comparison(mean_test.difference, mean_ci, mean_test.p_value, p_value_exact=mean_test.exact),
            Comparison(ppl_diff, ppl_ci, ppl_test.p_value, statistic="latent_ppl", p_value_exact=ppl_test.exact))


def compare_sets(result: CriticismResult, reference: str, candidate: str, *, n_bootstrap: int = 1000,
                 n_permutations: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[Comparison, Comparison]:
    """Two sets of one result compared as :func:`compare` compares each candidate with the reference (for
    example one LM's generations against another's): ``(mean Latent NLL, Latent PPL)`` comparisons of
    ``candidate`` minus ``reference``, from the documents' ``T(x)`` and ``M(x)`` the result holds."""
    _check_settings(n_bootstrap, n_permutations, level, 1)

    def scores(name: str) -> Scores:
        docs = result.set(name).documents
        return Scores([d.id for d in docs], np.array([d.latent_nll for d in docs], dtype=np.float64),
                      np.array([d.latent_steps for d in docs], dtype=np.float64))

    return compare(scores(reference), scores(candidate), n_bootstrap=n_bootstrap, n_permutations=n_permutations,
                   level=level, seed=seed)



UNTITLED_SHARE = 0.9
"""A set whose documents are at least this share single untitled sections, against a reference of at most
``1 - UNTITLED_SHARE`` such documents, has not the reference's shape (:func:`shape_mismatch`)."""


def _single_untitled(docs: Sequence[Document]) -> float:
    return sum(len(d.sections) == 1 and not d.sections[0].title for d in docs) / max(len(docs), 1)


def shape_mismatch(reference: Sequence[Document], docs: Sequence[Document]) -> str | None:
    """Why a set's documents cannot be compared with the reference's as they were read, or ``None``: nearly all
    of them one untitled section while nearly no reference document is (generations with Markdown headings
    read without ``--sections``, for one).  A section critic would then find every document unlikely for the
    way it was read, not for what the model wrote."""
    share, ref_share = _single_untitled(docs), _single_untitled(reference)
    if not docs or share < UNTITLED_SHARE or ref_share > 1.0 - UNTITLED_SHARE:
        return None
    return (f"{share:.0%} of the documents are one untitled section, against {ref_share:.0%} of the reference's: "
            "their sections were not read (--sections markdown or separator:STRING), or the model writes none")


def require_comparable_shapes(reference: Sequence[Document], candidates: Mapping[str, Sequence[Document]], *,
                              sections: str, option: str = "--sections") -> None:
    """Stop before any document is scored when a candidate set cannot be compared with the reference as it was read
    (:func:`shape_mismatch`) and nobody said how its sections are written: under ``sections="auto"`` (the reader's
    default, :mod:`critic.inputs`) a ``ValueError`` names the set and the fix (``option``: how the setting is
    given, ``--sections`` or a config's ``[inputs] sections``); a mode given explicitly is taken as meant, and the
    mismatch stays a warning of the set's result."""
    if sections != "auto":
        return
    for name, docs in candidates.items():
        why = shape_mismatch(reference, docs)
        if why:
            raise ValueError(f"candidate set {name!r}: {why}. Say how their sections are written ({option} "
                             f"separator:STRING, or markdown), or give {option} none to criticise each as one "
                             "untitled section")


def _check_settings(n_bootstrap: int, n_permutations: int, level: float, min_documents: int) -> None:
    for key, value in (("n_bootstrap", n_bootstrap), ("n_permutations", n_permutations),
                       ("min_documents", min_documents)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")


def _check_memory(n_bootstrap: int, n_permutations: int, n_reference: int, n_candidates: list[int]) -> None:
    """Refuse resampling settings whose results would not fit in memory, before any document is scored.

    Resampling runs in blocks of bounded size (:data:`critic.stats.BLOCK_BYTES`); what grows with the settings
    is the column sums of each resample (the CI of a difference keeps both sides' two sums, the statistics and
    their difference: 64 bytes a resample, measured), and the pooled rows and one split's indices for the
    largest pooled set.
    """
    largest = max([n_reference + n for n in n_candidates] or [n_reference])
    need = 64.0 * max(n_bootstrap, n_permutations) + stats.BLOCK_BYTES + 32.0 * largest
    require_memory(need, f"{n_bootstrap} bootstrap resamples and {n_permutations} permutations of {largest} "
                         "documents", "--n-bootstrap / --n-permutations (n_bootstrap, n_permutations)")


def criticize(
    critic: Critic,
    reference: Sequence[Document],
    candidates: Mapping[str, Sequence[Document]] | None = None,
    *,
    reference_name: str = "reference",
    paths: Mapping[str, str | Path] | None = None,
    n_bootstrap: int = 1000,
    n_permutations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    min_documents: int = 10,
    outlier_score: str = "length",
    progress: bool = False,
) -> CriticismResult:
    """Criticise candidate sets against a reference set with a fitted critic.

    ``paths`` optionally names the file each set was read from (by set name);
    every set's SHA-256 (of its documents as JSONL) and size are recorded in
    ``result.inputs`` either way.
    """
    candidates = dict(candidates or {})
    _check_settings(n_bootstrap, n_permutations, level, min_documents)
    if outlier_score not in OUTLIER_SCORES:
        raise ValueError(f"outlier_score must be one of {', '.join(OUTLIER_SCORES)}, got {outlier_score!r}")
    _check_memory(n_bootstrap, n_permutations, len(reference), [len(d) for d in candidates.values()])
    if reference_name in candidates:
        raise ValueError(f"candidate name {reference_name!r} clashes with the reference set")
    ref_scores, ref_summary = _score(critic, reference, progress=progress, seed=seed)
    if ref_scores.n == 0:
        raise ValueError("no reference document could be projected: "
                         + "; ".join(f"{k}: {v}" for k, v in list(ref_scores.skipped.items())[:5]))
    statistics = tuple(critic.outlier_statistics)
    pool, notes = outlier_pool(critic, reference, ref_scores, outlier_score=outlier_score, seed=seed)
    own = pool.own_p_values()
    n_ref = ref_scores.n  # the reference's documents are the pool's last rows
    ref_outliers = OutlierPValues(own.p[-n_ref:], own.plain[-n_ref:], own.components[-n_ref:])
    kwargs = dict(n_bootstrap=n_bootstrap, level=level, seed=seed, min_documents=min_documents, statistics=statistics)
    ref_result = summarize(reference_name, ref_scores, outliers=ref_outliers, words=pool.words[-n_ref:]
                           if pool.words is not None else None, **kwargs)
    ref_result.posterior_summary = ref_summary
    if len(pool.ids) < min_documents:
        ref_result.warnings.append(f"outlier p-values are against fewer than {min_documents} real documents")
    results = {}
    for name, docs in candidates.items():
        scores, summary = _score(critic, docs, progress=progress, seed=seed)
        words = word_counts(docs, scores.doc_ids)
        outliers = pool.p_values(outlier_columns(scores, statistics), words, scores.doc_ids)
        result = summarize(name, scores, outliers=outliers, words=words, **kwargs)
        result.posterior_summary = summary
        shape = shape_mismatch(reference, docs)
        if shape:
            result.warnings.append(shape)
        result.comparison, result.ppl_comparison = compare(ref_scores, scores, n_bootstrap=n_bootstrap,
                                                           n_permutations=n_permutations, level=level, seed=seed)
        results[name] = result
    paths = dict(paths or {})
    inputs = [{"name": name, "path": path_text(paths[name]) if name in paths else None,
               "sha256": documents_sha256(docs), "n_documents": len(docs)}
              for name, docs in {reference_name: reference, **candidates}.items()]
    config = {"n_bootstrap": n_bootstrap, "n_permutations": n_permutations, "level": level, "seed": seed,
              "outlier_score": outlier_score, "size_model": critic.size_model, "outlier_statistics": list(statistics),
              "min_documents": min_documents, "latent_nll_estimator": ref_scores.estimator,
              "calibration": {**pool.describe(), **({"notes": notes} if notes else {})}}
    try:
        state_sha256 = critic.state_sha256()
    except NotImplementedError:  # a critic without save support has no state hash
        state_sha256 = None
    about = {"name": critic.name, "params": critic.get_params(), "state_sha256": state_sha256,
             "headline": critic.headline}
    if critic.fit_warnings():
        about["warnings"] = critic.fit_warnings()
    return CriticismResult(critic=about, reference=ref_result, candidates=results, config=config, inputs=inputs)
