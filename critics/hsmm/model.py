"""The HSMM language model of paper app. D.

Parameters (all logits, normalised with softmax):

* ``init_logits`` ``(C,)``: the first state (transition from the start state);
* ``trans_logits`` ``(C, C)``: ``P(z_m | z_{m-1})``;
* ``dur_logits`` ``(C, K)``: ``P(N_m = k + 1 | z_m)``;
* ``emit_logits`` ``(C, V)`` over an :class:`~critics.hsmm.ngrams.NgramVocab`
  of training-data n-grams: ``P(x^m | z_m, N_m)`` is a softmax over the n-grams
  *of length* ``N_m`` (not the true subsequences: app. D, footnote 17).

``log_likelihood`` marginalises states and segmentations with the linear
semi-Markov forward pass of :mod:`critics.hsmm.semimarkov`.  Windows that are
not in the vocabulary get :data:`~critics.hsmm.semimarkov.NEG`; since every
seen unigram is in it, every sequence over seen tokens has a segmentation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import semimarkov as sm
from .ngrams import NgramVocab

__all__ = ["HSMMLM", "TrainConfig", "train_hsmm", "batches", "Checkpointer", "evaluate"]


class HSMMLM(nn.Module):
    def __init__(self, vocab: NgramVocab, num_states: int, *, init_scale: float = 1.0, seed: int = 0):
        super().__init__()
        self.vocab = vocab
        C, K, V = num_states, vocab.max_len, vocab.size
        g = torch.Generator().manual_seed(seed)

        def xavier(*shape):  # Glorot-uniform as in app. D
            fan = shape[-1] + (shape[-2] if len(shape) > 1 else 1)
            bound = init_scale * math.sqrt(6.0 / fan)
            return nn.Parameter((torch.rand(*shape, generator=g) * 2 - 1) * bound)

        self.init_logits = xavier(C)
        self.trans_logits = xavier(C, C)
        self.dur_logits = xavier(C, K)
        self.emit_logits = xavier(C, V)
        self.register_buffer("ngram_lengths", torch.as_tensor(vocab.lengths, dtype=torch.long), persistent=False)
        self.register_buffer("offsets", torch.as_tensor(vocab.offsets, dtype=torch.long), persistent=False)

    @property
    def num_states(self) -> int:
        return self.trans_logits.shape[0]

    @property
    def max_len(self) -> int:
        return self.dur_logits.shape[1]

    # ------------------------------------------------------------------ log-probabilities
    def log_init(self) -> torch.Tensor:
        return self.init_logits.log_softmax(-1)

    def log_trans(self) -> torch.Tensor:
        return self.trans_logits.log_softmax(-1)

    def log_dur(self) -> torch.Tensor:
        return self.dur_logits.log_softmax(-1)

    def log_emit(self) -> torch.Tensor:
        """``(C, V)``: log P(n-gram | state, its length), normalised within each length."""
        parts = []
        off = self.offsets.tolist()
        for l in range(self.max_len):  # loop over the K lengths
            a, b = off[l], off[l + 1]
            if b > a:
                parts.append(self.emit_logits[:, a:b].log_softmax(-1))
        return torch.cat(parts, dim=1)

    def emission_scores(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, T, K, C)`` emission scores for window ids ``(B, T, K)`` (``-1`` = not in vocab)."""
        le = self.log_emit().t()  # (V, C)
        scores = le[ids.clamp_min(0)]
        return torch.where((ids >= 0).unsqueeze(-1), scores, torch.full_like(scores, sm.NEG))

    def potentials(self, ids: torch.Tensor):
        return self.log_init(), self.log_trans(), self.log_dur(), self.emission_scores(ids)

    def log_likelihood(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``log P(x)`` per sequence (conditioned on its length), shape ``(B,)``."""
        return sm.log_partition(*self.potentials(ids), lengths)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(
        self,
        n: int,
        *,
        stop_token: int,
        stop_count: int,
        max_segments: int,
        generator: torch.Generator | None = None,
        batch_size: int = 256,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ancestral samples, vectorised over ``batch_size`` samples at a time (loop over segments).

        The HSMM has no end state, so each sample is generated segment by segment
        until it holds ``stop_count`` copies of ``stop_token`` and is cut right
        after the last one (or after ``max_segments`` segments).
        Returns padded ``(tokens (n, T), lengths (n,))``.
        """
        parts = [self._sample_batch(min(batch_size, n - a), stop_token, stop_count, max_segments, generator)
                 for a in range(0, n, batch_size)]
        T = max((p[0].shape[1] for p in parts), default=0)
        tokens = np.concatenate([np.pad(t, ((0, 0), (0, T - t.shape[1])), constant_values=-1) for t, _ in parts]) if parts else np.zeros((0, 0), np.int64)
        lengths = np.concatenate([ln for _, ln in parts]) if parts else np.zeros(0, np.int64)
        return tokens, lengths

    def _sample_batch(self, n, stop_token, stop_count, max_segments, generator):
        dev = self.trans_logits.device
        init, trans, dur, emit = self.log_init(), self.log_trans(), self.log_dur(), self.log_emit()
        ngram_tok = torch.as_tensor(self.vocab.tokens, device=dev)
        ngram_len = self.ngram_lengths.to(dev)
        pieces, state = [], None
        for m in range(max_segments):
            logits = init.expand(n, -1) if state is None else trans[state]
            state = torch.multinomial(logits.exp(), 1, generator=generator).squeeze(1)
            k = torch.multinomial(dur[state].exp(), 1, generator=generator).squeeze(1)
            masked = torch.where(ngram_len[None, :] == (k + 1)[:, None], emit[state], torch.full_like(emit[state], -math.inf))
            ids = torch.multinomial(masked.exp(), 1, generator=generator).squeeze(1)
            pieces.append(ngram_tok[ids])
            toks = torch.cat(pieces, 1)
            if int(((toks == stop_token).sum(1) >= stop_count).sum()) == n:
                break
        toks = torch.cat(pieces, 1).cpu().numpy()
        return _cut(toks, stop_token, stop_count)


def _cut(toks: np.ndarray, stop_token: int, stop_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop padding (-1) inside rows and cut each row after its ``stop_count``-th stop token."""
    live = toks >= 0
    order = np.argsort(~live, axis=1, kind="stable")
    packed = np.take_along_axis(toks, order, 1)
    n_live = live.sum(1)
    count = np.cumsum(packed == stop_token, axis=1)
    hit = (count >= stop_count) & (packed == stop_token)
    first = np.where(hit.any(1), hit.argmax(1) + 1, n_live)
    lengths = np.minimum(first, n_live)
    T = int(lengths.max()) if lengths.size else 0
    out = np.where(np.arange(T)[None, :] < lengths[:, None], packed[:, :T], -1)
    return out, lengths


@dataclass
class TrainConfig:
    num_states: int = 800
    top_k_ngrams: int = 250_000
    batch_size: int = 8
    pretrain_epochs: int = 1
    pretrain_lr: float = 1e-1
    epochs: int = 10
    lr: float = 3e-1
    min_lr: float = 3e-4
    patience: int = 240  # steps without validation improvement before halving the lr
    eval_every: int = 40
    init_scale: float = 1.0
    max_valid: int = 512


def batches(n: int, batch_size: int, rng: np.random.Generator | None):
    idx = rng.permutation(n) if rng is not None else np.arange(n)
    for a in range(0, n, batch_size):
        yield idx[a: a + batch_size]


def _to_batch(ids: np.ndarray, lengths: np.ndarray, sel: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Window ids ``(b, T, K)`` int64 (``T`` the longest of the rows ``sel``) and their lengths, on ``device``."""
    ln = lengths[sel]
    T = int(ln.max())
    return torch.as_tensor(ids[sel, :T], dtype=torch.long, device=device), torch.as_tensor(ln, device=device)


def evaluate(model: HSMMLM, ids: np.ndarray, lengths: np.ndarray, batch_size: int, device) -> float:
    """Total ``log P(x)`` over a set."""
    total = 0.0
    with torch.no_grad():
        for sel in batches(len(lengths), batch_size, None):
            x, ln = _to_batch(ids, lengths, sel, device)
            total += float(model.log_likelihood(x, ln).double().sum())
    return total


def train_hsmm(
    model: HSMMLM,
    train_ids: np.ndarray,
    train_lengths: np.ndarray,
    valid_ids: np.ndarray,
    valid_lengths: np.ndarray,
    cfg: TrainConfig,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    checkpoint=None,
    log=print,
) -> dict:
    """Adam on ``-log P(x)`` per token, with app. D's emission pre-training phase.

    Phase 1 (``pretrain_epochs`` at ``pretrain_lr``) trains only the emission
    logits; phase 2 trains everything at ``lr``, halving it when the validation
    likelihood has not improved for ``patience`` steps (down to ``min_lr``).
    ``checkpoint``, when given, is a :class:`Checkpointer` saved after every epoch so an interrupted run resumes where it stopped.
    """
    rng = np.random.default_rng(seed)
    nv = min(cfg.max_valid, len(valid_lengths))
    state = {"phase": 0, "epoch": 0, "history": [], "best": -math.inf, "lr": cfg.lr, "since_best": 0}
    opt, restored = None, None
    if checkpoint is not None:
        restored = checkpoint.load(model)
        if restored is not None:
            state = restored["state"]
    phases = [("pretrain", cfg.pretrain_epochs, cfg.pretrain_lr, [model.emit_logits]), ("train", cfg.epochs, None, list(model.parameters()))]
    done = sum(p[1] for p in phases[: state["phase"]]) + (state["epoch"] if state["phase"] < len(phases) else 0)
    for _ in range(done):  # replay the shuffles of finished epochs, so a resumed run equals an uninterrupted one
        rng.permutation(len(train_lengths))
    for phase_i, (name, n_epochs, lr, params) in enumerate(phases):
        if phase_i < state["phase"]:
            continue
        opt = torch.optim.Adam(params, lr=lr if lr is not None else state["lr"])
        if restored is not None and phase_i == state["phase"] and "optimizer" in restored:
            opt.load_state_dict(restored["optimizer"])
        while state["epoch"] < n_epochs:
            steps = 0
            for sel in batches(len(train_lengths), cfg.batch_size, rng):
                x, ln = _to_batch(train_ids, train_lengths, sel, device)
                loss = -model.log_likelihood(x, ln).sum() / ln.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                if name == "train" and steps % cfg.eval_every == 0:
                    v = evaluate(model, valid_ids[:nv], valid_lengths[:nv], 64, device)
                    if v > state["best"]:
                        state["best"], state["since_best"] = v, 0
                    else:
                        state["since_best"] += cfg.eval_every
                        if state["since_best"] >= cfg.patience and state["lr"] > cfg.min_lr:
                            state["lr"] = max(state["lr"] / 2, cfg.min_lr)
                            state["since_best"] = 0
                            for group in opt.param_groups:
                                group["lr"] = state["lr"]
            state["epoch"] += 1
            v = evaluate(model, valid_ids[:nv], valid_lengths[:nv], 64, device)
            ppl = math.exp(-v / float(valid_lengths[:nv].sum()))
            state["history"].append({"phase": name, "epoch": state["epoch"], "valid_ppl": ppl, "lr": opt.param_groups[0]["lr"]})
            if checkpoint is not None:
                checkpoint.save(model, {"state": state, "optimizer": opt.state_dict()})
            log(f"hsmm {name} epoch {state['epoch']}/{n_epochs}: valid word PPL {ppl:.4f}")
        state["phase"], state["epoch"] = phase_i + 1, 0
        if checkpoint is not None:
            checkpoint.save(model, {"state": state})
    return state


class Checkpointer:
    """Model weights plus training state in one file, written atomically.

    Read back with ``torch.load(weights_only=True)``: tensors and plain
    containers only.
    """

    def __init__(self, path):
        from pathlib import Path

        self.path = Path(path)

    def save(self, model: nn.Module, extra: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), **extra}, tmp)
        tmp.replace(self.path)

    def load(self, model: nn.Module) -> dict | None:
        if not self.path.exists():
            return None
        blob = torch.load(self.path, weights_only=True, map_location="cpu")
        model.load_state_dict(blob.pop("model"))
        return blob
