"""The :class:`Critic` base class: a prior ``P_c(z)`` and a posterior projection ``P_c(z|x)``.

A critic is fitted on real text, then projects and scores any text.  A
subclass implements

- :meth:`Critic.fit` -- learn the prior (and projector) from real documents;
- :meth:`Critic.project` -- ONE call per batch: the batched posterior
  ``P_c(z|x)``, the latent steps ``M(x)``, the documents that failed during
  projection (with why) and per-document extras (a :class:`Projection`);
- :meth:`Critic.prior` -- ``P_c(z)``: a torch ``Distribution`` or anything
  with ``log_prob`` (:class:`critic.latent.Prior`);
- ``_get_state`` / ``_set_state`` and, for critics that keep files of their
  own (a KenLM binary, a gensim model), ``_save_files`` / ``_load_files``;
- ``_move(device)`` when it holds tensors or modules.

The Latent NLL

    T_c(x) = -E_{z ~ P_c(z|x)} log P_c(z) = H(P_c(z|x), P_c(z))

comes from :func:`critic.latent.cross_entropy` (exact where a formula is
registered) or else from :func:`critic.latent.monte_carlo_cross_entropy` with
``mc_samples`` samples, whose per-document standard error travels with it.

Conventions follow scikit-learn: ``__init__`` only stores settings, ``fit``
returns ``self``, learned state ends in ``_``.  The device is a runtime
choice (:meth:`Critic.to`), never a setting and never saved.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from .calibration import Calibration, cross_fit_calibration
from .document import Document
from .io import OUTPUT_MARKER, atomic_directory, atomic_write_text, check_replaceable, sha256_bytes, sha256_file
from .latent import Prior, cross_entropy, monte_carlo_cross_entropy
from .saved import FORMAT_VERSION, CriticLoadError, check_device_name, critic_class, read_meta

__all__ = ["Critic", "Projection", "LatentNLL", "Scores", "NotFittedError", "CriticLoadError", "describe_skips",
           "resolve_device", "FORMAT_VERSION", "MAX_REASONS"]

MAX_REASONS = 5
"""The most lines :meth:`Critic.reasons` may give for one document."""


class NotFittedError(RuntimeError):
    """Raised when a critic is used before :meth:`Critic.fit`."""


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device named: ``cpu`` or ``cuda[:i]``; an error, never a fallback, if absent."""
    dev = torch.device(check_device_name(str(device) if isinstance(device, torch.device) else device))
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise RuntimeError(f"device {device!r} was asked for but CUDA is not available here")
        if dev.index is not None and dev.index >= count:
            raise RuntimeError(f"device {device!r} was asked for but only {count} CUDA device(s) exist")
    return dev


@dataclass
class Projection:
    """One batch of documents projected into a critic's latent space.

    ``doc_ids`` are the documents that projected, in input order (``B`` of
    them); ``posterior`` is their batched ``P_c(z|x)`` (batch shape ``(B,)``),
    ``latent_steps`` their ``M(x)`` (shape ``(B,)``).  Every document of the
    batch is either in ``doc_ids`` or in ``failures`` (id -> why it could not
    be projected).  ``extras`` maps a name to ``B`` per-document values that
    reports and plots may use (MAP latents, topic weights); ``unknown`` counts,
    per projected document, latent values mapped to an unknown state.
    """

    doc_ids: list[str]
    posterior: Any
    latent_steps: torch.Tensor
    failures: dict[str, str] = field(default_factory=dict)
    extras: dict[str, Sequence[Any]] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.doc_ids)


@dataclass
class LatentNLL:
    """``T(x)`` of a projection: values ``(B,)`` float64, the Monte-Carlo standard
    error ``(B,)`` (``None`` when exact) and how it was computed."""

    value: torch.Tensor
    stderr: torch.Tensor | None
    estimator: str


