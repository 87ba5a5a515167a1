"""Section-transition coherence critic (paper sec. 4, app. E).

Generative process: a first-order Markov chain over section types with a
start state ``<bos>`` and an end state ``<eos>``,

    P_c(z) = P(z_1 | <bos>) prod_{m=2}^{M} P(z_m | z_{m-1}) P(<eos> | z_M),

each section's text emitted given its type.  The prior is the bigram table
with add-delta smoothing, ``delta > 0`` chosen on validation data from a grid:

    P(j | i) = (C[i, j] + delta) / (sum_j' C[i, j'] + delta * |targets(i)|),

where the targets of ``<bos>`` are the K section types and the targets of a
section type are the K types and ``<eos>``.  The K types are the training
titles plus an explicit unknown state ``<unk>``: a title never seen in
training maps to it, is counted and reported, never skipped.

Posterior: the *given-title* posterior, a point mass on the (normalised)
titles the document carries.  ``T(x) = -log P_c(z)`` and ``M(x)`` = number of
sections + 1 (transitions scored), so the Latent PPL is
``exp(-sum log P / number of transitions)`` as in the paper.

Speed: a title is normalised once per distinct raw string (a memo kept by the
critic), a batch of documents becomes one flat array of title codes with
per-document lengths, counting is one ``np.bincount`` over pair codes and the
padded ``(B, L)`` states are filled by one scatter.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Annotated, Sequence

import numpy as np
import torch

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document, Section
from critic.latent import PAD, MarkovChain, SequencePointMass
from critic.registry import register_critic

from .normalize import DEFAULT_DROP_TITLES, TitleNormalizer, lemma

__all__ = ["SectionTransitionCritic", "DEFAULT_DELTA_GRID", "UNKNOWN"]

UNKNOWN = "<unk>"
DEFAULT_DELTA_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)

DROPPED = -1
"""Code of a section whose title is one of ``drop_titles`` (removed before projection)."""
UNTITLED = -2
"""Code of a section with no title (or none left after normalisation)."""

_MEMO_LIMIT = 1 << 17  # distinct raw titles remembered before the memo starts afresh


class _TitleMemo:
    """Raw section title -> the critic's view of it, computed once per distinct raw string.

    ``memo(raw)`` is the normalised title, ``None`` for a section without a
    title (``None``, blank, or nothing left after normalisation) or
    ``DROPPED`` for a boilerplate section.  One :class:`TitleNormalizer` is
    built per setting; the memo is cleared when it outgrows ``_MEMO_LIMIT``.

    Words are lemmatised through ``lemmas`` (word -> lemma; a fitted critic's table of its training titles'
    words, :meth:`SectionTransitionCritic.lemma_table`) and only a word missing from it through simplemma, so
    that scoring titles made of known words never reads simplemma's dictionary (about 0.3 s).  The
    ``drop_titles`` are normalised on the first title viewed, not when the memo is made.
    """

    def __init__(self, normalize_titles: bool, drop_titles: Sequence[str]):
        self.normalize_titles = normalize_titles
        self.drop_titles = drop_titles
        self.normalizer = TitleNormalizer(lemmatize=normalize_titles, remove_numbers=normalize_titles,
                                          spellings=TitleNormalizer().spellings if normalize_titles else ())
        self.lemmas: dict[str, str] = {}
        self._drop: set[str] | None = None
        self.seen: dict[str | None, str | int | None] = {}

    def lemma(self, word: str) -> str:
        """``word``'s lemma: from ``lemmas`` when there, else simplemma's (:func:`~.normalize.lemma`)."""
        try:
            return self.lemmas[word]
        except KeyError:
            return lemma(word)

    def normalize(self, raw: str | None) -> str:
        """``raw`` through the normaliser, its words lemmatised by :meth:`lemma`."""
        return self.normalizer(raw, self.lemma)

    @property
    def drop(self) -> set[str]:
        """The normalised ``drop_titles``."""
        if self._drop is None:
            self._drop = {self.normalize(t) for t in self.drop_titles}
        return self._drop

    def _view(self, raw: str | None) -> str | int | None:
        if raw is None or not raw.strip():
            return None
        title = self.normalize(raw) if self.normalize_titles else raw.strip()
        if title in self.drop:
            return DROPPED
        return title or None

    def __call__(self, raw: str | None) -> str | int | None:
        try:
            return self.seen[raw]
        except KeyError:
            if len(self.seen) >= _MEMO_LIMIT:
                self.seen.clear()
            view = self.seen[raw] = self._view(raw)
            return view

    def sections(self, sections: Sequence[Section]) -> list[str | int | None]:
        """The view of each section's title, in order (one dict lookup each once all are seen)."""
        try:
            return [self.seen[sec.title] for sec in sections]
        except KeyError:
            return [self(sec.title) for sec in sections]


