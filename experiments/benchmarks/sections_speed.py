"""Benchmark: the section critic's fit + score against the authors' way, plain Python dictionaries.

    python -m experiments.benchmarks.sections_speed [--repeat 100] [--root /usr/share/man] [--delta 0.1]
                                                    [--repeats 2] [--quick] [--json out.json]

Builds the man-page corpus from ``--root`` with the filters of
``experiments/manpages/sections.toml``, repeats its train split ``--repeat``
times (copy r of page ``id`` is ``id#r``) and, on one thread, times

* **ours**: ``SectionTransitionCritic(delta=...).fit(docs)`` then ``.score(docs)``;
* **plain**: the same computation written as the authors' scripts do it --
  normalise every title occurrence with the same :class:`TitleNormalizer`,
  count bigrams ``<bos> z_1 .. z_M <eos>`` in nested dicts, add-delta
  smoothing over the same states (training titles and ``<unk>``), and sum
  ``log P`` per document;
* **memo**: the plain baseline given a dict of already-normalised titles
  (its best path: each distinct raw title normalised once).

It asserts that the three give the same Latent NLL ``T(x)`` for every document
(to ``1e-9``) and prints the time of each (best of ``--repeats`` rounds, the
three run in turn within a round) and the ratios plain/ours (the speed-up over
the authors' way) and memo/ours (what is left once the baseline also normalises
each title once: counting and scoring in numpy/torch against Python dicts).  ``--quick`` is ``--repeat 10 --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from critic.io import atomic_write_text

from .corpus import filtered_manpages

__all__ = ["main", "load_train", "dictionary_baseline"]


def load_train(root: str | Path, repeat: int) -> list:
    """The filtered man-page train split (filters of ``sections.toml``), repeated with distinct ids."""
    train = filtered_manpages(root)["train"]
    return [d.replace_sections(d.sections, id=f"{d.id}#{r}") for r in range(repeat) for d in train]


def dictionary_baseline(docs: Sequence, delta: float, normalise: Callable[[str], str],
                        drop: set[str]) -> dict[str, float]:
    """``T(x) = -log P(z)`` per document, bigrams counted and scored in plain dicts.

    ``P(b | a) = (C[a][b] + delta) / (sum_b' C[a][b'] + delta * n(a))`` with
    ``n(<bos>) = K`` and ``n(a) = K + 1`` (the K states and ``<eos>``); the K
    states are the training titles and ``<unk>``.  Titles equal to one in
    ``drop`` are removed, as the critic does.
    """
    def path(doc, states=None):
        titles = [t for t in (normalise(sec.title) for sec in doc.sections) if t not in drop]
        if states is not None:
            titles = [t if t in states else "<unk>" for t in titles]
        return ["<bos>", *titles, "<eos>"]

    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for doc in docs:
        z = path(doc)
        for a, b in zip(z, z[1:]):
            counts[a][b] += 1
    states = (set(counts) - {"<bos>"}) | {"<unk>"}
    k = len(states)
    rows = {a: sum(row.values()) for a, row in counts.items()}
    nll = {}
    for doc in docs:
        z = path(doc, states)
        log_p = 0.0
        for a, b in zip(z, z[1:]):
            n = counts[a][b] if a in counts else 0
            log_p += math.log((n + delta) / (rows.get(a, 0) + delta * (k if a == "<bos>" else k + 1)))
        nll[doc.id] = -log_p
    return nll


def _best(fns: dict[str, Callable[[], dict]], repeats: int) -> dict[str, tuple[float, dict]]:
    """Best time and result of each function, run in turns (``repeats`` rounds), so that a busy
    spell of a shared machine does not fall on one implementation only."""
    best: dict[str, tuple[float, dict]] = {name: (math.inf, {}) for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            out = fn()
            best[name] = (min(best[name][0], time.perf_counter() - start), out)
    return best


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/usr/share/man", help="man page root (tests/data/manpages for a toy run)")
    ap.add_argument("--repeat", type=int, default=100, help="copies of the train split")
    ap.add_argument("--delta", type=float, default=0.1, help="add-delta smoothing (0.1: chosen on the man pages)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per implementation (best kept)")
    ap.add_argument("--quick", action="store_true", help="--repeat 10 --repeats 1")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.repeats = 10, 1

    import torch

    from critics.sections import SectionTransitionCritic, TitleNormalizer

    torch.set_num_threads(1)
    docs = load_train(args.root, args.repeat)
    normaliser = TitleNormalizer()
    drop = {normaliser(t) for t in SectionTransitionCritic().drop_titles}
    memo: dict[str, str] = {}

    def memo_normalise(title: str) -> str:
        if title not in memo:
            memo[title] = normaliser(title)
        return memo[title]

    def ours() -> dict[str, float]:
        scores = SectionTransitionCritic(delta=args.delta).fit(docs).score(docs)
        if scores.skipped:
            raise AssertionError(f"the critic skipped {len(scores.skipped)} documents: "
                                 f"{list(scores.skipped.items())[:2]}")
        return dict(zip(scores.doc_ids, scores.latent_nll.tolist()))

    def with_memo() -> dict[str, float]:
        memo.clear()
        return dictionary_baseline(docs, args.delta, memo_normalise, drop)

    timed = _best({"ours": ours, "plain": lambda: dictionary_baseline(docs, args.delta, normaliser, drop),
                   "memo": with_memo}, args.repeats)
    (t_ours, nll_ours), (t_plain, nll_plain), (t_memo, nll_memo) = timed["ours"], timed["plain"], timed["memo"]
    if not (list(nll_ours) == list(nll_plain) == list(nll_memo) == [d.id for d in docs]):
        raise AssertionError("the implementations scored different documents")
    diff = max(max(abs(nll_ours[i] - nll_plain[i]), abs(nll_ours[i] - nll_memo[i])) for i in nll_ours)
    if not diff <= 1e-9:
        raise AssertionError(f"Latent NLLs differ by up to {diff:.3e} (> 1e-9)")
    result = {"root": str(args.root), "repeat": args.repeat, "docs": len(docs),
              "sections": sum(len(d.sections) for d in docs), "delta": args.delta, "threads": 1,
              "ours_s": t_ours, "plain_s": t_plain, "memo_s": t_memo,
              "speedup_plain": t_plain / t_ours, "speedup_memo": t_memo / t_ours,
              "max_abs_diff": diff, "total_latent_nll": sum(nll_ours.values())}
    print(f"section critic fit + score, {len(docs)} documents ({result['sections']} sections; train split x "
          f"{args.repeat}), delta = {args.delta}, 1 thread, best of {args.repeats}")
    print(f"  ours  (critic: titles normalised once, numpy counts, torch scores) {t_ours:8.3f} s")
    print(f"  plain (authors' way: normalise every title occurrence, dict bigrams) {t_plain:8.3f} s"
          f"  plain/ours = {result['speedup_plain']:.1f}")
    print(f"  memo  (plain, each distinct title normalised once: its best path)  {t_memo:8.3f} s"
          f"  memo/ours = {result['speedup_memo']:.1f}")
    print(f"  same Latent NLLs: max |difference| = {diff:.2e} over {len(docs)} documents")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