@dataclass
class Scores:
    """Per-document Latent NLL ``T(x)`` and latent steps ``M(x)`` of one set.

    ``doc_ids``, ``latent_nll``, ``latent_steps`` (and ``latent_nll_stderr``
    when Monte Carlo) cover the projected documents, in input order;
    ``extras`` holds the projections' per-document extras, aligned with them.
    ``skipped`` maps each document that could not be scored to the reason
    (from :meth:`Critic.check`, from projection, or a non-finite ``T(x)``);
    ``unknown`` counts latent values mapped to an unknown state per document.
    """

    doc_ids: list[str]
    latent_nll: np.ndarray
    latent_steps: np.ndarray
    skipped: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    estimator: str = "exact"
    latent_nll_stderr: np.ndarray | None = None
    extras: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.doc_ids)

    @property
    def n_unknown(self) -> int:
        return int(sum(self.unknown.values()))

    def rows(self) -> np.ndarray:
        """``(T(x), M(x))`` rows, ``(n, 2)`` float64, in the order of the document ids (ties by value): what the
        set statistics, their bootstrap and permutation tests resample, so the same documents read in another
        order give the same numbers."""
        nll = np.asarray(self.latent_nll, dtype=np.float64)
        steps = np.asarray(self.latent_steps, dtype=np.float64)
        order = np.lexsort((steps, nll, np.asarray(self.doc_ids, dtype=str))) if self.n else np.arange(0)
        return np.stack([nll[order], steps[order]], axis=1)


def describe_skips(skipped: Mapping[str, str]) -> str:
    """``"skipped N: REASON (K, e.g. 'ID'), ..."`` for documents that could not be used (id -> why), the most
    common reason first."""
    reasons: dict[str, list[str]] = {}
    for doc_id, why in skipped.items():
        reasons.setdefault(why, []).append(doc_id)
    return f"skipped {len(skipped)}: " + ", ".join(
        f"{why} ({len(ids)}, e.g. {ids[0]!r})" for why, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])))


