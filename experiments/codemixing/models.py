"""Autoregressive (AR) and non-autoregressive (NAR) translation transformers of the same size (paper app. C).

Both models share one BPE vocabulary (:func:`build_tokenizer`: source and target sides, three special
tokens ``<|pad|>``, ``<|bos|>``, ``<|eos|>``) and one architecture: token embeddings (shared by the
encoder, the decoder and the output layer, which is tied to them), learned source and target position
embeddings, a pre-norm ``nn.TransformerEncoder`` of ``layers`` layers and a pre-norm
``nn.TransformerDecoder`` of ``layers`` layers (self-attention, cross-attention, feed-forward), dropout
``dropout``.  They differ only in the decoder's inputs and mask and in what they predict:

* **AR** (:class:`ARTranslator`): the decoder reads ``<|bos|> y_1 .. y_T`` under a causal mask and
  predicts ``y_1 .. y_T <|eos|>`` (teacher forcing):
  ``log p(y | x) = sum_t log p(y_t | y_<t, x) + log p(eos | y, x)``.
* **NAR** (:class:`NARTranslator`, Gu et al. 2018): a length head (a linear layer over the masked mean of
  the encoder states: classification over ``1 .. max_len``) predicts ``T``; the decoder has *no* causal
  mask and its inputs never contain target tokens: with ``nar_input="copy"`` (the default, Gu et al.'s
  uniform copy) target position ``t`` of ``T`` reads the source token embedding at source position
  ``floor((t + 1/2) S / T)`` plus the target position embedding, with ``nar_input="position"`` the
  position embedding alone.  Every position predicts its token independently:
  ``log p(y | x) = log p(T | x) + sum_t log p(y_t | x, T)``.  The length head is the only extra weight
  (``dim * max_len + max_len`` parameters: 1% of the default model).

``model.logits(src, src_pad, tgt, tgt_pad)`` gives the per-position logits of both kinds (the AR's
``T + 1``, the last predicting eos; the NAR's ``T``, which read only ``tgt_pad``); ``model.decode(memory,
src_pad, decoder_inputs, tgt_pad)`` is the decoder alone (the tests perturb its inputs).

Model folders (:func:`save_model` / :func:`load_model`): ``model.safetensors`` (the state dict; no
pickle), ``config.json`` (kind, :class:`TranslationConfig`, vocabulary size and special ids) and the
tokenizer (``tokenizer.json``).

Sampling (:func:`sample_ids`, :func:`sample`): batched, from a ``torch.Generator`` seeded per batch.  AR:
ancestral, temperature 1, until eos or ``max_len`` tokens.  NAR: the length from the length head, then
every position from its own categorical.  Draws use :func:`critic.lm.sampler.draw` (one uniform per
row).  Tokens that are never targets get probability 0: pad and bos (both kinds) and eos (NAR, whose
targets hold no eos), so a NAR sample has exactly the drawn number of tokens.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from critic.io import atomic_directory, atomic_write_text
from critic.lm.model import quiet_transformers, train_tokenizer
from critic.lm.runs import derived_seed, read_json_object
from critic.lm.sampler import Warp, draw

__all__ = ["KINDS", "SPECIAL_TOKENS", "TranslationConfig", "build_tokenizer", "encode", "ARTranslator",
           "NARTranslator", "build_model", "count_parameters", "save_model", "load_model", "sample_ids", "sample"]

KINDS = ("ar", "nar")
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
NAR_INPUTS = ("copy", "position")
MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"


@dataclass
class TranslationConfig:
    """Model size (the same for AR and NAR), tokenizer, training and sampling settings (CPU defaults)."""

    layers: int = 3
    heads: int = 4
    dim: int = 256
    ff: int = 1024
    max_len: int = 128               # tokens per side; longer pairs are left out of training
    dropout: float = 0.1
    vocab_size: int = 4096           # BPE vocabulary (bytes + specials + merges)
    nar_input: str = "copy"          # NAR decoder inputs: "copy" (Gu et al.'s uniform copy) or "position"
    length_weight: float = 1.0       # NAR loss = token CE + length_weight * length CE
    batch_size: int = 32
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 200          # linear warm-up, then linear decay to 0 at max_steps
    max_steps: int = 2000            # step budget
    max_tokens: int | None = None    # target-token budget (stops earlier when reached)
    eval_every: int = 200            # steps between validations (and checkpoints)
    max_grad_norm: float | None = 1.0
    samples_per_source: int = 1
    sample_batch_size: int = 64

    def check(self) -> None:
        for name in ("layers", "heads", "dim", "ff", "max_len", "batch_size", "max_steps", "eval_every",
                     "samples_per_source", "sample_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim ({self.dim}) must be a multiple of heads ({self.heads})")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise ValueError(f"max_tokens must be an integer >= 1 or None, got {self.max_tokens!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.nar_input not in NAR_INPUTS:
            raise ValueError(f"nar_input must be one of {', '.join(NAR_INPUTS)}, got {self.nar_input!r}")
        for name in ("learning_rate", "length_weight"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm!r}")
        if self.vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
            raise ValueError(f"vocab_size must exceed 256 bytes + {len(SPECIAL_TOKENS)} specials, "
                             f"got {self.vocab_size}")

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> "TranslationConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"unknown translation config keys: {', '.join(unknown)}")
        config = cls(**obj)
        config.check()
        return config


# ------------------------------------------------------------------------------------------------ tokenizer
def build_tokenizer(pairs: Sequence[tuple[str, str]], vocab_size: int = 4096):
    """A byte-level BPE tokenizer trained on both sides of ``pairs`` (source, target, source, ...), with
    pad/bos/eos special tokens; deterministic (:func:`critic.lm.model.train_tokenizer`)."""
    texts = [text for pair in pairs for text in pair]
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
    tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token = PAD, BOS, EOS
    return tokenizer


def encode(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens added."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def special_ids(tokenizer) -> dict[str, int]:
    return {"pad_id": tokenizer.convert_tokens_to_ids(PAD), "bos_id": tokenizer.convert_tokens_to_ids(BOS),
            "eos_id": tokenizer.convert_tokens_to_ids(EOS)}


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids (B, L), pad mask (B, L) True at padding)`` of right-padded ``seqs``."""
    width = max(1, max((len(s) for s in seqs), default=1))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    lengths = torch.as_tensor([len(s) for s in seqs], dtype=torch.long)
    return ids, torch.arange(width)[None, :] >= lengths[:, None]


