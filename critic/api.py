"""The Python API: candidate sets criticised against a reference by several critics in one call, as ``critic
report`` does, in the shape of scikit-learn and HF ``evaluate``::

    import critic

    result = critic.compare("data/manpages/test.jsonl", {"mymodel": texts, "other": frame},
                            critics=["models/sections", critic.get_critic("lda")(num_topics=10)],
                            train="data/manpages/train.jsonl", sections="markdown")
    print(result)                    # each critic's table (a notebook shows the report's summary table)
    result.summary()                 # DataFrame: a row per critic and set (results.json's statistics)
    result.to_pandas()               # DataFrame: a row per document and critic (documents.jsonl's rows)
    result.save("reports/mymodel")   # the report folder critic report writes

:func:`compare` reads each set (:func:`read_input`), fits or loads the critics (:func:`fit_or_load`) and criticises
with :func:`critic.workflows.criticise`, the code of ``critic report``, so the same texts and settings give the same
numbers.  A set is a path (a file or folder, read as the command line reads it), or held in memory: a list of
strings (a generation each), of dicts (records with the text and id fields) or of
:class:`~critic.document.Document` s, a pandas DataFrame, or anything with ``to_pandas()`` (a ``datasets.Dataset``,
a ``pyarrow.Table``).  Text becomes sections as ``sections`` says (:func:`critic.inputs.split_sections`); a
generation without an id gets ``NAME:N`` (``N``: its position from 1, as a line of a JSONL file) and an empty one
is skipped and counted, as the reader does (:mod:`critic.inputs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

from .config import check_call
from .critic import Critic
from .criticism import require_comparable_shapes
from .document import Document, DocumentError
from .inputs import InputOptions, ReadReport, DocumentBuilder, expand_lm_eval_outputs
from .panel import PanelResult
from .progress import shown as progress_shown
from .settings import CriticismSettings
from .terminal import get_logger
from .workflows import criticise, fit_critic, read_set

__all__ = ["compare", "Criticism", "read_input", "read_records", "fit_or_load", "say"]

Input = Union[str, os.PathLike, Iterable[Any]]
"""A set of documents: a path, an iterable of strings, dicts or Documents, or a DataFrame (or what has
``to_pandas()``)."""

CriticSpec = Union[Critic, str, os.PathLike]
"""A critic: a fitted :class:`Critic` (used as it is), an unfitted one (fitted on ``train``), a saved critic's folder
(loaded), or a registered critic's name (made with its defaults and fitted on ``train``)."""


_log = get_logger(__name__)


def say(message: str) -> None:
    """What the reader and the fits report (the default ``log``), logged at INFO: ``critic: message`` on stderr
    (:mod:`critic.terminal`)."""
    _log.info("%s", message)


@dataclass(repr=False)
class Criticism(PanelResult):
    """A :class:`~critic.panel.PanelResult` (``to_pandas()``, ``summary()``, ``flagged()``, printed as tables) that
    keeps what it was made from, so that it saves as ``critic report`` does: each set's documents (the text of
    the flagged documents' pages), the fitted critics (their figures and document views) by label, and the folder
    each saved critic was loaded from."""

    documents: dict[str, list[Document]] = field(default_factory=dict, compare=False)
    critics: dict[str, Critic] = field(default_factory=dict, compare=False)
    critic_dirs: dict[str, Path] = field(default_factory=dict, compare=False)

    def save(self, folder: str | Path) -> dict[str, Path]:
        """Write the report folder ``critic report`` writes (``results.json``, ``documents.jsonl``, ``report.md``,
        ``index.html``: :func:`critic.report.write_report`); returns its files by kind.  An existing folder is
        replaced only when it is a report or empty."""
        from .report import write_report

        return write_report(self, folder, documents=self.documents, critics=self.critics,
                            extra={"critic_dirs": {label: str(path) for label, path in self.critic_dirs.items()}})


