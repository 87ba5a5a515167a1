"""``criticize()``: the two-sample check in latent space.

For a fitted critic, a reference set (real held-out text) and named candidate
sets (model samples, corruptions), compute for each set

- per-document ``T(x)``, ``M(x)`` and an outlier score: the right-tail empirical
  p-value of ``T(x)/M(x)`` against the reference documents of similar length (``outlier_score="length"``,
  the default: :func:`critic.stats.size_matched_p_values` on word counts, so a document is not flagged
  for being short or long) or against the whole reference set (``"plain"``, kept beside it either way);
  for a critic with statistics beside ``T/M`` (:attr:`critic.critic.Critic.outlier_statistics`), the
  combination of their p-values and ``T/M``'s (:func:`outlier_p_values`), each kept beside it;
- the Latent NLL (mean of ``T(x)``) with a bootstrap CI and, when ``T(x)`` is
  estimated by Monte Carlo, the standard error of that mean from the samples,
  ``sqrt(sum_x se(x)^2) / n``;
- the Latent PPL ``exp(sum T / sum M)`` with a bootstrap CI;
- for candidates, the comparison against the reference on the mean Latent NLL and on the set-level
  Latent PPL: the difference (candidate - reference) with a bootstrap CI and a permutation p-value of
  that same statistic (the PPL, a ratio of sums, is permuted and resampled by document);
- counts of documents that could not be projected (with reasons) and of
  latent values mapped to the unknown state.

Numbers that cannot be trusted are not findings: a set with fewer than two
documents has no CI (``NaN``, written as ``null`` with a reason), and a set
with fewer than ``min_documents`` documents carries a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from . import stats
from .critic import Critic, Scores
from .document import Document, documents_sha256
from .resources import require_memory
from .results import Comparison, CriticismResult, DocumentResult, SetResult

__all__ = ["criticize", "summarize", "compare", "compare_sets", "word_counts", "outlier_p_values", "OUTLIER_SCORES", "SIZE_MODELS"]

SIZE_MODELS = {"bins": stats.size_matched_p_values, "location-scale": stats.size_model_p_values}
"""How a length-matched p-value takes the length into account, by :attr:`~critic.critic.Critic.size_model`."""

_NAN_PAIR = (float("nan"), float("nan"))


def _plain(value):
    """A projection extra as a JSON value: tensors and arrays become (nested) lists or numbers."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def outlier_p_values(reference: np.ndarray, values: np.ndarray, *, reference_words: np.ndarray | None = None,
                     words: np.ndarray | None = None, outlier_score: str = "length", size_model: str = "bins",
                     tie_break: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outlier p-values of documents with statistics ``values (n, J)`` against reference documents' ``reference
    (n_ref, J)``.

    Column 0 is ``T(x)/M(x)``, the others the critic's :attr:`~critic.critic.Critic.outlier_statistics`; in
    every column a larger value is less typical.  Column ``j`` has the right-tail empirical p-value ``p_j(x)``
    against the reference documents of similar word count (``outlier_score="length"`` with ``words`` given:
    :func:`critic.stats.size_matched_p_values` with ``size_model="bins"``, or the residual of a location-scale
    model on length, :func:`critic.stats.size_model_p_values`, with ``"location-scale"``: the critic's
    :attr:`~critic.critic.Critic.size_model`) or against all of them (``"plain"``:
    :func:`critic.stats.empirical_p_values`).  The outlier p-value is their Sidak combination

        p(x) = 1 - (1 - min_j p_j(x))^J,

    the chance that the smallest of ``J`` independent uniform p-values is at most ``min_j p_j(x)``: uniform on
    real documents when the statistics are independent, and under any dependence between them
    ``P(p <= a) <= J (1 - (1 - a)^(1/J)) <= -log(1 - a)`` (0.0513 at a = 0.05; Bonferroni's bound on the
    minimum).  With ``J = 1`` it is ``p_1`` itself.  ``tie_break (n, J)``: each column's ties broken as
    :func:`critic.stats.empirical_p_values` breaks them (so a discrete statistic's p-values are uniform too).

    Returns ``(p, plain, components)``: ``p (n,)`` under ``outlier_score``, ``plain (n,)`` the combination of the
    plain p-values, and ``components (n, J)`` the columns' own p-values under ``outlier_score``.
    """
    reference, values = (np.asarray(a, dtype=np.float64) for a in (reference, values))
    reference, values = (a[:, None] if a.ndim == 1 else a for a in (reference, values))
    columns = range(values.shape[1])
    ties = [None if tie_break is None else np.asarray(tie_break)[:, j] for j in columns]
    plain = np.stack([stats.empirical_p_values(reference[:, j], values[:, j], tie_break=ties[j]) for j in columns],
                     axis=1)
    if size_model not in SIZE_MODELS:
        raise ValueError(f"size_model must be one of {', '.join(SIZE_MODELS)}, got {size_model!r}")
    matched = plain
    if outlier_score == "length" and words is not None and len(values):
        ref_words = words if reference_words is None else reference_words
        matched = np.stack([SIZE_MODELS[size_model](reference[:, j], ref_words, values[:, j], words,
                                                    tie_break=ties[j]) for j in columns], axis=1)

    def combined(p: np.ndarray) -> np.ndarray:
        return p[:, 0] if p.shape[1] == 1 else 1.0 - (1.0 - p.min(axis=1)) ** p.shape[1]

    return combined(matched), combined(plain), matched


def _outlier_columns(scores: Scores, statistics: Sequence[str]) -> np.ndarray:
    """``(n, 1 + len(statistics))``: each document's ``T/M`` and its values of the named extras (which every
    projection carries, :meth:`critic.critic.Critic._validate_projection`; a set with no document has none)."""
    return np.column_stack([scores.latent_nll / scores.latent_steps]
                           + [np.asarray(scores.extras.get(s, []), dtype=np.float64) for s in statistics])


def summarize(
    name: str,
    scores: Scores,
    *,
    reference_columns: np.ndarray | None = None,
    statistics: Sequence[str] = (),
    words: np.ndarray | None = None,
    reference_words: np.ndarray | None = None,
    outlier_score: str = "length",
    size_model: str = "bins",
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    min_documents: int = 10,
) -> SetResult:
    """Set statistics of one set's :class:`Scores` (see module docstring).  ``reference_columns``: the reference
    documents' ``T/M`` and ``statistics`` (:func:`outlier_p_values`; ``None``: this set is the reference)."""
    per_step = scores.latent_nll / scores.latent_steps
    columns = _outlier_columns(scores, statistics)
    ref = columns if reference_columns is None else reference_columns
    names = ["latent_nll_per_step", *statistics]
    ties = np.column_stack([stats.id_uniforms(scores.doc_ids, f"{seed}:{name}") for name in names]) if scores.n \
        else None
    p_values, plain, components = outlier_p_values(ref, columns, reference_words=reference_words, words=words,
                                                   outlier_score=outlier_score, size_model=size_model,
                                                   tie_break=ties)
    stderr = scores.latent_nll_stderr
    docs = [
        DocumentResult(
            id=doc_id,
            latent_nll=float(scores.latent_nll[i]),
            latent_steps=float(scores.latent_steps[i]),
            latent_nll_per_step=float(per_step[i]),
            outlier_p_value=float(p_values[i]),
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
    nll_ci, ppl_ci = (stats.bootstrap_cis(stats.document_rows(scores.latent_nll, scores.latent_steps),
                                          [stats.MEAN, stats.LATENT_PPL], n_resamples=n_bootstrap, level=level,
                                          seed=seed)
                      if scores.n >= 2 else (_NAN_PAIR, _NAN_PAIR))
    return SetResult(
        name=name,
        n=scores.n,
        latent_nll=float(scores.latent_nll.mean()) if scores.n else float("nan"),
        latent_nll_ci=nll_ci,
        latent_ppl=stats.latent_ppl(scores.latent_nll, scores.latent_steps),
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


def compare(reference: Scores, candidate: Scores, *, n_bootstrap: int, n_permutations: int,
            level: float, seed: int) -> tuple[Comparison, Comparison]:
    """Candidate against reference on the per-document mean Latent NLL and on the set-level Latent PPL:
    each a difference (candidate minus reference), a bootstrap CI of it (each set resampled on its own)
    and a permutation p-value of the same statistic (the PPL's on its log, sum T / sum M).

    Undefined (``NaN``) unless both sets have at least two documents.
    """
    if reference.n < 2 or candidate.n < 2:
        both = reference.n and candidate.n
        diff = float(candidate.latent_nll.mean() - reference.latent_nll.mean()) if both else float("nan")
        ppl_diff = (stats.latent_ppl(candidate.latent_nll, candidate.latent_steps)
                    - stats.latent_ppl(reference.latent_nll, reference.latent_steps)) if both else float("nan")
        return (Comparison(diff, _NAN_PAIR, float("nan")),
                Comparison(ppl_diff, _NAN_PAIR, float("nan"), statistic="latent_ppl"))
    ref_rows = stats.document_rows(reference.latent_nll, reference.latent_steps)
    cand_rows = stats.document_rows(candidate.latent_nll, candidate.latent_steps)
    mean_test, ppl_test = stats.permutation_tests(ref_rows, cand_rows, [stats.MEAN, stats.LOG_LATENT_PPL],
                                                  n_permutations=n_permutations, seed=seed)
    mean_ci, ppl_ci = stats.bootstrap_difference_cis(ref_rows, cand_rows, [stats.MEAN, stats.LATENT_PPL],
                                                     n_resamples=n_bootstrap, level=level, seed=seed + 1)
    ppl_diff = (stats.latent_ppl(candidate.latent_nll, candidate.latent_steps)
                - stats.latent_ppl(reference.latent_nll, reference.latent_steps))
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


OUTLIER_SCORES = ("length", "plain")
"""What outlier p-values compare a document with: reference documents of similar length, or all of them."""


def word_counts(docs: Sequence[Document], ids: Sequence[str]) -> np.ndarray:
    """Each scored document's word count (whitespace tokens of its text), in the order of ``ids``."""
    count = {d.id: len(d.text.split()) for d in docs}
    return np.array([count[i] for i in ids], dtype=np.int64)


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
    ref_scores = critic.score(reference, progress=progress, seed=seed)
    if ref_scores.n == 0:
        raise ValueError("no reference document could be projected: "
                         + "; ".join(f"{k}: {v}" for k, v in list(ref_scores.skipped.items())[:5]))
    statistics = tuple(critic.outlier_statistics)
    ref_columns = _outlier_columns(ref_scores, statistics)
    ref_words = word_counts(reference, ref_scores.doc_ids)
    kwargs = dict(n_bootstrap=n_bootstrap, level=level, seed=seed, min_documents=min_documents,
                  outlier_score=outlier_score, size_model=critic.size_model, statistics=statistics)
    ref_result = summarize(reference_name, ref_scores, words=ref_words, **kwargs)
    if ref_scores.n < min_documents:
        ref_result.warnings.append("outlier p-values are against fewer than "
                                   f"{min_documents} reference documents")
    results = {}
    for name, docs in candidates.items():
        scores = critic.score(docs, progress=progress, seed=seed)
        result = summarize(name, scores, reference_columns=ref_columns, words=word_counts(docs, scores.doc_ids),
                           reference_words=ref_words, **kwargs)
        result.comparison, result.ppl_comparison = compare(ref_scores, scores, n_bootstrap=n_bootstrap,
                                                           n_permutations=n_permutations, level=level, seed=seed)
        results[name] = result
    paths = dict(paths or {})
    inputs = [{"name": name, "path": str(paths[name]) if name in paths else None,
               "sha256": documents_sha256(docs), "n_documents": len(docs)}
              for name, docs in {reference_name: reference, **candidates}.items()]
    config = {"n_bootstrap": n_bootstrap, "n_permutations": n_permutations, "level": level, "seed": seed,
              "outlier_score": outlier_score, "size_model": critic.size_model, "outlier_statistics": list(statistics),
              "min_documents": min_documents, "latent_nll_estimator": ref_scores.estimator}
    try:
        state_sha256 = critic.state_sha256()
    except NotImplementedError:  # a critic without save support has no state hash
        state_sha256 = None
    about = {"name": critic.name, "params": critic.get_params(), "state_sha256": state_sha256,
             "headline": critic.headline}
    if critic.fit_warnings():
        about["warnings"] = critic.fit_warnings()
    return CriticismResult(critic=about, reference=ref_result, candidates=results, config=config, inputs=inputs)