# ----------------------------------------------------------------------------------------------------- models
class _Seq2Seq(nn.Module):
    """What AR and NAR share: embeddings, encoder, decoder stack, tied output layer."""

    kind = ""

    def __init__(self, config: TranslationConfig, vocab_size: int, *, pad_id: int, bos_id: int, eos_id: int):
        super().__init__()
        self.config, self.vocab_size = config, vocab_size
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        d = config.dim
        self.embed = nn.Embedding(vocab_size, d)
        self.src_pos = nn.Embedding(config.max_len, d)
        self.tgt_pos = nn.Embedding(config.max_len + 1, d)   # AR reads bos + max_len tokens
        self.drop = nn.Dropout(config.dropout)
        enc = nn.TransformerEncoderLayer(d, config.heads, config.ff, config.dropout, activation="gelu",
                                         batch_first=True, norm_first=True)
        dec = nn.TransformerDecoderLayer(d, config.heads, config.ff, config.dropout, activation="gelu",
                                         batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, config.layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, config.layers, norm=nn.LayerNorm(d))
        for emb in (self.embed, self.src_pos, self.tgt_pos):
            nn.init.normal_(emb.weight, std=0.02)

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, S, D)`` of source ids ``(B, S)`` (``src_pad`` True at padding)."""
        pos = self.src_pos(torch.arange(src.shape[1], device=src.device))[None]
        return self.encoder(self.drop(self.embed(src) + pos), src_key_padding_mask=src_pad)

    def decode(self, memory: torch.Tensor, src_pad: torch.Tensor, inputs: torch.Tensor,
               tgt_pad: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, V)`` of decoder input vectors ``(B, T, D)`` (causal mask for AR only)."""
        T = inputs.shape[1]
        causal = (torch.triu(torch.ones(T, T, dtype=torch.bool, device=inputs.device), 1)
                  if self.kind == "ar" else None)
        h = self.decoder(self.drop(inputs), memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                         memory_key_padding_mask=src_pad)
        return h @ self.embed.weight.t()


class ARTranslator(_Seq2Seq):
    """Encoder-decoder with a causal decoder (module docstring)."""

    kind = "ar"

    def decoder_inputs(self, tgt: torch.Tensor) -> torch.Tensor:
        """``<|bos|> tgt`` embedded with positions: ``(B, T + 1, D)``."""
        bos = torch.full((tgt.shape[0], 1), self.bos_id, dtype=torch.long, device=tgt.device)
        ids = torch.cat([bos, tgt], 1)
        return self.embed(ids) + self.tgt_pos(torch.arange(ids.shape[1], device=tgt.device))[None]

    def logits(self, src, src_pad, tgt, tgt_pad) -> torch.Tensor:
        """``(B, T + 1, V)``: position ``t`` predicts ``tgt[:, t]`` from ``tgt[:, :t]``; ``T`` predicts eos."""
        tgt = tgt.masked_fill(tgt_pad, self.pad_id)
        in_pad = torch.cat([torch.zeros_like(tgt_pad[:, :1]), tgt_pad], 1)  # bos + the real tokens
        return self.decode(self.encode(src, src_pad), src_pad, self.decoder_inputs(tgt), in_pad)

    def nll(self, src, src_pad, tgt, tgt_pad) -> dict[str, torch.Tensor]:
        """Summed token NLL (eos included) and the training loss (its mean per prediction)."""
        logits = self.logits(src, src_pad, tgt, tgt_pad)
        lengths = (~tgt_pad).sum(1)
        labels = torch.cat([tgt.masked_fill(tgt_pad, self.pad_id), tgt.new_full((tgt.shape[0], 1), self.pad_id)], 1)
        labels[torch.arange(tgt.shape[0], device=tgt.device), lengths] = self.eos_id
        token = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=self.pad_id, reduction="sum")
        count = int(lengths.sum()) + tgt.shape[0]
        return {"loss": token / count, "nll": token.detach(), "predictions": count,
                "token_nll": token.detach(), "length_nll": torch.zeros(())}


