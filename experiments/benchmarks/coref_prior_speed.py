"""Benchmark: scoring coreference chains with the KenLM prior against plain-Python 5-gram dictionaries.

    python -m experiments.benchmarks.coref_prior_speed [--chains 5000] [--train 5000] [--order 5]
                                                       [--repeats 5] [--seed 0] [--quick] [--json out.json]

Draws synthetic chains shaped like those of Wikipedia people summaries (:func:`synthetic_chains`:
sentence dots, 1-4 person entities, the subject first and most mentioned, sticky runs about one
person, ids numbered by first appearance, pronouns in both cases, a few wrong-gender pronouns;
about 29 tokens a chain; the parameters are guesses from the shape of real chains, not fitted to
any), fits :class:`~critics.coref.kenlm_prior.KenLMChainPrior` on ``--train`` chains (ARPA file,
so that the baseline reads the very same model) and, on one thread, times scoring ``--chains``
other chains:

* **kenlm**: ``prior.log_prob(chains)`` -- encode the tokens (one C-level pass), build every
  relabelled window's packed context and target in numpy, find each context's longest suffix
  seen in training (a numpy hash index per suffix length) and read ln P in the prior's score
  table (KenLM's score of every training-context suffix and target, queried at fit); sum per chain.
  No KenLM call at scoring;
* **direct**: the pre-table path, same numbers: ``np.unique`` over the packed windows and one
  kenlm ``BaseScore`` per distinct window from the suffix states, gathered back and summed;
* **plain**: the baseline, the same model in Python dictionaries: the ARPA read into
  ``{n-gram: (log10 p, log10 backoff)}`` and the normalisers Z into ``{context suffix: ln Z}``;
  per position the window is relabelled in Python (each chain's tokens are parsed once), then
  queried with back-off.  No precomputed window table and no window cached across positions
  (every position does the full work); KenLM's float32 arithmetic is reproduced (values rounded
  to float32, sums rounded after each addition) so that the two agree to 1e-9;
* **authors**: :class:`~critics.coref.smoothing.AuthorsChainPrior` (fitted on the same chains),
  the same table path over its own smoothing.

Before timing it asserts that kenlm and plain give the same ln P for every position (to 1e-9),
and that the table and direct KenLM queries give bit-identical ln P per position and per chain.
It prints positions/s (best of ``--repeats`` rounds, the scorers run in turn within a round), the
ratios measured in this run and the best time of each step of the kenlm path, in ns a position.
``--quick`` is ``--chains 500 --train 500 --repeats 1``.

Measured on the 2 shared cores of the development machine (defaults: 145,578 positions, 42,493
distinct windows; 6 runs, best of 7 each): kenlm 0.017-0.020 s (7.5-8.7M positions/s), plain
0.92-1.01 s (~150k/s): 48-57x, the 50x target met in 5 runs of 6 (the spread is the machine's);
direct 0.045-0.053 s (19-21x); authors as kenlm.  The kenlm steps, ns a position: encode ~50 (the
one Python-level pass over the tokens, a dict lookup each, is ~40 of it: the floor of any scorer
that takes token strings), windows ~30, context rows ~25, table gather ~11, per-chain sums ~4.
(Before the score table -- relabelling on ``(P, n)`` arrays, ``np.unique``, one KenLM call per
distinct window -- the same chains took 0.080 s, 10-12x.)
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from critic.io import atomic_write_text

from .sections_speed import _best

__all__ = ["main", "synthetic_chains", "read_arpa", "PythonChainModel"]

_PRONOUNS = {"M": ("he", "him", "his", "himself"), "F": ("she", "her", "hers", "herself"),
             "P": ("they", "them", "their", "themselves"), "N": ()}
_F32 = struct.Struct("f")
LN10 = math.log(10.0)


def synthetic_chains(n: int, seed: int = 0, sentences: float = 10.0, stay: float = 0.5) -> list[list[str]]:
    """``n`` chains shaped like those of Wikipedia people summaries (:mod:`critics.coref.chains`), about
    ``3 * sentences`` tokens each.

    Per chain 1-4 person entities, entity 0 the article's subject (genders M .5, F .27, P .13, N .1),
    ids numbered by first appearance in the chain (as the chain builder numbers them);
    Poisson(``sentences``) sentences, each opened by ``.``, of Poisson(1.9) mentions.  The chain's
    first mention is the subject; each later mention stays on the entity of the previous one with
    probability ``stay`` (runs about one person), else picks entity e with weight (.6, .25, .1, .05)[e].
    An entity's first mention is its gender (a name), later ones a pronoun 55% of the time (3% of
    these of a random gender; capitalised at a sentence start 70% of the time), else the gender again."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 5))
        genders = rng.choice(["M", "F", "P", "N"], size=k, p=[0.5, 0.27, 0.13, 0.1])
        weights = np.array([0.6, 0.25, 0.1, 0.05][:k])
        weights /= weights.sum()
        ids: dict[int, int] = {}
        chain: list[str] = []
        e = 0
        for _ in range(max(1, int(rng.poisson(sentences)))):
            chain.append(".")
            for m in range(int(rng.poisson(1.9))):
                if ids and rng.random() >= stay:
                    e = int(rng.choice(k, p=weights))
                g = str(genders[e])
                if e in ids and _PRONOUNS[g] and rng.random() < 0.55:
                    if rng.random() < 0.03:
                        g = str(rng.choice(["M", "F", "P"]))
                    word = _PRONOUNS[g][int(rng.choice(4, p=[0.45, 0.2, 0.3, 0.05]))]
                    if m == 0 and rng.random() < 0.7:
                        word = word.capitalize()
                else:
                    word = g
                chain.append(f"{word}:{ids.setdefault(e, len(ids))}")
        out.append(chain)
    return out


