"""A small decoder-only transformer LM (the paper's Trans-LM baseline), built from a config.

Plain ``torch.nn``: pre-norm blocks, learned positions, tied input/output
embeddings, a KV cache for sampling.  No pretrained weights.  Token ids
``0 .. V - 1`` are data tokens; ``V`` is BOS and ``V + 1`` EOS.  The model
learns to end sequences (EOS), and samples are drawn by plain ancestral
sampling (temperature 1, no top-k / top-p).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TransformerConfig", "TransformerLM", "train_transformer", "sequence_log_prob"]


@dataclass
class TransformerConfig:
    layers: int = 6
    heads: int = 4
    dim: int = 512
    ff_dim: int = 1024
    dropout: float = 0.1
    max_len: int = 600
    batch_size: int = 16
    epochs: int = 19
    lr: float = 5e-4
    warmup_steps: int = 4000
    weight_decay: float = 0.0


class _Block(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.h = cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, cfg.ff_dim), nn.GELU(), nn.Linear(cfg.ff_dim, cfg.dim))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cache=None):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        causal = cache is None or T > 1
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=self.drop.p if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, D)))
        return x + self.drop(self.ff(self.ln2(x)))


class TransformerLM(nn.Module):
    def __init__(self, vocab_size: int, cfg: TransformerConfig):
        super().__init__()
        self.cfg, self.vocab_size = cfg, vocab_size
        self.bos, self.eos = vocab_size, vocab_size + 1
        n_tok = vocab_size + 2
        self.tok = nn.Embedding(n_tok, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len + 2, cfg.dim)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, ids: torch.Tensor, caches=None, offset: int = 0) -> torch.Tensor:
        T = ids.shape[1]
        pos = torch.arange(offset, offset + T, device=ids.device)
        x = self.tok(ids) + self.pos(pos)[None]
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self.ln(x) @ self.tok.weight.t()

    @torch.no_grad()
    def sample(self, n: int, *, generator: torch.Generator | None = None, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Ancestral samples until EOS (or ``max_len`` tokens): padded ``(tokens, lengths)``."""
        was = self.training
        self.eval()
        dev = self.tok.weight.device
        rows, lens = [], []
        for a in range(0, n, batch_size):
            b = min(batch_size, n - a)
            caches = [dict() for _ in self.blocks]
            cur = torch.full((b, 1), self.bos, device=dev)
            out = torch.full((b, self.cfg.max_len), -1, dtype=torch.long, device=dev)
            done = torch.zeros(b, dtype=torch.bool, device=dev)
            length = torch.full((b,), self.cfg.max_len, dtype=torch.long, device=dev)
            for t in range(self.cfg.max_len):  # one token per step for the whole batch, KV-cached
                logits = self(cur, caches, offset=t)[:, -1].float()
                nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
                # BOS is never a valid continuation; treat it as EOS if drawn
                end = (nxt == self.eos) | (nxt == self.bos)
                newly = end & ~done
                length = torch.where(newly, torch.full_like(length, t), length)
                done |= end
                out[:, t] = torch.where(done, torch.full_like(nxt, -1), nxt)
                if bool(done.all()):
                    break
                cur = nxt[:, None]
            rows.append(out.cpu().numpy())
            lens.append(length.cpu().numpy())
        self.train(was)
        lengths = np.concatenate(lens)
        T = int(lengths.max()) if lengths.size else 0
        tokens = np.full((n, T), -1, dtype=np.int64)
        for i, r in enumerate(rows):  # loop over sampling batches
            tokens[i * batch_size: i * batch_size + len(r)] = r[:, :T]
        return tokens, lengths


def _io(model: TransformerLM, tokens: np.ndarray, lengths: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``[BOS] x`` and targets ``x [EOS]`` (``-100`` past the end)."""
    B = len(lengths)
    T = int(lengths.max())
    x = torch.as_tensor(tokens[:, :T], device=device)
    ln = torch.as_tensor(lengths, device=device)
    pos = torch.arange(T + 1, device=device)[None]
    inp = torch.full((B, T + 1), model.eos, dtype=torch.long, device=device)
    inp[:, 0] = model.bos
    inp[:, 1:] = torch.where(x >= 0, x, torch.full_like(x, model.eos))
    tgt = torch.full((B, T + 1), -100, dtype=torch.long, device=device)
    tgt[:, :T] = torch.where(pos[:, :T] < ln[:, None], x.clamp_min(0), torch.full_like(x, -100))
    tgt[torch.arange(B, device=device), ln] = model.eos
    return inp, tgt


def sequence_log_prob(model: TransformerLM, tokens: np.ndarray, lengths: np.ndarray, *, batch_size: int = 64, device="cpu") -> np.ndarray:
    """``log P(x, EOS)`` per sequence (float64)."""
    model.eval()
    out = []
    with torch.no_grad():
        for a in range(0, len(lengths), batch_size):
            inp, tgt = _io(model, tokens[a: a + batch_size], lengths[a: a + batch_size], device)
            logp = model(inp).float().log_softmax(-1)
            tok_lp = logp.gather(-1, tgt.clamp_min(0)[..., None]).squeeze(-1)
            out.append(torch.where(tgt >= 0, tok_lp, torch.zeros_like(tok_lp)).double().sum(1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def train_transformer(
    model: TransformerLM,
    tokens: np.ndarray,
    lengths: np.ndarray,
    *,
    seed: int = 0,
    device="cpu",
    checkpoint=None,
    log=print,
) -> dict:
    """Adam with linear warm-up then inverse-sqrt decay (fairseq's schedule); resumes from ``checkpoint``."""
    cfg = model.cfg
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    state = {"epoch": 0, "step": 0, "history": []}
    if checkpoint is not None:
        restored = checkpoint.load(model)
        if restored is not None:
            state = restored["state"]
            if "optimizer" in restored:
                opt.load_state_dict(restored["optimizer"])
    for _ in range(state["epoch"]):  # replay the shuffles of finished epochs
        rng.permutation(len(lengths))

    def lr_at(step):
        w = max(cfg.warmup_steps, 1)
        return cfg.lr * min((step + 1) / w, math.sqrt(w / (step + 1)))

    while state["epoch"] < cfg.epochs:
        model.train()
        order = rng.permutation(len(lengths))
        total, count = 0.0, 0
        for a in range(0, len(order), cfg.batch_size):
            sel = order[a: a + cfg.batch_size]
            inp, tgt = _io(model, tokens[sel], lengths[sel], device)
            loss = F.cross_entropy(model(inp).flatten(0, 1).float(), tgt.flatten(), ignore_index=-100)
            for g in opt.param_groups:
                g["lr"] = lr_at(state["step"])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            n_tok = int((tgt >= 0).sum())
            total += float(loss.detach()) * n_tok
            count += n_tok
        state["epoch"] += 1
        state["history"].append({"epoch": state["epoch"], "train_ppl": math.exp(total / max(count, 1))})
        if checkpoint is not None:
            checkpoint.save(model, {"state": state, "optimizer": opt.state_dict()})
        log(f"transformer epoch {state['epoch']}/{cfg.epochs}: train PPL {state['history'][-1]['train_ppl']:.4f}")
    model.eval()
    return state
