"""The seeds' other metrics, as statistics beside the critics (seeds 000-003 and MAUVE).

Pure functions over plain Python / numpy inputs (an order is a list of item indices, a label
sequence a list of ints, probabilities are natural logs):

* ordering (seed 000): :func:`pmr`, :func:`position_accuracy`, :func:`kendall_tau`, :func:`wlcs_l`,
  :func:`rouge_w`, corpus means :func:`ordering_scores`
* Ordered BERTScore (seed 001): :func:`ordered_bertscore` (``version=1|2``, ``n=``) over a similarity
  matrix, :func:`align_gold_order` (Algorithm 1), :func:`coherence_lambda` (eqs. 4-7); text-level
  versions in :mod:`critics.metrics.text`
* PDD (seed 002): :func:`pdd`, :func:`pdd_normalized`
* fluency (seed 003): :func:`fluency_a1`, :func:`fluency_a2`, :func:`nce`, :func:`perplexity`,
  :func:`slor`, :func:`wpslor`; model backends :class:`KenLMFluency`, :class:`CausalLMFluency`
* :func:`mauve_score` (the main paper's baseline), :func:`correlations` and :func:`r_squared`
  against human judgments.

Importing this package registers every metric, with its command-line form (``critic metric NAME``, see
:mod:`critics.metrics.cli`), and ``critic setup kenlm``, which the fluency metrics need.
"""

from .agreement import correlations, r_squared
from .fluency import (
    CausalLMFluency,
    KenLMFluency,
    UnigramModel,
    a2_thresholds,
    fluency_a1,
    fluency_a2,
    nce,
    perplexity,
    slor,
    word_tokenize,
    wordpiece_tokenizer,
    wpslor,
)
from .mauve import mauve_score, mauve_text
from .obs import align_gold_order, coherence_lambda, ordered_bertscore
from .ordering import kendall_tau, ordering_scores, pmr, position_accuracy, rouge_w, wlcs, wlcs_l
from .pdd import pdd, pdd_normalized

__all__ = [
    "METRICS",
    "pmr",
    "position_accuracy",
    "kendall_tau",
    "wlcs",
    "wlcs_l",
    "rouge_w",
    "ordering_scores",
    "ordered_bertscore",
    "align_gold_order",
    "coherence_lambda",
    "pdd",
    "pdd_normalized",
    "fluency_a1",
    "fluency_a2",
    "a2_thresholds",
    "nce",
    "slor",
    "wpslor",
    "perplexity",
    "word_tokenize",
    "wordpiece_tokenizer",
    "UnigramModel",
    "KenLMFluency",
    "CausalLMFluency",
    "mauve_score",
    "mauve_text",
    "correlations",
    "r_squared",
]

# name -> (function, one-line description); also registered with critic.registry when present.
METRICS = {
    "pmr": (pmr, "perfect match ratio of an order (seed 000)"),
    "position_accuracy": (position_accuracy, "fraction of items at their gold position (seed 000)"),
    "kendall_tau": (kendall_tau, "Kendall's tau = 1 - 2 inversions / C(n,2) (seed 000)"),
    "wlcs_l": (wlcs_l, "length-adapted weighted LCS F, f(k)=k^alpha (seed 000, eqs. 5-7)"),
    "rouge_w": (lambda pred, gold, **kw: rouge_w(pred, gold, **kw)["f"], "ROUGE-W F (Lin 2004)"),
    "ordered_bertscore": (ordered_bertscore, "Ordered BERTScore v1/v2 with parameter n (seed 001)"),
    "align_gold_order": (align_gold_order, "order predicted sentences by gold, Algorithm 1 (seed 001)"),
    "coherence_lambda": (coherence_lambda, "entity overlap + cosine of adjacent sentences (seed 001, eqs. 4-7)"),
    "pdd": (pdd, "positional discourse divergence of role labels (seed 002)"),
    "pdd_normalized": (pdd_normalized, "1 / (1 + PDD) (seed 002)"),
    "fluency_a1": (fluency_a1, "mean log conditional n-gram probability (seed 003, A1)"),
    "fluency_a2": (fluency_a2, "good/bad n-gram weighted fluency (seed 003, A2)"),
    "nce": (nce, "negative cross-entropy ln p(S)/|S| (seed 003)"),
    "perplexity": (perplexity, "exp(-NCE) (seed 003)"),
    "slor": (slor, "syntactic log-odds ratio (seed 003)"),
    "wpslor": (wpslor, "SLOR over WordPiece tokens (seed 003)"),
    "mauve": (mauve_score, "MAUVE of two feature sets (mauve-text)"),
    "mauve_text": (mauve_text, "MAUVE of two text sets on the offline MiniLM document vectors"),
    "correlations": (correlations, "Pearson/Spearman/Kendall against judgments"),
    "r_squared": (r_squared, "R^2 of judgments regressed on metrics (seed 000)"),
}

try:
    from critic.registry import register_metric, register_setup
except ImportError:  # the core package is optional for the pure functions
    pass
else:
    from .cli import COMMANDS, setup_kenlm

    for _name, (_fn, _desc) in METRICS.items():
        register_metric(_name, _fn, _desc, command=COMMANDS[_name])
    register_setup("kenlm", setup_kenlm)