def read_arpa(path: str | Path) -> dict[tuple[str, ...], tuple[float, float]]:
    """``{n-gram: (log10 p, log10 backoff)}`` from an ARPA file, values rounded to float32 as KenLM
    stores them."""
    table: dict[tuple[str, ...], tuple[float, float]] = {}
    in_grams = False
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("\\") and line.endswith("-grams:"):
                in_grams = True
            elif line.startswith("\\"):
                in_grams = False
            elif in_grams and line:
                parts = line.split("\t")
                backoff = float(parts[2]) if len(parts) > 2 else 0.0
                table[tuple(parts[1].split(" "))] = (_f32(float(parts[0])), _f32(backoff))
    return table


def _f32(x: float) -> float:
    return _F32.unpack(_F32.pack(x))[0]


class PythonChainModel:
    """The KenLM chain prior's model in plain dictionaries, queried one position at a time."""

    def __init__(self, arpa: dict, log_z: dict[tuple[str, ...], float], order: int):
        self.table, self.log_z, self.order = arpa, log_z, order
        self.unk = arpa[("<unk>",)][0]

    @classmethod
    def from_prior(cls, prior) -> "PythonChainModel":
        """The ARPA file and the normalisers of a fitted ``KenLMChainPrior(binary=False)``."""
        from critics.coref.windows import decode_codes, unpack

        n = prior.order
        log_z = {}
        for k in range(n):
            tokens = decode_codes(*unpack(prior.suffixes[k], n, width=k), prior._table) if k else [()]
            for toks, z in zip(tokens, prior.log_z[k].tolist()):
                log_z[tuple(f"{n - k + j}|{t}" for j, t in enumerate(toks))] = z
        return cls(read_arpa(prior.model_path), log_z, n)

    def _window(self, parsed: list, i: int) -> tuple[str, ...]:
        """The tagged relabelled window ending at position i (``parsed``: (text, id or None))."""
        n = self.order
        out, ids = [], {}
        for slot, j in enumerate(range(i - n + 1, i + 1), start=1):
            if j < 0:
                out.append(f"{slot}|<pad>")
                continue
            text, eid = parsed[j]
            if eid is None:
                out.append(f"{slot}|{text}")
            else:
                if eid not in ids:
                    ids[eid] = len(ids)
                out.append(f"{slot}|{text}:{ids[eid]}")
        return tuple(out)

    def logprob(self, window: tuple[str, ...]) -> float:
        """ln P_c(target | context): KenLM's back-off query (float32 sums in KenLM's order) / Z."""
        n, table = self.order, self.table
        context, word = window[:-1], window[-1]
        backoffs, prob = [], self.unk
        for k in range(n - 1, -1, -1):  # context suffix of length k
            entry = table.get(context[n - 1 - k:] + (word,))
            if entry is not None:
                prob = entry[0]
                break
            ctx = table.get(context[n - 1 - k:]) if k else None
            if ctx is not None:
                backoffs.append(ctx[1])
        for b in reversed(backoffs):  # KenLM adds the shortest context's back-off first
            prob = _f32(prob + b)
        for k in range(n - 1, -1, -1):  # the normaliser of the longest context suffix in the model
            z = self.log_z.get(context[n - 1 - k:])
            if z is not None:
                return prob * LN10 - z
        raise KeyError(window)

    def position_logprobs(self, chains: Sequence[Sequence[str]]) -> list[list[float]]:
        out = []
        for chain in chains:
            parsed = []
            for tok in chain:
                text, colon, eid = tok.rpartition(":")
                parsed.append((text, int(eid)) if colon else (tok, None))
            out.append([self.logprob(self._window(parsed, i)) for i in range(len(parsed))])
        return out


