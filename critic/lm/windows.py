"""Documents as one token stream cut into windows, and the LM's summed NLL over them.

Fine-tuning, validation and perplexity see windows of the same stream (truncated BPTT, app. E):

* the stream is ``s = [e] + tok(render(d_1)) + tok(render(d_2)) + ...`` where ``e`` is the end token,
  so every document follows an end token as in sampling (each rendered document ends with one); with a
  format's start token ``b`` each document is ``[b] + tok(render(d_i))``: ``b`` is given, never a target
  (its label is ignored), as sampling gives it after ``e``;
* a window is a slice ``s[u_k .. u_{k+1}]`` (both ends included, at most ``W`` = context tokens) with
  ``0 = u_0 < u_1 < ... < u_K = N - 1``: consecutive windows share one token, the last input of one
  being the first of the next, so the targets ``s_1 .. s_{N-1}`` are split between windows without
  overlap and every one is predicted exactly once, from the tokens before it in its window (at most
  ``W - 1``).  Each window is an independent example (no state crosses windows); a window shorter
  than ``W`` is padded at the end and its padding is never a target.

Two ways to choose the cuts ``u_k``:

* :func:`cut_windows` (the stream): ``u_k = k (W - 1)``, every window full but the last, a window
  starts wherever the stream happens to be, mostly inside a document;
* :func:`aligned_windows` (document-aligned, the default of fine-tuning): every window starts with
  an end token followed by a document's first token, exactly what sampling conditions on (one end
  token at position 0, :mod:`critic.lm.sampler`), or continues a document longer than the window.

``labels`` are ``-100`` (ignored) at padding; position ``t`` of a window predicts its token
``t + 1``.  :func:`window_nll` sums ``-log p(s_{t+1} | window prefix)`` over the targets.
"""

from __future__ import annotations

import bisect
import contextlib
from typing import Callable, ContextManager, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..document import Document
from .format import DocumentFormat

__all__ = ["IGNORE", "token_stream", "cut_windows", "aligned_windows", "batch_nll", "window_nll", "autocast_for"]

IGNORE = -100


def token_stream(docs: Sequence[Document], tokenizer, fmt: DocumentFormat, end_id: int) -> torch.Tensor:
    """``(N,)`` int64: the end token, then each rendered document's tokens (no special tokens added), each after
    the format's start token if it has one."""
    if not docs:
        raise ValueError("no documents to tokenise")
    texts = [fmt.render(doc) for doc in docs]
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    start = [] if fmt.start_of_document is None else [tokenizer.convert_tokens_to_ids(fmt.start_of_document)]
    stream = [end_id]
    for seq in ids:
        stream.extend(start)
        stream.extend(seq)
    return torch.tensor(stream, dtype=torch.long)


def _check_stream(stream: torch.Tensor, context: int) -> int:
    if context < 2:
        raise ValueError(f"context must be at least 2 tokens, got {context}")
    if stream.dim() != 1:
        raise ValueError(f"the token stream must be one-dimensional, got shape {tuple(stream.shape)}")
    n = int(stream.numel())
    if n < 2:
        raise ValueError("the token stream has nothing to predict")
    return n


def _slice_windows(stream: torch.Tensor, cuts: torch.Tensor, context: int, pad_id: int,
                   start_id: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)``, both ``(K, context)``: window ``k`` is ``stream[cuts[k] .. cuts[k + 1]]``, padded;
    the labels of the padding and of the start token ``start_id`` are ignored.

    ``cuts``: ``(K + 1,)`` increasing, from 0 to ``N - 1``, steps of at most ``context - 1``.
    """
    start, length = cuts[:-1, None], (cuts[1:] - cuts[:-1])[:, None] + 1   # (K, 1) each
    offset = torch.arange(context)                                          # (W,)
    inside = offset < length                                                # (K, W)
    tokens = stream[(start + offset).clamp(max=stream.numel() - 1)]
    inputs = torch.where(inside, tokens, torch.full_like(tokens, pad_id))
    target = inside if start_id is None else inside & (tokens != start_id)
    labels = torch.where(target, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def cut_windows(stream: torch.Tensor, context: int, pad_id: int, *,
                start_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)``, both ``(K, context)`` int64, from an ``(N,)`` stream: ``u_k = k (W - 1)``,
    ``K = ceil((N - 1) / (W - 1))`` (module docstring); ``start_id``: the format's start token, never a target."""
    n = _check_stream(stream, context)
    cuts = torch.cat([torch.arange(0, n - 1, context - 1), torch.tensor([n - 1])])
    return _slice_windows(stream, cuts, context, pad_id, start_id)


def aligned_windows(stream: torch.Tensor, context: int, pad_id: int, end_id: int, *,
                    start_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Document-aligned ``(inputs, labels)``, both ``(K, context)`` int64, from an ``(N,)`` stream that starts
    with the end token ``e = end_id`` (:func:`token_stream`); ``start_id``: the format's start token (each
    document's first token is then ``b``, given: never a target).

    Every end token at ``c < N - 1`` is a *cut point*: a document starts at ``c + 1``.  From a window's
    first token ``u_k`` (``u_0 = 0``), with ``r = u_k + W - 1`` its reach,

        u_{k+1} = N - 1                                    if r >= N - 1   (the last window)
                = max{c cut point : u_k < c <= r}          if there is one (whole documents packed)
                = r                                        otherwise       (a continuation follows)

    so a window holds ``e``, then as many whole documents as fit (each ending with its own end token,
    which is also position 0 of the next window; a document that does not fit in the room left starts the
    next window), then padding::

        e  d1 d1 d1 e  d2 d2 e  pad pad        e  d3 d3 d3 d3 d3 d3 d3 d3 d3     d3 d3 d3 e  d4 e  pad ...
        ^ a document start at position 1       (d3 longer than W - 1 tokens)    ^ continuation: d3's tail

    A document of ``L`` tokens (its end token included) is never split when ``L <= W - 1``; a longer one
    fills windows of ``W - 1`` targets and its tail starts a *continuation window* with the last token of
    the window before (one token of overlap, as in :func:`cut_windows`: each token is a target once, and
    the first target of a continuation is predicted from that one token).  Documents are packed after the
    continued tail.  So every window begins either with ``e`` and a document's first token, or with a
    continuation; the targets are exactly those of :func:`cut_windows` (``s_1 .. s_{N-1}``, each once), in
    more windows (the padding); ``K <= (N - 1) / (W - 1) + (number of documents)``.
    """
    n = _check_stream(stream, context)
    if int(stream[0]) != end_id:
        raise ValueError(f"a document-aligned stream starts with the end token {end_id}, got {int(stream[0])}")
    ends = (stream[:-1] == end_id).nonzero().squeeze(1).tolist()     # cut points, increasing (ends[0] = 0)
    cuts, u, i = [0], 0, 0                                           # i: cut points <= the last reach
    while u < n - 1:
        reach = u + context - 1
        if reach >= n - 1:
            u = n - 1
        else:
            i = bisect.bisect_right(ends, reach, lo=i)               # cut points <= reach: ends[:i]
            u = ends[i - 1] if ends[i - 1] > u else reach
        cuts.append(u)
    return _slice_windows(stream, torch.tensor(cuts), context, pad_id, start_id)


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
