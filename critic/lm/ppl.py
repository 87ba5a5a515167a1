"""Word-level perplexity of documents under a fine-tuned LM (the paper's PPL rows, table 2).

The documents are rendered in the model's format, tokenised into one stream and cut into the
training windows (:mod:`critic.lm.windows`): every token after the leading end token but the format's
start token (given, not predicted) is predicted once, from at most ``W - 1`` tokens before it in its
window.  With ``NLL`` the total negative log-likelihood (nats) of those ``N_tok`` predicted tokens,

    token PPL = exp(NLL / N_tok),        word PPL = exp(NLL / N_words),

where ``N_words`` counts the whitespace-separated words of the rendered documents, each section
marker and end token being one word (:meth:`DocumentFormat.count_words`).  Both are perplexities
of the same probability of the same text; the word-level one does not depend on the tokenizer,
so LMs with different vocabularies compare.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from ..document import Document
from .budget import require_memory, window_memory
from .finite import check_finite
from .model import load_model_dir, quiet_transformers
from .windows import cut_windows, token_stream, window_nll

__all__ = ["Perplexity", "perplexity"]


@dataclass
class Perplexity:
    """Total NLL (nats) of ``n_tokens`` predicted tokens covering ``n_words`` words; their perplexities."""

    nll: float
    n_tokens: int
    n_words: int
    token_ppl: float
    word_ppl: float
    n_documents: int = 0
    context: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def perplexity(model_dir: str | Path, docs: Sequence[Document], *, batch_size: int = 8, device: str = "cpu",
               progress: bool = True) -> Perplexity:
    """Word and token perplexity of ``docs`` under the model folder ``model_dir`` (module docstring)."""
    from ..critic import resolve_device

    docs = list(docs)
    if not docs:
        raise ValueError("perplexity needs at least one document")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    dev = resolve_device(device)
    lm = load_model_dir(model_dir, device=str(dev))
    fmt = lm.format
    end_id = lm.token_id(fmt.end_of_document)
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else end_id
    start_id = None if fmt.start_of_document is None else lm.token_id(fmt.start_of_document)
    inputs, labels = cut_windows(token_stream(docs, lm.tokenizer, fmt, end_id), lm.context, pad_id, start_id=start_id)
    rows = min(batch_size, inputs.shape[0])
    require_memory(f"{model_dir}: perplexity", window_memory(lm.model, rows=rows, window=lm.context, training=False),
                   {}, device=dev, scale=f"for batches of {rows} windows of {lm.context} tokens",
                   fix="lower --batch-size")
    with quiet_transformers():
        nll, n_tokens = window_nll(lm.model, inputs, labels, batch_size=batch_size, device=dev, progress=progress,
                                   desc="perplexity")
    damaged = "the model gives non-finite log-probabilities: are its weights damaged?"
    check_finite(nll, f"{model_dir}: the total NLL of the documents", fix=damaged)
    n_words = sum(fmt.count_words(fmt.render(doc)) for doc in docs)
    token_ppl, word_ppl = _exp(nll / n_tokens), _exp(nll / n_words)
    for name, value in (("token", token_ppl), ("word", word_ppl)):
        check_finite(value, f"{model_dir}: the {name} perplexity", nll=f"{nll:.4g} nats",
                     fix="the model gives the documents almost zero probability: are its weights damaged?")
    return Perplexity(nll=nll, n_tokens=n_tokens, n_words=n_words, token_ppl=token_ppl,
                      word_ppl=word_ppl, n_documents=len(docs), context=lm.context)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf
