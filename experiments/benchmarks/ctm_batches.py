"""Benchmark: the CTM critic on man pages against its floors -- padding of its inference batches, a document's
independence of its batch, and its fit against gensim LDA's.

    python -m experiments.benchmarks.ctm_batches [--root /usr/share/man] [--topics 20] [--pages 500] [--json out.json]

The filtered man pages of ``experiments/manpages/sections.toml`` (train split); every figure in CPU seconds
(``time.process_time``, one torch thread: the machine's load moves wall time):

* **fit**: ``CorrelatedTopicCritic(num_topics=--topics)`` (variational EM) against gensim LDA with as many
  topics (``LdaCodeMixCritic``) on the same pages: the ratio (issue 40's target: at most 5);
* **inference** of ``--pages`` pages with the fitted critic: the word cells its batches hold against the real
  ones (1.0: no padding; documents of similar width batched together, :meth:`BagOfWords.batches`), and its CPU
  seconds against the old layout (batches of 512 in input order, float32);
* **independence**: each page's ``T(x)`` in the batches against the same page scored alone: max and median
  absolute difference (the issue's bar: 1e-4 nats), and what the old float32 layout gave.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from critic.io import atomic_write_text

from .corpus import filtered_manpages

__all__ = ["main", "padding"]


def padding(bow, batches) -> float:
    """Word cells of ``batches`` (each padded to its widest document) over the real ones (distinct words)."""
    width = bow.num_distinct
    return float(sum(len(rows) * width[rows].max() for rows in batches) / width.sum())


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/usr/share/man", help="man page root")
    ap.add_argument("--topics", type=int, default=20, help="topics of both fits")
    ap.add_argument("--pages", type=int, default=500, help="pages scored (from the training split)")
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args(argv)

    import torch

    from critics.topics.ctm import infer_local
    from critics.topics.ctm_critic import CorrelatedTopicCritic
    from critics.topics.lda import LdaCodeMixCritic

    torch.set_num_threads(1)
    train = filtered_manpages(args.root)["train"]
    ctm, ctm_s = _cpu(lambda: CorrelatedTopicCritic(num_topics=args.topics).fit(train))
    _, lda_s = _cpu(lambda: LdaCodeMixCritic(num_topics=args.topics).fit(train))
    pages = train[:args.pages]
    bow, _, _, _ = ctm.bag_of_words(pages)
    settings = dict(method=ctm.infer_method, steps=ctm.infer_steps, tol=ctm.infer_tol, num_draws=ctm.infer_draws,
                    seed=ctm.seed)
    row_order = [np.arange(s, min(s + 512, len(bow))) for s in range(0, len(bow), 512)]
    scores, new_s = _cpu(lambda: ctm.score(pages))
    alone = np.array([ctm.score([p]).latent_nll[0] for p in pages if p.id in set(scores.doc_ids)])

    def old_layout():  # input order, 512 a batch, float32: the layout before issue 40
        from critics.topics.ctm import words

        real = words.BagOfWords.batches
        words.BagOfWords.batches = lambda self, size: iter(row_order)
        try:
            return infer_local(ctm.globals_, bow, batch_size=512, **settings)
        finally:
            words.BagOfWords.batches = real

    old, old_s = _cpu(old_layout)
    old_t = _cross_entropy(ctm, old.m, old.v)
    old_alone = np.array([_cross_entropy(ctm, *(lambda r: (r.m, r.v))(infer_local(ctm.globals_, bow.subset([i]),
                                                                                  batch_size=1, **settings)))[0]
                          for i in range(len(bow))])
    out = {
        "pages": len(bow), "topics": args.topics,
        "fit_cpu_s": {"ctm": ctm_s, "lda": lda_s, "ratio": ctm_s / lda_s},
        "padding": {"now": padding(bow, bow.batches(ctm.infer_batch_size)), "old": padding(bow, row_order),
                    "batch_size": ctm.infer_batch_size},
        "inference_cpu_s": {"now": new_s, "old": old_s, "speed-up": old_s / new_s},
        "alone_vs_batch_nats": {"now_max": float(np.abs(scores.latent_nll - alone).max()),
                                "now_median": float(np.median(np.abs(scores.latent_nll - alone))),
                                "old_max": float(np.abs(old_t - old_alone).max())},
    }
    f, p, i, a = out["fit_cpu_s"], out["padding"], out["inference_cpu_s"], out["alone_vs_batch_nats"]
    print(f"fit, K={args.topics} on {len(train)} pages: CTM {f['ctm']:.1f} CPU-s, gensim LDA {f['lda']:.1f}: "
          f"{f['ratio']:.2f}x (target <= 5)")
    print(f"inference of {len(bow)} pages: word cells {p['now']:.2f}x the real ones (batches of {p['batch_size']} "
          f"by width; target <= 1.5), old layout {p['old']:.2f}x; {i['now']:.2f} CPU-s against {i['old']:.2f} "
          f"({i['speed-up']:.1f}x)")
    print(f"T(x) in its batch against alone: max {a['now_max']:.1e} nats, median {a['now_median']:.1e} (target "
          f"<= 1e-4); old float32 layout: max {a['old_max']:.2f}")
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return out


def _cross_entropy(critic, m, v) -> np.ndarray:
    """``T(x) = H(q, N(mu, Sigma))`` of each row, in float64, with the critic's own posterior and prior."""
    import torch

    from critic.latent import cross_entropy

    return cross_entropy(critic._posterior(m.to(torch.float64), v.to(torch.float64)), critic.prior()).numpy()


if __name__ == "__main__":
    main()
