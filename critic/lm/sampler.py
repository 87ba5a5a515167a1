"""Batched ancestral sampling from a causal LM with a KV cache and an exact sliding window.

:func:`generate_batch` draws ``B`` sequences together.  Each starts from the prompt (the end token, and
the format's start token if it has one: documents follow them in training) and stops at the end token or
after ``max_new_tokens``.
At every step the next token of each unfinished row is drawn from

    p(x_{t+1} | the last min(t, W - 1) tokens)            (W = the context window)

which is what the model was trained to predict (a training window of ``W`` tokens predicts each of
its tokens from at most ``W - 1`` before it).  While the sequence is shorter than ``W`` the model
is fed one token per step against its KV cache (cost ~ one token's forward pass).  From length
``W`` on, the oldest token must leave the context; with learned absolute positions (GPT-2) the
cached keys and values would no longer be those of the truncated context, so each step recomputes
the forward pass over the last ``W - 1`` tokens without a cache: exact, at about ``W - 1`` tokens
of compute per generated token (batched over the window, so much less than ``W - 1`` times the
wall time of a cached step, but the dominant cost of samples much longer than the window).

Rows that finish leave the batch (their cache rows are dropped), so the cost follows the rows
still running.  The draws come from one ``torch.Generator`` per batch; all shapes and the order
of draws are functions of the batch alone, so the same generator seed gives the same sequences.

Sampling is from the full distribution unless asked otherwise (:class:`Warp`: temperature, top-k,
top-p, applied in that order, as in transformers' warpers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch

from .finite import check_finite

__all__ = ["Warp", "generate_batch", "draw"]


@dataclass(frozen=True)
class Warp:
    """Optional changes to the next-token distribution (all ``None``, nothing masked: plain ancestral sampling).

    ``masked``: token ids given probability 0 before the rest (the others renormalised), e.g. a pretrained
    model's special tokens that no training document holds (:func:`critic.lm.sample.unused_special_ids`).
    ``opening``: the first ``opening`` tokens are drawn from the unwarped distribution (masked only), the warp
    applies from then on: a sampled opening that greedy or nucleus decoding continue (Holtzman et al. 2020 decode
    after a prompt; here the model writes its own).  The draws consume one uniform per row and step whatever the
    warp, so one seed gives ancestral, nucleus and greedy decoding the same opening.
    """

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    masked: tuple[int, ...] = ()
    opening: int = 0

    def __post_init__(self) -> None:
        if self.temperature is not None and not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.opening, int) or isinstance(self.opening, bool) or self.opening < 0:
            raise ValueError(f"opening must be an integer >= 0, got {self.opening!r}")

    def at(self, step: int) -> "Warp":
        """The warp of generated token ``step`` (0-based): unwarped but masked inside the opening."""
        return self if step >= self.opening else Warp(masked=self.masked)

    @property
    def plain(self) -> bool:
        return self.temperature is None and self.top_k is None and self.top_p is None and not self.masked

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """``(B, V)`` logits -> warped ``(B, V)`` logits (masked entries ``-inf``)."""
        if self.masked:
            logits = logits.index_fill(-1, torch.tensor(self.masked, device=logits.device), float("-inf"))
        if self.temperature is not None:
            logits = logits / self.temperature
        if self.top_k is not None and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
            drop = cum - torch.softmax(sorted_logits, dim=-1) >= self.top_p  # mass before the token already >= p
            drop[:, 0] = False
            logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return logits


def draw(logits: torch.Tensor, generator: torch.Generator, warp: Warp, *, what: str = "the model",
         where: Mapping[str, Any] | None = None) -> torch.Tensor:
    """One token per row of ``(B, V)`` logits: ``(B,)`` int64 drawn with ``generator``.

    Logits that are NaN or ``+inf`` (or a row all ``-inf``), or warped probabilities that are not a
    distribution, are a :class:`~critic.lm.finite.NonFiniteError` (``what``: the model's name,
    ``where``: step, batch), never a sample.

    Inverse-CDF sampling: with ``F_v = sum_{w <= v} p_w`` and ``u ~ U[0, 1)`` (one uniform per row),
    the token is the first ``v`` with ``F_v > u F_V``, so ``P(v) = p_v`` and a token of
    probability 0 is never drawn.  One uniform per row instead of ``torch.multinomial``'s one per
    vocabulary entry (which costs as much as the model's forward pass at V = 4096 on a CPU).
    """
    logits = logits.float()
    top = logits.amax(-1)                 # NaN or +inf anywhere in a row, or a row all -inf: not finite
    if not warp.plain:
        logits = warp(logits)
    probs = torch.softmax(logits, dim=-1)
    cdf = probs.cumsum(-1)
    if not bool(torch.isfinite(top).all() & torch.isfinite(cdf[:, -1]).all()):  # one sync; then say which
        where = dict(where or {})
        check_finite(top, f"{what}: the largest next-token logit of each row",
                     fix="the model gives non-finite logits: are its weights damaged?", **where)
        check_finite(cdf[:, -1], f"{what}: the total of the next-token probabilities",
                     fix=f"the warped distribution ({warp}) is not a distribution: raise the temperature", **where)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    vocab = probs.shape[-1]
    if bool((token >= vocab).any()):  # rounding put u F_V at F_V: the last token of positive probability
        last_positive = vocab - 1 - (probs.flip(-1) > 0).int().argmax(-1)
        token = torch.minimum(token, last_positive)
    return token


@torch.no_grad()
def generate_batch(model, *, rows: int, prompt: Sequence[int], end_id: int, max_new_tokens: int, window: int,
                   generator: torch.Generator, warp: Warp = Warp(), device: torch.device | str = "cpu",
                   what: str = "the model",
                   where: Mapping[str, Any] | None = None) -> Iterator[tuple[int, list[int], bool]]:
    """Yield ``(row, generated token ids, finished)`` for each of ``rows`` sequences, as each ends.

    ``finished``: the row drew ``end_id`` (the last id); otherwise it ran ``max_new_tokens``.  The
    prompt is not part of the ids.  ``window`` is ``W`` of the module docstring (> the prompt's length).
    Non-finite logits or probabilities raise :class:`~critic.lm.finite.NonFiniteError` naming ``what``,
    ``where`` (e.g. the batch) and the step (1-based), before the step's token is drawn.
    """
    first = len(prompt)                            # position of the first generated token
    if first < 1:
        raise ValueError("the prompt needs at least one token")
    if window <= first:
        raise ValueError(f"window must exceed the prompt's {first} token(s), got {window}")
    device = torch.device(device)
    seq = torch.empty((rows, first + max_new_tokens), dtype=torch.long, device=device)
    seq[:, :first] = torch.tensor(list(prompt), dtype=torch.long, device=device)
    alive = torch.arange(rows, device=device)      # batch row of each running sequence
    length = first                                 # tokens in every running sequence
    cached = 0                                     # tokens already in the cache
    cache = None
    for step in range(max_new_tokens):
        if length < window:                        # context = all `length` tokens: cached step
            out = model(input_ids=seq[:, cached:length], past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache, cached = out.past_key_values, length
        else:                                      # context = the last W - 1 tokens: recompute
            out = model(input_ids=seq[:, length - window + 1:length], use_cache=False, logits_to_keep=1)
            cache = None
        token = draw(out.logits[:, -1, :], generator, warp.at(step), what=what,
                     where={**(where or {}), "step": step + 1})
        seq[:, length] = token
        length += 1
        ended = token == end_id
        if step == max_new_tokens - 1:
            ids = seq[:, first:length].tolist()
            for r, row_ids, fin in zip(alive.tolist(), ids, ended.tolist()):
                yield r, row_ids, fin
            return
        if bool(ended.any()):
            done = ended.nonzero().squeeze(1)
            for r, row_ids in zip(alive[done].tolist(), seq[done, first:length].tolist()):
                yield r, row_ids, True
            keep = (~ended).nonzero().squeeze(1)
            if keep.numel() == 0:
                return
            alive, seq = alive[keep], seq[keep]
            if cache is not None:
                cache.batch_select_indices(keep)