def compare(reference: Input, candidates: Mapping[str, Input],
            critics: Mapping[str, CriticSpec] | Sequence[CriticSpec] | CriticSpec, *,
            train: Input | None = None, valid: Input | None = None, calibration_folds: int | None = None,
            sections: str = "auto", text_field: str = "text", id_field: str = "id", format: str = "auto",
            separator: str | None = None, lm_eval_text: str = "continuation", seed: int = 0, device: str = "cpu",
            word_ppl: Mapping[str, float] | None = None, mauve: bool = False, progress: bool = False,
            log: Callable[[str], None] | None = say, **settings: Any) -> Criticism:
    """Criticise each candidate set (name -> set) against the ``reference`` with every critic, as ``critic report
    --reference REFERENCE --candidate NAME=SET --critic ...`` does; returns the panel's result.

    ``critics``: a critic, a list of them (labelled by a saved critic's folder name, else by the critic's name) or
    label -> critic (see :data:`CriticSpec` and :func:`fit_or_load`); those to fit are fitted on ``train`` (``valid``:
    their held-out documents) with ``calibration_folds`` (default the critic's own), as ``critic fit`` does.
    ``sections``, ``text_field``, ``id_field``, ``format``, ``separator`` and ``lm_eval_text`` say how the sets
    are read (:class:`~critic.inputs.InputOptions`; the reference's format is always detected); ``settings`` are
    the criticism's (:class:`~critic.settings.CriticismSettings`: ``top``, ``n_bootstrap``, ``n_permutations``,
    ``outlier_score``, ``fdr``, ``flag_level``), checked before any work.  ``word_ppl`` (candidate -> word
    perplexity) and ``mauve`` add those statistics; ``progress`` shows progress bars; ``log`` (``None``: quiet)
    gets what the reader skipped and how the critics were fitted."""
    check_call(CriticismSettings, settings, where="compare()", owner="criticism")  # a name it does not know, too
    criticism = CriticismSettings(**settings)
    options = InputOptions(format=format, text_field=text_field, id_field=id_field, sections=sections,
                           separator=separator, lm_eval_text=lm_eval_text)
    log = log or (lambda message: None)
    _check_names(candidates, word_ppl or {})
    sets = {"reference": reference, **_candidate_sets(candidates, options, log)}
    documents, reads = {}, {}
    for name, data in sets.items():
        documents[name], reads[name] = read_input(
            data, dataclasses.replace(options, format="auto") if name == "reference" else options, name, log=log)
    reference_documents = documents["reference"]
    candidate_documents = {name: docs for name, docs in documents.items() if name != "reference"}
    require_comparable_shapes(reference_documents, candidate_documents, sections=sections, option="sections=")
    with progress_shown() if progress else contextlib.nullcontext():
        fitted, dirs = fit_or_load(critics, train=train, valid=valid, options=options,
                                   calibration_folds=calibration_folds, seed=seed, device=device, log=log)
    panel = criticise(fitted, reference_documents, candidate_documents, criticism, seed=seed, reads=reads,
                      paths={name: data for name, data in sets.items() if _is_path(data)}, word_ppl=word_ppl,
                      mauve=mauve, progress=progress)
    return Criticism(**{f.name: getattr(panel, f.name) for f in dataclasses.fields(PanelResult)},
                     documents=documents, critics=fitted, critic_dirs=dirs)


def _check_names(candidates: Mapping[str, Input], word_ppl: Mapping[str, float]) -> None:
    """The candidates' names (text, not ``reference``, at least one) and ``word_ppl``'s (candidates'); a
    ``ValueError`` naming the name."""
    if not candidates:
        raise ValueError("candidates: give at least one set to criticise, e.g. {'mymodel': texts}")
    for name in candidates:
        if not isinstance(name, str) or not name:
            raise ValueError(f"candidates: a set's name must be a non-empty string, got {name!r}")
        if name == "reference":
            raise ValueError("candidates: 'reference' is the reference set's name; choose another")
    for name in word_ppl:
        if name not in candidates:
            raise ValueError(f"word_ppl: no candidate set {name!r} (the candidates: {', '.join(candidates)})")


def _candidate_sets(candidates: Mapping[str, Input], options: InputOptions, log: Callable[[str], None]
                    ) -> dict[str, Input]:
    """The candidate sets by name, as ``critic report`` takes them: an lm-eval ``--output_path`` folder is a set per
    samples file, ``NAME/MODEL/TASK`` (:func:`critic.inputs.expand_lm_eval_outputs`); a ``ValueError`` for a name
    given twice."""
    sets: dict[str, Input] = {}
    for name, data in candidates.items():
        for part, value in (expand_lm_eval_outputs({name: data}, options, log=log) if _is_path(data)
                            else {name: data}).items():
            if part in sets:
                raise ValueError(f"candidates: the set name {part!r} is given twice")
            sets[part] = value
    return sets


