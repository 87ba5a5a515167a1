"""``critic metric NAME ...`` and ``critic setup kenlm|neuralcoref``; results are printed as JSON.

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
    critic setup neuralcoref                              # Python 3.7 venv for the coreference critic

Documents in JSONL give their units as ``"sentences": [...]``, or as ``"sections": [{"text": ...}]``
(one unit per section), or as ``"text"`` (one unit).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["add_commands", "metric_main", "setup_main"]

_ORDERING = ("pmr", "position_accuracy", "kendall_tau", "wlcs_l", "rouge_w")
_FLUENCY = ("fluency_a1", "fluency_a2", "nce", "perplexity", "slor", "wpslor")


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _read_jsonl(path: str) -> list[tuple[str, dict]]:
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


def _documents(path: str) -> list[list[str]]:
    return [_units(where, rec) for where, rec in _read_jsonl(path)]


def _lines(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{p}: file holds no sentences")
    return lines


def _n(text: str):
    if text in ("inf", "infinity"):
        return math.inf
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--n: expected an integer or 'inf', got {text!r}") from None


def _emit(obj) -> int:
    print(json.dumps(obj, indent=2, default=float))
    return 0


def metric_main(args) -> int:
    from critic.config import suggest

    from . import METRICS
    from .ordering import ordering_scores

    name = args.name
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}{suggest(name, list(METRICS))}; `critic list` shows them")
    if name in _ORDERING:
        if args.jsonl:
            recs = _read_jsonl(args.jsonl)
            preds = [_int_list(where, r, "pred") for where, r in recs]
            golds = [_int_list(where, r, "gold") for where, r in recs]
            for (where, _), p, g in zip(recs, preds, golds):
                try:
                    ordering_scores([p], [g], metrics=[name])
                except ValueError as exc:
                    raise ValueError(f"{where}: {exc}") from None
        elif args.pred and args.gold:
            preds, golds = [_ints(args.pred, "--pred")], [_ints(args.gold, "--gold")]
        else:
            raise ValueError("give --pred and --gold, or --jsonl")
        out = ordering_scores(preds, golds, metrics=[name])
        return _emit({"metric": name, "value": out[name], "n": out["n"]})
    if name in ("pdd", "pdd_normalized"):
        from .pdd import pdd

        if args.pred_jsonl and args.gold_jsonl:
            pred = [_int_list(where, r, "labels") for where, r in _read_jsonl(args.pred_jsonl)]
            gold = [_int_list(where, r, "labels") for where, r in _read_jsonl(args.gold_jsonl)]
        elif args.pred and args.gold:
            pred, gold = _ints(args.pred, "--pred"), _ints(args.gold, "--gold")
        else:
            raise ValueError("give --pred and --gold label lists, or --pred-jsonl and --gold-jsonl")
        value, bins = pdd(pred, gold, num_bins=args.bins, num_classes=args.classes, return_num_bins=True)
        if name == "pdd_normalized":
            value = 1 / (1 + value)
        return _emit({"metric": name, "value": value, "num_bins": bins})
    if name in ("ordered_bertscore", "align_gold_order"):
        from .encoders import BertScoreSimilarity
        from .text import align_gold_order_text, ordered_bertscore_texts

        if not (args.pred_jsonl and args.gold_jsonl):
            raise ValueError("give --pred-jsonl and --gold-jsonl (documents paired by line)")
        preds, golds = _documents(args.pred_jsonl), _documents(args.gold_jsonl)
        if len(preds) != len(golds):
            raise ValueError(f"{args.pred_jsonl} has {len(preds)} documents but {args.gold_jsonl} has {len(golds)}")
        n = _n(args.n)
        sim = BertScoreSimilarity(args.model)
        if name == "align_gold_order":
            return _emit({"metric": name, "orders": [align_gold_order_text(p, g, sim) for p, g in zip(preds, golds)]})
        scores = ordered_bertscore_texts(golds, preds, args.version, n, sim)
        return _emit({"metric": name, "version": args.version, "n": args.n, "mean": sum(scores) / len(scores),
                      "values": scores})
    if name == "coherence_lambda":
        from .encoders import SentenceEncoder
        from .text import coherence_lambda_text

        if not args.jsonl:
            raise ValueError("give --jsonl documents")
        docs = _documents(args.jsonl)
        enc = SentenceEncoder(args.model)
        scores = [coherence_lambda_text(units, args.lam, enc) for units in docs]
        return _emit({"metric": name, "lam": args.lam, "mean": sum(scores) / len(scores), "values": scores})
    if name in _FLUENCY:
        return _fluency(args)
    if name == "mauve":
        from .mauve import mauve_text

        if not (args.pred_jsonl and args.gold_jsonl):
            raise ValueError("give --pred-jsonl and --gold-jsonl")
        p = [" ".join(units) for units in _documents(args.pred_jsonl)]
        q = [" ".join(units) for units in _documents(args.gold_jsonl)]
        return _emit({"metric": name, "value": mauve_text(p, q, args.model)})
    if name in ("correlations", "r_squared"):
        from .agreement import correlations, r_squared

        if not (args.values and args.judgments):
            raise ValueError("give --values and --judgments")
        x, y = _floats(args.values, "--values"), _floats(args.judgments, "--judgments")
        out = correlations(x, y) if name == "correlations" else {"r_squared": r_squared(x, y)}
        return _emit({"metric": name, **out})
    raise ValueError(f"metric {name!r} has no command-line form")


def _fluency(args) -> int:
    from .fluency import CausalLMFluency, KenLMFluency, UnigramModel, word_tokenize, wordpiece_tokenizer

    if not (args.train and args.sentences):
        raise ValueError("give --train (text, one sentence a line) and --sentences")
    train, sents = _lines(args.train), _lines(args.sentences)
    name = args.name
    if name == "wpslor":
        scorer = KenLMFluency.fit(train, order=args.order, tokenize=wordpiece_tokenizer(args.model), memory=args.memory)
        key = "slor"
    elif args.backend == "kenlm" or name in ("fluency_a1", "fluency_a2"):
        scorer = KenLMFluency.fit(train, order=args.order, memory=args.memory)
        key = {"fluency_a1": "a1", "fluency_a2": "a2", "perplexity": "ppl"}.get(name, name)
    else:
        uni = UnigramModel.from_corpus([word_tokenize(s) for s in train], eos=False)
        scorer = CausalLMFluency(uni, model=args.model, gguf_file=args.gguf_file)
        key = {"perplexity": "ppl"}.get(name, name)
    scores = scorer.score_many(sents) if hasattr(scorer, "score_many") else [scorer.score(s) for s in sents]
    values = [s[key] for s in scores]
    return _emit({"metric": name, "backend": "kenlm" if isinstance(scorer, KenLMFluency) else "transformers",
                  "mean": sum(values) / len(values), "values": values})


def setup_main(args) -> int:
    own = {"kenlm": ("cache", "sdist"), "neuralcoref": ("venv", "python")}
    stray = [f"--{opt}" for tool, opts in own.items() if tool != args.tool for opt in opts
             if getattr(args, opt, None) is not None]
    if stray:
        raise ValueError(f"not options of `critic setup {args.tool}`: {', '.join(stray)}")
    if args.tool == "neuralcoref":
        from critics.coref.neuralcoref import setup_neuralcoref

        print(setup_neuralcoref(args.venv, python=args.python, force=args.force))
        return 0
    from critics.ngram.build import setup_kenlm

    if args.sdist is not None:
        import tarfile

        sdist = Path(args.sdist)
        if not sdist.is_file():
            raise FileNotFoundError(f"{sdist}: no such file (--sdist)")
        if not tarfile.is_tarfile(sdist):
            raise ValueError(f"{sdist}: not a tar archive (--sdist expects kenlm-0.3.0.tar.gz)")
    path = setup_kenlm(args.cache, sdist=args.sdist, force=args.force)
    print(path)
    return 0


def add_commands(subparsers) -> None:
    """Add the ``metric`` and ``setup`` sub-commands to the ``critic`` CLI."""
    m = subparsers.add_parser("metric", help="compute one of the seeds' metrics (critic list shows them)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("name")
    m.add_argument("--pred", help="comma-separated order or label list")
    m.add_argument("--gold", help="comma-separated order or label list")
    m.add_argument("--jsonl", help="JSONL input (orders or documents)")
    m.add_argument("--pred-jsonl", help="JSONL predictions / generated documents")
    m.add_argument("--gold-jsonl", help="JSONL references")
    m.add_argument("--bins", type=int, default=5, help="PDD: requested number of positional bins")
    m.add_argument("--classes", type=int, default=None, help="PDD: number of roles (default max label + 1)")
    m.add_argument("--version", type=int, default=1, choices=(1, 2), help="Ordered BERTScore version")
    m.add_argument("--n", default="1", help="Ordered BERTScore n (an int or inf)")
    m.add_argument("--lam", type=float, default=0.5, help="coherence-lambda weight")
    m.add_argument("--model", default=None, help="encoder / causal LM name or path (default: offline models)")
    m.add_argument("--gguf-file", default=None, help="GGUF file inside --model")
    m.add_argument("--train", help="fluency: training text, one sentence a line")
    m.add_argument("--sentences", help="fluency: sentences to score, one a line")
    m.add_argument("--backend", choices=("kenlm", "transformers"), default="kenlm")
    m.add_argument("--order", type=int, default=3, help="n-gram order")
    m.add_argument("--memory", default="1G", help="lmplz -S memory bound")
    m.add_argument("--values", help="correlations: comma-separated metric values")
    m.add_argument("--judgments", help="correlations: comma-separated human scores")
    m.set_defaults(func=metric_main)

    s = subparsers.add_parser("setup", help="build optional tools (kenlm: lmplz and build_binary; "
                                            "neuralcoref: its Python 3.7 venv)")
    s.add_argument("tool", choices=("kenlm", "neuralcoref"))
    s.add_argument("--cache", default=None, help="kenlm: build folder (default ~/.cache/critic/kenlm)")
    s.add_argument("--sdist", default=None, help="kenlm: local kenlm-0.3.0.tar.gz instead of downloading it")
    s.add_argument("--venv", default=None, help="neuralcoref: venv folder (default $CRITIC_NEURALCOREF_VENV "
                                                "or ~/.cache/critic/neuralcoref/venv)")
    s.add_argument("--python", default=None, help="neuralcoref: the Python 3.7 to build it with (default "
                                                  "$CRITIC_PYTHON37, pyenv's 3.7.x, python3.7 on PATH)")
    s.add_argument("--force", action="store_true", help="rebuild even when the tool is there")
    s.set_defaults(func=setup_main)
