"""Benchmark: sections per second of the classifier posterior ``prod_m P(z_m | x^m)`` on man pages.

    python -m experiments.benchmarks.section_posterior_speed [--root /usr/share/man] [--threads 2]
        [--repeats 2] [--encoder-train DOCS] [--encoder-docs DOCS] [--no-encoder] [--quick] [--json out.json]

Builds the man-page corpus from ``--root`` with the filters of ``experiments/manpages/sections.toml``
and fits :class:`~critics.sections.ClassifierSectionCritic` on its train split (delta and the
classifier's temperature on the valid split).  It then times ``critic.project(docs)`` -- the
posterior of a batch: boilerplate dropped, every section classified in one batched call, the
padded MAP states built -- best of ``--repeats`` rounds, on ``--threads`` threads:

* **tfidf** (TF-IDF 1-2 grams + logistic regression, the default): every document of the three
  splits (target: >= 10,000 sections/s);
* **encoder** (frozen all-MiniLM-L6-v2, mean-pooled, logistic head; trained on the first
  ``--encoder-train`` training documents, all by default): the test documents (the first
  ``--encoder-docs`` of them), in fp32 and in bf16 autocast, the two run in turn within a
  round (target: >= 70 sections/s on 2 cores).  It reports how often the bf16 MAP labels agree
  with fp32 and the largest difference of their posterior probabilities.

Held-out accuracy (MAP label = given title, test split) is reported for both classifiers.
Sections per second count the sections projected (after the boilerplate drop); each distinct
section text is classified once (the number of distinct texts is printed beside it).
``--quick`` is ``--repeats 1 --encoder-train 100 --encoder-docs 40``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Callable, Sequence

from critic.io import atomic_write_text

from .corpus import filtered_manpages
from .sections_speed import _best

__all__ = ["main", "time_projection"]


def _stats(projection, seconds: float) -> dict:
    """What a timed projection covered: documents, failures, sections (after the boilerplate drop)."""
    sections = int(projection.latent_steps.sum()) - len(projection)
    return {"docs": len(projection), "failures": len(projection.failures), "sections": sections,
            "seconds": seconds, "sections_per_s": sections / seconds if seconds > 0 else math.inf,
            "projection": projection}


def time_projection(critic, docs: Sequence, repeats: int) -> dict:
    """Best wall time of ``critic.project(docs)`` over ``repeats`` runs, and what it projected."""
    seconds, projection = _best({"project": lambda: critic.project(docs)}, repeats)["project"]
    return _stats(projection, seconds)


def _distinct(docs: Sequence) -> int:
    return len({sec.text for d in docs for sec in d.sections})


def _public(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "projection"}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/usr/share/man", help="man page root (tests/data/manpages for a toy run)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per posterior (best kept)")
    ap.add_argument("--encoder-train", type=int, default=None, help="training documents of the encoder head "
                    "(default: all)")
    ap.add_argument("--encoder-docs", type=int, default=None, help="test documents timed with the encoder "
                    "(default: all)")
    ap.add_argument("--no-encoder", action="store_true", help="time the TF-IDF posterior only")
    ap.add_argument("--quick", action="store_true", help="--repeats 1 --encoder-train 100 --encoder-docs 40")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 1
        args.encoder_train = args.encoder_train or 100
        args.encoder_docs = args.encoder_docs or 40

    import torch

    from critics.sections import ClassifierSectionCritic
    from critics.sections.classifier import bf16_supported

    torch.set_num_threads(args.threads)
    splits = filtered_manpages(args.root)
    every = [d for s in ("train", "valid", "test") for d in splits[s]]
    result = {"root": str(args.root), "threads": args.threads, "repeats": args.repeats,
              "docs": {s: len(v) for s, v in splits.items()}}

    start = time.perf_counter()
    tfidf = ClassifierSectionCritic().fit(splits["train"], validation=splits["valid"])
    fit_s = time.perf_counter() - start
    timed = _public(time_projection(tfidf, every, args.repeats))
    accuracy, compared = tfidf.accuracy(splits["test"])
    result["tfidf"] = {**timed, "distinct_texts": _distinct(every), "fit_s": fit_s, "test_accuracy": accuracy,
                       "test_sections": compared, "valid_accuracy": tfidf.valid_accuracy_,
                       "temperature": tfidf.classifier_.temperature_}
    print(f"section posterior, man pages ({', '.join(f'{s} {n}' for s, n in result['docs'].items())} documents), "
          f"{args.threads} thread(s), best of {args.repeats}")
    print(f"  tfidf   {timed['sections']:6d} sections ({result['tfidf']['distinct_texts']} distinct texts) "
          f"{timed['seconds']:8.3f} s  {timed['sections_per_s']:10.1f} sections/s   "
          f"test accuracy {accuracy:.4f} ({compared} sections), fit {fit_s:.1f} s")

    if not args.no_encoder:
        result["encoder"] = _encoder(args, splits, bf16_supported("cpu"))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def _encoder(args, splits: dict, bf16: bool) -> dict:
    """Fit the frozen-encoder critic, time its posterior in fp32 and bf16 autocast, compare the two."""
    import torch

    from critics.sections import ClassifierSectionCritic

    train = splits["train"][:args.encoder_train]
    docs = splits["test"][:args.encoder_docs]
    start = time.perf_counter()
    critic = ClassifierSectionCritic(classifier="encoder").fit(train, validation=splits["valid"])
    fit_s = time.perf_counter() - start
    clf = critic.classifier_

    def run(precision: str) -> Callable:
        def go():
            clf.precision = precision
            return critic.project(docs)
        return go

    best = _best({"fp32": run("fp32"), **({"bf16": run("bf16")} if bf16 else {})}, args.repeats)
    timed = {name: _stats(projection, seconds) for name, (seconds, projection) in best.items()}
    clf.precision = "fp32"
    accuracy, compared = critic.accuracy(splits["test"][:args.encoder_docs])
    out = {"train_docs": len(train), "train_sections": critic.classifier_sections_["train"]["used"],
           "fit_s": fit_s, "valid_accuracy": critic.valid_accuracy_, "temperature": clf.temperature_,
           "test_accuracy": accuracy, "test_sections": compared, "distinct_texts": _distinct(docs),
           "fp32": _public(timed["fp32"]), "bf16": _public(timed["bf16"]) if bf16 else None}
    print(f"  encoder (frozen all-MiniLM-L6-v2 + logistic head, trained on {len(train)} documents, "
          f"{out['train_sections']} sections, fit {fit_s:.1f} s): test accuracy {accuracy:.4f} ({compared} "
          f"sections)")
    for name in ("fp32", "bf16"):
        if out[name] is None:
            print(f"  encoder {name}: bf16 autocast is not supported on this CPU")
            continue
        t = out[name]
        print(f"  encoder {name} {t['sections']:6d} sections ({out['distinct_texts']} distinct texts) "
              f"{t['seconds']:8.3f} s  {t['sections_per_s']:10.1f} sections/s")
    if bf16:
        low, high = timed["bf16"]["projection"], timed["fp32"]["projection"]
        same = sum(a == b for x, y in zip(low.extras["labels"], high.extras["labels"]) for a, b in zip(x, y))
        with torch.no_grad():
            clf.precision = "bf16"
            p_low = clf.log_proba([s.text for d in docs for s in d.sections]).exp()
            clf.precision = "fp32"
            p_high = clf.log_proba([s.text for d in docs for s in d.sections]).exp()
        out["bf16_speedup"] = out["bf16"]["sections_per_s"] / out["fp32"]["sections_per_s"]
        out["map_agreement"] = same / max(out["fp32"]["sections"], 1)
        out["max_abs_prob_diff"] = float((p_low - p_high).abs().max()) if len(p_low) else 0.0
        print(f"  bf16/fp32 speed-up {out['bf16_speedup']:.2f}x; MAP labels agree on {out['map_agreement']:.4f} "
              f"of sections; largest |P_bf16 - P_fp32| = {out['max_abs_prob_diff']:.2e}")
    return out


if __name__ == "__main__":
    main()
