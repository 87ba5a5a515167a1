"""Documents as one token stream cut into fixed windows, and the LM's summed NLL over them.

Fine-tuning, validation and perplexity all see the same examples (truncated BPTT, app. E):

* the stream is ``s = [e] + tok(render(d_1)) + tok(render(d_2)) + ...`` where ``e`` is the end token,
  so every document follows an end token as in sampling (each rendered document ends with one);
* window ``k`` holds ``s[k (W - 1) : k (W - 1) + W]`` (``W`` = context), for
  ``k = 0 .. K - 1`` with ``K = ceil((N - 1) / (W - 1))``: consecutive windows share one token, the
  last input of one being the first of the next, so the targets ``s_1 .. s_{N-1}`` are split
  between windows without overlap and every one is predicted exactly once, from the tokens before
  it in its window (at most ``W - 1``).  Each window is an independent example (no state crosses
  windows); the last one is padded and its padding is never a target.

``labels`` are ``-100`` (ignored) at padding; position ``t`` of a window predicts its token
``t + 1``.  :func:`window_nll` sums ``-log p(s_{t+1} | window prefix)`` over the targets.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..document import Document
from .format import DocumentFormat

__all__ = ["IGNORE", "token_stream", "cut_windows", "batch_nll", "window_nll", "autocast_for"]

IGNORE = -100


def token_stream(docs: Sequence[Document], tokenizer, fmt: DocumentFormat, end_id: int) -> torch.Tensor:
    """``(N,)`` int64: the end token, then each rendered document's tokens (no special tokens added)."""
    if not docs:
        raise ValueError("no documents to tokenise")
    texts = [fmt.render(doc) for doc in docs]
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    stream = [end_id]
    for seq in ids:
        stream.extend(seq)
    return torch.tensor(stream, dtype=torch.long)


def cut_windows(stream: torch.Tensor, context: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)``, both ``(K, context)`` int64, from an ``(N,)`` stream (module docstring)."""
    if context < 2:
        raise ValueError(f"context must be at least 2 tokens, got {context}")
    n = int(stream.numel())
    if n < 2:
        raise ValueError("the token stream has nothing to predict")
    stride = context - 1
    k = -(-(n - 1) // stride)
    padded = torch.full((k * stride + 1,), pad_id, dtype=torch.long)
    padded[:n] = stream
    inputs = padded.unfold(0, context, stride).contiguous()             # (K, W)
    position = torch.arange(k)[:, None] * stride + torch.arange(context)  # index into the stream
    labels = torch.where(position < n, inputs, torch.full_like(inputs, IGNORE))
    return inputs, labels


def batch_nll(model, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(sum of -log p over the batch's targets, number of targets)`` for ``(B, W)`` windows.

    Logits ``(B, W, V)`` at positions ``0 .. W-2`` score labels at ``1 .. W-1``; the loss is
    computed in fp32 whatever the model's precision.  Differentiable.
    """
    logits = model(input_ids=inputs).logits[:, :-1]
    target = labels[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                          ignore_index=IGNORE, reduction="sum")
    return nll, int((target != IGNORE).sum())


def autocast_for(device: torch.device, bf16: bool) -> Callable[[], ContextManager]:
    """A context factory: bf16 autocast on ``device`` when asked, else nothing."""
    if not bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


@torch.no_grad()
def window_nll(model, inputs: torch.Tensor, labels: torch.Tensor, *, batch_size: int, device: torch.device,
               autocast: Callable[[], ContextManager] = contextlib.nullcontext, progress: bool = False,
               desc: str = "evaluating") -> tuple[float, int]:
    """Total NLL (nats, summed in float64 across batches) and number of targets of all windows, in eval mode.

    The model's training flag is restored afterwards.
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    starts: Iterable[int] = range(0, inputs.shape[0], batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=desc, unit="batch", leave=False)
    try:
        for start in starts:
            with autocast():
                nll, n = batch_nll(model, inputs[start:start + batch_size].to(device),
                                   labels[start:start + batch_size].to(device))
            total += float(nll)
            count += n
    finally:
        model.train(was_training)
    return total, count
