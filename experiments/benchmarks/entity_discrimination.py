"""Benchmark: does the entity-grid critic prefer a document to the same sentences shuffled?  Barzilay & Lapata's
sentence-order discrimination, and the outlier AUC of shuffled documents against real ones.

    python -m experiments.benchmarks.entity_discrimination [--corpora manpages,people] [--documents N]
                                                           [--permutations 20] [--train 1000] [--rate 0.5]
                                                           [--params JSON] [--bootstrap 1000] [--seed 0]
                                                           [--quick] [--json out.json]

For each corpus the critic (``entity-grid``, its defaults or ``--params``) is fitted on the training documents;
then

* **discrimination** (B&L 2008): each of the first ``--documents`` held-out documents that has two or more
  sentences is paired with up to ``--permutations`` *distinct* random orders of all its sentences
  (:func:`sentence_permutations`; a document with fewer orders gets them all), the sentences exactly the critic's
  (``shuffled-document`` re-splits the text it reorders: on man pages a moved sentence without a final stop merges
  with the next one, so its grid is not the original's permuted).  Accuracy = the share of pairs in which the
  original has the lower ``T(x)``, ties counting half, with a percentile bootstrap CI over documents (a document's
  pairs resampled together).  B&L report 87.2% on their Earthquakes and 90.4% on their Accidents news corpora
  (their full model: coreference, syntax, salience; about 10 sentences a document);
* **outlier detection**: :func:`experiments.benchmarks.outliers.run_case` with the corruptions
  ``shuffled-sentences`` (each section's sentences in another order) and ``shuffled-document`` (all of them): a
  share ``--rate`` of half the held-out documents replaced by shuffled ones, ranked by outlier p-value against the
  other half; the AUC of shuffled against real documents with its bootstrap CI (the project's target: >= 0.85).

Corpora (both install offline): ``manpages``, the filtered man pages of ``experiments/manpages/sections.toml``
(train split; held out: valid and test); ``people``, the English Wikipedia "People" summaries (the first
``--train`` for training, the rest held out), three sentences a summary on average.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
import zlib
from typing import Sequence

import numpy as np

from critic.document import Document, Section
from critic.io import atomic_write_text

from .corpus import filtered_manpages
from .outliers import Case, run_case

__all__ = ["main", "BARZILAY_LAPATA_2008", "sentence_permutations", "discrimination", "CORPORA"]

BARZILAY_LAPATA_2008 = {"Earthquakes": 0.872, "Accidents": 0.904}
"""Discrimination accuracy of B&L's full entity-grid model (coreference + syntax + salience) on their two news
corpora (Computational Linguistics 34(1), 2008)."""


def sentence_permutations(doc: Document, permutations: int, seed: int = 0) -> list[Document]:
    """Up to ``permutations`` distinct random orders of the document's sentences (as the critic splits them,
    :func:`critics.entitygrid.document_sentences`) other than its own -- all ``N! - 1`` of them when there are no
    more -- each a document of one section whose paragraphs are the sentences in that order, so that the splitter
    finds the same sentences again and its grid is the original's with the columns permuted.  Ids
    ``"<id>#order-<k>"``; the orders drawn from ``numpy.random.default_rng([seed, crc32(id)])``."""
    from critics.entitygrid import document_sentences

    sentences = document_sentences(doc)
    n = len(sentences)
    if n < 2:
        return []
    if math.factorial(n) - 1 <= permutations:
        orders = list(itertools.permutations(range(n)))[1:]
    else:
        rng, found = np.random.default_rng([seed, zlib.crc32(doc.id.encode("utf-8"))]), {}
        while len(found) < permutations:
            order = tuple(rng.permutation(n).tolist())
            if order != tuple(range(n)):
                found.setdefault(order, None)
        orders = list(found)
    return [Document(f"{doc.id}#order-{k}", (Section(None, "\n\n".join(sentences[i] for i in order)),))
            for k, order in enumerate(orders)]


def discrimination(critic, docs: Sequence[Document], *, permutations: int, n_bootstrap: int, seed: int = 0) -> dict:
    """B&L's discrimination of ``docs`` against orders of their sentences (:func:`sentence_permutations`) by
    ``T(x)`` under ``critic``: ``accuracy``, its bootstrap ``ci`` over documents, ``documents`` and ``pairs``
    counted, and ``outcomes``: ``(original id, permuted id, T original, T permuted, 1 | 0.5 | 0)`` of every pair.
    A document or permutation the critic cannot score leaves its pairs out (``skipped`` counts the documents left
    with no pair)."""
    shuffles = {d.id: sentence_permutations(d, permutations, seed) for d in docs}
    originals = critic.score([d for d in docs if shuffles[d.id]])
    shuffled = critic.score([s for d in docs for s in shuffles[d.id]])
    t_original = dict(zip(originals.doc_ids, originals.latent_nll.tolist()))
    t_shuffled = dict(zip(shuffled.doc_ids, shuffled.latent_nll.tolist()))
    outcomes, per_doc = [], []
    for d in docs:
        if d.id not in t_original:
            continue
        mine = [(d.id, s.id, t_original[d.id], t_shuffled[s.id]) for s in shuffles[d.id] if s.id in t_shuffled]
        found = [(*pair, 1.0 if pair[2] < pair[3] else 0.5 if pair[2] == pair[3] else 0.0) for pair in mine]
        outcomes += found
        if found:
            per_doc.append([o[-1] for o in found])
    sums = np.array([sum(o) for o in per_doc])
    sizes = np.array([len(o) for o in per_doc])
    rng = np.random.default_rng(seed)
    boot = [sums[rows].sum() / sizes[rows].sum()
            for rows in (rng.integers(len(per_doc), size=len(per_doc)) for _ in range(n_bootstrap))] if per_doc else []
    return {"accuracy": float(sums.sum() / sizes.sum()) if per_doc else float("nan"),
            "ci": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))] if boot else [math.nan] * 2,
            "documents": len(per_doc), "pairs": int(sizes.sum()),
            "skipped": len(docs) - len(per_doc), "outcomes": outcomes}


def _manpages(args) -> tuple[list, list]:
    splits = filtered_manpages(args.root)
    return splits["train"], splits["valid"] + splits["test"]


def _people(args) -> tuple[list, list]:
    from critic.corpora.wikisummaries import load_wiki_summaries

    people = load_wiki_summaries(language="en", topic="People", install=False)
    return people[:args.train], people[args.train:]


CORPORA = {"manpages": _manpages, "people": _people}


def _shuffle(name: str):
    """The corruption ``name`` of :mod:`critic.corrupt` as a case's corruption (:func:`critic.corrupt.corrupt_all`: a
    document of one sentence cannot carry it and stays out, neither bad nor real)."""
    from critic.corrupt import corrupt_all

    return lambda docs, rng: corrupt_all(docs, name, seed=rng.randrange(2**31))


def run_corpus(name: str, args) -> dict:
    from critics.entitygrid import EntityGridCritic

    train, held_out = CORPORA[name](args)
    start = time.perf_counter()
    critic = EntityGridCritic(**args.params).fit(train)
    fitted = time.perf_counter() - start
    found = discrimination(critic, held_out[:args.documents], permutations=args.permutations,
                           n_bootstrap=args.bootstrap, seed=args.seed)
    case = Case(lambda: EntityGridCritic(**args.params), train, held_out,
                {k: _shuffle(k) for k in ("shuffled-sentences", "shuffled-document")})
    detected = run_case(name, case, args)
    return {"train": len(train), "held_out": len(held_out), "fit_seconds": fitted,
            "discrimination": {k: v for k, v in found.items() if k != "outcomes"},
            "detection": {corruption: {score: {k: r[k] for k in ("auc", "auc_ci", "precision_at_k", "k", "n",
                                                                 "skipped")}
                                       for score, r in by_score.items()}
                          for corruption, by_score in detected["corruptions"].items()}}


def _report(results: dict) -> None:
    published = ", ".join(f"{v:.1%} {k}" for k, v in BARZILAY_LAPATA_2008.items())
    print(f"sentence-order discrimination (original vs a shuffle, lower T(x) wins, ties half); B&L 2008, news with "
          f"coreference: {published}")
    for name, r in results["corpora"].items():
        d = r["discrimination"]
        print(f"  {name:<9} trained on {r['train']}: {d['documents']} documents, {d['pairs']} pairs: accuracy "
              f"{d['accuracy']:.1%} ({d['ci'][0]:.1%}-{d['ci'][1]:.1%})")
    print("outlier detection of shuffled documents among real held-out ones: AUC (95% CI), precision at k "
          "(target: AUC >= 0.85)")
    for name, r in results["corpora"].items():
        for corruption, by_score in r["detection"].items():
            for score, x in by_score.items():
                print(f"  {name:<9} {corruption:<18} {score:<17} AUC {x['auc']:.3f} ({x['auc_ci'][0]:.3f}-"
                      f"{x['auc_ci'][1]:.3f})  P@{x['k']} {x['precision_at_k']:.2f}  n={x['n']} "
                      f"skipped={x['skipped']}")


def _settings(text: str) -> dict:
    """``--params``: a JSON object of the critic's settings, checked against their declarations."""
    from critic.config import check_params
    from critics.entitygrid import EntityGridCritic

    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc.msg}") from None
    if not isinstance(settings, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of settings, got {text!r}")
    try:
        check_params(EntityGridCritic, settings, where="entity-grid")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return settings


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="manpages,people", help="comma-separated: " + ", ".join(CORPORA))
    ap.add_argument("--documents", type=int, default=1000, help="held-out documents paired with their shuffles")
    ap.add_argument("--permutations", type=int, default=20, help="distinct shuffles per document (B&L: 20)")
    ap.add_argument("--train", type=int, default=1000, help="training documents of the people corpus")
    ap.add_argument("--rate", type=float, default=0.5, help="share of the evaluation documents shuffled (the AUC does "
                                                             "not depend on it; more shuffled ones narrow its CI)")
    ap.add_argument("--params", type=_settings, default={}, help="the critic's settings as a JSON object, e.g. "
                                                                 "'{\"order\": 1}' (default: its defaults)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the CIs")
    ap.add_argument("--calibration-null", type=int, default=200,
                    help="simulations of a calibrated score's KS distances (outliers.calibration)")
    ap.add_argument("--root", default="/usr/share/man", help="man page root")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="--documents 100 --permutations 10 --train 300 "
                                                         "--bootstrap 200 --calibration-null 20")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.documents, args.permutations, args.train, args.bootstrap, args.calibration_null = 100, 10, 300, 200, 20
    names = [n for n in args.corpora.split(",") if n]
    unknown = [n for n in names if n not in CORPORA]
    if unknown:
        ap.error(f"unknown corpus {', '.join(unknown)}; known: {', '.join(CORPORA)}")
    for option in ("documents", "permutations", "train", "bootstrap", "calibration_null"):
        if getattr(args, option) < 1:
            ap.error(f"--{option.replace('_', '-')} must be at least 1, got {getattr(args, option)}")
    if not 0 < args.rate < 1:
        ap.error(f"--rate must be a share in (0, 1), got {args.rate}")
    results = {"params": args.params, "corpora": {name: run_corpus(name, args) for name in names}}
    _report(results)
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
