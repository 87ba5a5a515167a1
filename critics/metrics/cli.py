"""The metrics' command-line forms (``critic metric NAME``) and ``critic setup kenlm``; results print as JSON.

A metric's command-line form is a function whose keyword parameters are the options of ``critic metric NAME``
(read by :func:`critic.cli_args.signature_options`: types, defaults, ``Range`` bounds and help, declared once in
the annotations below); it reads the files the options name and returns the JSON object that is printed after
``"metric": NAME``.  :data:`COMMANDS` maps each metric to its form; :mod:`critics.metrics` registers them.

Examples::

    critic metric kendall_tau --pred 2,0,1 --gold 0,1,2
    critic metric wlcs_l --jsonl orders.jsonl             # {"pred": [...], "gold": [...]} per line
    critic metric pdd --pred 0,1,1,2 --gold 0,0,1,2 --bins 3
    critic metric pdd --pred-jsonl gen.jsonl --gold-jsonl ref.jsonl   # {"labels": [...]} per line
    critic metric ordered_bertscore --pred-jsonl sys.jsonl --gold-jsonl ref.jsonl --version 2 --n 4
    critic metric coherence_lambda --jsonl docs.jsonl --lam 0.5
    critic metric slor --train corpus.txt --sentences test.txt --backend kenlm --order 3
    critic metric mauve --pred-jsonl gen.jsonl --gold-jsonl ref.jsonl
    critic metric correlations --values 0.1,0.5,0.7 --judgments 1,3,4
    critic setup kenlm

Documents in JSONL give their units as ``"sentences": [...]``, or as ``"sections": [{"text": ...}]``
(one unit per section), or as ``"text"`` (one unit).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Callable, Literal

from critic.config import Range

__all__ = ["COMMANDS", "setup_kenlm"]

# ------------------------------------------------------------------ the options, declared once
PredOrder = Annotated[list[int] | None, "the predicted order: item indices, e.g. 2,0,1"]
GoldOrder = Annotated[list[int] | None, "the gold order, e.g. 0,1,2"]
OrdersFile = Annotated[Path | None, 'JSON lines {"pred": [...], "gold": [...]}, one pair of orders each '
                                    "(instead of --pred and --gold)"]
PredLabels = Annotated[list[int] | None, "the predicted role labels of one document, e.g. 0,1,1,2"]
GoldLabels = Annotated[list[int] | None, "the reference role labels of one document"]
PredLabelsFile = Annotated[Path | None, 'predicted documents as JSON lines {"labels": [...]} (instead of --pred)']
GoldLabelsFile = Annotated[Path | None, 'reference documents as JSON lines {"labels": [...]} (instead of --gold)']
Bins = Annotated[int, Range(min=1), "requested number of positional bins (capped at the longest sequence)"]
Classes = Annotated[int | None, Range(min=1), "number of roles (default: the largest label + 1)"]
PredDocs = Annotated[Path, 'generated (predicted) documents, JSON lines with "sentences", "sections" or "text"']
GoldDocs = Annotated[Path, "reference documents, paired with --pred-jsonl by line"]
Documents = Annotated[Path, 'documents, JSON lines with "sentences", "sections" or "text"']
Encoder = Annotated[str | None, "encoder name or folder (default: the offline MiniLM)"]
Version = Annotated[Literal[1, 2], "Ordered BERTScore version (1: eqs. 1-2, 2: eqs. 3-4)"]
N = Annotated[int | Literal["inf"], Range(min=1), "Ordered BERTScore's n"]
Lam = Annotated[float, Range(min=0, max=1), "weight of the entity overlap against the cosine similarity"]
Train = Annotated[Path, "training text, one sentence a line"]
Sentences = Annotated[Path, "sentences to score, one a line"]
Order = Annotated[int, Range(min=1), "n-gram order of the KenLM model"]
Memory = Annotated[str, "memory bound of lmplz (its -S), e.g. 1G or 20%"]
Backend = Annotated[Literal["kenlm", "transformers"], "the language model: a KenLM n-gram model of --train, or a "
                                                      "transformers causal LM (--model)"]
CausalLM = Annotated[str | None, "transformers backend: causal LM name or folder (default: SmolLM2-135M from its "
                                 "offline GGUF)"]
GgufFile = Annotated[str | None, "transformers backend: a GGUF file inside --model"]
WordPiece = Annotated[str | None, "the BERT-type model whose WordPiece tokenizer cuts the text (default: the "
                                  "offline MiniLM)"]
Values = Annotated[list[float], "the metric's values, e.g. 0.1,0.5,0.7"]
Judgments = Annotated[list[float], "the human judgments of the same items, e.g. 1,3,4"]


# ------------------------------------------------------------------ reading what the options name
def _read_jsonl(path: Path) -> list[tuple[str, dict]]:
    """``(where, record)`` per non-blank line; errors name the file and line."""
    from critic.document import iter_json_lines

    records = []
    for where, rec in iter_json_lines(path):
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        records.append((where, rec))
    if not records:
        raise ValueError(f"{path}: file holds no records")
    return records


def _int_list(where: str, rec: dict, key: str) -> list[int]:
    value = rec.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{where}: {key!r} must be a list of integers, got "
                         + ("nothing" if key not in rec else repr(value)[:60]))
    return value


def _strings(where: str, value, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: {what} must be a list of strings")
    return value


def _units(where: str, rec: dict) -> list[str]:
    """A document's units: ``sentences``, else one per section's ``text``, else ``text`` as one unit."""
    if "sentences" in rec:
        return _strings(where, rec["sentences"], "'sentences'")
    if "sections" in rec:
        sections = rec["sections"]
        if not isinstance(sections, list):
            raise ValueError(f"{where}: 'sections' must be a list")
        texts = [s.get("text") if isinstance(s, dict) else s for s in sections]
        return _strings(where, texts, "'sections' (objects with a string 'text', or strings)")
    if "text" in rec:
        if not isinstance(rec["text"], str):
            raise ValueError(f"{where}: 'text' must be a string")
        return [rec["text"]]
    raise ValueError(f"{where}: record has none of sentences/sections/text: {sorted(rec)}")


def _documents(path: Path) -> list[list[str]]:
    return [_units(where, rec) for where, rec in _read_jsonl(path)]


def _paired_documents(pred_jsonl: Path, gold_jsonl: Path) -> tuple[list[list[str]], list[list[str]]]:
    preds, golds = _documents(pred_jsonl), _documents(gold_jsonl)
    if len(preds) != len(golds):
        raise ValueError(f"{pred_jsonl} has {len(preds)} documents but {gold_jsonl} has {len(golds)}")
    return preds, golds


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: file holds no sentences")
    return lines


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# ------------------------------------------------------------------ the forms, one per kind of input
def _orders(name: str) -> Callable[..., dict]:
    def orders(*, pred: PredOrder = None, gold: GoldOrder = None, jsonl: OrdersFile = None) -> dict:
        """The mean over pairs of orders: one pair (--pred, --gold), or a file of them (--jsonl)."""
        from .ordering import ordering_scores

        if jsonl is not None:
            recs = _read_jsonl(jsonl)
            preds = [_int_list(where, r, "pred") for where, r in recs]
            golds = [_int_list(where, r, "gold") for where, r in recs]
            for (where, _), p, g in zip(recs, preds, golds):
                try:
                    ordering_scores([p], [g], metrics=[name])
                except ValueError as exc:
                    raise ValueError(f"{where}: {exc}") from None
        elif pred is not None and gold is not None:
            preds, golds = [pred], [gold]
        else:
            raise ValueError("give --pred and --gold, or --jsonl")
        out = ordering_scores(preds, golds, metrics=[name])
        return {"value": out[name], "n": out["n"]}

    return orders


def _labels(normalized: bool) -> Callable[..., dict]:
    def labels(*, pred: PredLabels = None, gold: GoldLabels = None, pred_jsonl: PredLabelsFile = None,
               gold_jsonl: GoldLabelsFile = None, bins: Bins = 5, classes: Classes = None) -> dict:
        """Label sequences of one document pair (--pred, --gold), or of two sets of documents (--pred-jsonl,
        --gold-jsonl); also prints the number of bins used."""
        from .pdd import pdd

        if pred_jsonl is not None and gold_jsonl is not None:
            pred = [_int_list(where, r, "labels") for where, r in _read_jsonl(pred_jsonl)]
            gold = [_int_list(where, r, "labels") for where, r in _read_jsonl(gold_jsonl)]
        elif pred is None or gold is None:
            raise ValueError("give --pred and --gold label lists, or --pred-jsonl and --gold-jsonl")
        value, used = pdd(pred, gold, num_bins=bins, num_classes=classes, return_num_bins=True)
        return {"value": 1 / (1 + value) if normalized else value, "num_bins": used}

    return labels


def _ordered_bertscore(*, pred_jsonl: PredDocs, gold_jsonl: GoldDocs, version: Version = 1, n: N = 1,
                       model: Encoder = None) -> dict:
    """Ordered BERTScore of each document pair (the sentences of generated and reference documents)."""
    from .encoders import BertScoreSimilarity
    from .text import ordered_bertscore_texts

    preds, golds = _paired_documents(pred_jsonl, gold_jsonl)
    scores = ordered_bertscore_texts(golds, preds, version, math.inf if n == "inf" else n, BertScoreSimilarity(model))
    return {"version": version, "n": n, "mean": _mean(scores), "values": scores}


def _align_gold_order(*, pred_jsonl: PredDocs, gold_jsonl: GoldDocs, model: Encoder = None) -> dict:
    """Algorithm 1 on each document pair: the order of the predicted sentences that follows the reference."""
    from .encoders import BertScoreSimilarity
    from .text import align_gold_order_text

    preds, golds = _paired_documents(pred_jsonl, gold_jsonl)
    sim = BertScoreSimilarity(model)
    return {"orders": [align_gold_order_text(p, g, sim) for p, g in zip(preds, golds)]}


def _coherence_lambda(*, jsonl: Documents, lam: Lam = 0.5, model: Encoder = None) -> dict:
    """coherence-lambda of each document's sentences."""
    from critic.lm.encoders import SentenceEncoder
    from .text import coherence_lambda_text

    docs = _documents(jsonl)
    enc = SentenceEncoder(model)
    scores = [coherence_lambda_text(units, lam, enc) for units in docs]
    return {"lam": lam, "mean": _mean(scores), "values": scores}


