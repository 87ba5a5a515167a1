"""Benchmark: do the report's flags fire, and how many of them are real documents?  Recall at a false discovery
rate and the realised share of false flags, per critic and corruption, by reference size.

    python -m experiments.benchmarks.flags [--cases sections,sections-classifier,lda,coref,ctm]
                                           [--reference-sizes 50,100,500] [--clean 60] [--bad 20]
                                           [--repetitions 50] [--fdr 0.1] [--quick] [--json out.json]

For each case (:mod:`experiments.benchmarks.outliers` builds them: a critic, real training documents, real held-out
documents and corruptions that target the critic's latent) the critic is fitted once on the training documents
and calibrated as ``critic fit`` does (:meth:`critic.critic.Critic.calibrate`: its training documents cross-fitted,
``--valid`` held-out documents beside them).  Then, ``--repetitions`` times for each reference size: the remaining
held-out documents are shuffled into a reference set of that size, ``--clean`` clean candidates and ``--bad``
others corrupted; ``criticize`` scores two candidate sets against the reference -- the clean ones with the
corrupted ones ("mixed", what a user's generations look like) and the clean ones alone ("clean") -- and documents
are flagged as the report flags them (Benjamini-Hochberg q-value at most ``--fdr``).  Printed per case, corruption,
reference size and pool ("calibrated": the critic's calibration documents and the reference, the default;
"reference only": the reference alone, what the p-values compared with before calibration):

* **recall**: the share of corrupted documents flagged in the mixed set (mean over repetitions);
* **FDP mixed**: the share of real documents among the mixed set's flags (0 when none), its mean being the
  realised false discovery rate, which BH keeps at most ``fdr * clean / (clean + bad)`` in expectation;
* **FDP clean**: the same on the all-clean set, where any flag is false (its mean is the chance of any flag);
* **AUC**: the outlier p-value's ranking of corrupted against real documents in the mixed set;
* the smallest p-value the pool allows (``1 / (n_g + 1)``, ``n_g`` real documents in the smallest length group).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from critic.io import atomic_write_text

from .outliers import CASES, add_case_arguments, auc, integer_list, ranking_scores

__all__ = ["main", "repetition"]


def _flags(result, name: str, fdr: float) -> np.ndarray:
    return np.array([d.q_value <= fdr for d in result.candidates[name].documents], dtype=bool)


def repetition(critic, held_out: list, corrupt, *, n_reference: int, n_clean: int, n_bad: int, fdr: float,
               rng: random.Random, seed: int) -> dict:
    """One draw: a reference of ``n_reference`` held-out documents, ``n_clean`` clean candidates and ``n_bad``
    corrupted copies of other held-out documents (of clean ones when there are no others left), flagged at
    ``fdr``; returns recall, the false discovery proportions of the mixed and the clean set, AUC and the pool."""
    from critic.criticism import criticize

    docs = rng.sample(held_out, len(held_out))
    reference, rest = docs[:n_reference], docs[n_reference:]
    clean = rest[:n_clean]
    sources = rest[n_clean:n_clean + n_bad] if len(rest) >= n_clean + n_bad else rng.sample(clean, n_bad)
    bad = corrupt(sources, rng)
    result = criticize(critic, reference, {"mixed": clean + bad, "clean": clean}, n_bootstrap=10,
                       n_permutations=10, seed=seed)
    mixed = result.candidates["mixed"]
    is_bad = np.array([d.id not in {c.id for c in clean} for d in mixed.documents])
    flagged = _flags(result, "mixed", fdr)
    clean_flags = _flags(result, "clean", fdr)
    scores = ranking_scores(np.array([d.outlier_p_value for d in mixed.documents]),
                            np.array([d.latent_nll_per_step for d in mixed.documents]))
    return {"recall": float(flagged[is_bad].mean()) if is_bad.any() else float("nan"),
            "fdp_mixed": float((flagged & ~is_bad).sum() / max(flagged.sum(), 1)),
            "fdp_clean": float(clean_flags.any()),
            "auc": auc(scores, is_bad) if is_bad.any() and (~is_bad).any() else float("nan"),
            "smallest_p": result.config["calibration"]["smallest_p"], "pool_size": result.config["calibration"]["n"]}


def _without_calibration(critic):
    """The same fitted critic comparing with the reference alone (a shallow copy with no calibration)."""
    bare = copy.copy(critic)
    bare.__dict__.pop("calibration_", None)
    return bare


def run_case(name: str, args) -> list[dict]:
    case = CASES[name](args)
    need = max(args.reference_sizes) + args.clean + args.valid
    held = list(case.held_out)
    train = random.Random(args.seed).sample(case.train, len(case.train))  # corpora come sorted (man1 .. man8)
    if len(held) < need:  # borrow training documents: the sweep needs held-out documents for its largest reference
        moved = need - len(held)
        if len(train) - moved < 5:
            raise SystemExit(f"{name}: {len(held)} held-out and {len(train)} training documents cannot give a "
                             f"reference of {max(args.reference_sizes)} and {args.clean} clean candidates")
        held, train = held + train[-moved:], train[:-moved]
    valid, held = held[:args.valid], held[args.valid:]
    started = time.perf_counter()
    critic = case.make().fit(train, validation=valid or None)
    fit_s = time.perf_counter() - started
    started = time.perf_counter()
    critic.calibrate(train, valid or None, folds=args.calibration_folds, seed=args.seed)
    calibrate_s = time.perf_counter() - started
    print(f"{name}: fitted on {len(train)} in {fit_s:.1f} s; calibration {critic.calibration.summary()} in "
          f"{calibrate_s:.1f} s; {len(held)} held-out documents", flush=True)
    rows = []
    for corruption, corrupt in case.corruptions.items():
        for pool, scored in (("calibrated", critic), ("reference only", _without_calibration(critic))):
            for n_reference in args.reference_sizes:
                reps = [repetition(scored, held, corrupt, n_reference=n_reference, n_clean=args.clean, n_bad=args.bad,
                                   fdr=args.fdr, rng=random.Random(args.seed * 100_003 + r), seed=args.seed)
                        for r in range(args.repetitions)]
                summary = {key: float(np.nanmean([r[key] for r in reps])) for key in
                           ("recall", "fdp_mixed", "fdp_clean", "auc", "smallest_p", "pool_size")}
                summary["fdp_mixed_se"] = float(np.std([r["fdp_mixed"] for r in reps]) / np.sqrt(len(reps)))
                summary["fdp_clean_se"] = float(np.std([r["fdp_clean"] for r in reps]) / np.sqrt(len(reps)))
                rows.append({"case": name, "corruption": corruption, "pool": pool, "reference": n_reference,
                             "train": len(train), "valid": len(valid), "calibration": len(critic.calibration),
                             "fit_s": fit_s, "calibrate_s": calibrate_s, **summary})
                print(_row(rows[-1]), flush=True)
    return rows


HEADER = ("| critic | corruption | pool | reference | pool size | smallest p | recall at FDR | FDP mixed (se) | "
          "FDP clean (se) | AUC |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|")


def _row(r: dict) -> str:
    return (f"| {r['case']} | {r['corruption']} | {r['pool']} | {r['reference']} | {r['pool_size']:.0f} | "
            f"{r['smallest_p']:.4f} | {r['recall']:.3f} | {r['fdp_mixed']:.3f} ({r['fdp_mixed_se']:.3f}) | "
            f"{r['fdp_clean']:.3f} ({r['fdp_clean_se']:.3f}) | {r['auc']:.3f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.flags", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="sections", help=f"comma-separated: {', '.join(CASES)} (default: sections)")
    p.add_argument("--reference-sizes", type=integer_list(2, "50,100,500"), default=[50, 100, 500],
                   help="reference set sizes, comma-separated (default 50,100,500)")
    p.add_argument("--clean", type=int, default=60, help="clean candidates per set (default 60)")
    p.add_argument("--bad", type=int, default=20, help="corrupted candidates in the mixed set (default 20)")
    p.add_argument("--valid", type=int, default=97, help="held-out documents given to fit and calibration as "
                                                         "validation (default 97, the man pages' valid split)")
    p.add_argument("--calibration-folds", type=int, default=None, help="cross-fitting folds (default: the critic's)")
    p.add_argument("--repetitions", type=int, default=50, help="draws per reference size (default 50)")
    p.add_argument("--fdr", type=float, default=0.1, help="flag at this false discovery rate (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="5 repetitions, references of 50 and 100")
    p.add_argument("--json", type=Path, help="write the rows here")
    add_case_arguments(p)
    args = p.parse_args(argv)
    args.lda_k = args.lda_topics[0]
    if args.quick:
        args.repetitions, args.reference_sizes = 5, [50, 100]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as work:
        args.work = args.work or work
        rows = []
        print(HEADER)
        for name in cases:
            rows += run_case(name, args)
    print("\n" + HEADER)
    for r in rows:
        print(_row(r))
    if args.json:
        atomic_write_text(args.json, json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
