"""Coreference-chain critic (paper sec. 5, app. G).

Generative process: a chain z of sentence starts and person-entity mentions
(:mod:`critics.coref.chains`) drawn from a 5-gram model whose every window is
relabelled by first appearance of its entities,

    P_c(z) = prod_i P(z_i | relabel(z_{i-4} .. z_{i-1}, z_i)),

padded before the first token.  The posterior is a point mass on the chain
that the resolver (neuralcoref, or precomputed clusters) finds in the text, so

    T_c(x) = -log P_c(z(x)),   M(x) = number of chain tokens (sentence starts included),

and the Latent PPL is ``exp(-sum log P / number of chain tokens scored)``.

The prior (``smoothing``):

- ``"kenlm"`` (default): modified Kneser-Ney estimated by KenLM's ``lmplz``
  (``--discount_fallback``) on the relabelled windows, queried through kenlm's
  state API (:mod:`critics.coref.kenlm_prior`);
- ``"authors"``: the authors' interpolated absolute discounting with one
  discount per order, ``D = n1 / (n1 + 2 n2)`` (:mod:`critics.coref.smoothing`).

A chain token never seen as a target in training is scored by the prior's
unknown-token probability and counted in the document's ``unknown``.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

import torch

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document
from critic.latent import ValuePointMass
from critic.registry import register_critic

from .chains import Chain, build_chain
from .resolvers import METADATA_KEY, Resolver, resolve

__all__ = ["CorefChainCritic", "SMOOTHINGS"]

Smoothing = Literal["kenlm", "authors"]
SMOOTHINGS = typing.get_args(Smoothing)


def _prior_class(smoothing: str):
    if smoothing == "kenlm":
        from .kenlm_prior import KenLMChainPrior

        return KenLMChainPrior
    from .smoothing import AuthorsChainPrior

    return AuthorsChainPrior


@register_critic("coref")
class CorefChainCritic(Critic):
    """Coreference chains under a 5-gram prior (see the module docstring).

    Settings: ``smoothing`` (``kenlm`` | ``authors``), ``order`` (5), ``resolver``
    (``auto`` | ``metadata`` | ``neuralcoref``: see :mod:`critics.coref.resolvers`),
    ``memory`` (lmplz's ``-S`` bound), ``unk_prob`` (the authors' probability of
    an unseen token, used with ``smoothing="authors"``).
    """

    batch_size = 256
    chunk_documents = 256  # a streamed chunk: one batch, seconds of neuralcoref resolution
    extra = "coref"  # pip install 'critic[coref]': what it needs beyond the core
    needs = ("free text: resolved by neuralcoref (critic setup neuralcoref), or clusters already in the "
             "metadata (critic coref resolve)")

    def __init__(self, *, smoothing: Smoothing = "kenlm", order: Annotated[int, Range(min=2)] = 5,
                 resolver: Resolver = "auto", memory: str = "1G", unk_prob: Annotated[float, Range(gt=0, lt=1)] = 1e-20):
        self.smoothing = smoothing
        self.order = order
        self.resolver = resolver
        self.memory = memory
        self.unk_prob = unk_prob

    # ------------------------------------------------------------------ chains
    def chains(self, docs: Sequence[Document]) -> tuple[dict[str, Chain], dict[str, str]]:
        """``({doc id: chain}, {doc id: why not})`` through the critic's resolver.

        One neuralcoref worker serves every batch of the critic (started when a document first needs it,
        closed at exit), not one per :meth:`project` call."""
        needs_worker = self.resolver == "neuralcoref" or (
            self.resolver == "auto" and any(METADATA_KEY not in d.metadata and d.text.strip() for d in docs))
        if needs_worker and getattr(self, "_worker", None) is None:
            from .neuralcoref import NeuralcorefResolver

            self._worker = NeuralcorefResolver()
        resolutions, failures = resolve(docs, resolver=self.resolver,
                                        neuralcoref=self._worker if needs_worker else None)
        return {i: build_chain(r) for i, r in resolutions.items()}, failures

    def fit_prior(self, chains: Sequence[Sequence[str]]):
        """A new prior with this critic's settings, fitted on ``chains`` (token sequences)."""
        self.check_params()
        cls = _prior_class(self.smoothing)
        if self.smoothing == "kenlm":
            return cls.fit(chains, order=self.order, memory=self.memory)
        return cls.fit(chains, order=self.order, unk_prob=self.unk_prob)

    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "CorefChainCritic":
        """Fit the prior on the chains of ``docs``; documents without a chain are counted in
        ``training_skipped_``.  ``validation`` is not needed (the smoothing has no free parameter)."""
        self.check_params()
        chains, failures = self.chains(docs)
        if not chains:
            raise ValueError(f"no training document gave a coreference chain ({len(failures)} failed"
                             + (f", e.g. {next(iter(failures.items()))}" if failures else "") + ")")
        self.prior_ = self.fit_prior([chains[d.id].tokens for d in docs if d.id in chains])
        self.training_chains_ = len(chains)
        self.training_tokens_ = int(sum(len(c) for c in chains.values()))
        self.training_skipped_ = dict(sorted(failures.items()))
        return self

    def project(self, docs: Sequence[Document]) -> Projection:
        self._require_fitted()
        chains, failures = self.chains(docs)
        ids = [d.id for d in docs if d.id in chains]
        tokens = [chains[i].tokens for i in ids]
        unknown = self.prior_.unknown(tokens)
        return Projection(
            doc_ids=ids,
            posterior=ValuePointMass(tokens),
            latent_steps=torch.tensor([len(t) for t in tokens], dtype=torch.float64),
            failures=failures,
            extras={"chain": [" ".join(t) for t in tokens],
                    "mention_spans": [[list(s) if s else None for s in chains[i].spans] for i in ids]},
            unknown={i: int(u.sum()) for i, u in zip(ids, unknown)},
        )

    def prior(self):
        self._require_fitted()
        return self.prior_

    # ------------------------------------------------------------------ report
    implausible_threshold: float = -7.0
    """A chain token is implausible when ``log P_c(z_i | window) <`` this (the paper's tables 15-17)."""

    def _view_chain(self, doc: Document, result) -> tuple[list[str], list] | str:
        """``(tokens, spans)`` of ``doc``'s chain: from the result's extras, else resolved again from the
        metadata's clusters or by a neuralcoref worker already running; else why not (a sentence)."""
        extras = getattr(result, "extras", None) or {}
        if "chain" in extras and "mention_spans" in extras:
            tokens = extras["chain"].split()
            return tokens, [tuple(s) if s else None for s in extras["mention_spans"]]
        from_metadata = self.resolver != "neuralcoref" and METADATA_KEY in doc.metadata
        if not from_metadata and getattr(self, "_worker", None) is None:
            return ("The chain's mention spans are not in this result and the document's metadata has no "
                    "coreference clusters; finding them would start neuralcoref for this page alone. Resolve the "
                    "documents first (critic coref resolve) to see them here.")
        chains, failures = self.chains([doc])
        if doc.id not in chains:
            return f"No coreference chain for this document: {failures.get(doc.id, 'unknown reason')}."
        chain = chains[doc.id]
        return list(chain.tokens), list(chain.spans)

    reason_windows: int = 3
    """How many chain windows :meth:`reasons` names."""

    def reasons(self, result, document: Document | None) -> list[str]:
        """The chain's least likely windows under the prior (:func:`~critics.coref.diagnostics.lowest_windows`):
        those with ``log P_c(z_i | window) <`` :attr:`implausible_threshold` (the paper's table 15), lowest first,
        at most :attr:`reason_windows` -- or the lowest ones when none is below -- each as ``". he:0 his:0 ->
        she:0 (token 7): log P = -9.21"`` (the document's chain tokens ``TEXT:ENTITY``, ``.`` a sentence start;
        ``(start)`` where the window begins before the chain), then how many more are below the threshold.  The
        chain is the extras' ``chain``, else found again as the document view finds it."""
        from .diagnostics import lowest_windows

        self._require_fitted()
        extras = getattr(result, "extras", None) or {}
        if "chain" in extras:
            tokens = extras["chain"].split()
        elif document is None:
            raise ValueError(f"the result of {result.id!r} has no 'chain' extra and no document was given")
        else:
            found = self._view_chain(document, result)
            if isinstance(found, str):
                raise ValueError(f"document {document.id!r}: {found}")
            tokens = found[0]
        if len(tokens) != result.latent_steps:
            raise ValueError(f"the chain of {result.id!r} has {len(tokens)} tokens, its result M(x) = "
                             f"{result.latent_steps:g}: not the chain that was scored")
        if not tokens:
            return []
        threshold = self.implausible_threshold
        rows, below = lowest_windows(self.prior_, tokens, threshold=threshold, top=self.reason_windows)
        out = [" ".join((["(start)"] if len(r["context"]) < self.prior_.order - 1 else []) + r["context"])
               + f" -> {r['token']} (token {r['position']}): log P = {r['log_prob']:.2f}" for r in rows]
        if below > len(rows):
            out.append(f"{below - len(rows)} more chain token(s) with log P < {threshold:g}")
        return out

    # ------------------------------------------------------------------ state
    def training_used(self) -> int:
        return self.training_chains_

    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        return {"training_chains": self.training_chains_, "training_tokens": self.training_tokens_,
                "training_skipped": self.training_skipped_}, {}

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        self.check_params()
        self.training_chains_ = int(state["training_chains"])
        self.training_tokens_ = int(state["training_tokens"])
        self.training_skipped_ = dict(state["training_skipped"])

    def _save_files(self, directory: Path) -> None:
        self.prior_.save(directory / "prior")

    def _load_files(self, directory: Path) -> None:
        self.prior_ = _prior_class(self.smoothing).load(directory / "prior")