def _tensor_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _state_digest(meta: dict[str, Any], tensors: dict[str, torch.Tensor], files: dict[str, str]) -> str:
    """SHA-256 of what defines a fitted critic: name, params, state, calibration, tensors and own files."""
    head = json.dumps({k: meta[k] for k in ("critic", "params", "state", "calibration") if k in meta}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    parts = [head.encode("utf-8")]
    for name in sorted(tensors):
        t = tensors[name]
        parts.append(f"\0{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        parts.append(_tensor_bytes(t))
    for name in sorted(files):
        parts.append(f"\0file\0{name}\0{files[name]}".encode())
    return sha256_bytes(b"".join(parts))


class Critic:
    """Base class of all critics.  See the module docstring for the contract.

    Class attributes a subclass may set: ``name`` (registry name, set by
    :func:`critic.registry.register_critic`), ``mc_samples`` (samples of the
    Monte-Carlo fallback), ``batch_size`` (documents per :meth:`project`),
    ``chunk_documents`` (about how many documents a streamed chunk of ``critic score`` holds, in whole
    batches: the unit written, resumed, sharded and sent to a Dask worker; a slow critic lowers it so that a
    chunk is seconds of work and a modest set still spreads over the workers), ``headline`` (the set statistic that fits the latent: ``"latent_ppl"`` for
    discrete chains, ``"latent_nll"`` for continuous latents, where a PPL over
    ``M(x) = 1`` means nothing), ``needs`` (what input it needs, for users), ``outlier_statistics`` and
    ``size_model``.

    Optional hooks for the reports: :meth:`report_figures`, :meth:`set_statistics`, :meth:`document_view` (a
    flagged document's page) and :meth:`reasons` (why a flagged document is unlikely, in a few plain lines:
    shown in the report's flag table, on the document's page and by ``critic outliers``, and kept in
    ``documents.jsonl``).
    """

    name: str = "critic"
    mc_samples: int = 1000
    batch_size: int = 256
    chunk_documents: int = 8192
    headline: str = "latent_ppl"
    needs: str = "documents"
    outlier_statistics: tuple[str, ...] = ()
    """Per-document statistics beside ``T(x)/M(x)`` that the outlier p-value combines with it: names of
    :attr:`Projection.extras` whose values are finite numbers, larger meaning less typical.  For what a
    document's latent projection cannot show, such as the share of a document's words a topic model has never
    seen (its posterior then stays near the prior and ``T(x)`` looks typical).  Each is ranked among real
    documents like ``T/M``; the outlier p-value combines the ranks (:mod:`critic.conformal`).  Default: none (the
    outlier p-value is ``T/M``'s own)."""
    size_model: str = "bins"
    """How the length-matched outlier p-values (``outlier_score="length"``) take a document's length into account
    for this critic's statistics: ``"bins"`` (:func:`critic.conformal.length_groups`: against the real documents
    of the same length quantile group; any statistic, discrete ones included) or ``"location-scale"``
    (:func:`critic.conformal.location_scale_residuals`: a residual under a location-scale model of the statistic
    on log length, against all the real documents; for continuous statistics, whose law given the length shifts
    and scales).  Measured per critic in docs/outliers.md."""
    calibration_folds: int = 5
    """Folds of the cross-fitting :meth:`calibrate` does by default (:mod:`critic.calibration`): ``K`` more fits,
    each on ``(K - 1) / K`` of the training documents, to score every training document with a critic that
    did not see it.  Cheap critics keep 5; a critic whose fit takes minutes sets 0 (its calibration is then its
    validation documents) and says in its docs how to cross-fit it (``critic fit --calibration-folds K``)."""

    def __init_subclass__(cls, **kwargs):
        """A subclass's ``fit`` forgets the hashes of the critic's own files first (see
        :meth:`_own_files_sha256`): refitting may change files that the JSON state does not show; and it forgets
        the calibration of an earlier fit (:meth:`calibrate`), which scored documents with that fit."""
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_forgets_files", False):
            @functools.wraps(fit)
            def fit_forgetting_files(self, *args, **kw):
                self.__dict__.pop("_files_sha256", None)
                self.__dict__.pop("calibration_", None)
                return fit(self, *args, **kw)

            fit_forgetting_files._forgets_files = True
            cls.fit = fit_forgetting_files

    # -------------------------------------------------------------- to implement
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "Critic":
        raise NotImplementedError

    def project(self, docs: Sequence[Document]) -> Projection:
        """Project a batch: posterior, ``M(x)``, failures and extras (see :class:`Projection`)."""
        raise NotImplementedError

    def prior(self) -> Prior:
        """``P_c(z)``: a torch ``Distribution`` or any :class:`~critic.latent.Prior`."""
        raise NotImplementedError

    def check(self, doc: Document) -> str | None:
        """Why ``doc`` cannot be projected (``None`` when it can): a cheap test before projection."""
        return None

    def training_used(self) -> int | None:
        """How many training documents the fit used, for a critic that skips some (``None``: it skips none or
        does not say).  Such a critic keeps ``training_skipped_`` (id -> why) and saves both."""
        return None

    def fit_summary(self, n_documents: int) -> str:
        """What a fit used: ``"used U of N training documents"``, and the ones it skipped by reason, from the
        ``training_skipped_`` (id -> why) a critic that skips training documents keeps (and saves)."""
        skipped = getattr(self, "training_skipped_", None) or {}
        text = f"used {n_documents - len(skipped)} of {n_documents} training documents"
        return text + (f"; {describe_skips(skipped)}" if skipped else "")

    def fit_warnings(self) -> list[str]:
        """What makes this fitted critic degenerate, for ``fit`` and every result that uses it (e.g. a
        prior fitted on a single latent type, which cannot tell documents apart).  The base class warns when
        the fit skipped more training documents than it used (:meth:`training_used`); a subclass adds its
        own to ``super().fit_warnings()``."""
        skipped, used = getattr(self, "training_skipped_", None) or {}, self.training_used()
        if used is None or len(skipped) <= used:
            return []
        why, example = next(iter(skipped.values())), next(iter(skipped))
        return [f"fitted on {used} of {used + len(skipped)} training documents: {len(skipped)} were skipped (e.g. "
                f"{example!r}: {why}), so the prior describes a minority of the text it was given"]

    def latent_components(self) -> np.ndarray | None:
        """Parameters of the latent states that two fits may learn in another order, one row per state
        (``(K, V)``: the topics' word distributions), for matching fits of different seeds
        (:mod:`critic.seeds`).  Default: ``None`` (states named by the data, as section types, need no
        matching)."""
        return None

    def calibrate(self, train: Sequence[Document], validation: Sequence[Document] | None = None, *,
                  folds: int | None = None, seed: int = 0, log=None) -> "Critic":
        """Keep the scores of real documents this fitted critic was not fitted on, for outlier p-values
        (:mod:`critic.calibration`): ``train`` cross-fitted in ``folds`` folds (default
        :attr:`calibration_folds`; 0: none) and the ``validation`` documents.  Call it after :meth:`fit` with the
        same documents; saved with the critic.  Returns self."""
        self._require_fitted()
        self.calibration_ = cross_fit_calibration(self, train, validation,
                                                  folds=self.calibration_folds if folds is None else folds,
                                                  seed=seed, log=log)
        return self

    def fold_params(self, share: float) -> dict[str, Any]:
        """The settings of a critic that cross-fitting fits on a fold's complement, ``share`` of the training
        documents (:meth:`calibrate`): by default this critic's own.  A critic whose scores depend on how much it
        was trained on returns settings that put a fold's scores on the full fit's scale (an add-delta smoothed
        count model scales delta by ``share``: an unseen event's probability ``delta / (N + delta V)`` is then the
        full fit's).  Calibration documents scored on another scale than new documents give outlier p-values
        that are too small (measured in docs/outliers.md)."""
        return self.get_params()

    @property
    def calibration(self) -> Calibration | None:
        """The calibration documents kept by :meth:`calibrate` (``None`` before)."""
        return getattr(self, "calibration_", None)

    # -------------------------------------------------------------- optional: why a document is unlikely
    def reasons(self, result: Any, document: Document | None) -> list[str]:
        """Why this critic finds a document unlikely: at most :data:`MAX_REASONS` short plain-text lines, most
        important first, each naming what in the document's latent the prior finds improbable and by how much
        (the least likely section transitions ``"see also -> name: P = 0.003"``, the chain windows with the
        lowest ``log P``, the topics farthest from the prior).  ``result`` is the document's
        :class:`~critic.results.DocumentResult` (its ``extras`` hold the projection's per-document values, its
        ``p_values`` which statistic ranks it); ``document`` is the document itself, ``None`` when only the result
        is at hand.  Computed from them and the fitted critic, without projecting again where the extras suffice.
        The reports call it once per flagged document through :meth:`explain`.  Default: none."""
        return []

    def explain(self, result: Any, document: Document | None = None) -> list[str]:
        """:meth:`reasons`, checked: ``document`` (when given) must be the one ``result`` describes, and the
        reasons a list of at most :data:`MAX_REASONS` non-empty one-line strings (else a ``ValueError`` or
        ``TypeError`` naming the critic)."""
        where = f"{type(self).__name__}.reasons"
        if document is not None and document.id != result.id:
            raise ValueError(f"{where}: the document {document.id!r} is not the one the result describes "
                             f"({result.id!r})")
        found = self.reasons(result, document)
        if not isinstance(found, (list, tuple)) or not all(isinstance(r, str) for r in found):
            raise TypeError(f"{where} must return a list of strings, got {found!r:.200}")
        bad = next((r for r in found if not r.strip() or "\n" in r or "\r" in r), None)
        if bad is not None:
            raise ValueError(f"{where}: each reason is one non-empty line, got {bad!r:.200}")
        if len(found) > MAX_REASONS:
            raise ValueError(f"{where} gave {len(found)} reasons for {result.id!r}: at most {MAX_REASONS}, most "
                             "important first")
        return list(found)

    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Learned state as (JSON-able dict, named tensors), for :meth:`save`."""
        raise NotImplementedError

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def _save_files(self, directory: Path) -> None:
        """Write the critic's own files (a KenLM binary, a gensim model) into ``directory``."""

    def _load_files(self, directory: Path) -> None:
        """Read back what :meth:`_save_files` wrote (``directory`` is the save directory)."""

    def _move(self, device: torch.device) -> None:
        """Move fitted tensors and modules to ``device`` (called by :meth:`to` once fitted)."""

    # -------------------------------------------------------------- device
    @property
    def device(self) -> torch.device:
        """Where the critic computes: a runtime choice, ``cpu`` unless :meth:`to` said otherwise."""
        return getattr(self, "_device", torch.device("cpu"))

    def to(self, device: str | torch.device) -> "Critic":
        """Compute on ``device`` (``cpu`` or ``cuda[:i]``; absent devices are an error); returns self."""
        dev = resolve_device(device)
        self._device = dev
        if self.is_fitted:
            self._move(dev)
        return self

    # -------------------------------------------------------------- scoring
    def latent_nll(self, projection: Projection, *, seed: int = 0) -> LatentNLL:
        """``T_c(x) = H(P_c(z|x), P_c(z))`` per projected document.

        Exact through the cross-entropy registry where a formula is known for
        the (posterior, prior) pair, else Monte Carlo with ``mc_samples``
        samples (seeded) and its standard error.
        """
        q, p = projection.posterior, self.prior()
        try:
            value = cross_entropy(q, p)
            return LatentNLL(value.detach().to(torch.float64).cpu(), None, "exact")
        except NotImplementedError:
            value, stderr = monte_carlo_cross_entropy(q, p, num_samples=self.mc_samples, seed=seed)
            return LatentNLL(value.detach().to(torch.float64).cpu(), stderr.detach().to(torch.float64).cpu(),
                             f"monte carlo ({self.mc_samples} samples)")

    def score(self, docs: Sequence[Document], *, progress: bool = False, seed: int = 0, first_batch: int = 0,
              observe: Callable[[Projection], None] | None = None) -> Scores:
        """Project and score every document it can; count and give the reason for the others.

        Documents are checked (:meth:`check`), projected in batches of
        ``batch_size`` (one :meth:`project` call each), and ``T(x)`` computed
        per batch, the k-th batch's Monte Carlo seeded ``seed + first_batch + k`` (so a set scored in
        pieces that start on batch boundaries gets the numbers of one call).  A non-finite ``T(x)`` or
        ``M(x)`` is a counted skip with its reason, never a reported number.  ``observe``: given each
        batch's :class:`Projection` as it is made (a view's summary of the set's posteriors,
        :meth:`critic.views.CriticView.posterior_summary`), so that nothing projects the set again.
        """
        self._require_fitted()
        ids = [d.id for d in docs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"document id {dup!r} occurs more than once in the set: ids must be unique")
        kept: list[Document] = []
        skipped: dict[str, str] = {}
        for doc in docs:
            reason = self.check(doc)
            if reason is None:
                kept.append(doc)
            else:
                skipped[doc.id] = reason
        parts: list[tuple[list[str], np.ndarray, np.ndarray, np.ndarray | None, dict]] = []
        unknown: dict[str, int] = {}
        estimator = "exact"
        bar = None
        if progress:  # counts documents (the checked-out ones at once), with a rate and an ETA
            from tqdm.auto import tqdm

            bar = tqdm(total=len(docs), initial=len(docs) - len(kept), desc=f"{self.name}: scoring", unit="doc")
        for k, start in enumerate(range(0, len(kept), self.batch_size)):
            chunk = kept[start:start + self.batch_size]
            projection = self.project(chunk)
            if bar is not None:
                bar.update(len(chunk))
            self._validate_projection(projection, chunk)
            if observe is not None:
                observe(projection)
            skipped.update(projection.failures)
            unknown.update({i: c for i, c in projection.unknown.items() if c})
            if not len(projection):
                continue
            nll = self.latent_nll(projection, seed=seed + first_batch + k)
            estimator = nll.estimator
            t = nll.value.numpy()
            m = projection.latent_steps.detach().to(torch.float64).cpu().numpy()
            se = None if nll.stderr is None else nll.stderr.numpy()
            good = np.isfinite(t) & np.isfinite(m) & (m > 0)
            for i in np.flatnonzero(~good):
                skipped[projection.doc_ids[i]] = _bad_number_reason(float(t[i]), float(m[i]))
            extras = {name: [v for v, g in zip(values, good) if g] for name, values in projection.extras.items()}
            parts.append(([d for d, g in zip(projection.doc_ids, good) if g], t[good], m[good],
                          None if se is None else se[good], extras))
        if bar is not None:
            bar.close()
        order = {d.id: i for i, d in enumerate(docs)}
        skipped = dict(sorted(skipped.items(), key=lambda kv: order[kv[0]]))
        unknown = {i: c for i, c in unknown.items() if i not in skipped}
        doc_ids = [i for p in parts for i in p[0]]
        extras_names = sorted({name for p in parts for name in p[4]})
        return Scores(
            doc_ids=doc_ids,
            latent_nll=np.concatenate([p[1] for p in parts]) if parts else np.zeros(0),
            latent_steps=np.concatenate([p[2] for p in parts]) if parts else np.zeros(0),
            skipped=skipped,
            unknown=unknown,
            estimator=estimator,
            latent_nll_stderr=(np.concatenate([p[3] for p in parts])
                               if parts and all(p[3] is not None for p in parts) else None),
            extras={name: [v for p in parts for v in p[4].get(name, [None] * len(p[0]))] for name in extras_names},
        )

    def _validate_projection(self, projection: Projection, chunk: Sequence[Document]) -> None:
        """A projection must account for every document of its batch, once."""
        where = f"{type(self).__name__}.project"
        asked = [d.id for d in chunk]
        projected, failed = list(projection.doc_ids), set(projection.failures)
        if sorted(projected + list(failed)) != sorted(asked):
            lost = sorted(set(asked) - set(projected) - failed)
            extra = sorted((set(projected) | failed) - set(asked))
            twice = sorted({i for i in projected if projected.count(i) > 1} | (set(projected) & failed))
            raise RuntimeError(f"{where} must return every document either projected or in failures, once "
                               f"(lost: {lost[:3]}, not in the batch: {extra[:3]}, given twice: {twice[:3]})")
        b = len(projected)
        if tuple(projection.latent_steps.shape) != (b,):
            raise RuntimeError(f"{where}: latent_steps has shape {tuple(projection.latent_steps.shape)}, "
                               f"expected ({b},)")
        for name, values in projection.extras.items():
            if len(values) != b:
                raise RuntimeError(f"{where}: extras[{name!r}] has {len(values)} values for {b} documents")
        for name in self.outlier_statistics:
            values = projection.extras.get(name)
            try:
                finite = values is not None and bool(np.all(np.isfinite(np.asarray(values, dtype=np.float64))))
            except (TypeError, ValueError):  # not numbers
                finite = False
            if not finite:
                raise RuntimeError(f"{where}: outlier statistic {name!r} must be an extra of finite numbers, got "
                                   f"{'none' if values is None else list(values)[:3]}")

    # -------------------------------------------------------------- settings and state
    def get_params(self) -> dict[str, Any]:
        """Settings given to ``__init__`` (scikit-learn style)."""
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self" and hasattr(self, k)}

    def check_params(self) -> None:
        """Every setting against its declaration in ``__init__`` (type, ``Range`` bounds, ``Literal`` choices):
        the one check the command line, configs, studies and :meth:`fit` use (:func:`critic.config.check_params`);
        a :class:`~critic.config.ConfigError` (a ``ValueError``) naming the critic and the setting."""
        from .config import check_params

        check_params(type(self), self.get_params(), where=type(self).__name__)

    @property
    def is_fitted(self) -> bool:
        return any(k.endswith("_") and not k.startswith("_") for k in vars(self))

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() first")

    def _meta(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        state, tensors = self._get_state()
        meta = {"format_version": FORMAT_VERSION, "critic": self.name, "params": _jsonable(self.get_params()),
                "state": state, "tensors": sorted(tensors)}
        if self.calibration is not None:
            meta["calibration"] = self.calibration.to_state()
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{type(self).__name__}: settings or state cannot be saved as JSON ({exc})") from None
        return meta, {k: v.detach().cpu() for k, v in tensors.items()}

    def state_sha256(self) -> str:
        """SHA-256 of the fitted state (name, params, state, tensors, own files), as in ``critic.json``."""
        self._require_fitted()
        meta, tensors = self._meta()
        return _state_digest(meta, tensors, self._own_files_sha256(meta, tensors))

    def _own_files_sha256(self, meta: dict, tensors: dict) -> dict[str, str]:
        """The hashes of the critic's own files (:meth:`_save_files`), written out only when the state they are
        made from (settings, JSON state, tensors) differs from the last save, load or hash: a KenLM binary or a
        gensim model is not re-written each time a run records the critic's hash."""
        key = _state_digest(meta, tensors, {})
        known = getattr(self, "_files_sha256", None)
        if known is None or known[0] != key:
            with tempfile.TemporaryDirectory() as tmp:
                self._save_files(Path(tmp))
                known = self._files_sha256 = (key, _hash_files(Path(tmp)))
        return known[1]

    # -------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        """Write the critic to the directory ``path``, atomically (complete or absent).

        ``critic.json`` holds the format version, the critic's name, settings,
        JSON state, the names of its tensors, the hashes of its own files and
        ``state_sha256`` over all of these (an existing directory is replaced
        only if it is empty or a saved critic); ``tensors.pt`` is a plain
        ``name -> tensor`` mapping read back with ``weights_only=True`` (no
        pickled code); the critic's own files sit beside them.
        """
        self._require_fitted()
        path = Path(path)
        check_replaceable(path, "critic")
        meta, tensors = self._meta()
        with atomic_directory(path, "critic") as tmp:
            self._save_files(tmp)
            files = _hash_files(tmp)
            self._files_sha256 = (_state_digest(meta, tensors, {}), files)
            meta["files"] = files
            meta["state_sha256"] = _state_digest(meta, tensors, files)
            torch.save(tensors, tmp / "tensors.pt")
            atomic_write_text(tmp / "critic.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "cpu") -> "Critic":
        """Load a critic saved by :meth:`save` onto ``device``; dispatches on the saved name.

        Every way a save can be damaged or foreign -- missing, truncated or
        empty files, bad JSON, wrong types, a relabelled kind, edited state --
        raises :class:`CriticLoadError` naming the path and what is wrong.
        """
        path = Path(path)
        meta = read_meta(path)
        klass = critic_class(meta["critic"], path)
        if cls is not Critic and not issubclass(klass, cls):
            raise CriticLoadError(f"{path} holds a {meta['critic']!r} critic, not a {cls.__name__}")
        tensors = _read_tensors(path, meta["tensors"])
        files = _hash_files(path)
        if files != meta["files"]:
            saved = meta["files"]
            problems = ([f"{name} is missing" for name in sorted(set(saved) - set(files))]
                        + [f"{name} was changed (SHA-256 {files[name][:12]}..., saved {saved[name][:12]}...)"
                           for name in sorted(set(saved) & set(files)) if files[name] != saved[name]]
                        + [f"{name} was added" for name in sorted(set(files) - set(saved))])
            raise CriticLoadError(f"{path}: the critic's own files differ from those saved: {'; '.join(problems)}")
        digest = _state_digest(meta, tensors, files)
        if digest != meta["state_sha256"]:
            raise CriticLoadError(f"{path}: critic.json or tensors.pt was changed after saving "
                                  f"(state_sha256 is {meta['state_sha256'][:12]}..., contents hash to {digest[:12]}...)")
        try:
            critic = klass(**meta["params"])
        except TypeError as exc:
            raise CriticLoadError(f"{path}: saved params do not fit {klass.__name__}: {exc}") from None
        try:
            critic._set_state(meta["state"], tensors)
            if "calibration" in meta:
                critic.calibration_ = Calibration.from_state(meta["calibration"])
            critic._load_files(path)
            critic._files_sha256 = (_state_digest(*critic._meta(), {}), files)  # the files checked above
        except Exception as exc:  # any damage a hash cannot see becomes one named error
            raise CriticLoadError(f"{path}: saved state is not a valid {meta['critic']!r} critic "
                                  f"({type(exc).__name__}: {exc})") from None
        return critic.to(device)


def _bad_number_reason(t: float, m: float) -> str:
    if math.isnan(t):
        return "Latent NLL is NaN (the critic's prior or posterior produced an undefined value)"
    if math.isinf(t):
        return "Latent NLL is infinite: the prior gives probability 0 to the projected latent"
    return f"latent steps M(x) = {m} is not a positive finite number"


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _hash_files(directory: Path) -> dict[str, str]:
    """``relative path -> sha256`` of a save directory's own files (all but critic.json, tensors.pt and the output
    marker, :data:`critic.io.OUTPUT_MARKER`)."""
    out = {}
    for f in sorted(directory.rglob("*")):
        rel = f.relative_to(directory).as_posix()
        if f.is_file() and rel not in ("critic.json", "tensors.pt", OUTPUT_MARKER):
            out[rel] = sha256_file(f)
    return out


def _read_tensors(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    file = path / "tensors.pt"
    if not file.is_file():
        raise CriticLoadError(f"{file}: missing (the critic was saved with tensors {names[:5]})")
    try:
        tensors = torch.load(file, weights_only=True, map_location="cpu")
    except Exception as exc:  # EOFError, RuntimeError, UnpicklingError: a damaged file, whichever
        raise CriticLoadError(f"{file}: cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(tensors, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()):
        raise CriticLoadError(f"{file}: expected a mapping of names to tensors")
    if sorted(tensors) != sorted(names):
        raise CriticLoadError(f"{file}: holds tensors {sorted(tensors)[:5]}, critic.json lists {sorted(names)[:5]}")
    return tensors
