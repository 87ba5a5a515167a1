"""Section-transition critic with a classifier posterior (paper sec. 4, app. E).

The prior is the given-title critic's (:class:`~critics.sections.critic.SectionTransitionCritic`):
a bigram Markov chain over the K states (training titles, ``<unk>`` last) with ``<bos>`` /
``<eos>`` and add-delta smoothing chosen on validation.  The posterior does not read titles:

    P_c(z | x) ~= q(z) = prod_{m=1}^{M} q_m(z_m),   q_m(j) = P_c(z_m = j | x^m),

one calibrated :class:`~critics.sections.classifier.SectionClassifier` per section text
``x^m`` over the K - 1 training titles (``q_m(<unk>) = 0``: no classifier can predict a title
it never saw).  Two ways to score a document with it:

- ``mode="map"`` (the paper): ``z*_m = argmax_j q_m(j)``, a point mass, and
  ``T(x) = -log P_c(z*)``;
- ``mode="expectation"``: the exact ``T(x) = -E_q log P_c(z)``, linear in each factor::

      T(x) = -[ sum_j q_1(j) log pi_j + sum_{m=2}^{M} sum_{i,j} q_{m-1}(i) q_m(j) log A_ij
               + sum_i q_M(i) log f_i ]

  (:class:`critic.latent.FactorisedCategorical` under :class:`critic.latent.MarkovChain`).

``M(x)`` = sections + 1 in both.  Documents need no titles (LM generations have none); a
given title is only used to count titles outside the prior's vocabulary (``unknown``) and by
:meth:`ClassifierSectionCritic.accuracy`.  Sections whose given title is one of
``drop_titles`` are removed before projection, as in the given-title critic.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import torch

from critic.critic import Projection
from critic.document import Document
from critic.latent import PAD, FactorisedCategorical, SequencePointMass
from critic.registry import register_critic

from .classifier import CLASSIFIERS, SectionClassifier, load_classifier, make_classifier
from .critic import DEFAULT_DELTA_GRID, DROPPED, UNKNOWN, UNTITLED, Delta, DeltaGrid, SectionTransitionCritic, _padded
from .normalize import DEFAULT_DROP_TITLES

__all__ = ["ClassifierSectionCritic", "MODES"]

MODES = ("map", "expectation")


class _Sections(NamedTuple):
    """The kept sections (boilerplate dropped) of a batch of documents, flat over documents.

    ``codes (N,)`` given-title state codes (``<unk>`` index, or ``UNTITLED``), ``texts`` their N
    texts, ``lengths (B,)`` kept sections per document, ``sizes (B,)`` all sections per document.
    """

    codes: np.ndarray
    texts: list[str]
    lengths: np.ndarray
    sizes: np.ndarray


class _Classified(NamedTuple):
    """The projectable documents of a batch and their classified sections.

    ``ok (B,)`` marks them; ``reasons`` gives every other document's id -> why;
    ``codes (N,)`` the given-title codes of their kept sections (``UNTITLED`` where none),
    ``lengths (B',)`` kept sections per projectable document, ``log_probs (N, K - 1)``
    the classifier's calibrated ``log q_m`` over the training titles.
    """

    ok: np.ndarray
    reasons: dict[str, str]
    codes: np.ndarray
    lengths: np.ndarray
    log_probs: torch.Tensor


def _kept(critic: SectionTransitionCritic, docs: Sequence[Document]) -> _Sections:
    """The kept sections of ``docs`` with ``critic``'s given-title codes (its ``_sequences``) and texts."""
    codes, lengths = critic._sequences(docs)
    memo = critic._memo()
    texts = [s.text for d in docs for s, view in zip(d.sections, memo.sections(d.sections)) if view != DROPPED]
    sizes = np.fromiter((len(d.sections) for d in docs), dtype=np.int64, count=len(docs))
    return _Sections(codes, texts, lengths, sizes)


def _blank(texts: list[str]) -> np.ndarray:
    """``(N,)`` True where a text is empty or whitespace."""
    return np.fromiter((not t.strip() for t in texts), dtype=bool, count=len(texts))


def _labelled(critic: SectionTransitionCritic, docs: Sequence[Document]
              ) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """Classifier data from real documents: (texts, state indices of ``critic``, counts).

    A section is used when its title is kept (not in ``drop_titles``), present, in the
    training vocabulary (not ``<unk>``), and its text is not blank; the counts say how many
    sections there were, were used, and were left out for each of these reasons.
    """
    kept = _kept(critic, docs)
    unk = critic.index_[UNKNOWN]
    blank = _blank(kept.texts)
    titled = (kept.codes >= 0) & (kept.codes != unk)
    use = titled & ~blank
    counts = {"sections": int(kept.sizes.sum()), "used": int(use.sum()),
              "dropped_title": int(kept.sizes.sum() - len(kept.codes)),
              "no_title": int((kept.codes == UNTITLED).sum()), "unknown_title": int((kept.codes == unk).sum()),
              "empty_text": int((titled & blank).sum())}
    return [t for t, u in zip(kept.texts, use) if u], kept.codes[use], counts


def _per_document(values: list, lengths: np.ndarray) -> list[list]:
    """Split the flat ``values`` into consecutive runs of ``lengths``."""
    ends = np.cumsum(lengths).tolist()
    return [values[e - n:e] for e, n in zip(ends, lengths.tolist())]


@register_critic("sections-classifier")
class ClassifierSectionCritic(SectionTransitionCritic):
    """Bigram Markov prior over section titles; classifier posterior ``prod_m P(z_m | x^m)``.

    Parameters
    ----------
    classifier: ``"tfidf"`` (:class:`~critics.sections.classifier.TfidfClassifier`, the fast
        default) or ``"encoder"`` (:class:`~critics.sections.classifier.EncoderClassifier`).
    encoder: the encoder's Hugging Face name or folder (``None``: bundled all-MiniLM-L6-v2);
        only with ``classifier="encoder"``.
    finetune: fine-tune the encoder with its head (app. E) instead of a frozen encoder.
    mode: ``"map"`` (point mass on the MAP titles, the paper) or ``"expectation"`` (exact
        ``-E_q log P_c(z)`` under the factorised posterior).
    delta, delta_grid, normalize_titles, drop_titles: as :class:`SectionTransitionCritic`.

    Fitted attributes: the parent's (``vocab_``, ``index_``, ``counts_``, ``delta_``,
    ``validation_ppl_``, ``validation_skipped_``), ``classifier_`` (the fitted classifier),
    ``valid_accuracy_`` (its accuracy on the validation sections) and ``classifier_sections_``
    (``{"train": counts, "valid": counts}``: sections used, and those left out because their
    title was dropped, missing, unknown, or their text empty).
    """

    batch_size = 1024  # documents per project(): all their sections go to the classifier at once
    extra = "sections-classifier"  # pip install 'critic[sections-classifier]': what it needs beyond the core
    needs = ("titled sections to fit; any sections to score (untitled ones are typed by the classifier; free "
             "text: --sections markdown or separator:STRING)")

    def __init__(
        self,
        classifier: str = "tfidf",
        encoder: str | None = None,
        finetune: bool = False,
        mode: str = "map",
        delta: Delta = None,
        delta_grid: DeltaGrid = DEFAULT_DELTA_GRID,
        normalize_titles: bool = True,
        drop_titles: Sequence[str] = DEFAULT_DROP_TITLES,
    ):
        super().__init__(delta=delta, delta_grid=delta_grid, normalize_titles=normalize_titles,
                         drop_titles=drop_titles)
        self.classifier = classifier
        self.encoder = encoder
        self.finetune = finetune
        self.mode = mode

    # ------------------------------------------------------------ settings
    def _check_mode(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    def _check_classifier_settings(self) -> None:
        """``classifier``, ``mode``, ``encoder`` and ``finetune`` must agree (ValueError naming the setting)."""
        if self.classifier not in CLASSIFIERS:
            raise ValueError(f"classifier must be one of {sorted(CLASSIFIERS)}, got {self.classifier!r}")
        self._check_mode()
        if self.classifier != "encoder" and (self.encoder is not None or self.finetune):
            raise ValueError(f"encoder= and finetune= apply to classifier='encoder', not {self.classifier!r}")

    def _new_classifier(self) -> SectionClassifier:
        """An unfitted classifier of this critic's settings (a test may override it)."""
        if self.classifier == "encoder":
            return make_classifier("encoder", model=self.encoder, finetune=self.finetune, device=str(self.device))
        return make_classifier(self.classifier)

    # ------------------------------------------------------------ sections
    def _classify(self, docs: Sequence[Document]) -> _Classified:
        """Drop boilerplate sections, find the unprojectable documents, classify every kept section
        of the others in ONE ``log_proba`` call."""
        self._require_fitted()
        kept = _kept(self, docs)
        ok, reasons = self._failures(docs, kept)
        rows = np.repeat(ok, kept.lengths)
        texts = [t for t, r in zip(kept.texts, rows) if r]
        k = len(self.vocab_) - 1
        log_probs = self.classifier_.log_proba(texts) if texts else torch.zeros((0, k), dtype=torch.float64)
        return _Classified(ok, reasons, kept.codes[rows], kept.lengths[ok], log_probs)

    def _failures(self, docs: Sequence[Document], kept: _Sections) -> tuple[np.ndarray, dict[str, str]]:
        """``(B,)`` True for the projectable documents (>= 1 kept section, none blank); why for the others."""
        blank = _blank(kept.texts)
        doc_of = np.repeat(np.arange(len(docs)), kept.lengths)
        ok = (kept.lengths > 0) & (np.bincount(doc_of[blank], minlength=len(docs)) == 0)
        starts = np.cumsum(kept.lengths) - kept.lengths
        reasons = {}
        for b in np.flatnonzero(~ok):
            if kept.sizes[b] == 0:
                reasons[docs[b].id] = "document has no sections"
            elif kept.lengths[b] == 0:
                reasons[docs[b].id] = "no sections left after dropping " + "/".join(self.drop_titles) + " sections"
            else:
                first = int(np.flatnonzero(blank[starts[b]:starts[b] + kept.lengths[b]])[0])
                reasons[docs[b].id] = (f"section {first} has no text (empty or whitespace); the classifier "
                                       "posterior needs each section's text")
        return ok, reasons

    def check(self, doc: Document) -> str | None:
        """Why ``doc`` cannot be projected: no sections, none left after the boilerplate drop, or a
        section with blank text.  Titles are not needed."""
        return self._failures([doc], _kept(self, [doc]))[1].get(doc.id)

    # ------------------------------------------------------------ fitting
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None
            ) -> "ClassifierSectionCritic":
        """The given-title critic's prior on ``docs`` (delta on ``validation`` unless set); the
        classifier trained on the sections of ``docs``, calibrated and scored on those of
        ``validation`` (required: temperature scaling needs held-out sections)."""
        self._check_classifier_settings()
        if not validation:
            raise ValueError("validation documents are needed: the classifier is calibrated (temperature "
                             "scaling) and its accuracy measured on their sections")
        prior = SectionTransitionCritic(delta=self.delta, delta_grid=self.delta_grid,
                                        normalize_titles=self.normalize_titles, drop_titles=self.drop_titles)
        prior.fit(docs, validation=validation)
        train_texts, train_labels, train_counts = _labelled(prior, docs)
        valid_texts, valid_labels, valid_counts = _labelled(prior, validation)
        if not train_texts:
            raise ValueError(f"no usable training sections for the classifier: of {train_counts['sections']}, "
                             f"{train_counts['dropped_title']} have a dropped title, {train_counts['no_title']} no "
                             f"title and {train_counts['empty_text']} empty text")
        if not valid_texts:
            raise ValueError(f"no usable validation sections to calibrate the classifier: of "
                             f"{valid_counts['sections']}, {valid_counts['dropped_title']} have a dropped title, "
                             f"{valid_counts['no_title']} no title, {valid_counts['unknown_title']} a title unseen "
                             f"in training and {valid_counts['empty_text']} empty text")
        clf = self._new_classifier().fit(train_texts, train_labels, len(prior.vocab_) - 1,
                                         valid_texts=valid_texts, valid_labels=valid_labels)
        self._set_state(*prior._get_state())
        self._adopt(clf, {"train": train_counts, "valid": valid_counts})
        return self

    def _adopt(self, clf: SectionClassifier, counts: dict[str, dict[str, int]]) -> None:
        if clf.num_classes_ != len(self.vocab_) - 1:
            raise ValueError(f"the classifier has {clf.num_classes_} classes, the prior {len(self.vocab_) - 1} "
                             "titles besides <unk>")
        self.classifier_ = clf.to(self.device)
        self.valid_accuracy_ = float(clf.valid_accuracy_)
        self.classifier_sections_ = counts

    # ------------------------------------------------------------ projection
    def project(self, docs: Sequence[Document]) -> Projection:
        """Posterior over the K states from the classifier (``q(<unk>) = 0``), ``M(x)`` = kept
        sections + 1; extras ``labels`` (MAP titles), ``label_probabilities`` (their probabilities
        ``max_j q_m(j)``, per section), ``map_probability`` (their mean over the document's
        sections) and ``worst_transition_nll`` (of the MAP path, :meth:`worst_transition_nll`); ``unknown`` counts given titles outside the vocabulary.  Documents without kept sections or with a blank section are failures."""
        self._check_mode()
        c = self._classify(docs)
        kept = [d.id for d, good in zip(docs, c.ok.tolist()) if good]
        best, labels = c.log_probs.max(-1)
        labels = labels.numpy()
        if self.mode == "map":
            posterior = SequencePointMass(_padded(labels, c.lengths))
        else:
            posterior = FactorisedCategorical(self._padded_probs(c.log_probs.exp(), c.lengths),
                                              torch.from_numpy(c.lengths))
        doc_of = np.repeat(np.arange(len(kept)), c.lengths)
        mean_best = np.bincount(doc_of, weights=best.exp().numpy(), minlength=len(kept)) / np.maximum(c.lengths, 1)
        names = [self.vocab_[j] for j in labels.tolist()]
        unk = np.bincount(doc_of[c.codes == self.index_[UNKNOWN]], minlength=len(kept))
        return Projection(
            doc_ids=kept,
            posterior=posterior,
            latent_steps=torch.from_numpy(c.lengths + 1.0),
            failures=c.reasons,
            extras={"labels": _per_document(names, c.lengths),
                    "label_probabilities": _per_document(best.exp().tolist(), c.lengths),
                    "map_probability": mean_best.tolist(),
                    **({"worst_transition_nll": self.worst_transition_nll(labels, c.lengths).tolist()}
                       if hasattr(self, "prior_") else {})},  # fit projects the validation set first
            unknown={kept[b]: int(unk[b]) for b in np.flatnonzero(unk)},
        )

    def _padded_probs(self, probs: torch.Tensor, lengths: np.ndarray) -> torch.Tensor:
        """``(B, L, K)`` factors from the flat ``probs (N, K - 1)``: ``<unk>`` column 0; padded steps
        uniform (ignored by the posterior's mask, but a valid distribution for sampling)."""
        k = len(self.vocab_)
        where = _padded(np.arange(len(probs)), lengths)
        full = torch.cat([probs, torch.zeros((len(probs), 1), dtype=probs.dtype)], dim=1)
        out = full[where.clamp_min(0)] if len(probs) else torch.zeros((*where.shape, k), dtype=torch.float64)
        out[where == PAD] = 1.0 / k
        return out

    # ------------------------------------------------------------ inspection
    def labels(self, docs: Sequence[Document]) -> list[list[str] | None]:
        """MAP titles of each document's kept sections (``None`` where it cannot be projected)."""
        out: list[list[str] | None] = []
        for start in range(0, len(docs), self.batch_size):
            c = self._classify(docs[start:start + self.batch_size])
            names = iter(_per_document([self.vocab_[j] for j in c.log_probs.argmax(-1).tolist()], c.lengths))
            out += [next(names) if good else None for good in c.ok.tolist()]
        return out

    def reasons(self, result, document: Document | None) -> list[str]:
        """The least likely transitions of the document's MAP section path (the extras' ``labels``, else the
        document classified again) under the prior (:meth:`transition_reasons`): the factors of ``T(x)`` in
        ``mode="map"``; with ``mode="expectation"`` they are those of the MAP path, the posterior's mode."""
        labels = (getattr(result, "extras", None) or {}).get("labels")
        if labels is None:
            if document is None:
                raise ValueError(f"the result of {result.id!r} has no 'labels' extra and no document was given to "
                                 "classify")
            c = self._classify([document])
            if not c.ok[0]:
                raise ValueError(f"document {document.id!r} cannot be projected by this critic: "
                                 f"{c.reasons[document.id]}")
            labels = [self.vocab_[j] for j in c.log_probs.argmax(-1).tolist()]
        return self.transition_reasons(labels)

    def accuracy(self, docs: Sequence[Document]) -> tuple[float, int]:
        """(share of the sections with a title in the vocabulary whose MAP label equals it, how many
        were compared), over the projectable documents; ``(nan, 0)`` when none."""
        right = total = 0
        for start in range(0, len(docs), self.batch_size):
            c = self._classify(docs[start:start + self.batch_size])
            known = (c.codes >= 0) & (c.codes != self.index_[UNKNOWN])
            right += int((c.log_probs.argmax(-1).numpy()[known] == c.codes[known]).sum())
            total += int(known.sum())
        return (right / total if total else float("nan")), total

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        state, tensors = super()._get_state()
        state.update(valid_accuracy=self.valid_accuracy_, classifier_sections=self.classifier_sections_)
        return state, tensors

    def _set_state(self, state, tensors) -> None:
        super()._set_state(state, tensors)
        if "valid_accuracy" in state:  # fit() passes the given-title prior's state, without these
            self.valid_accuracy_ = float(state["valid_accuracy"])
            self.classifier_sections_ = {k: {n: int(v) for n, v in c.items()}
                                         for k, c in state["classifier_sections"].items()}

    def _save_files(self, directory) -> None:
        self.classifier_.save(directory / "classifier")

    def _load_files(self, directory) -> None:
        clf = load_classifier(directory / "classifier", device=self.device)
        if clf.kind != self.classifier:
            raise ValueError(f"the saved classifier is {clf.kind!r}, the critic's setting {self.classifier!r}")
        self._adopt(clf, self.classifier_sections_)

    def _move(self, device: torch.device) -> None:
        self.classifier_.to(device)
