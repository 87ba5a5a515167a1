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

Tokens: ``doc.metadata["tokens"]`` (a list of str) when present, else the
whitespace-split text of the document.  A document with a token never seen in
training (or none at all) cannot be projected; :meth:`HSMMCritic.check` says so.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

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

__all__ = ["HSMMCritic", "SemiMarkovChain", "SemiMarkovPosterior", "doc_tokens"]


def doc_tokens(doc: Document) -> list[str]:
    """A document's token sequence: ``metadata["tokens"]`` or its whitespace-split text."""
    toks = doc.metadata.get("tokens") if doc.metadata else None
    return [str(t) for t in toks] if toks is not None else doc.text.split()


class SemiMarkovChain(Distribution):
    """Prior over segmentations: log-probabilities ``init (C,)``, ``trans (C, C)``, ``dur (C, K)``."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, init: torch.Tensor, trans: torch.Tensor, dur: torch.Tensor):
        self.init, self.trans, self.dur = init, trans, dur
        super().__init__(batch_shape=torch.Size(), validate_args=False)


class SemiMarkovPosterior(Distribution):
    """Semi-Markov CRF ``P(z | x)`` over segmentations of a batch (batch shape ``(B,)``)."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, init, trans, dur, emit, lengths):
        self.init, self.trans, self.dur, self.emit, self.lengths = init, trans, dur, emit, lengths
        self._marginals = None
        super().__init__(batch_shape=torch.Size([emit.shape[0]]), validate_args=False)

    @property
    def marginals(self) -> sm.Marginals:
        """Per-document expected counts (cached)."""
        if self._marginals is None:
            self._marginals = sm.marginals(self.init, self.trans, self.dur, self.emit, self.lengths)
        return self._marginals

    @property
    def log_partition(self) -> torch.Tensor:
        return self.marginals.log_z

    def argmax(self):
        """Viterbi: ``(score, states (B, T), starts (B, T))``."""
        return sm.viterbi(self.init, self.trans, self.dur, self.emit, self.lengths)

    def entropy(self) -> torch.Tensor:
        """``H(z | x)`` per document, ``(B,)`` nats (torch-struct's ``EntropySemiring``)."""
        return sm.entropy(self.init, self.trans, self.dur, self.emit, self.lengths)

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
    def _encode(self, docs: Sequence[Document]) -> tuple[np.ndarray, np.ndarray]:
        seqs = [[self.token_index_[t] for t in doc_tokens(d)] for d in docs]
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        tokens = np.full((len(seqs), max(int(lengths.max()), 1) if len(seqs) else 1), -1, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
        return tokens, lengths

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
        tokens, lengths = self._encode(docs)
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
        v_tokens, v_lengths = self._encode(valid_docs)
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

        Edge marginals (autograd of the log-partition) are computed once here
        and reused by the exact cross-entropy.
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
        tokens, lengths = self._encode(kept)
        m = self.model_
        dev = m.trans_logits.device
        ids = torch.as_tensor(m.vocab.lookup(tokens, lengths), device=dev)
        with torch.no_grad():
            init, trans, dur, emit = (x.double() for x in m.potentials(ids))
        return [d.id for d in kept], SemiMarkovPosterior(init, trans, dur, emit, torch.as_tensor(lengths, device=dev)), failures

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