class NARTranslator(_Seq2Seq):
    """Encoder, length head and a non-causal decoder that never reads target tokens (module docstring)."""

    kind = "nar"

    def __init__(self, config: TranslationConfig, vocab_size: int, **ids: int):
        super().__init__(config, vocab_size, **ids)
        self.length_head = nn.Linear(config.dim, config.max_len)   # class k = length k + 1

    def length_logits(self, memory: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
        """``(B, max_len)`` logits over target lengths ``1 .. max_len`` from the masked mean of ``memory``."""
        keep = (~src_pad).unsqueeze(-1).to(memory.dtype)
        pooled = (memory * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.length_head(pooled)

    def decoder_inputs(self, src: torch.Tensor, src_pad: torch.Tensor, tgt_pad: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` for target lengths ``(~tgt_pad).sum(1)``: uniform copy of the source token
        embeddings (``nar_input="copy"``) or nothing, plus target position embeddings."""
        B, T = tgt_pad.shape
        pos = self.tgt_pos(torch.arange(T, device=src.device))[None].expand(B, T, -1)
        if self.config.nar_input == "position":
            return pos
        src_len = (~src_pad).sum(1, keepdim=True).clamp(min=1)
        tgt_len = (~tgt_pad).sum(1, keepdim=True).clamp(min=1)
        t = torch.arange(T, device=src.device)[None]
        index = torch.div((2 * t + 1) * src_len, 2 * tgt_len, rounding_mode="floor").clamp(max=src_len - 1)
        return self.embed(torch.gather(src, 1, index)) + pos

    def logits(self, src, src_pad, tgt, tgt_pad) -> torch.Tensor:
        """``(B, T, V)`` given the target lengths only: ``tgt``'s tokens are never read."""
        del tgt
        return self.decode(self.encode(src, src_pad), src_pad, self.decoder_inputs(src, src_pad, tgt_pad), tgt_pad)

    def nll(self, src, src_pad, tgt, tgt_pad) -> dict[str, torch.Tensor]:
        """Summed NLL (tokens + length) and the training loss: mean token CE + length_weight * mean length CE."""
        memory = self.encode(src, src_pad)
        lengths = (~tgt_pad).sum(1)
        if bool((lengths < 1).any()) or bool((lengths > self.config.max_len).any()):
            raise ValueError(f"NAR targets need 1 .. {self.config.max_len} tokens")
        length_nll = F.cross_entropy(self.length_logits(memory, src_pad), lengths - 1, reduction="sum")
        logits = self.decode(memory, src_pad, self.decoder_inputs(src, src_pad, tgt_pad), tgt_pad)
        labels = tgt.masked_fill(tgt_pad, self.pad_id)
        token = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=self.pad_id, reduction="sum")
        n_tokens, B = int(lengths.sum()), tgt.shape[0]
        loss = token / n_tokens + self.config.length_weight * length_nll / B
        return {"loss": loss, "nll": (token + length_nll).detach(), "predictions": n_tokens + B,
                "token_nll": token.detach(), "length_nll": length_nll.detach()}


def build_model(kind: str, config: TranslationConfig, vocab_size: int, *, pad_id: int, bos_id: int, eos_id: int,
                seed: int = 0) -> _Seq2Seq:
    """An AR or NAR translator with weights drawn under ``seed`` (the global torch RNG is left as it was)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    config.check()
    cls = ARTranslator if kind == "ar" else NARTranslator
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(config, vocab_size, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------ model folders
def save_model(model: _Seq2Seq, tokenizer, path: str | Path) -> Path:
    """Write a model folder atomically: ``model.safetensors``, ``config.json``, the tokenizer."""
    from safetensors.torch import save_file

    meta = {"kind": model.kind, "config": asdict(model.config), "vocab_size": model.vocab_size,
            "pad_id": model.pad_id, "bos_id": model.bos_id, "eos_id": model.eos_id,
            "parameters": count_parameters(model)}
    with atomic_directory(path) as tmp, quiet_transformers():
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / MODEL_FILE))
        atomic_write_text(tmp / CONFIG_FILE, json.dumps(meta, indent=1, allow_nan=False) + "\n")
        tokenizer.save_pretrained(tmp)
    return Path(path)


def load_model(path: str | Path, *, device: str | torch.device = "cpu"):
    """``(model in eval mode, tokenizer)`` of a folder written by :func:`save_model`."""
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not (path / CONFIG_FILE).is_file() or not (path / MODEL_FILE).is_file():
        raise FileNotFoundError(f"{path}: not a translation model folder (no {CONFIG_FILE} / {MODEL_FILE})")
    meta = read_json_object(path / CONFIG_FILE)
    config = TranslationConfig.from_dict(meta["config"])
    model = build_model(meta["kind"], config, int(meta["vocab_size"]), pad_id=int(meta["pad_id"]),
                        bos_id=int(meta["bos_id"]), eos_id=int(meta["eos_id"]))
    model.load_state_dict(load_file(str(path / MODEL_FILE)))
    with quiet_transformers():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    return model.to(device).eval(), tokenizer


# ----------------------------------------------------------------------------------------------------- sampling
@torch.no_grad()
def sample_ids(model: _Seq2Seq, sources: Sequence[Sequence[int]], generator: torch.Generator
               ) -> tuple[list[list[int]], list[bool]]:
    """One sample per source (token ids, no specials) and whether it ended properly (AR: drew eos before
    ``max_len`` tokens; NAR: always).  One batch; the draws depend only on the batch and ``generator``."""
    if any(len(s) == 0 for s in sources):
        raise ValueError("cannot translate an empty source (no tokens)")
    model.eval()
    device = next(model.parameters()).device
    max_len = model.config.max_len
    src, src_pad = pad_batch([list(s)[:max_len] for s in sources], model.pad_id)
    src, src_pad = src.to(device), src_pad.to(device)
    memory = model.encode(src, src_pad)
    B, V = src.shape[0], model.vocab_size
    never = torch.zeros(V, dtype=torch.bool, device=device)
    never[[model.pad_id, model.bos_id]] = True
    plain = Warp()
    if model.kind == "nar":
        never[model.eos_id] = True
        lengths = draw(model.length_logits(memory, src_pad), generator, plain) + 1
        tgt_pad = torch.arange(int(lengths.max()), device=device)[None] >= lengths[:, None]
        inputs = model.decoder_inputs(src, src_pad, tgt_pad)
        logits = model.decode(memory, src_pad, inputs, tgt_pad).masked_fill(never, float("-inf"))
        tokens = draw(logits.flatten(0, 1), generator, plain).view(B, -1)
        return [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())], [True] * B
    out: list[list[int]] = [[] for _ in range(B)]
    finished = [False] * B
    alive = torch.arange(B, device=device)              # batch rows still running; finished rows leave
    tgt = torch.empty((B, 0), dtype=torch.long, device=device)
    for step in range(max_len + 1):                     # the (max_len + 1)-th prediction can only be eos
        inputs = model.decoder_inputs(tgt)
        no_pad = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=device)
        logits = model.decode(memory, src_pad, inputs, no_pad)[:, -1].masked_fill(never, float("-inf"))
        token = draw(logits, generator, plain)
        ended = token == model.eos_id
        for r, row, end in zip(alive.tolist(), tgt.tolist(), ended.tolist()):
            if end or step == max_len:
                out[r], finished[r] = row, end
        keep = (~ended).nonzero().squeeze(1)
        if keep.numel() == 0 or step == max_len:
            break
        alive, memory, src_pad = alive[keep], memory[keep], src_pad[keep]
        tgt = torch.cat([tgt[keep], token[keep, None]], 1)
    return out, finished


def sample(model: _Seq2Seq, tokenizer, sources: Sequence[str], *, n: int = 1, seed: int = 0,
           batch_size: int = 64) -> list[list[str]]:
    """``n`` translations of each source (``result[i][j]``: sample ``j`` of source ``i``), decoded.

    Rows are source-major (each source's ``n`` samples in a row), cut into batches of ``batch_size``;
    batch ``b`` draws from a generator seeded with ``derived_seed(seed, "sample", b)``: the same seed
    and batch size give the same samples.
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got {n}, {batch_size}")
    ids = encode(tokenizer, sources)
    rows = [s for s in ids for _ in range(n)]
    texts: list[str] = []
    device = next(model.parameters()).device
    for b, start in enumerate(range(0, len(rows), batch_size)):
        gen = torch.Generator(device=device).manual_seed(derived_seed(seed, "sample", b))
        drawn, _ = sample_ids(model, rows[start:start + batch_size], gen)
        texts += tokenizer.batch_decode(drawn, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return [texts[i * n:(i + 1) * n] for i in range(len(sources))]
