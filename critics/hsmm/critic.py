"""The HSMM as a general critic of token sequences.

* Latent: a segmentation of the token sequence into segments with states.
* Prior ``P_c(z)``: the semi-Markov chain over states and durations
  (:class:`SemiMarkovChain`: initial, transition and duration log-probabilities).
* Posterior ``P_c(z|x)``: the semi-Markov CRF given ``x``
  (:class:`SemiMarkovPosterior`), prior potentials plus n-gram emissions.
* Latent NLL, exact: ``T(x) = -sum_edges mu(edge) * log-prior(edge)``, the posterior
  edge marginals (autograd of the log-partition) times the additive log-prior
  potentials (initial state, transitions, durations).
* Latent steps ``M(x)``: the posterior expected number of segments.
* Memory: a posterior keeps its documents' token indices; emission scores ``(b, T, K, C)`` and the
  autograd graph of the edge counts exist for one width group of documents at a time
  (:func:`width_groups`, :data:`GROUP_SCORES`), so scoring 5,000 documents holds about what scoring 500
  does (``python -m experiments.benchmarks.hsmm_memory``).

Tokens: ``doc.metadata["tokens"]`` (a list of str) when present, else the
whitespace-split text of the document.  A document with a token never seen in
training (or none at all) cannot be projected; :meth:`HSMMCritic.check` says so.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.distributions import Distribution, constraints

from critic import Critic, register_critic
from critic.critic import Projection
from critic.document import Document
from critic.latent import register_cross_entropy

from . import semimarkov as sm
from .model import HSMMLM, TrainConfig, train_hsmm
from .ngrams import NgramVocab, build_vocab

__all__ = ["HSMMCritic", "SemiMarkovChain", "SemiMarkovPosterior", "doc_tokens", "width_groups", "GROUP_SCORES"]

GROUP_SCORES = 2**20
"""Emission scores (8 MiB in float64) a width group of the posterior holds at most: ``cells = GROUP_SCORES //
(K C)`` (row, position) cells, 8,192 at ``K = 8, C = 16``.  A group's memory (its scores, float32 and float64,
and the forward pass's autograd graph) is bounded by it whatever the batch or the set; a document longer than
``cells`` is a group of its own."""


def doc_tokens(doc: Document) -> list[str]:
    """A document's token sequence: ``metadata["tokens"]`` or its whitespace-split text."""
    toks = doc.metadata.get("tokens") if doc.metadata else None
    return [str(t) for t in toks] if toks is not None else doc.text.split()


def width_groups(lengths: np.ndarray, cells: int) -> list[np.ndarray]:
    """Rows ``0 .. B - 1`` cut into groups of similar length, padded to their longest within ``cells``.

    Rows sorted by length (stable) are taken in turn while ``rows x longest <= cells`` (at least one row a
    group; a row longer than ``cells`` is a group of its own), so a group of ``b`` rows padded to its longest
    ``T`` has ``b T <= cells`` and wastes only the spread of lengths within it, not the batch's.
    """
    order = np.argsort(lengths, kind="stable")
    groups, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * lengths[order[stop]] <= cells:
            stop += 1
        groups.append(order[start:stop])
        start = stop
    return groups


