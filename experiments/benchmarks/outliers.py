"""Benchmark: do the outlier flags find the bad generations?  Detection per critic and corruption, and calibration.

    python -m experiments.benchmarks.outliers [--cases sections,ctm,lda,coref] [--rate 0.1] [--bootstrap 1000]
                                              [--ctm-fit em|svi] [--passage-share 0.3] [--calibration-null 1000]
                                              [--quick] [--json out.json]

For each case a critic is fitted on real training documents; the real held-out documents are split in two: a
reference half, and an evaluation half of which a share ``--rate`` is replaced by known-bad documents made by a
corruption that targets the critic's latent.  ``criticize`` scores the mixed set against the reference, and the
documents are ranked as the report ranks them (outlier p-value ascending, then T/M descending), once by the
length-matched p-value (the default) and once by the plain one; for a critic with statistics beside ``T/M``
(:attr:`critic.critic.Critic.outlier_statistics`) also by ``T/M``'s own p-value alone ("T/M alone": the paper's
ranking by ``T(x)``).  Printed per case and corruption: the AUC of that ranking for bad against real documents with
a percentile bootstrap CI (documents resampled within each class), precision at k (k = the number of bad
documents), and the calibration of the real documents' p-values within each length tertile and overall: the KS
test against the uniform distribution ("KS", p > 0.01 is calibrated), and the same KS distance against what a
calibrated score gives with this reference ("KS vs ref", see :func:`calibration`).

Cases (all corpora install offline):

* ``sections``: the section-transition critic on the filtered man pages (``experiments/manpages/sections.toml``);
  corruptions: sections permuted, one repeated, one dropped (:mod:`critic.corrupt`);
* ``ctm``: the CTM critic (K = 10; ``--ctm-fit em``, its default fit: variational EM from the NMF start, or
  ``svi`` from a random start with ``--ctm-steps``, the default before issue 21) on English Wikipedia People
  summaries; corruptions: off-topic documents (man pages' text, cut to a summary's length), off-topic passages (a
  run of ``--passage-share`` of a summary's words replaced by as many words of a man page) and topic drift (a
  summary's second half replaced by the second half of a summary of another topic);
* ``lda``: the LDA critic (``--lda-topics``, default K = 2: the paper's code-mixing setting, one topic per
  language) on English and Spanish Wikipedia summaries;
  corruption: code-mixed documents (:func:`critics.topics.codemix.code_mixed_set`, sentences alternating);
* ``coref``: the coreference critic on the People summaries resolved by neuralcoref; corruptions: one pronoun's
  gender or number swapped (:mod:`critics.coref.corrupt`; documents with no eligible pronoun are left out);
* ``repetition``: the repetition critic on the filtered man pages; corruptions: loops (:mod:`critic.corrupt`: a
  paragraph written three more times, the last three sentences written three more times);
* ``entity-grid``: the entity-grid critic on the filtered man pages; corruptions: sentences shuffled inside each
  section, or across the document (documents of one sentence are left out).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Sequence

import numpy as np

from critic.document import Document, Section
from critic.io import atomic_write_text

from .corpus import filtered_manpages

__all__ = ["main", "ranking_scores", "auc", "detection", "calibration", "CASES", "add_case_arguments", "integer_list"]


def ranking_scores(p_values: np.ndarray, per_step: np.ndarray) -> np.ndarray:
    """A score per document that orders them as the report flags them: smaller p first, then larger T/M."""
    order = np.lexsort((-per_step, p_values))
    scores = np.empty(len(order))
    scores[order] = -np.arange(len(order), dtype=np.float64)
    return scores


def auc(scores: np.ndarray, bad: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for ``bad`` (True) against the rest: the probability that a bad
    document outranks a real one (Mann-Whitney; ties count half)."""
    pos, neg = scores[bad], scores[~bad]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def detection(scores: np.ndarray, bad: np.ndarray, *, n_bootstrap: int, seed: int = 0) -> dict:
    """AUC with a percentile bootstrap CI (each class resampled on its own) and precision at k = #bad."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(bad), np.flatnonzero(~bad)
    boot = []
    for _ in range(n_bootstrap):
        rows = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
        boot.append(auc(scores[rows], bad[rows]))
    k = len(pos)
    top = np.argsort(-scores, kind="stable")[:k]
    return {"auc": auc(scores, bad), "auc_ci": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
            "precision_at_k": float(bad[top].mean()), "k": int(k), "n": int(len(bad))}


def _ks_tests(p_values: np.ndarray, words: np.ndarray) -> list:
    """KS tests of ``p_values`` against the uniform distribution: all of them, then each length tertile of
    ``words`` (``None`` for a tertile of fewer than 5 documents)."""
    from scipy.stats import kstest

    tertile = np.searchsorted(np.quantile(words, [1 / 3, 2 / 3]), words, side="right")
    groups = [p_values] + [p_values[tertile == t] for t in range(3)]
    return [kstest(p, "uniform") if len(p) >= 5 else None for p in groups]


def calibration(p_values: np.ndarray, words: np.ndarray, *, reference_words: np.ndarray, outlier_score: str,
                size_model: str = "bins", statistics: int = 1, n_null: int = 1000, seed: int = 0) -> dict:
    """Are real documents' outlier p-values uniform, overall and within each length tertile?

    ``all``, ``tertiles``: the KS test of the p-values against the uniform distribution (``None`` for a tertile of
    fewer than 5 documents).  It takes the p-values for independent draws, which they are not: every document is
    compared with the same finite reference, whose sampling noise they share.  With length bins of about 40
    reference documents that noise is as large as the test's threshold, and calibrated p-values fail it in some
    tertile about a third of the time (300 simulations of this benchmark's sizes: 31% at 0.01).

    ``vs_reference`` (``all``, ``tertiles``): the same KS distances ``D`` against their distribution for a
    calibrated score with this reference, simulated ``n_null`` times: ``statistics`` independent uniform
    statistics for the reference documents (``reference_words``) and for these ones (``words``), their
    p-values by :func:`critic.outliers.outlier_p_values` under ``outlier_score`` and the critic's ``size_model``
    (combined as the critic's are);
    ``p = (1 + #{D_null >= D}) / (1 + n_null)``.  Uniform under calibration whatever the reference's size; a
    score that is not calibrated (a length-confounded one, a conservative combination) still fails it.
    """
    from critic.outliers import outlier_p_values

    tests = _ks_tests(p_values, words)
    observed = np.array([np.nan if t is None else t.statistic for t in tests])
    rng = np.random.default_rng(seed)
    null = np.array([[np.nan if t is None else t.statistic for t in _ks_tests(outlier_p_values(
        rng.random((len(reference_words), statistics)), rng.random((len(words), statistics)),
        pool_words=reference_words, words=words, outlier_score=outlier_score, size_model=size_model, seed=k).p, words)]
        for k in range(n_null)])
    vs_reference = [None if np.isnan(d) else float((1 + np.sum(null[:, j] >= d)) / (1 + n_null))
                    for j, d in enumerate(observed)]
    scipy_p = [None if t is None else float(t.pvalue) for t in tests]
    return {"all": scipy_p[0], "tertiles": scipy_p[1:],
            "vs_reference": {"all": vs_reference[0], "tertiles": vs_reference[1:]}}


@dataclass
class Case:
    """A critic to fit, its training documents, real held-out documents and the corruptions that target it."""

    make: Callable[[], object]
    train: list
    held_out: list
    corruptions: dict[str, Callable[[list, random.Random], list]]
    reads: Callable[[object, object], Hashable] | None = None
    """What of a document the critic's statistics read (``reads(critic, doc)``), where that is small enough to
    count: a bad document that reads like a real one gets the same statistics (:func:`seen_share`)."""


def seen_share(training: Sequence[Hashable], docs: Sequence[Hashable]) -> float:
    """The share of ``docs`` that read exactly like some training document (``training``: the readings of the
    training documents): a corrupted document that does gives the critic nothing its training data calls unusual."""
    known = set(training)
    return float(np.mean([r in known for r in docs])) if len(docs) else float("nan")


def _sections_case(args) -> Case:
    from critic.corrupt import drop_section, permute_sections, repeat_section
    from critics.sections import SectionTransitionCritic

    splits = filtered_manpages(args.root)

    def each(fn):
        return lambda docs, rng: [fn(d, seed=rng.randrange(2**31)) for d in docs]

    return Case(lambda: SectionTransitionCritic(delta=0.1), splits["train"], splits["valid"] + splits["test"],
                {"permuted": each(permute_sections), "repeated": each(repeat_section), "dropped": each(drop_section)},
                reads=lambda critic, doc: tuple(critic.titles(doc)))


def _classifier_case(args) -> Case:
    """The sections case with the README's critic, the classifier section critic (its fit needs validation
    documents: the flags benchmark gives them)."""
    from critics.sections import ClassifierSectionCritic

    case = _sections_case(args)
    return Case(ClassifierSectionCritic, case.train, case.held_out, case.corruptions)


def _people(args) -> list:
    from critic.corpora.wikisummaries import load_wiki_summaries

    return load_wiki_summaries(language="en", topic="People", install=False)


def _off_topic(pages: Sequence[Document]):
    """Off-topic documents: a man page's text cut to the length of the real document it replaces."""
    def corrupt(docs, rng):
        out = []
        for d in docs:
            words = " ".join(s.text for s in rng.choice(pages).sections).split()[:len(d.text.split())]
            out.append(Document(f"{d.id}#off-topic", (Section(None, " ".join(words)),)))
        return out

    return corrupt


def _passage(pages: Sequence[Document], share: float):
    """Off-topic passages: a run of ``k = max(1, round(share * n))`` of a document's ``n`` words, at a random place,
    replaced by ``k`` consecutive words of a random man page (from a random place; fewer if the page is shorter)."""
    def corrupt(docs, rng):
        out = []
        for d in docs:
            words = d.text.split()
            k = max(1, round(share * len(words)))
            page = " ".join(s.text for s in rng.choice(pages).sections).split()
            start, at = rng.randrange(max(1, len(page) - k + 1)), rng.randrange(len(words) - k + 1)
            text = words[:at] + page[start:start + k] + words[at + k:]
            out.append(Document(f"{d.id}#passage", (Section(None, " ".join(text)),)))
        return out

    return corrupt


def _drift(others: Sequence[Document]):
    """Topic drift: a document's second half (its words from ``n // 2`` on) replaced by the second half of a
    random document of another topic, cut to as many words (fewer if that half is shorter)."""
    def corrupt(docs, rng):
        out = []
        for d in docs:
            words = d.text.split()
            half = len(words) // 2
            other = rng.choice(others).text.split()
            text = words[:half] + other[len(other) // 2:][:len(words) - half]
            out.append(Document(f"{d.id}#drift", (Section(None, " ".join(text)),)))
        return out

    return corrupt


def _ctm_case(args) -> Case:
    from critic.corpora.wikisummaries import load_wiki_summaries
    from critics.topics.ctm_critic import CorrelatedTopicCritic

    people = _people(args)
    others = [d for d in load_wiki_summaries(language="en", install=False)
              if d.metadata["topic"] not in ("People", "Uncategorized")]
    pages = [p for p in filtered_manpages(args.root)["train"] if len(p.text.split()) > 400]
    fit = dict(fit_method="svi", init="random", steps=args.ctm_steps) if args.ctm_fit == "svi" else {}
    return Case(lambda: CorrelatedTopicCritic(num_topics=10, **fit), people[:args.train], people[args.train:],
                {"off-topic": _off_topic(pages), "passage": _passage(pages, args.passage_share),
                 "drift": _drift(others)})


def _lda_case(args) -> Case:
    from critic.corpora.wikisummaries import load_wiki_summaries
    from critics.topics.codemix import code_mixed_set
    from critics.topics.lda import LdaCodeMixCritic

    en = load_wiki_summaries(language="en", install=False)[:args.train]
    es = load_wiki_summaries(language="es", install=False)[:args.train]
    half = args.train // 2
    spanish = es[half:]

    def mixed(docs, rng):
        english = [d for d in docs]
        return code_mixed_set(english, rng.sample(spanish, len(english)), kinds=("sentences",),
                              seed=rng.randrange(2**31))

    return Case(lambda: LdaCodeMixCritic(num_topics=args.lda_k), en[:half] + es[:half], en[half:] + es[half:],
                {"code-mixed": mixed})


def _coref_case(args) -> Case:
    from critics.coref import CorefChainCritic
    from critics.coref.corrupt import CORRUPTIONS
    from critics.coref.resolvers import annotate

    resolved, _ = annotate(_people(args), Path(args.work) / "neuralcoref")  # resumable, once per work folder

    return Case(CorefChainCritic, resolved[:args.train], resolved[args.train:],  # no eligible pronoun: left out
                {f"pronoun {kind}": _corrupted(CORRUPTIONS[kind]) for kind in ("gender", "number")})


def _corrupted(corrupt: Callable[[Document, int], Document | None]):
    """``corrupt(document, seed)`` over a list, each document seeded from ``rng`` (a document that cannot carry the
    corruption, ``None``, stays out: neither bad nor real)."""
    return lambda docs, rng: [bad for d in docs if (bad := corrupt(d, rng.randrange(2**31))) is not None]


def _manpages_case(critic: str, corruptions: Sequence[str]):
    """A case of the critic registered as ``critic`` (its defaults) on the filtered man pages, as the sections
    case splits them, with the named corruptions of :mod:`critic.corrupt`."""
    def case(args) -> Case:
        from critic.corrupt import CORRUPTIONS
        from critic.registry import get_critic

        splits = filtered_manpages(args.root)
        return Case(get_critic(critic), splits["train"], splits["valid"] + splits["test"],
                    {name: _corrupted(CORRUPTIONS[name]) for name in corruptions})

    return case


CASES = {"sections": _sections_case, "sections-classifier": _classifier_case, "ctm": _ctm_case, "lda": _lda_case,
         "coref": _coref_case, "repetition": _manpages_case("repetition", ("looped-paragraph", "looped-tail")),
         "entity-grid": _manpages_case("entity-grid", ("shuffled-sentences", "shuffled-document"))}


def add_case_arguments(ap: argparse.ArgumentParser) -> None:
    """The options the cases are built from (:data:`CASES`), shared with :mod:`experiments.benchmarks.flags`."""
    ap.add_argument("--train", type=int, default=1000, help="training documents of the topic cases")
    ap.add_argument("--ctm-steps", type=int, default=1500, help="SVI steps of the CTM fit")
    ap.add_argument("--ctm-fit", choices=("em", "svi"), default="em",
                    help="the CTM's fit: SVI (--ctm-steps) or variational EM from the NMF start")
    ap.add_argument("--passage-share", type=_share, default=0.3,
                    help="share of a summary's words an off-topic passage replaces (the ctm case)")
    ap.add_argument("--lda-topics", type=integer_list(2, "2,3,10"), default=[2], help="the LDA critic's K, comma-separated (a "
                                                                          "sweep finds the K that reverses its ranking)")
    ap.add_argument("--root", default="/usr/share/man", help="man page root")
    ap.add_argument("--work", help="keep resolutions here (the coref case; default: a temporary folder)")


def run_case(name: str, case: Case, args) -> dict:
    from critic import criticize

    start = time.perf_counter()
    critic = case.make().fit(case.train)
    rng = random.Random(args.seed)
    held_out = list(case.held_out)
    rng.shuffle(held_out)
    half = len(held_out) // 2
    reference, evaluation = held_out[:half], held_out[half:]
    out = {"train": len(case.train), "reference": len(reference), "fit_seconds": time.perf_counter() - start,
           "corruptions": {}, "seen_share": {}}
    for corruption, corrupt in case.corruptions.items():
        n_bad = max(1, round(args.rate * len(evaluation)))
        replaced = set(rng.sample(range(len(evaluation)), n_bad))
        bad_docs = corrupt([evaluation[i] for i in sorted(replaced)], rng)
        mixed = [d for i, d in enumerate(evaluation) if i not in replaced] + bad_docs
        bad_ids = {d.id for d in bad_docs}
        found = {}
        if case.reads is not None:  # bad documents that read like real ones cannot stand out
            training = [case.reads(critic, d) for d in case.train]
            out["seen_share"][corruption] = {
                "bad": seen_share(training, [case.reads(critic, d) for d in bad_docs]),
                "real": seen_share(training, [case.reads(critic, d) for d in mixed if d.id not in bad_ids])}
        for score in ("length", "plain"):
            result = criticize(critic, reference, {"mixed": mixed}, n_bootstrap=10, n_permutations=10,
                               outlier_score=score, seed=args.seed)
            docs = result.candidates["mixed"].documents
            ref_words = np.array([d.words for d in result.reference.documents])
            per_step = np.array([d.latent_nll_per_step for d in docs])
            bad = np.array([d.id in bad_ids for d in docs])
            words = np.array([d.words for d in docs])
            rankings = {score: (np.array([d.outlier_p_value for d in docs]), len(critic.outlier_statistics) + 1)}
            if critic.outlier_statistics:  # the paper's ranking, by T/M's own p-value
                rankings[f"{score}, T/M alone"] = (np.array([d.p_values["latent_nll_per_step"] for d in docs]), 1)
            for label, (p, statistics) in rankings.items():
                found[label] = {
                    **detection(ranking_scores(p, per_step), bad, n_bootstrap=args.bootstrap, seed=args.seed),
                    "calibration": calibration(p[~bad], words[~bad], reference_words=ref_words, outlier_score=score,
                                               size_model=critic.size_model,
                                               statistics=statistics, n_null=args.calibration_null, seed=args.seed),
                    "skipped": result.candidates["mixed"].n_skipped}
        out["corruptions"][corruption] = found
    return out


def _report(results: dict) -> None:
    print("outlier detection: AUC (95% CI), precision at k; calibration of real documents' p-values (all | length "
          "tertiles): KS p, and KS vs ref (the KS distance against a calibrated score's with this reference)")

    def ps(one):
        return f"{_p(one['all'])} | " + " ".join(_p(t) for t in one["tertiles"])

    for name, case in results["cases"].items():
        print(f"{name} (trained on {case['train']}, reference {case['reference']}):")
        for corruption, by_score in case["corruptions"].items():
            if corruption in case["seen_share"]:
                seen = case["seen_share"][corruption]
                print(f"  {corruption:<11} read exactly like a training document: {seen['bad']:.0%} of the bad ones, "
                      f"{seen['real']:.0%} of the real ones")
            for score, r in by_score.items():
                cal = r["calibration"]
                print(f"  {corruption:<11} {score:<17} AUC {r['auc']:.3f} ({r['auc_ci'][0]:.3f}-{r['auc_ci'][1]:.3f})  "
                      f"P@{r['k']} {r['precision_at_k']:.2f}  n={r['n']} skipped={r['skipped']}  "
                      f"KS {ps(cal)}  KS vs ref {ps(cal['vs_reference'])}")


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def integer_list(minimum: int, example: str):
    """An argparse type: comma-separated integers, each at least ``minimum`` (``example`` in the message)."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"expected integers >= {minimum} such as {example}, got {text!r}")
        return values

    return parse


def _share(text: str) -> float:
    """``--passage-share``: a number in (0, 1)."""
    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0.0 < share < 1.0:
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1) such as 0.3, got {text!r}")
    return share


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="sections,ctm,lda,coref", help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--rate", type=float, default=0.1, help="share of the evaluation documents made bad")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the AUC CI")
    ap.add_argument("--calibration-null", type=int, default=1000,
                    help="simulations of a calibrated score's KS distances (KS vs ref)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="--train 300 --ctm-steps 200 --bootstrap 200 --calibration-null 200")
    ap.add_argument("--json", help="write the results here too")
    add_case_arguments(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.train, args.ctm_steps, args.bootstrap, args.calibration_null = 300, 200, 200, 200
    if args.calibration_null < 1:
        ap.error(f"--calibration-null must be at least 1, got {args.calibration_null}")
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as scratch:
        args.work = args.work or scratch
        results = {"rate": args.rate, "cases": {}}
        for name in names:
            for k in (args.lda_topics if name == "lda" else [None]):  # the LDA critic at each K asked for
                args.lda_k = k
                label = name if k is None else f"lda K={k}"
                results["cases"][label] = run_case(label, CASES[name](args), args)
    _report(results)
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
