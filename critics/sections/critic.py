"""Section-transition coherence critic (paper sec. 4, app. E).

Generative process: a first-order Markov chain over section types with a
start state ``<bos>`` and an end state ``<eos>``,

    P_c(z) = P(z_1 | <bos>) prod_{m=2}^{M} P(z_m | z_{m-1}) P(<eos> | z_M),

each section's text emitted given its type.  The prior is the bigram table
with add-delta smoothing, ``delta`` chosen on validation data from a grid:

    P(j | i) = (C[i, j] + delta) / (sum_j' C[i, j'] + delta * |targets(i)|),

where the targets of ``<bos>`` are the K section types and the targets of a
section type are the K types and ``<eos>``.  The K types are the training
titles plus an explicit unknown state ``<unk>``: a title never seen in
training maps to it, is counted and reported, never skipped.

Posterior: the *given-title* posterior, a point mass on the (normalised)
titles the document carries.  ``T(x) = -log P_c(z)`` and ``M(x)`` = number of
sections + 1 (transitions scored), so the Latent PPL is
``exp(-sum log P / number of transitions)`` as in the paper.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import torch

from critic.critic import Critic
from critic.document import Document
from critic.latent import PAD, MarkovChain, SequencePointMass
from critic.registry import register_critic

from .normalize import DEFAULT_DROP_TITLES, TitleNormalizer

__all__ = ["SectionTransitionCritic", "DEFAULT_DELTA_GRID", "UNKNOWN"]

UNKNOWN = "<unk>"
DEFAULT_DELTA_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)


@register_critic("sections")
class SectionTransitionCritic(Critic):
    """Bigram Markov prior over section titles; given-title (point-mass) posterior.

    Parameters
    ----------
    delta: fixed add-delta smoothing; ``None`` picks it on validation data from ``delta_grid``.
    delta_grid: candidate deltas (lowest validation Latent PPL wins; ties: the smaller delta).
    normalize_titles: apply app. E title normalisation (lemmatise, drop numbers, spellings).
    drop_titles: section titles (after normalisation) removed before projection, as in app. E.
    """

    def __init__(
        self,
        delta: float | None = None,
        delta_grid: Sequence[float] = DEFAULT_DELTA_GRID,
        normalize_titles: bool = True,
        drop_titles: Sequence[str] = DEFAULT_DROP_TITLES,
    ):
        self.delta = delta
        self.delta_grid = tuple(delta_grid)
        self.normalize_titles = normalize_titles
        self.drop_titles = tuple(drop_titles)

    # ------------------------------------------------------------ titles
    def _normalizer(self) -> TitleNormalizer:
        return TitleNormalizer(lemmatize=self.normalize_titles, remove_numbers=self.normalize_titles,
                               spellings=TitleNormalizer().spellings if self.normalize_titles else ())

    def titles(self, doc: Document) -> list[str | None]:
        """The document's section titles as the critic sees them (normalised, boilerplate dropped).

        A section without a title gives ``None``.
        """
        norm = self._normalizer()
        drop = {norm(t) for t in self.drop_titles}
        out: list[str | None] = []
        for sec in doc.sections:
            if sec.title is None or not sec.title.strip():
                out.append(None)
                continue
            t = norm(sec.title) if self.normalize_titles else sec.title.strip()
            if t not in drop:
                out.append(t if t else None)
        return out

    def check(self, doc: Document) -> str | None:
        if not doc.sections:
            return "document has no sections"
        titles = self.titles(doc)
        if not titles:
            return "no sections left after dropping " + "/".join(self.drop_titles) + " sections"
        missing = [k for k, t in enumerate(titles) if t is None]
        if missing:
            return (f"section {missing[0]} has no title (or none left after normalisation); the "
                    "given-title posterior needs one per section")
        return None

    def unknown_count(self, doc: Document) -> int:
        return sum(t not in self.index_ for t in self.titles(doc) if t is not None)

    # ------------------------------------------------------------ fitting
    def _indices(self, docs: Sequence[Document]) -> list[list[int]]:
        unk = self.index_[UNKNOWN]
        return [[self.index_.get(t, unk) for t in self.titles(d)] for d in docs]

    @staticmethod
    def _count(sequences: list[list[int]], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start, trans, end = np.zeros(k), np.zeros((k, k)), np.zeros(k)
        for seq in sequences:
            start[seq[0]] += 1
            np.add.at(trans, (seq[:-1], seq[1:]), 1)
            end[seq[-1]] += 1
        return start, trans, end

    @staticmethod
    def smoothed_log_probs(start: np.ndarray, trans: np.ndarray, end: np.ndarray, delta: float
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add-delta smoothed ``(log pi, log A, log f)`` from transition counts."""
        k = start.shape[0]
        initial = np.log((start + delta) / (start.sum() + delta * k))
        denom = trans.sum(1) + end + delta * (k + 1)
        transition = np.log((trans + delta) / denom[:, None])
        final = np.log((end + delta) / denom)
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
        return as_t(initial), as_t(transition), as_t(final)

    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None
            ) -> "SectionTransitionCritic":
        reasons = {d.id: self.check(d) for d in docs}
        bad = {k: v for k, v in reasons.items() if v is not None}
        usable = [d for d in docs if reasons[d.id] is None]
        if bad:
            first = next(iter(bad.items()))
            raise ValueError(f"{len(bad)} training document(s) cannot be used, e.g. {first[0]!r}: {first[1]}")
        if not usable:
            raise ValueError("no training documents")
        freq = Counter(t for d in usable for t in self.titles(d))
        vocab = sorted(freq, key=lambda t: (-freq[t], t)) + [UNKNOWN]
        self.vocab_ = vocab
        self.index_ = {t: i for i, t in enumerate(vocab)}
        self.counts_ = self._count(self._indices(usable), len(vocab))
        if self.delta is not None:
            self.delta_ = float(self.delta)
            self.validation_ppl_ = {}
        else:
            if not validation:
                raise ValueError("delta=None picks delta on validation data: pass validation=docs "
                                 "or set delta")
            val = [d for d in validation if self.check(d) is None]
            if not val:
                raise ValueError("no usable validation document to choose delta")
            seqs = self._indices(val)
            steps = sum(len(s) + 1 for s in seqs)
            scores = {}
            for delta in self.delta_grid:
                self._set_prior(delta)
                nll = float(self.latent_nll(val).sum())
                scores[delta] = float(np.exp(nll / steps))
            self.validation_ppl_ = scores
            self.delta_ = min(scores, key=lambda d: (scores[d], d))
        self._set_prior(self.delta_)
        return self

    def _set_prior(self, delta: float) -> None:
        self.prior_ = MarkovChain(*self.smoothed_log_probs(*self.counts_, delta))

    # ------------------------------------------------------------ projection
    def prior(self) -> MarkovChain:
        self._require_fitted()
        return self.prior_

    def posterior(self, docs: Sequence[Document]) -> SequencePointMass:
        """Point mass on each document's title indices, ``(B, L)`` padded with ``PAD``."""
        seqs = self._indices(docs)
        width = max(len(s) for s in seqs)
        states = torch.full((len(seqs), width), PAD, dtype=torch.long)
        for b, s in enumerate(seqs):
            states[b, : len(s)] = torch.as_tensor(s)
        return SequencePointMass(states)

    def latent_steps(self, docs: Sequence[Document]) -> torch.Tensor:
        return torch.tensor([len(self.titles(d)) + 1 for d in docs], dtype=torch.float64)

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

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        start, trans, end = self.counts_
        state = {"vocab": self.vocab_, "delta": self.delta_,
                 "validation_ppl": {repr(k): v for k, v in self.validation_ppl_.items()}}
        tensors = {"start": torch.as_tensor(start), "transition": torch.as_tensor(trans),
                   "end": torch.as_tensor(end)}
        return state, tensors

    def _set_state(self, state, tensors) -> None:
        self.vocab_ = list(state["vocab"])
        self.index_ = {t: i for i, t in enumerate(self.vocab_)}
        self.delta_ = float(state["delta"])
        self.validation_ppl_ = {float(k): v for k, v in state["validation_ppl"].items()}
        self.counts_ = tuple(tensors[k].numpy() for k in ("start", "transition", "end"))
        self._set_prior(self.delta_)