def _mauve(*, pred_jsonl: PredDocs, gold_jsonl: GoldDocs, model: Encoder = None) -> dict:
    """MAUVE of the generated documents against the references (each document's units joined)."""
    from .mauve import mauve_text

    p = [" ".join(units) for units in _documents(pred_jsonl)]
    q = [" ".join(units) for units in _documents(gold_jsonl)]
    return {"value": mauve_text(p, q, model)}


_KEY = {"fluency_a1": "a1", "fluency_a2": "a2", "perplexity": "ppl", "wpslor": "slor"}
"""The field of a fluency scorer's result that each metric reads."""


def _fluency(name: str, scorer, sentences: list[str]) -> dict:
    from .fluency import KenLMFluency

    scores = scorer.score_many(sentences) if hasattr(scorer, "score_many") else [scorer.score(s) for s in sentences]
    values = [s[_KEY.get(name, name)] for s in scores]
    return {"backend": "kenlm" if isinstance(scorer, KenLMFluency) else "transformers", "mean": _mean(values),
            "values": values}


def _ngram_fluency(name: str) -> Callable[..., dict]:
    def ngram_fluency(*, train: Train, sentences: Sentences, order: Order = 3, memory: Memory = "1G") -> dict:
        """Each sentence's score under a KenLM n-gram model of --train."""
        from .fluency import KenLMFluency

        train_lines, lines = _lines(train), _lines(sentences)
        return _fluency(name, KenLMFluency.fit(train_lines, order=order, memory=memory), lines)

    return ngram_fluency