def _stage_times(prior, chains, best: dict[str, float]) -> float:
    """One ``prior.log_prob(chains)`` by its steps (the same calls, one after the other), keeping the
    best time of each step in ``best``; returns the sum of the chain's ln P."""
    from critics.coref.windows import encode, window_parts

    marks = [time.perf_counter()]
    enc = encode(chains, prior._table.copy())
    marks.append(time.perf_counter())
    contexts, targets = window_parts(enc, prior.order)
    marks.append(time.perf_counter())
    cell = prior._context_rows(contexts)
    marks.append(time.perf_counter())
    cell *= prior._score_table.shape[1]
    cell += np.take(prior._column, targets, mode="clip")
    logp = prior._score_flat[cell]
    marks.append(time.perf_counter())
    total = np.bincount(enc.chain_index, weights=logp, minlength=len(enc.lengths))
    marks.append(time.perf_counter())
    for name, a, b in zip(STAGES, marks[:-1], marks[1:]):
        best[name] = min(best.get(name, math.inf), b - a)
    return float(total.sum())


STAGES = ("encode", "windows", "context rows", "table gather", "per-chain sums")
"""The steps of the table path, as :func:`_stage_times` names them."""


def direct_log_prob(prior, chains) -> np.ndarray:
    """Per-chain ln P by the pre-table path: ``np.unique`` over the packed windows, one KenLM
    ``BaseScore`` per distinct window (:meth:`~critics.coref.kenlm_prior.KenLMChainPrior.direct_log_probs`)."""
    keys, lengths, _ = prior._windows(chains)
    uniq, inverse = np.unique(keys, return_inverse=True)
    logp = prior.direct_log_probs(uniq)[inverse]
    return np.bincount(np.repeat(np.arange(len(lengths)), lengths), weights=logp, minlength=len(lengths))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", type=int, default=5000, help="chains scored")
    ap.add_argument("--train", type=int, default=5000, help="chains the priors are fitted on")
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per scorer (best kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory", default="200M", help="lmplz -S")
    ap.add_argument("--quick", action="store_true", help="--chains 500 --train 500 --repeats 1")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.chains, args.train, args.repeats = 500, 500, 1

    import torch

    from critics.coref.kenlm_prior import KenLMChainPrior
    from critics.coref.smoothing import AuthorsChainPrior

    torch.set_num_threads(1)
    train = synthetic_chains(args.train, seed=args.seed)
    chains = synthetic_chains(args.chains, seed=args.seed + 1)
    start = time.perf_counter()
    prior = KenLMChainPrior.fit(train, order=args.order, memory=args.memory, binary=False)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    authors = AuthorsChainPrior.fit(train, order=args.order)
    fit_authors_s = time.perf_counter() - start
    plain = PythonChainModel.from_prior(prior)

    # the same numbers, before any timing: the table path against plain dictionaries (to 1e-9) and
    # against direct KenLM queries (bit for bit), per position and per chain
    ours = np.concatenate(prior.position_logprobs(chains)) if chains else np.zeros(0)
    theirs = np.array([lp for per in plain.position_logprobs(chains) for lp in per])
    diff = float(np.max(np.abs(ours - theirs))) if len(ours) else 0.0
    if not diff <= 1e-9:
        raise AssertionError(f"KenLM prior and plain dictionaries differ by up to {diff:.3e} (> 1e-9)")
    keys = prior._windows(chains)[0]
    uniq, inverse = np.unique(keys, return_inverse=True)
    if prior.direct_log_probs(uniq)[inverse].tobytes() != ours.tobytes():
        raise AssertionError("the score table and direct KenLM queries give different ln P")
    if direct_log_prob(prior, chains).tobytes() != prior.log_prob(chains).numpy().tobytes():
        raise AssertionError("the table path and the direct path give different per-chain ln P")

    def per_chain_plain() -> list[float]:
        return [sum(per) for per in plain.position_logprobs(chains)]

    stages: dict[str, float] = {}
    timed = _best({"kenlm": lambda: prior.log_prob(chains).tolist(), "plain": per_chain_plain,
                   "direct": lambda: direct_log_prob(prior, chains).tolist(),
                   "authors": lambda: authors.log_prob(chains).tolist(),
                   "stages": lambda: _stage_times(prior, chains, stages)}, args.repeats)
    positions = len(ours)
    train_keys = prior._windows(train)[0]
    base = prior.base
    tokens = [t for c in chains for t in c]
    mentions = [t for t in tokens if ":" in t]
    result = {"chains": len(chains), "train_chains": len(train), "positions": positions,
              "distinct_windows": len(uniq), "distinct_contexts": len(np.unique(keys // base)),
              "distinct_tokens": len(set(tokens)), "tokens_per_chain": positions / max(len(chains), 1),
              "mention_share": len(mentions) / max(len(tokens), 1),
              "subject_share": sum(t.endswith(":0") for t in mentions) / max(len(mentions), 1),
              "context_seen_share": float(np.isin(keys // base, train_keys // base).mean()) if positions else 0.0,
              "window_seen_share": float(np.isin(keys, train_keys).mean()) if positions else 0.0,
              "order": args.order, "vocabulary": len(prior.vocabulary),
              "score_table_rows": int(prior._score_table.shape[0]),
              "threads": 1, "repeats": args.repeats, "fit_kenlm_s": fit_s, "fit_authors_s": fit_authors_s,
              "max_abs_diff": diff}
    for name in ("kenlm", "plain", "direct", "authors"):
        result[f"{name}_s"] = timed[name][0]
        result[f"{name}_positions_per_s"] = positions / timed[name][0]
    for name in STAGES:
        result[f"stage_{name.replace(' ', '_')}_ns_per_position"] = stages[name] / max(positions, 1) * 1e9
    result["speedup_kenlm_vs_plain"] = result["plain_s"] / result["kenlm_s"]
    result["speedup_direct_vs_plain"] = result["plain_s"] / result["direct_s"]
    result["speedup_authors_vs_plain"] = result["plain_s"] / result["authors_s"]
    print(f"coreference chain priors, order {args.order}: {len(chains)} chains, {positions} positions "
          f"({result['distinct_windows']} distinct windows, {result['distinct_contexts']} distinct contexts), "
          f"fitted on {len(train)} other chains; 1 thread, best of {args.repeats}")
    print(f"  data: synthetic_chains (Wikipedia-people-like: sentence dots, 1-4 entities, the subject first and "
          f"sticky runs, ids by first appearance): {result['tokens_per_chain']:.1f} tokens a chain, "
          f"{result['mention_share']:.0%} mentions ({result['subject_share']:.0%} of them the subject), "
          f"{result['distinct_tokens']} distinct tokens; {result['context_seen_share']:.0%} of positions have "
          f"a context seen in training, {result['window_seen_share']:.0%} a window seen in training")
    print(f"  fit: KenLM {fit_s:.2f} s (lmplz + score table of {result['score_table_rows']} context suffixes x "
          f"{len(prior.vocabulary)} targets), authors {fit_authors_s:.2f} s")
    print(f"  {'scorer':<66} {'seconds':>8} {'positions/s':>12} {'plain/this':>10}")
    rows = [("kenlm   (numpy windows + table of KenLM's scores, no query)", "kenlm"),
            ("direct  (numpy windows + one KenLM BaseScore per distinct window)", "direct"),
            ("plain   (Python relabel + dict 5-gram back-off, no window table)", "plain"),
            ("authors (numpy windows + table of the absolute discounting)", "authors")]
    for label, name in rows:
        print(f"  {label:<66} {result[f'{name}_s']:8.3f} {result[f'{name}_positions_per_s']:12,.0f} "
              f"{result['plain_s'] / result[f'{name}_s']:10.1f}")
    print("  kenlm steps, ns a position: " + ", ".join(
        f"{name} {stages[name] / max(positions, 1) * 1e9:.0f}" for name in STAGES)
        + f" (sum {sum(stages.values()) / max(positions, 1) * 1e9:.0f})")
    print(f"  same ln P: kenlm vs plain max |difference| = {diff:.2e} over {positions} positions; "
          f"score table vs direct KenLM queries bit-identical")
    target = result["speedup_kenlm_vs_plain"] >= 50
    print(f"  target kenlm >= 50x plain: {'met' if target else 'not met'} "
          f"({result['speedup_kenlm_vs_plain']:.1f}x)")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
