"""The use cases, each written once: fit a critic, read the sets, criticise them with several critics.

Every entry point calls these and writes none of them out again: the commands (``critic fit``, ``critic
compare``, ``critic report``, ``critic outliers``), ``critic run`` configs (the ``report`` runner,
:mod:`critic.report_runner`) and the studies (:class:`critic.study.Pipeline`); all of them write their report
with the one writer, :func:`critic.report.write_report`.  So the same inputs and settings give the same
``report.md`` and ``index.html`` whichever entry point wrote them.  The settings of a criticism are declared
once, in :class:`critic.settings.CriticismSettings`.

This module imports the scoring stack (torch) only inside the functions that score, so a command's ``--help``
stays fast.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .inputs import ReadReport, expand_lm_eval_outputs, lm_eval_output, read_documents
from .settings import CriticismSettings

if TYPE_CHECKING:  # annotations only
    from .critic import Critic
    from .document import Document
    from .inputs import InputOptions
    from .panel import PanelResult

__all__ = ["fit_critic", "read_set", "read_sets", "criticise"]


# ------------------------------------------------------------------ fit
def fit_critic(critic: Critic, train: Sequence[Document], valid: Sequence[Document] | None = None, *,
               calibration_folds: int | None = None, seed: int = 0, log: Callable[[str], None] | None = None,
               fitted: bool = False) -> Critic:
    """Fit ``critic`` on ``train`` (``valid``: the documents of its held-out choices), then keep the scores of real
    documents it was not fitted on for outlier p-values (:meth:`Critic.calibrate`, cross-fitted in
    ``calibration_folds`` folds, default the critic's own).  ``fitted``: the critic was fitted already (by a seed
    check), calibrate it only.  Returns the critic, ready to save."""
    if not fitted:
        critic.fit(train, validation=valid)
    return critic.calibrate(train, valid, folds=calibration_folds, seed=seed, log=log)


# ------------------------------------------------------------------ read
def read_sets(reference: str | Path, candidates: Mapping[str, str | Path], options: InputOptions, *,
              log: Callable[[str], None], option: str = "--sections"
              ) -> tuple[list[Document], dict[str, list[Document]], dict[str, dict]]:
    """The reference (its format always detected) and the candidate sets (read as ``options`` say), what the
    reader did with each (``reads``, by set name; said through ``log`` when worth saying), after checking that
    the candidates can be compared with the reference (:func:`~critic.criticism.require_comparable_shapes`;
    ``option`` names how ``sections`` is given).  A candidate that is an lm-eval ``--output_path`` folder is a set
    per samples file, ``NAME/MODEL/TASK`` (:func:`~critic.inputs.expand_lm_eval_outputs`).  Returns
    ``(reference, candidates, reads)``."""
    from .criticism import require_comparable_shapes

    reads: dict[str, dict] = {}
    ref_docs, reads["reference"] = read_set(reference, dataclasses.replace(options, format="auto"), "reference",
                                            log=log)
    sets = {}
    for name, path in expand_lm_eval_outputs(candidates, options, log=log).items():
        sets[name], reads[name] = read_set(path, options, name, log=log)
    require_comparable_shapes(ref_docs, sets, sections=options.sections, option=option)
    return ref_docs, sets, reads


def read_set(path: str | Path, options: InputOptions, name: str | None = None, *,
             log: Callable[[str], None]) -> tuple[list[Document], dict[str, Any]]:
    """The documents at ``path`` and what the reader did (said through ``log`` when it skipped lines, made up
    ids, split documents at headings or has a warning: :meth:`~critic.inputs.ReadReport.worth_saying`).  An lm-eval
    ``--output_path`` folder holding one samples file (of its latest run) is that file; one holding several is a
    :class:`~critic.document.DocumentError` naming them."""
    output = lm_eval_output(path) if options.format in ("auto", "lm-eval") else None
    if output is not None:
        if len(output.sets) > 1:
            raise output.not_one_set()
        if output.note():
            log(output.note())
        (path,) = output.sets.values()
    report = ReadReport()
    docs = read_documents(path, options, name=name, report=report)
    if report.worth_saying():
        log(report.summary())
    return docs, {"path": str(path), **report.to_dict()}


# ------------------------------------------------------------------ criticise
def criticise(critics: Mapping[str, Critic], reference: Sequence[Document],
              candidates: Mapping[str, Sequence[Document]], settings: CriticismSettings, *, seed: int = 0,
              reference_name: str = "reference", reads: Mapping[str, dict] | None = None,
              paths: Mapping[str, str | Path] | None = None, word_ppl: Mapping[str, float] | None = None,
              mauve: bool = False, progress: bool = False) -> PanelResult:
    """Each critic (label -> fitted critic) over the reference and the candidate sets
    (:func:`~critic.panel.criticize_panel`: set statistics with CIs, two-sample tests, outlier p-values, flags
    with the flagging critics' reasons), each critic's ``settings.top`` least likely documents explained too (the
    report lists them), then the statistics beside the Latent NLL (:func:`~critic.panel.add_set_statistics`:
    each critic's own, ``word_ppl`` and MAUVE)."""
    from .panel import add_set_statistics, criticize_panel, explain_outliers

    panel = criticize_panel(critics, reference, candidates, reads=reads, top=settings.top, reference_name=reference_name,
                            paths=paths, seed=seed, progress=progress, **settings.flag_rule, **settings.resampling())
    documents = {reference_name: reference, **candidates}
    for label, critic in critics.items():
        explain_outliers(panel.results[label], critic, documents, top=settings.top)
    add_set_statistics(panel, reference, candidates, critics=critics, word_ppl=word_ppl, mauve=mauve, seed=seed)
    return panel