class SemiMarkovChain(Distribution):
    """Prior over segmentations: log-probabilities ``init (C,)``, ``trans (C, C)``, ``dur (C, K)``."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, init: torch.Tensor, trans: torch.Tensor, dur: torch.Tensor):
        self.init, self.trans, self.dur = init, trans, dur
        super().__init__(batch_shape=torch.Size(), validate_args=False)


class SemiMarkovPosterior(Distribution):
    """Semi-Markov CRF ``P(z | x)`` over segmentations of a batch (batch shape ``(B,)``).

    Factors ``init (C,)``, ``trans (C, C)``, ``dur (C, K)`` and emission scores that ``emission(rows)`` builds
    for any rows of the batch: ``(len(rows), T, K, C)``, ``T`` the longest of their ``lengths (B,)``.  The
    programmes that give each document numbers of its own (:attr:`marginals`, :meth:`entropy`) run on
    :func:`width_groups` of rows of at most ``cells`` (row, position) cells, one group's scores and graph in
    memory at a time, never the batch padded to its longest document; :attr:`emit` (the whole batch, for
    Viterbi, k-best and samples) is built when read and not kept.
    """

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, init, trans, dur, emission: Callable[[np.ndarray], torch.Tensor], lengths, *, cells: int):
        self.init, self.trans, self.dur, self.emission, self.lengths = init, trans, dur, emission, lengths
        self.cells = cells
        self._marginals = None
        super().__init__(batch_shape=torch.Size([len(lengths)]), validate_args=False)

    @property
    def emit(self) -> torch.Tensor:
        """Emission scores of the whole batch, ``(B, T, K, C)`` (built on each read)."""
        return self.emission(np.arange(len(self.lengths)))

    def _by_groups(self, programme: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
        """``programme(emit, lengths)`` of each width group, its ``(b, ...)`` outputs put back in batch order: ``(B, ...)``."""
        dev = self.lengths.device
        groups = width_groups(self.lengths.cpu().numpy(), self.cells)
        outputs = [programme(self.emission(rows), self.lengths[torch.as_tensor(rows, device=dev)]) for rows in groups]
        order = torch.as_tensor(np.argsort(np.concatenate(groups)), device=dev)
        return [torch.cat(parts)[order] for parts in zip(*outputs)]

    def _edge_counts(self, emit: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        counts = sm.edge_counts(self.init, self.trans, self.dur, emit, lengths)
        return counts.log_z, counts.init, counts.trans, counts.dur

    @property
    def marginals(self) -> sm.EdgeCounts:
        """Per-document expected counts of the prior's edges (cached)."""
        if self._marginals is None:
            self._marginals = sm.EdgeCounts(*self._by_groups(self._edge_counts))
        return self._marginals

    @property
    def log_partition(self) -> torch.Tensor:
        return self.marginals.log_z

    def argmax(self):
        """Viterbi: ``(score, states (B, T), starts (B, T))``."""
        return sm.viterbi(self.init, self.trans, self.dur, self.emit, self.lengths)

    def entropy(self) -> torch.Tensor:
        """``H(z | x)`` per document, ``(B,)`` nats (torch-struct's ``EntropySemiring``)."""
        return self._by_groups(lambda emit, lengths: (sm.entropy(self.init, self.trans, self.dur, emit, lengths),))[0]

    def kbest(self, k: int) -> tuple[torch.Tensor, list[list[list[tuple[int, int, int]]]]]:
        """The ``k`` best segmentations per document: :func:`~critics.hsmm.semimarkov.kbest`."""
        return sm.kbest(k, self.init, self.trans, self.dur, self.emit, self.lengths)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        """Segmentations ``z ~ P(z | x)`` as 0/1 segment indicators ``(*sample_shape, B, T, K, C)``."""
        n = math.prod(sample_shape)
        draws = sm.sample(n, self.init, self.trans, self.dur, self.emit, self.lengths)
        return draws.reshape(*sample_shape, *draws.shape[1:])


@register_cross_entropy(SemiMarkovPosterior, SemiMarkovChain)
def _semimarkov_cross_entropy(q: SemiMarkovPosterior, p: SemiMarkovChain) -> torch.Tensor:
    m = q.marginals
    ll = (m.init * p.init).sum(-1) + (m.trans * p.trans).sum((-1, -2)) + (m.dur * p.dur).sum((-1, -2))
    return -ll.to(torch.float64)


