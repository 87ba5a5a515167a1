"""Benchmark: ``critic.lm.sample`` against the LM's own forward-pass rate at the same batch.

    python -m experiments.benchmarks.sampling_speed [--batch 32] [--tokens 256] [--layers 4] [--heads 4]
        [--dim 256] [--positions 512] [--vocab 4096] [--root /usr/share/man] [--pages 40]
        [--repeats 2] [--threads 1] [--quick] [--json out.json]

A GPT-2 built from a config (random weights: the speed does not depend on them) with a byte-level
BPE tokenizer trained on ``--pages`` man pages from ``--root`` is saved as a model folder, then,
on ``--threads`` threads, best of ``--repeats`` rounds (the two taken in turn within a round):

* **sample**: ``sample(n=batch, batch_size=batch, max_new_tokens=tokens)``: the whole loop of
  drawing, decoding, parsing and the fsynced log writes; its rate = tokens drawn / loop time;
* **bound**: ``tokens`` cached single-token forward passes of the same model at the same batch
  (``model(x, past_key_values=cache, use_cache=True, logits_to_keep=1)`` from a one-token prompt),
  nothing else: the rate no sampler on this model can beat;

and prints ``bound / sample`` (the target: within 1.3).  ``tokens < positions`` so that every step
is a cached one (past the window, sampling recomputes: see :mod:`critic.lm.sampler`).  Rows that
draw the end token leave the batch early (about ``tokens / vocab`` of them with random weights).
``--quick``: ``--batch 8 --tokens 32 --layers 2 --heads 2 --dim 64 --positions 64 --vocab 512
--pages 10 --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from critic.io import atomic_write_text

__all__ = ["main", "build_model_dir", "forward_bound"]

QUICK = {"batch": 8, "tokens": 32, "layers": 2, "heads": 2, "dim": 64, "positions": 64, "vocab": 512, "pages": 10,
         "repeats": 1}


def build_model_dir(out: Path, *, root: Path, pages: int, vocab: int, layers: int, heads: int, dim: int,
                    positions: int) -> Path:
    """A random-weight GPT-2 model folder (W/O Title format) with a tokenizer trained on ``pages`` man pages."""
    from critic.corpora.manpages import find_manpage_files, load_manpages
    from critic.lm.format import DocumentFormat
    from critic.lm.model import build_tiny_lm, prepare_for_format, save_model_dir, train_tokenizer

    docs = load_manpages(find_manpage_files(Path(root))[:pages])
    if not docs:
        raise SystemExit(f"no man pages under {root}")
    fmt = DocumentFormat(with_titles=False)
    tok = train_tokenizer([s.text for d in docs for s in d.sections if s.text], vocab_size=vocab,
                          special_tokens=fmt.special_tokens)
    model = build_tiny_lm(tok, n_layer=layers, n_head=heads, n_embd=dim, n_positions=positions, seed=0)
    prepare_for_format(model, tok, fmt)
    return save_model_dir(model, tok, fmt, out, training={"context": positions})


def forward_bound(model_dir: Path, *, batch: int, tokens: int) -> float:
    """Seconds of ``tokens`` cached single-token forward passes at ``batch`` rows (no sampling)."""
    import torch

    from critic.lm.model import load_model_dir, quiet_transformers

    lm = load_model_dir(model_dir)
    x = torch.full((batch, 1), lm.token_id(lm.format.end_of_document), dtype=torch.long)
    with torch.no_grad(), quiet_transformers():
        start = time.perf_counter()
        cache = None
        for _ in range(tokens):
            cache = lm.model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1).past_key_values
        return time.perf_counter() - start


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256, help="tokens drawn per row (max_new_tokens)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--positions", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--root", default="/usr/share/man", help="man pages for the tokenizer (tests/data/manpages: toy)")
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a toy size (see the module docstring)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if not args.tokens < args.positions:
        raise SystemExit(f"--tokens ({args.tokens}) must be below --positions ({args.positions}): cached steps only")

    import torch

    from critic.lm.sample import sample

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = build_model_dir(tmp / "model", root=Path(args.root), pages=args.pages, vocab=args.vocab,
                                    layers=args.layers, heads=args.heads, dim=args.dim, positions=args.positions)
        best = {"sample": math.inf, "bound": math.inf, "wall": math.inf}
        report = None
        for r in range(args.repeats):
            start = time.perf_counter()
            report = sample(model_dir, tmp / f"run{r}", n=args.batch, batch_size=args.batch,
                            max_new_tokens=args.tokens, seed=r, progress=False)
            wall = time.perf_counter() - start
            # per-token rate of this round, compared at the bound's token count
            best["sample"] = min(best["sample"], report.seconds / report.generated_tokens)
            best["wall"] = min(best["wall"], wall)
            best["bound"] = min(best["bound"], forward_bound(model_dir, batch=args.batch, tokens=args.tokens)
                                / (args.batch * args.tokens))
            if report.written != args.batch or report.generated_tokens != report.total_tokens:
                raise AssertionError(f"bookkeeping: {report.counts()}")
    sample_rate, bound_rate = 1 / best["sample"], 1 / best["bound"]
    result = {"batch": args.batch, "tokens": args.tokens, "layers": args.layers, "heads": args.heads, "dim": args.dim,
              "positions": args.positions, "vocab": args.vocab, "threads": args.threads, "repeats": args.repeats,
              "sample_tokens_per_s": sample_rate, "bound_tokens_per_s": bound_rate, "ratio": bound_rate / sample_rate,
              "sample_wall_s": best["wall"], "generated_tokens": report.generated_tokens,
              "rows_finished_early": report.finished, "written": report.written}
    print(f"sampling speed, GPT-2 {args.layers} layers x {args.dim} dims, vocab {args.vocab}, batch {args.batch}, "
          f"{args.tokens} tokens per row, {args.threads} thread(s), best of {args.repeats}")
    print(f"  sample (draw + decode + parse + fsynced log)  {sample_rate:10.0f} tokens/s"
          f"  ({report.generated_tokens} tokens, {report.finished} rows hit the end token)")
    print(f"  bound  (cached forward passes only)           {bound_rate:10.0f} tokens/s")
    print(f"  bound/sample = {result['ratio']:.3f}  (target <= 1.3)")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
