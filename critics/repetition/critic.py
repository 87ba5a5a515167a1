"""Repetition critic: a document's copy structure under a semi-Markov prior fitted on real text.

Latent ``z``: the document's factorisation into NEW segments and COPY segments of earlier text (:mod:`.factorize`,
greedy leftmost-longest, overlapping copies allowed as in LZ77) over its units, words or sentences of every section
in order (:mod:`.units`); a COPY keeps how far back its source starts.  Prior ``P_c(z)``: a two-state
explicit-duration process over NEW and COPY with log2-binned durations, and for each copy its offset: a loop (the
copy starts where its source ends, or inside it) or a distant copy (:mod:`.prior`); transitions, bins and loops
counted on the factorisations of real documents, with add-alpha pseudo-counts.

Posterior: a point mass on the factorisation of the text.  Which spans of a text repeat earlier ones is read off
the text, not inferred: a posterior over other segmentations (the semi-Markov forward pass over every (start,
length, state)) would weigh each by ``P_c(x | z)``, and the critic has no model of the words of NEW text to give
it.  So ``T(x) = -log P_c(z)`` exactly, and ``M(x)`` = segments + 1, the transitions scored (END included), as for
the section critic.
"""

from __future__ import annotations

import math
from textwrap import shorten
from typing import Annotated, Any, Sequence

import numpy as np
import torch

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document
from critic.latent import PAD, PointMass
from critic.registry import register_critic

from .factorize import Factorisation, encode, factorize
from .prior import COPY, END, NEW, CopySemiMarkov, log2_bin
from .units import UNIT_NAMES, Unit, Units, document_units, has_units, span_text

__all__ = ["RepetitionCritic", "DEFAULT_MIN_COPY"]

DEFAULT_MIN_COPY = {"sentence": 1, "token": 6}
"""The shortest copy by unit when ``min_copy`` is not given: one repeated sentence is a copy, while a repeated
word, or a few, is ordinary language.  6 words ranked looped man pages best among 5, 6, 8 and 10
(docs/critics/repetition.md)."""

EXCERPT = 60
"""Characters of the repeated text a reason shows (white space collapsed, cut at a word)."""

COUNT_SHAPES = {"transition_counts": (2, 3), "duration_counts": (3, None), "loop_counts": (2,)}
"""The fitted counts and their shapes (``None``: ``duration_bins + 1``)."""

ALLOWED = np.array([[False, True, True], [True, True, True]])
"""Transitions ``(2, 3)`` with positive probability: from NEW to COPY or END (NEW -> NEW would be one segment),
from COPY to anything."""