@register_critic("hsmm")
class HSMMCritic(Critic):
    """Hidden semi-Markov model critic over token sequences (paper sec. 3, app. D)."""

    extra = "hsmm"  # pip install 'critic[hsmm]': what it needs beyond the core
    needs = "token sequences (metadata \"tokens\", else the text split on whitespace)"

    def __init__(
        self,
        num_states: int = 16,
        max_len: int = 8,
        top_k_ngrams: int = 5000,
        end_token: str | None = None,
        fit_batch_size: int = 32,
        pretrain_epochs: int = 1,
        pretrain_lr: float = 0.1,
        epochs: int = 5,
        lr: float = 0.3,
        seed: int = 0,
    ):
        self.num_states = num_states
        self.max_len = max_len
        self.top_k_ngrams = top_k_ngrams
        self.end_token = end_token
        self.fit_batch_size = fit_batch_size
        self.pretrain_epochs = pretrain_epochs
        self.pretrain_lr = pretrain_lr
        self.epochs = epochs
        self.lr = lr
        self.seed = seed

    # ------------------------------------------------------------------ encoding
    def _sequences(self, docs: Sequence[Document]) -> list[np.ndarray]:
        """Each document's token indices."""
        return [np.array([self.token_index_[t] for t in doc_tokens(d)], dtype=np.int64) for d in docs]

    def _emission(self, sequences: Sequence[np.ndarray], rows: np.ndarray) -> torch.Tensor:
        """Emission scores of ``sequences[rows]``: ``(len(rows), T, K, C)`` float64, ``T`` their longest."""
        tokens, lengths = _padded([sequences[r] for r in rows])
        m = self.model_
        ids = torch.as_tensor(m.vocab.lookup(tokens, lengths), dtype=torch.long, device=m.trans_logits.device)
        with torch.no_grad():
            return m.emission_scores(ids).double()

    def check(self, doc: Document) -> str | None:
        self._require_fitted()
        toks = doc_tokens(doc)
        if not toks:
            return "empty token sequence"
        unknown = sorted({t for t in toks if t not in self.token_index_})
        if unknown:
            return f"{len(unknown)} token type(s) never seen in training, e.g. {unknown[0]!r}"
        return None

    # ------------------------------------------------------------------ fitting
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None, log=None) -> "HSMMCritic":
        docs = [d for d in docs]
        bad = [d.id for d in docs if not doc_tokens(d)]
        if bad:
            raise ValueError(f"{len(bad)} training document(s) have no tokens, e.g. {bad[0]!r}")
        vocab = sorted({t for d in docs for t in doc_tokens(d)})
        self.token_index_ = {t: i for i, t in enumerate(vocab)}
        dev = self.device
        tokens, lengths = _padded(self._sequences(docs))
        end = self.token_index_.get(self.end_token) if self.end_token is not None else None
        ngrams = build_vocab(tokens, lengths, max_len=self.max_len, top_k=self.top_k_ngrams, base=len(vocab), final_only=end)
        if not validation:
            raise ValueError("HSMMCritic.fit needs validation documents (learning-rate halving and the best "
                             "checkpoint are chosen on them)")
        self.validation_skipped_ = {d.id: r for d in validation if (r := self.check(d)) is not None}
        valid_docs = [d for d in validation if d.id not in self.validation_skipped_]
        if not valid_docs:
            first = next(iter(self.validation_skipped_.items()))
            raise ValueError(f"none of the {len(validation)} validation documents can be used, "
                             f"e.g. {first[0]!r}: {first[1]}")
        v_tokens, v_lengths = _padded(self._sequences(valid_docs))
        model = HSMMLM(ngrams, self.num_states, seed=self.seed).to(dev)
        cfg = TrainConfig(
            num_states=self.num_states, top_k_ngrams=self.top_k_ngrams, batch_size=self.fit_batch_size,
            pretrain_epochs=self.pretrain_epochs, pretrain_lr=self.pretrain_lr, epochs=self.epochs, lr=self.lr,
        )
        history = train_hsmm(model, ngrams.lookup(tokens, lengths), lengths, ngrams.lookup(v_tokens, v_lengths),
                             v_lengths, cfg, seed=self.seed, device=dev, log=log or (lambda s: None))
        self.model_ = model.eval()
        self.history_ = history["history"]
        return self

    # ------------------------------------------------------------------ latent space
    def prior(self) -> SemiMarkovChain:
        self._require_fitted()
        with torch.no_grad():
            m = self.model_
            return SemiMarkovChain(m.log_init().double(), m.log_trans().double(), m.log_dur().double())

    def project(self, docs: Sequence[Document]) -> Projection:
        """The semi-Markov CRF posterior of a batch; ``M(x)`` = posterior expected number of segments.

        Edge marginals (autograd of the log-partition, by width groups of the batch) are computed once
        here and reused by the exact cross-entropy.
        """
        kept, q, failures = self.posterior(docs)
        if q is None:
            return Projection([], None, torch.zeros(0, dtype=torch.float64), failures)
        return Projection(kept, q, q.marginals.num_segments.to(torch.float64).cpu(), failures)

    def posterior(self, docs: Sequence[Document]) -> tuple[list[str], SemiMarkovPosterior | None, dict[str, str]]:
        """``(ids of the documents kept, their posterior (None if none), failures)``; nothing computed yet."""
        self._require_fitted()
        failures = {d.id: r for d in docs if (r := self.check(d)) is not None}
        kept = [d for d in docs if d.id not in failures]
        if not kept:
            return [], None, failures
        sequences = self._sequences(kept)
        p, m = self.prior(), self.model_
        lengths = torch.as_tensor([len(x) for x in sequences], device=m.trans_logits.device)
        q = SemiMarkovPosterior(p.init, p.trans, p.dur, functools.partial(self._emission, sequences), lengths,
                                cells=max(1, GROUP_SCORES // (m.max_len * m.num_states)))
        return [d.id for d in kept], q, failures

    def entropy(self, docs: Sequence[Document]) -> dict[str, float]:
        """``H(z | x)`` of each document's segmentation posterior, in nats (documents that project)."""
        kept, q, _ = self.posterior(docs)
        return {} if q is None else dict(zip(kept, q.entropy().tolist()))

    def kbest(self, doc: Document, k: int = 5) -> list[tuple[float, list[tuple[list[str], int]]]]:
        """The ``k`` most probable segmentations of one document, best first.

        Each is ``(log P(z | x), [(segment tokens, state), ...])``; fewer than ``k``
        when the document has fewer segmentations.
        """
        _, q, failures = self.posterior([doc])
        if q is None:
            raise ValueError(f"document {doc.id!r} cannot be projected: {failures[doc.id]}")
        scores, (segmentations,) = q.kbest(k)
        log_z = float(sm.log_partition(q.init, q.trans, q.dur, q.emit, q.lengths)[0])
        tokens = doc_tokens(doc)
        return [(float(score) - log_z, [(tokens[s : s + n], c) for s, n, c in segs])
                for score, segs in zip(scores[:, 0].tolist(), segmentations)]

    def _move(self, device: torch.device) -> None:
        self.model_ = self.model_.to(device)

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        m = self.model_
        tensors = {k: v.detach().cpu() for k, v in m.state_dict().items()}
        tensors["ngram_tokens"] = torch.as_tensor(m.vocab.tokens)
        tensors["ngram_lengths"] = torch.as_tensor(m.vocab.lengths)
        tokens = sorted(self.token_index_, key=self.token_index_.get)
        return {"tokens": tokens, "history": self.history_, "validation_skipped": self.validation_skipped_}, tensors

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        self.token_index_ = {t: i for i, t in enumerate(state["tokens"])}
        vocab = NgramVocab.from_tokens(len(state["tokens"]), tensors["ngram_tokens"].numpy(),
                                       tensors["ngram_lengths"].numpy(), self.max_len)
        model = HSMMLM(vocab, self.num_states)
        model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("ngram_")})
        self.model_ = model.eval()
        self.history_ = list(state["history"])
        self.validation_skipped_ = dict(state["validation_skipped"])


def _padded(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens (N, T), lengths (N,))``: the sequences padded with ``-1`` to the longest (``T >= 1``)."""
    lengths = np.array([len(x) for x in sequences], dtype=np.int64)
    tokens = np.full((len(sequences), max(int(lengths.max(initial=0)), 1)), -1, dtype=np.int64)
    for i, x in enumerate(sequences):
        tokens[i, : len(x)] = x
    return tokens, lengths