def _raw_titles(docs: Sequence[Document]) -> tuple[list[str | None], np.ndarray]:
    """Every section title of ``docs`` in order (``N`` of them) and sections per document ``(B,)``."""
    raws = [sec.title for d in docs for sec in d.sections]
    sizes = np.fromiter((len(d.sections) for d in docs), dtype=np.int64, count=len(docs))
    return raws, sizes


def _encode(raws: list, table: dict, code) -> np.ndarray:
    """``(N,)`` int64 codes of ``raws`` through ``table``, filled by ``code(raw)`` for raws not in it."""
    try:
        return np.fromiter(map(table.__getitem__, raws), dtype=np.int64, count=len(raws))
    except KeyError:
        for raw in set(raws).difference(table):
            table[raw] = code(raw)
        return np.fromiter(map(table.__getitem__, raws), dtype=np.int64, count=len(raws))


def _title_ids(raws: list, memo: "_TitleMemo") -> tuple[np.ndarray, list[str]]:
    """``(N,)`` ids of ``raws`` into the list of their distinct normalised titles (in no set order),
    ``DROPPED`` / ``UNTITLED`` for boilerplate and untitled sections."""
    titles: dict[str, int] = {}

    def code(raw):
        title = memo(raw)
        if title is None:
            return UNTITLED
        return DROPPED if title == DROPPED else titles.setdefault(title, len(titles))

    return _encode(raws, {}, code), list(titles)