@register_critic("repetition")
class RepetitionCritic(Critic):
    """Copy factorisation under a two-state semi-Markov prior; point-mass posterior.

    Parameters
    ----------
    unit: ``"sentence"`` (the shared splitter, :mod:`critic.sentences`) or ``"token"`` (``\\w+`` words).
    min_copy: the shortest COPY segment, in units (``None``: :data:`DEFAULT_MIN_COPY` of the unit).
    duration_bins: ``B``, the log2-width duration bins before the geometric tail (durations ``< 2^B`` binned).
    transition_pseudocount: add-alpha smoothing of each allowed transition's count.
    duration_pseudocount: add-beta smoothing of each duration bin's count.

    Fitted attributes: ``transition_counts_ (2, 3)`` (from NEW, COPY to NEW, COPY, END), ``duration_counts_
    (3, B + 1)`` (per bin: NEW durations, COPY durations counted from ``min_copy``, distant copies' gaps),
    ``loop_counts_ (2,)`` (distant copies, loops), ``prior_`` (:class:`.prior.CopySemiMarkov`) and
    ``training_skipped_`` (id -> why: training documents without units).
    """

    extra = ""  # the core's dependencies suffice
    batch_size = 1024  # a projection is integer work per document: its memory is the padded (B, S, 3) segments
    needs = "documents with text (any sections)"
    outlier_statistics = ("looped_share",)  # a loop is one segment among many: T/M dilutes it

    def __init__(
        self,
        unit: Unit = "token",
        min_copy: Annotated[int | None, Range(min=1)] = None,
        duration_bins: Annotated[int, Range(min=1, max=40)] = 16,
        transition_pseudocount: Annotated[float, Range(gt=0, max=1e12)] = 0.5,
        duration_pseudocount: Annotated[float, Range(gt=0, max=1e12)] = 0.5,
    ):
        self.unit = unit
        self.min_copy = min_copy
        self.duration_bins = duration_bins
        self.transition_pseudocount = transition_pseudocount
        self.duration_pseudocount = duration_pseudocount

    @property
    def shortest_copy(self) -> int:
        """``min_copy``, or the unit's default."""
        return DEFAULT_MIN_COPY[self.unit] if self.min_copy is None else int(self.min_copy)

    # ------------------------------------------------------------ latent
    def units(self, doc: Document) -> Units:
        """The document's units (:func:`.units.document_units`)."""
        return document_units(doc, self.unit)

    def factorize(self, units: Units) -> Factorisation:
        """The copy factorisation of a document's units."""
        return factorize(encode(units.keys), self.shortest_copy)

    def check(self, doc: Document) -> str | None:
        return None if has_units(doc, self.unit) else f"document has no {UNIT_NAMES[self.unit][1]}"

    def _factorisations(self, docs: Sequence[Document]) -> tuple[list[Factorisation | None], dict[str, str]]:
        """Each document's factorisation (``None`` for one without units) and why those could not be used."""
        found, failures = [], {}
        for doc in docs:
            units = self.units(doc)
            found.append(self.factorize(units) if len(units) else None)
            if not len(units):
                failures[doc.id] = f"document has no {UNIT_NAMES[self.unit][1]}"
        return found, failures

    @staticmethod
    def segments(factorisations: Sequence[Factorisation]) -> torch.Tensor:
        """``(B, S, 3)`` int64: per document its segments' ``(state, duration, offset)`` rows (NEW = 0 with offset
        0, COPY = 1 with offset ``start - source``), padded with :data:`PAD` rows to the most segments ``S`` of the
        batch."""
        width = max((len(f.starts) for f in factorisations), default=0)
        out = np.full((len(factorisations), width, 3), PAD, dtype=np.int64)
        for b, f in enumerate(factorisations):
            out[b, :len(f.starts)] = np.stack([f.is_copy, f.lengths, f.offsets], 1)
        return torch.from_numpy(out)

    # ------------------------------------------------------------ fitting
    def count(self, factorisations: Sequence[Factorisation]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The counts the prior is smoothed from, over one or more factorisations: transitions ``(2, 3)`` (each
        segment to the next, the last to END); bins ``(3, B + 1)`` of NEW durations, COPY durations (counted from
        ``min_copy``: bin of ``d - min_copy + 1``) and distant copies' gaps ``o - d``; and the copies ``(2,)`` that
        are distant (``o > d``) and loops (``o <= d``)."""
        state = np.concatenate([f.is_copy for f in factorisations]).astype(np.int64)
        length = np.concatenate([f.lengths for f in factorisations])
        offset = np.concatenate([f.offsets for f in factorisations])
        following = np.append(state[1:], END)
        following[np.cumsum([len(f.starts) for f in factorisations]) - 1] = END  # a document's last segment
        transitions = np.zeros((2, 3))
        np.add.at(transitions, (state, following), 1)
        loop = (state == COPY) & (offset <= length)
        distant = (state == COPY) & ~loop
        rows = np.concatenate([state, np.full(distant.sum(), 2)])
        values = np.concatenate([np.where(state == COPY, length - (self.shortest_copy - 1), length),
                                 offset[distant] - length[distant]])
        bins = np.zeros((3, self.duration_bins + 1))
        np.add.at(bins, (rows, log2_bin(torch.from_numpy(values), self.duration_bins).numpy()), 1)
        return transitions, bins, np.array([distant.sum(), loop.sum()], dtype=np.float64)

    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "RepetitionCritic":
        """Count the factorisations of ``docs`` (``validation`` is not used: the smoothing is set, not chosen);
        documents without units are skipped, their reasons kept in ``training_skipped_``."""
        self.check_params()
        found, skipped = self._factorisations(docs)
        used = [f for f in found if f is not None]
        if not used:
            raise ValueError(f"no training document has {UNIT_NAMES[self.unit][1]} (of {len(docs)})")
        self.training_skipped_ = skipped
        self.transition_counts_, self.duration_counts_, self.loop_counts_ = self.count(used)
        self._set_prior()
        return self

    def training_used(self) -> int:
        self._require_fitted()
        return int(self.transition_counts_[:, END].sum())  # one END per document

    def smoothed_log_probs(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        """``log A (2, 3)``, the bin log-weights ``(3, B + 1)`` and ``log lambda`` from the counts:

            A(i, j) = (C[i, j] + alpha) / (sum_j' allowed C[i, j'] + alpha |allowed(i)|) for allowed (i, j), else 0;
            w_r(b) = (N[r, b] + beta) / (sum_b' N[r, b'] + beta (B + 1));
            lambda = (loops + alpha) / (copies + 2 alpha).
        """
        alpha, beta = self.transition_pseudocount, self.duration_pseudocount
        smoothed = np.where(ALLOWED, self.transition_counts_ + alpha, 0.0)
        bins = self.duration_counts_ + beta
        loop = (self.loop_counts_[1] + alpha) / (self.loop_counts_.sum() + 2 * alpha)
        with np.errstate(divide="ignore"):
            return (torch.from_numpy(np.log(smoothed / smoothed.sum(1, keepdims=True))),
                    torch.from_numpy(np.log(bins / bins.sum(1, keepdims=True))), math.log(loop))

    def _set_prior(self) -> None:
        transition, bins, log_loop = self.smoothed_log_probs()
        self.prior_ = CopySemiMarkov(transition.to(self.device), bins.to(self.device), log_loop, self.shortest_copy)

    def fold_params(self, share: float) -> dict[str, Any]:
        """A fold fitted on ``share`` of the documents smooths with ``share`` times the pseudo-counts, so an unseen
        transition or duration bin keeps the full fit's probability (``alpha / (N + K alpha)``)."""
        return {**self.get_params(), "transition_pseudocount": share * self.transition_pseudocount,
                "duration_pseudocount": share * self.duration_pseudocount}

    def _move(self, device: torch.device) -> None:
        self._set_prior()

    # ------------------------------------------------------------ projection
    def prior(self) -> CopySemiMarkov:
        self._require_fitted()
        return self.prior_

    def project(self, docs: Sequence[Document]) -> Projection:
        """Point mass on each document's segments ``(B, S, 3)`` (:meth:`segments`); ``M(x)`` = segments + 1.
        Extras per document: ``units`` (n), ``copied_share`` (units in COPY segments / n), ``looped_share`` (units
        in loops, copies that start where their source ends or inside it, / n: the outlier statistic),
        ``longest_copy`` (units) and ``copies`` (``[start, length, source]`` of each COPY segment, units counted
        from 0)."""
        found, failures = self._factorisations(docs)
        kept = [f for f in found if f is not None]
        return Projection(
            doc_ids=[d.id for d, f in zip(docs, found) if f is not None],
            posterior=PointMass(self.segments(kept).to(self.device), event_dim=2),
            latent_steps=torch.tensor([len(f.starts) + 1.0 for f in kept], dtype=torch.float64),
            failures=failures,
            extras={"units": [f.units for f in kept],
                    "copied_share": [f.copied_units / f.units for f in kept],
                    "looped_share": [f.looped_units / f.units for f in kept],
                    "longest_copy": [int(f.lengths[f.is_copy].max(initial=0)) for f in kept],
                    "copies": [[list(c) for c in f.copies] for f in kept]},
        )

    # ------------------------------------------------------------ report
    def segment_nll(self, factorisation: Factorisation) -> np.ndarray:
        """``(S + 1,)``: ``-log`` of each segment's factors in ``P_c(z)`` (entering it, its duration, a copy's
        offset), then of the END transition (:meth:`.prior.CopySemiMarkov.segment_log_probs`); they sum to
        ``T(x)``."""
        value = self.segments([factorisation]).to(self.device)
        return -self.prior().segment_log_probs(value)[0].cpu().numpy()

    def copy_costs(self, copies: Sequence[Sequence[int]], n: int) -> np.ndarray:
        """``(K,)``: each copy's factor ``-log`` in ``P_c(z)`` (:meth:`segment_nll`), for a document of ``n`` units
        with these ``K`` copies ``(start, length, source)`` (what its result's extras keep)."""
        factorisation = Factorisation.from_copies(copies, n)
        return self.segment_nll(factorisation)[:-1][factorisation.is_copy]

    reason_copies: int = 4
    """How many copies :meth:`reasons` names after its summary line."""

    def reasons(self, result, document: Document | None) -> list[str]:
        """A summary (how many units repeat earlier text, how many of them in loops), then the copies the prior
        finds least likely (largest factor ``-log P`` in ``T(x)``; ties: the earlier), each as ``"words 14-22
        repeat words 11-13 (section 'DESCRIPTION') 3 times in a row: "..." (-log P = 9.1)"``: where the copy is,
        what it repeats and where that was first written, how often (a loop repeats its source with period
        ``start - source``), the source's first words and the copy's factor.  From the result's extras; the
        ``document``, when given, adds section names and excerpts."""
        extras = result.extras
        n, copies = int(extras["units"]), [tuple(c) for c in extras["copies"]]
        one, many = UNIT_NAMES[self.unit]
        if not copies:
            return [f"no {one} repeats earlier text: {n} {many if n > 1 else one} of new text "
                    f"(-log P = {result.latent_nll:.1f})"]
        units = self.units(document) if document is not None else None
        if units is not None and len(units) != n:
            raise ValueError(f"document {document.id!r} has {len(units)} {many}, its result {n}: not the document "
                             "that was scored")
        copied = sum(length for _, length, _ in copies)
        looped = sum(length for start, length, source in copies if start - source <= length)
        lines = [f"{copied} of {n} {many} ({copied / n:.0%}) repeat earlier text in {len(copies)} "
                 f"cop{'ies' if len(copies) > 1 else 'y'}; {looped} ({looped / n:.0%}) in loops, right after what "
                 "they repeat"]
        costs = self.copy_costs(copies, n)
        for k in sorted(range(len(copies)), key=lambda k: (-costs[k], k))[:self.reason_copies]:
            lines.append(self._copy_reason(*copies[k], costs[k], units, document))
        return lines

    def _copy_reason(self, start: int, length: int, source: int, cost: float, units: Units | None,
                     document: Document | None) -> str:
        """One copy as a line of :meth:`reasons`."""
        one, many = UNIT_NAMES[self.unit]
        period = min(length, start - source)  # the span repeated: a loop's period, else the whole copy

        def where(first: int, count: int) -> str:
            span = f"{many} {first + 1}-{first + count}" if count > 1 else f"{one} {first + 1}"
            if units is None:
                return span
            section = int(units.sections[first])
            title = document.sections[section].title
            return span + (f" (section {title!r})" if title else f" (section {section + 1})")

        line = f"{where(start, length)} repeat{'s' if length == 1 else ''} {where(source, period)}"
        if start - source <= length:
            line += " right after it" if length == period else f" {length / period:g} times in a row"
        if units is not None:
            line += f': "{shorten(span_text(document, units, source, period), EXCERPT, placeholder=" …")}"'
        return line + f" (-log P = {cost:.1f})"

    def fit_warnings(self) -> list[str]:
        """A prior fitted on documents without a single copy gives every copy only its pseudo-counts' mass."""
        warnings = super().fit_warnings()
        if self.transition_counts_[NEW, COPY] == 0:
            warnings.append(f"no training document repeats a {UNIT_NAMES[self.unit][0]} (min_copy "
                            f"{self.shortest_copy}): the prior's COPY state is its pseudo-counts alone")
        return warnings

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        return ({"training_skipped": self.training_skipped_},
                {"transition_counts": torch.from_numpy(self.transition_counts_),
                 "duration_counts": torch.from_numpy(self.duration_counts_),
                 "loop_counts": torch.from_numpy(self.loop_counts_)})

    def _set_state(self, state, tensors) -> None:
        self.training_skipped_ = {str(k): str(v) for k, v in state["training_skipped"].items()}
        counts = {name: tensors[name].to(torch.float64).numpy() for name in COUNT_SHAPES}
        for name, shape in COUNT_SHAPES.items():
            want = tuple(self.duration_bins + 1 if n is None else n for n in shape)
            if counts[name].shape != want:
                raise ValueError(f"saved {name} has shape {counts[name].shape}, expected {want}")
            if not (np.isfinite(counts[name]).all() and (counts[name] >= 0).all()):
                raise ValueError(f"saved {name} must be finite and non-negative")
        self.transition_counts_, self.duration_counts_, self.loop_counts_ = counts.values()
        self._set_prior()