def _lm_fluency(name: str) -> Callable[..., dict]:
    def lm_fluency(*, train: Train, sentences: Sentences, backend: Backend = "kenlm", order: Order = 3,
                   memory: Memory = "1G", model: CausalLM = None, gguf_file: GgufFile = None) -> dict:
        """Each sentence's score under a language model (a KenLM n-gram model of --train, or a causal LM) and a
        unigram model of --train."""
        from .fluency import CausalLMFluency, KenLMFluency, UnigramModel, word_tokenize

        train_lines, lines = _lines(train), _lines(sentences)
        if backend == "kenlm":
            scorer = KenLMFluency.fit(train_lines, order=order, memory=memory)
        else:
            uni = UnigramModel.from_corpus([word_tokenize(s) for s in train_lines], eos=False)
            scorer = CausalLMFluency(uni, model=model, gguf_file=gguf_file)
        return _fluency(name, scorer, lines)

    return lm_fluency


def _wpslor(*, train: Train, sentences: Sentences, order: Order = 3, memory: Memory = "1G",
            model: WordPiece = None) -> dict:
    """Each sentence's SLOR over WordPiece pieces, under KenLM and unigram models of --train."""
    from .fluency import KenLMFluency, wordpiece_tokenizer

    train_lines, lines = _lines(train), _lines(sentences)
    scorer = KenLMFluency.fit(train_lines, order=order, tokenize=wordpiece_tokenizer(model), memory=memory)
    return _fluency("wpslor", scorer, lines)