def _is_path(data: Any) -> bool:
    return isinstance(data, (str, os.PathLike))


# ------------------------------------------------------------------ reading
def read_input(data: Input, options: InputOptions, name: str | None, *, log: Callable[[str], None]
               ) -> tuple[list[Document], dict[str, Any]]:
    """The documents of one set and what the reader did (a ``results.json`` ``reads`` entry): a path read as the
    command line reads it (:func:`critic.workflows.read_set`), anything else held in memory (:func:`read_records`).
    ``name``: the NAME of made-up ids (``None``: a file's stem, as ``critic fit`` names its ``--train``; a set in
    memory: ``documents``)."""
    if _is_path(data):
        return read_set(data, options, name, log=log)
    return read_records(data, options, name or "documents", log=log)


def read_records(data: Any, options: InputOptions, name: str, *, log: Callable[[str], None] | None = None
                 ) -> tuple[list[Document], dict[str, Any]]:
    """The documents of a set held in memory, each item made as the reader makes a record of a file
    (:mod:`critic.inputs`): a string is a generation, a dict a record (``options.text_field``, ``options.id_field``,
    its other keys metadata), a :class:`Document` is kept as it is; a DataFrame's rows are records (anything with
    ``to_pandas()`` is taken as its DataFrame).  A generation without an id gets ``NAME:N`` (``N``: its position
    from 1); an empty one is skipped and counted, and said through ``log``.  Returns the documents and what the
    read did (:meth:`~critic.inputs.ReadReport.to_dict`, its path ``NAME <TYPE>``, its format ``in-memory``);
    :class:`DocumentError` naming the set and item (or row) for bad input, and for a set that gives no document."""
    rows, unit = _rows(data, options, name)
    report = ReadReport(path=f"{name} <{type(data).__name__}>", format="in-memory", name=name)
    build = DocumentBuilder(name, options, report)
    documents = []
    for number, item in enumerate(rows, start=1):
        doc = _document(build, f"{name} {unit} {number}", number, item)
        if doc is not None:
            documents.append(doc)
    report.n_read = len(documents)
    report.finish()
    if log is not None and (report.skipped or report.warnings):
        log("; ".join([f"{report.path}: {report.n_read} documents", report.skips(),
                       *(f"warning: {warning}" for warning in report.warnings)]))
    return documents, report.to_dict()


def _rows(data: Any, options: InputOptions, name: str) -> tuple[Iterable[Any], str]:
    """The items of a set held in memory and what one is called (``row`` of a DataFrame, else ``item``); a
    DataFrame without the text column is a :class:`DocumentError` naming the column and the columns there are."""
    if hasattr(data, "to_pandas"):  # datasets.Dataset, pyarrow.Table, polars.DataFrame
        data = data.to_pandas()
    if hasattr(data, "columns") and hasattr(data, "to_dict"):  # a pandas DataFrame
        columns = [str(c) for c in data.columns]
        if options.text_field not in data.columns:
            raise DocumentError(f"{name}: the DataFrame has no column {options.text_field!r} (columns: "
                                f"{', '.join(columns) or 'none'}); name the column holding the generations with "
                                "text_field=")
        return data.to_dict("records"), "row"
    if isinstance(data, (Mapping, bytes)) or not isinstance(data, Iterable):
        raise DocumentError(f"{name}: a {type(data).__name__} is no set of documents: give a path, a list of "
                            "strings, dicts or Documents, or a DataFrame")
    return data, "item"


def _document(build: DocumentBuilder, where: str, number: int, item: Any) -> Document | None:
    """The document of one item of a set held in memory (``None`` when it is skipped)."""
    if isinstance(item, str):
        return build.document(where, number, item)
    if isinstance(item, Document):
        build.ids.claim(item.id, where)
        return item
    if isinstance(item, Mapping):
        if build.options.text_field not in item:
            raise DocumentError(f"{where}: no {build.options.text_field!r} key (keys: {', '.join(map(str, item))}); "
                                "name the key holding the generation with text_field=")
        return build.record(where, number, dict(item))
    raise DocumentError(f"{where}: a {type(item).__name__}: expected a string (a generation), a dict with "
                        f"{build.options.text_field!r} or a Document")