def _drop(codes: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Remove ``DROPPED`` sections: (kept codes ``(N',)``, kept sections per document ``(B,)``)."""
    keep = codes != DROPPED
    doc_of = np.repeat(np.arange(len(sizes)), sizes)
    return codes[keep], np.bincount(doc_of[keep], minlength=len(sizes))


def _usable(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``(B,)`` True where a document has >= 1 kept section and every kept one is titled."""
    doc_of = np.repeat(np.arange(len(lengths)), lengths)
    untitled = np.bincount(doc_of[codes == UNTITLED], minlength=len(lengths))
    return (lengths > 0) & (untitled == 0)


def _select(codes: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat codes and lengths of the documents ``rows`` (a boolean ``(B,)`` mask)."""
    return codes[np.repeat(rows, lengths)], lengths[rows]


def _padded(codes: np.ndarray, lengths: np.ndarray) -> torch.Tensor:
    """``(B, L)`` states, ``L = max(lengths)``, row b = its ``lengths[b]`` codes then ``PAD``.

    One scatter: element n of the flat ``codes`` goes to row ``doc(n)``,
    column ``n - offset(doc(n))`` with ``offset = cumsum(lengths) - lengths``.
    """
    offsets = np.cumsum(lengths) - lengths
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.arange(len(codes)) - np.repeat(offsets, lengths)
    states = np.full((len(lengths), int(lengths.max(initial=0))), PAD, dtype=np.int64)
    states[rows, cols] = codes
    return torch.from_numpy(states)


DELTA_RANGE = Range(min=1e-12, max=1e12)
"""Add-delta smoothing's bounds: at 0 an unseen transition costs log 0; beyond them the smoothed probabilities
leave float64 (a delta of 1e308 overflows ``n + K delta``, one of 5e-324 underflows ``delta / n``) long after they
stopped meaning anything (1e12 is uniform to 12 digits for any count a corpus has)."""

Delta = Annotated[float | None, DELTA_RANGE]
"""The type of a section critic's ``delta`` setting: ``None`` (chosen on validation data) or within
:data:`DELTA_RANGE`."""

DeltaGrid = Annotated[Sequence[float], DELTA_RANGE]
"""The type of a section critic's ``delta_grid``: candidate deltas, each within :data:`DELTA_RANGE`."""


def _check_delta(value, name: str) -> float:
    """``value`` as a float, or a ValueError naming the setting (:data:`DELTA_RANGE`)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number {DELTA_RANGE}, got {value!r}")
    why = DELTA_RANGE.violation(value)
    if why:
        raise ValueError(f"{name} {why} (add-delta smoothing)")
    return float(value)


@register_critic("sections")
class SectionTransitionCritic(Critic):
    """Bigram Markov prior over section titles; given-title (point-mass) posterior.

    Parameters
    ----------
    delta: fixed add-delta smoothing (1e-12 to 1e12); ``None`` picks it on validation data from ``delta_grid``.
    delta_grid: candidate deltas, each > 0 (lowest validation Latent PPL wins; ties: the smaller delta).
    normalize_titles: apply app. E title normalisation (lemmatise, drop numbers, spellings).
    drop_titles: section titles (after normalisation) removed before projection, as in app. E.

    Fitted attributes: ``vocab_`` (the K states, ``<unk>`` last), ``index_``,
    ``counts_`` (start ``(K,)``, transition ``(K, K)``, end ``(K,)``),
    ``delta_``, ``validation_ppl_`` (delta -> validation Latent PPL),
    ``validation_skipped_`` (validation document id -> why it could not be used) and ``lemmas_`` (word ->
    lemma of the training titles' words, :meth:`lemma_table`).
    """

    batch_size = 8192  # a projection is K-independent integer work: large batches cost no memory
    needs = "documents with titled sections (free text: --sections markdown or separator:STRING)"
    outlier_statistics = ("worst_transition_nll",)  # one implausible transition, not diluted by M(x)

    def __init__(
        self,
        delta: Delta = None,
        delta_grid: DeltaGrid = DEFAULT_DELTA_GRID,
        normalize_titles: bool = True,
        drop_titles: Sequence[str] = DEFAULT_DROP_TITLES,
    ):
        self.delta = delta
        self.delta_grid = tuple(delta_grid)
        self.normalize_titles = normalize_titles
        self.drop_titles = tuple(drop_titles)

    # ------------------------------------------------------------ titles
    def _memo(self) -> _TitleMemo:
        """The memo of this critic's settings (rebuilt, with the title codes, if they were reassigned)."""
        memo = self.__dict__.get("_title_memo")
        if memo is None or memo.normalize_titles is not self.normalize_titles \
                or memo.drop_titles is not self.drop_titles:
            memo = self._title_memo = _TitleMemo(self.normalize_titles, self.drop_titles)
            memo.lemmas = self.__dict__.get("lemmas_", {})
            self._codes = {}
        return memo

    def lemma_table(self, raws) -> dict[str, str]:
        """word -> lemma of every word of the titles ``raws`` and of ``drop_titles`` (``{}`` without title
        normalisation), sorted by word.  Fitting keeps its training titles' table as ``lemmas_`` (saved with the
        critic): a loaded critic lemmatises these words from it, reading simplemma's dictionary only for a title
        with a word it never saw, and its view of its own training titles stays the one it was fitted with."""
        if not self.normalize_titles:
            return {}
        memo, normalizer = self._memo(), self._memo().normalizer
        words = {w for raw in {*raws, *self.drop_titles} if raw is not None for w in normalizer.words(raw)}
        return {w: memo.lemma(w) for w in sorted(words)}

    def titles(self, doc: Document) -> list[str | None]:
        """The document's section titles as the critic sees them (normalised, boilerplate dropped).

        A section without a title gives ``None``.
        """
        return [t for t in self._memo().sections(doc.sections) if t != DROPPED]

    def check(self, doc: Document) -> str | None:
        if not doc.sections:
            return "document has no sections"
        views = self._memo().sections(doc.sections)
        if None not in views and views.count(DROPPED) < len(views):
            return None
        titles = [t for t in views if t != DROPPED]
        if not titles:
            return "no sections left after dropping " + "/".join(self.drop_titles) + " sections"
        return (f"section {titles.index(None)} has no title (or none left after normalisation); the "
                "given-title posterior needs one per section")

    def _state_code(self, raw: str | None) -> int:
        """State index of a raw title (``<unk>`` if unseen in training), or ``DROPPED`` / ``UNTITLED``."""
        title = self._memo()(raw)
        if title is None:
            return UNTITLED
        if title == DROPPED:
            return DROPPED
        return self.index_.get(title, self.index_[UNKNOWN])

    def _sequences(self, docs: Sequence[Document]) -> tuple[np.ndarray, np.ndarray]:
        """State codes of every kept section, flat ``(N,)``, and kept sections per document ``(B,)``.

        ``UNTITLED`` marks a section without a title; each distinct raw title
        is looked up once per fit (``_codes``), never normalised twice.
        """
        self._memo()
        if len(self._codes) >= _MEMO_LIMIT:
            self._codes.clear()
        raws, sizes = _raw_titles(docs)
        return _drop(_encode(raws, self._codes, self._state_code), sizes)

    # ------------------------------------------------------------ fitting
    @staticmethod
    def _count(codes: np.ndarray, lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bigram counts of ``<bos> z_1 .. z_M <eos>`` over documents given flat.

        ``codes (N,)`` holds the states of all documents one after another,
        ``lengths (B,)`` (each >= 1) their sizes.  Returns float64 ``start (K,)``
        (``C[<bos>, j]``), ``transition (K, K)`` (``C[i, j]``, pair code ``i K + j``
        counted by one ``bincount``) and ``end (K,)`` (``C[i, <eos>]``).
        """
        ends = np.cumsum(lengths)
        first, last = codes[ends - lengths], codes[ends - 1]
        within = np.ones(max(len(codes) - 1, 0), dtype=bool)
        within[ends[:-1] - 1] = False  # the pair (last of doc b, first of doc b + 1) is not a transition
        pairs = codes[:-1][within] * k + codes[1:][within]
        start = np.bincount(first, minlength=k).astype(np.float64)
        trans = np.bincount(pairs, minlength=k * k).astype(np.float64).reshape(k, k)
        end = np.bincount(last, minlength=k).astype(np.float64)
        return start, trans, end

    @staticmethod
    def smoothed_log_probs(start: np.ndarray, trans: np.ndarray, end: np.ndarray, delta: float
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add-delta smoothed ``(log pi, log A, log f)`` from transition counts (``delta > 0``)."""
        delta = _check_delta(delta, "delta")
        k = start.shape[0]
        initial = np.log((start + delta) / (start.sum() + delta * k))
        denom = trans.sum(1) + end + delta * (k + 1)
        transition = np.log((trans + delta) / denom[:, None])
        final = np.log((end + delta) / denom)
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
        return as_t(initial), as_t(transition), as_t(final)

    def fold_params(self, share: float) -> dict:
        """A cross-fitting fold smooths with ``share`` times the delta this fit chose
        (:meth:`critic.critic.Critic.fold_params`): an unseen transition from a state seen ``N`` times costs
        ``-log(delta / (N + delta V))``; on ``share`` of the documents the state is seen about ``share N`` times,
        so the scaled delta gives the full fit's cost (its own delta would give one ``-log share`` smaller, and
        the calibration's worst transitions would sit below new documents')."""
        return {**self.get_params(), "delta": max(self.delta_ * share, DELTA_RANGE.min)}

    def _check_settings(self) -> None:
        """Every setting against its declaration (:meth:`check_params`: ``delta`` and each ``delta_grid`` value
        within :data:`DELTA_RANGE`), and a grid to choose from when ``delta`` is not set."""
        self.check_params()
        if self.delta is None and not self.delta_grid:
            raise ValueError("delta_grid is empty: give candidate deltas > 0, or set delta")

    def _set_vocab(self, vocab: list[str]) -> None:
        self.vocab_ = vocab
        self.index_ = {t: i for i, t in enumerate(vocab)}
        self._codes = {}

    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None
            ) -> "SectionTransitionCritic":
        """Count title bigrams on ``docs``; pick delta on ``validation`` unless ``delta`` is set.

        Every training document must be usable (else ValueError with the
        first reason); unusable validation documents are skipped and kept in
        ``validation_skipped_`` with their reasons.
        """
        self._check_settings()
        if self.delta is None and not validation:
            raise ValueError("delta=None picks delta on validation data: pass validation=docs or set delta")
        if not docs:
            raise ValueError("no training documents")
        val, skipped = self._usable_validation(validation) if self.delta is None else ([], {})
        raws, sizes = _raw_titles(docs)
        ids, titles = _title_ids(raws, self._memo())
        self.lemmas_ = self._memo().lemmas = self.lemma_table(raws)
        ids, lengths = _drop(ids, sizes)
        usable = _usable(ids, lengths)
        if not usable.all():
            bad = [d for d, ok in zip(docs, usable) if not ok]
            raise ValueError(f"{len(bad)} training document(s) cannot be used, e.g. {bad[0].id!r}: "
                             f"{self.check(bad[0])}")
        freq = np.bincount(ids, minlength=len(titles))
        order = sorted(range(len(titles)), key=lambda i: (-freq[i], titles[i]))
        self._set_vocab([titles[i] for i in order] + [UNKNOWN])
        lookup = np.array([self.index_.get(t, self.index_[UNKNOWN]) for t in titles], dtype=np.int64)
        self.counts_ = self._count(lookup[ids], lengths, len(self.vocab_))
        self.validation_skipped_ = skipped
        if self.delta is not None:
            self.delta_, self.validation_ppl_ = float(self.delta), {}
        else:
            self._choose_delta(val)
        self._set_prior(self.delta_)
        return self

    def _usable_validation(self, validation: Sequence[Document]) -> tuple[list[Document], dict[str, str]]:
        """(validation documents that pass :meth:`check`, id -> reason for the others); a
        ValueError with the count and a reason when none passes."""
        reasons = {d.id: self.check(d) for d in validation}
        skipped = {i: r for i, r in reasons.items() if r is not None}
        if len(skipped) == len(reasons):
            first = next(iter(skipped.items()))
            raise ValueError(f"no usable validation document to choose delta: all {len(validation)} failed, "
                             f"e.g. {first[0]!r}: {first[1]}")
        return [d for d in validation if reasons[d.id] is None], skipped

    def _choose_delta(self, val: Sequence[Document]) -> None:
        """``delta_`` = argmin over ``delta_grid`` of the validation Latent PPL
        ``exp(sum_x T(x) / sum_x M(x))`` (ties: the smaller delta)."""
        projection = self.project(val)
        steps = float(projection.latent_steps.sum())
        scores = {}
        for delta in self.delta_grid:
            self._set_prior(delta)
            scores[delta] = float(np.exp(float(self.latent_nll(projection).value.sum()) / steps))
        self.validation_ppl_ = scores
        self.delta_ = float(min(scores, key=lambda d: (scores[d], d)))

    def _set_prior(self, delta: float) -> None:
        self.prior_ = MarkovChain(*self.smoothed_log_probs(*self.counts_, delta))

    # ------------------------------------------------------------ projection
    def prior(self) -> MarkovChain:
        self._require_fitted()
        return self.prior_

    def project(self, docs: Sequence[Document]) -> Projection:
        """Point mass on each document's title indices ``(B, L)`` (padded with ``PAD``);
        ``M(x)`` = sections + 1; titles mapped to ``<unk>`` counted per document
        (documents with none are left out of ``unknown``).  Documents that fail
        :meth:`check` are returned as failures with its reason.  Extra ``worst_transition_nll``: the largest of
        the ``M + 1`` factors of ``T(x)`` (:meth:`worst_transition_nll`), an outlier statistic beside ``T/M``."""
        codes, lengths = self._sequences(docs)
        ok = _usable(codes, lengths)
        failures = {docs[b].id: self.check(docs[b]) for b in np.flatnonzero(~ok)}
        codes, lengths = _select(codes, lengths, ok)
        kept = [d.id for d, good in zip(docs, ok.tolist()) if good]
        unk = np.bincount(np.repeat(np.arange(len(lengths)), lengths)[codes == self.index_[UNKNOWN]],
                          minlength=len(lengths))
        fitted = hasattr(self, "prior_")  # fit projects the validation set before the prior is chosen
        return Projection(
            doc_ids=kept,
            posterior=SequencePointMass(_padded(codes, lengths)),
            latent_steps=torch.from_numpy(lengths + 1.0),
            failures=failures,
            unknown={kept[b]: int(unk[b]) for b in np.flatnonzero(unk)},
            extras={"worst_transition_nll": self.worst_transition_nll(codes, lengths).tolist()} if fitted else {},
        )

    def worst_transition_nll(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``(B,)``: ``max_m -log P_c(z_m | z_m-1)`` over the ``M + 1`` transitions of each chain
        ``<bos> z_1 .. z_M <eos>`` (flat ``codes``, ``lengths (B,)``, every length >= 1).

        ``T(x)/M(x)`` is the mean of these factors, so one implausible transition (a section repeated, one
        dropped) moves it by a ``1/(M + 1)`` share; the largest factor shows it whole.  The critic names it as an
        outlier statistic (:attr:`outlier_statistics`): the outlier p-value combines its p-value with ``T/M``'s.
        """
        prior = self.prior()
        initial, transition, final = (t.numpy() for t in (prior.initial, prior.transition, prior.final))
        starts = np.cumsum(lengths) - lengths
        worst = -np.minimum(initial[codes[starts]], final[codes[starts + lengths - 1]])
        inner = np.ones(len(codes), dtype=bool)
        inner[starts] = False  # position n > first of its document: the transition codes[n-1] -> codes[n]
        doc_of = np.repeat(np.arange(len(lengths)), lengths)
        steps = -transition[codes[np.flatnonzero(inner) - 1], codes[inner]]
        np.maximum.at(worst, doc_of[inner], steps)
        return worst

    # ------------------------------------------------------------ inspection
    def transition_probability(self, previous: str, current: str) -> float:
        """``P_c(current | previous)`` with ``<bos>``/``<eos>`` allowed as endpoints."""
        p = self.prior()
        if previous == "<bos>":  # the prior has no empty documents: <bos> -> <eos> has probability 0
            return 0.0 if current == "<eos>" else float(p.initial[self.index_[current]].exp())
        i = self.index_[previous]
        if current == "<eos>":
            return float(p.final[i].exp())
        return float(p.transition[i, self.index_[current]].exp())

    def transition_log_probability(self, previous: str, current: str) -> float:
        """``log P_c(current | previous)`` read from the prior's tables (``-inf`` for ``<bos> -> <eos>``)."""
        p = self.prior()
        if previous == "<bos>":
            return -math.inf if current == "<eos>" else float(p.initial[self.index_[current]])
        i = self.index_[previous]
        if current == "<eos>":
            return float(p.final[i])
        return float(p.transition[i, self.index_[current]])

    # ------------------------------------------------------------ report
    reason_transitions: int = 3
    """How many of a document's least likely transitions :meth:`reasons` names."""

    def transition_reasons(self, types: Sequence[str], shown: Sequence[str] | None = None) -> list[str]:
        """The :attr:`reason_transitions` least likely distinct transitions of the chain
        ``<bos> z_1 .. z_M <eos>`` (``types``: the ``M`` states, each in ``vocab_``) under the prior, least likely
        first (ties: the earlier), as ``"z_m-1 -> z_m: P = 0.003"`` with ``P = P_c(z_m | z_m-1)``, one of the
        ``M + 1`` factors in ``T(x) = -sum_m log P_c(z_m | z_m-1)`` (``<bos>``/``<eos>`` included); a transition
        occurring ``n > 1`` times says ``(n times)``.  ``shown``: the ``M`` names to print for the states (e.g.
        the given title beside ``<unk>``), default ``types``."""
        unknown = [t for t in types if t not in self.index_]
        if unknown:
            raise ValueError(f"section types {unknown[:3]} are not states of the prior (vocab_): map unseen titles "
                             f"to {UNKNOWN!r}")
        shown = list(types if shown is None else shown)
        if len(shown) != len(types):
            raise ValueError(f"{len(shown)} names shown for {len(types)} section types")
        states, names = ["<bos>", *types, "<eos>"], ["<bos>", *shown, "<eos>"]
        seen: dict[tuple[str, str], list] = {}  # (from, to) shown -> [log P, first position, count]
        for m in range(1, len(states)):
            key = (names[m - 1], names[m])
            if key in seen:
                seen[key][2] += 1
            else:
                seen[key] = [self.transition_log_probability(states[m - 1], states[m]), m, 1]
        least = sorted(seen.items(), key=lambda kv: (kv[1][0], kv[1][1]))[:self.reason_transitions]
        return [f"{a} -> {b}: P = {math.exp(lp):.3g}" + (f" ({n} times)" if n > 1 else "")
                for (a, b), (lp, _, n) in least]

    def reasons(self, result, document: Document | None) -> list[str]:
        """The least likely transitions of the document's chain of given titles (:meth:`transition_reasons`), a
        title never seen in training shown as ``<unk> ("its title")``.  The titles are read from ``document``
        (required: the projection keeps no extras), as :meth:`project` reads them."""
        if document is None:
            raise ValueError(f"{type(self).__name__}.reasons reads the document's section titles: pass the document")
        why = self.check(document)
        if why is not None:
            raise ValueError(f"document {document.id!r} cannot be projected by this critic: {why}")
        titles = self.titles(document)
        if len(titles) + 1 != result.latent_steps:
            raise ValueError(f"document {document.id!r} has {len(titles)} sections, its result M(x) = "
                             f"{result.latent_steps:g} (sections + 1): not the document that was scored")
        types = [t if t in self.index_ else UNKNOWN for t in titles]
        shown = [t if t == raw else f'{UNKNOWN} ("{raw}")' for t, raw in zip(types, titles)]
        return self.transition_reasons(types, shown)

    def fit_warnings(self) -> list[str]:
        """A prior over a single section type (e.g. every training document has one section, titled alike)
        scores every chain of a given length the same: it cannot tell documents apart."""
        self._require_fitted()
        types = [t for t in self.vocab_ if t != UNKNOWN]
        if len(types) > 1:
            return super().fit_warnings()
        return super().fit_warnings() + [f"fitted on a single section type ({', '.join(map(repr, types)) or 'none'}): every document's chain "
                "scores the same for its length, so this critic cannot tell documents apart"]

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        start, trans, end = self.counts_
        state = {"vocab": self.vocab_, "delta": self.delta_, "lemmas": self.lemmas_,
                 "validation_ppl": {repr(k): v for k, v in self.validation_ppl_.items()},
                 "validation_skipped": self.validation_skipped_}
        tensors = {"start": torch.as_tensor(start), "transition": torch.as_tensor(trans),
                   "end": torch.as_tensor(end)}
        return state, tensors

    def _set_state(self, state, tensors) -> None:
        lemmas = state.get("lemmas", {})  # a critic saved before lemma tables: simplemma lemmatises every word
        if not isinstance(lemmas, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in lemmas.items()):
            raise ValueError("saved lemmas must map words to lemmas")
        self.lemmas_ = dict(lemmas)
        self._memo().lemmas = self.lemmas_
        self._set_vocab(list(state["vocab"]))
        self.delta_ = _check_delta(state["delta"], "saved delta")
        self.validation_ppl_ = {float(k): v for k, v in state["validation_ppl"].items()}
        self.validation_skipped_ = {str(k): str(v) for k, v in state["validation_skipped"].items()}
        self.counts_ = tuple(tensors[k].numpy() for k in ("start", "transition", "end"))
        self._set_prior(self.delta_)