def _correlations(*, values: Values, judgments: Judgments) -> dict:
    """Pearson, Spearman and Kendall correlations (and p-values) of the values with the judgments."""
    from .agreement import correlations

    return correlations(values, judgments)


def _r_squared(*, values: Values, judgments: Judgments) -> dict:
    """R^2 of the judgments regressed on the values."""
    from .agreement import r_squared

    return {"r_squared": r_squared(values, judgments)}


COMMANDS: dict[str, Callable[..., dict]] = {
    **{name: _orders(name) for name in ("pmr", "position_accuracy", "kendall_tau", "wlcs_l", "rouge_w")},
    "pdd": _labels(normalized=False),
    "pdd_normalized": _labels(normalized=True),
    "ordered_bertscore": _ordered_bertscore,
    "align_gold_order": _align_gold_order,
    "coherence_lambda": _coherence_lambda,
    **{name: _ngram_fluency(name) for name in ("fluency_a1", "fluency_a2")},
    **{name: _lm_fluency(name) for name in ("nce", "perplexity", "slor")},
    "wpslor": _wpslor,
    "mauve": _mauve,
    "mauve_text": _mauve,
    "correlations": _correlations,
    "r_squared": _r_squared,
}
"""Metric name -> its command-line form."""


# ------------------------------------------------------------------ critic setup kenlm
def setup_kenlm(*, cache: Annotated[Path | None, "build folder (default ~/.cache/critic/kenlm)"] = None,
                sdist: Annotated[Path | None, "a local kenlm-0.3.0.tar.gz instead of downloading it"] = None,
                force: Annotated[bool, "rebuild even when the tools are there"] = False) -> Path:
    """KenLM's lmplz and build_binary, built from the PyPI sdist (about 30 s; needs cmake and Boost)

    With $CRITIC_KENLM_BIN set and valid, or tools already built, nothing is built; prints the folder of the tools.
    """
    import tarfile

    from critics.ngram.build import setup_kenlm as build

    if sdist is not None:
        if not sdist.is_file():
            raise FileNotFoundError(f"{sdist}: no such file (--sdist)")
        if not tarfile.is_tarfile(sdist):
            raise ValueError(f"{sdist}: not a tar archive (--sdist expects kenlm-0.3.0.tar.gz)")
    return build(cache, sdist=sdist, force=force)