# ------------------------------------------------------------------ critics
def fit_or_load(critics: Mapping[str, CriticSpec] | Sequence[CriticSpec] | CriticSpec, *, train: Input | None,
                valid: Input | None = None, options: InputOptions = InputOptions(),
                calibration_folds: int | None = None, seed: int = 0, device: str = "cpu",
                log: Callable[[str], None] = say) -> tuple[dict[str, Critic], dict[str, Path]]:
    """Each critic ready to criticise, by label, and the folder of each one loaded (label -> folder).

    A fitted :class:`Critic` is used as it is; an unfitted one is fitted on ``train`` and calibrated
    (:func:`critic.workflows.fit_critic`: ``valid``, ``calibration_folds`` and ``seed`` as ``critic fit`` takes
    them); a path, or a string naming an existing path, is a saved critic's folder, loaded onto ``device``; another
    string is a registered critic's name, made with its default settings and the run's ``seed`` (as ``critic fit
    NAME --seed SEED``) on ``device`` and fitted.  A list's labels are the folders' names and the critics' names; a
    label used twice is a ``ValueError`` asking for label -> critic."""
    named = (list(critics.items()) if isinstance(critics, Mapping)
             else [(None, c) for c in (critics if isinstance(critics, (list, tuple)) else [critics])])
    if not named:
        raise ValueError("critics: give at least one critic")
    documents: dict[str, list[Document]] = {}

    def documents_of(which: str, data: Input | None) -> list[Document] | None:
        """``train`` or ``valid`` read once, when a critic is to be fitted (a file's made-up ids named by its stem,
        as ``critic fit`` names them: they decide the calibration's folds)."""
        if data is not None and which not in documents:
            documents[which] = read_input(data, options, None if _is_path(data) else which, log=log)[0]
        return documents.get(which)

    out: dict[str, Critic] = {}
    dirs: dict[str, Path] = {}
    for label, spec in named:
        folder = _folder(spec)
        critic = Critic.load(folder, device=device) if folder is not None else _critic(spec, seed, device)
        label = label if label is not None else folder.name if folder is not None else critic.name
        if label in out:
            raise ValueError(f"critics: the label {label!r} is used twice; name them: critics={{LABEL: critic, ...}}")
        if not critic.is_fitted:
            fit_on = documents_of("train", train)
            if fit_on is None:
                raise ValueError(f"critics: {label!r} is not fitted: give train= (real documents to fit it on)")
            log(f"fitting {label} on {len(fit_on)} documents")
            fit_critic(critic, fit_on, documents_of("valid", valid), calibration_folds=calibration_folds, seed=seed,
                       log=lambda message, label=label: log(f"{label}: {message}"))
            log(f"fitted {label}: {critic.fit_summary(len(fit_on))}; calibration: {critic.calibration.summary()}")
            for warning in critic.fit_warnings():
                log(f"{label}: warning: {warning}")
        out[label] = critic
        if folder is not None:
            dirs[label] = folder
    return out, dirs


def _folder(spec: CriticSpec) -> Path | None:
    """The saved critic's folder ``spec`` names (a path, or a string naming an existing path), else ``None``."""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and os.path.exists(spec)):
        return Path(spec)
    return None


def _critic(spec: CriticSpec, seed: int, device: str) -> Critic:
    """The critic ``spec`` is, when it names no folder: a :class:`Critic` itself, or a new one of the registered
    name with the run's seed; a ``ValueError`` for a string that names neither a folder nor a critic."""
    if isinstance(spec, Critic):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"critics: a {type(spec).__name__} is no critic: give a Critic, a saved critic's folder or "
                         "a critic's name")
    from .config import seeded_params
    from .registry import get_critic

    try:
        cls = get_critic(spec)
    except KeyError as exc:
        raise ValueError(f"critics: {spec!r} is no saved critic's folder (no such path) and {exc.args[0]}") from None
    return cls(**seeded_params(cls, {}, seed)).to(device)
