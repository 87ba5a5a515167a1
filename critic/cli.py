"""The ``critic`` command line.

``critic list``, ``critic fit``, ``critic score``, ``critic compare``,
``critic outliers``, ``critic run CONFIG.toml``, ``critic data build CORPUS``,
plus commands that plugins add (``add_commands(subparsers)`` in a module of
the ``critic.plugins`` entry-point group).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
import tomllib
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from . import registry
from .critic import Critic, resolve_device
from .criticism import criticize
from .document import DocumentError, read_jsonl
from .report import outliers_table, write_report

__all__ = ["main", "build_parser", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda[:N]; never a silent fallback")


def _named_file(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return name, Path(path)


# ------------------------------------------------------------------ commands
def cmd_list(args) -> int:
    critics = registry.list_critics()
    metrics = registry.list_metrics()
    print("Critics:")
    for name, cls in critics.items():
        doc = (cls.__doc__ or "").strip().splitlines()
        print(f"  {name:<16} {doc[0] if doc else ''}")
    print("Metrics:")
    for name, entry in metrics.items():
        print(f"  {name:<16} {entry.description}")
    for name, err in registry.plugin_errors().items():
        print(f"Plugin {name!r} could not be loaded: {err}", file=sys.stderr)
    return 0


def _critic_params(cls: type, args) -> dict:
    params = {}
    if getattr(args, "params", None):
        params.update(json.loads(args.params))
    import inspect

    if "device" in inspect.signature(cls.__init__).parameters:
        params.setdefault("device", args.device)
    return params


def cmd_fit(args) -> int:
    cls = registry.get_critic(args.critic)
    critic = cls(**_critic_params(cls, args))
    train = read_jsonl(args.train)
    valid = read_jsonl(args.valid) if args.valid else None
    critic.fit(train, validation=valid)
    critic.save(args.out)
    print(f"fitted {args.critic} on {len(train)} documents; saved to {args.out}")
    return 0


def _load(args) -> Critic:
    critic = Critic.load(args.critic_dir)
    if hasattr(critic, "device"):
        critic.device = args.device
    return critic


def cmd_score(args) -> int:
    critic = _load(args)
    scores = critic.score(read_jsonl(args.input), progress=True)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    try:
        for doc_id, t, m in zip(scores.doc_ids, scores.latent_nll, scores.latent_steps):
            row = {"id": doc_id, "latent_nll": float(t), "latent_steps": float(m),
                   "latent_nll_per_step": float(t / m), "unknown": scores.unknown.get(doc_id, 0)}
            out.write(json.dumps(row) + "\n")
        for doc_id, reason in scores.skipped.items():
            out.write(json.dumps({"id": doc_id, "skipped": reason}) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    if scores.skipped:
        print(f"{len(scores.skipped)} document(s) could not be projected (see 'skipped' lines)", file=sys.stderr)
    return 0


def cmd_compare(args) -> int:
    critic = _load(args)
    reference = read_jsonl(args.reference)
    candidates = {name: read_jsonl(path) for name, path in args.candidate}
    result = criticize(critic, reference, candidates, n_bootstrap=args.n_bootstrap, seed=args.seed,
                       progress=True)
    paths = write_report(result, args.out, top=args.top)
    print(result)
    print(f"\nwrote {', '.join(str(p) for p in paths.values())}")
    return 0


def cmd_outliers(args) -> int:
    critic = _load(args)
    result = criticize(critic, read_jsonl(args.reference), {"input": read_jsonl(args.input)},
                       n_bootstrap=args.n_bootstrap, seed=args.seed)
    print(outliers_table(result, top=args.top, name="input"))
    return 0


def load_runner(spec: str):
    module, sep, func = spec.partition(":")
    if not sep:
        raise ValueError(f"runner must look like 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(module), func)


def cmd_run(args) -> int:
    path = Path(args.config)
    with open(path, "rb") as fh:
        config = tomllib.load(fh)
    if "runner" not in config:
        raise ValueError(f"{path}: no top-level 'runner = \"module:function\"' key")
    out = Path(args.out) if args.out else Path("runs") / path.stem
    out.mkdir(parents=True, exist_ok=True)
    config.setdefault("config_path", str(path))
    load_runner(config["runner"])(config, out=out, seed=args.seed, device=args.device)
    return 0


def cmd_data_build(args) -> int:
    if args.corpus != "manpages":
        raise ValueError(f"unknown corpus {args.corpus!r} (known: manpages)")
    from .corpora.manpages import build_manpages

    report = build_manpages(args.out, root=Path(args.root), install=not args.no_install)
    print(json.dumps(report.counts))
    return 0


def cmd_data_convert(args) -> int:
    from collections import Counter

    from .document import write_jsonl

    if args.format == "cohan":
        from .corpora.cohan import iter_cohan

        docs = list(iter_cohan(args.input))
        report: dict = {"kept": len(docs)}
    elif args.format == "wikipedia":
        from .corpora.wikipedia import iter_wikipedia

        counter: Counter = Counter()
        docs = list(iter_wikipedia(args.input, counter))
        report = dict(counter)
    else:
        raise ValueError(f"unknown format {args.format!r} (known: cohan, wikipedia)")
    write_jsonl(docs, args.out)
    print(json.dumps(report))
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="critic", description="Model criticism in latent space.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list critics and metrics")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("fit", help="fit a critic on real documents and save it")
    p.add_argument("critic", help="registered critic name (see `critic list`)")
    p.add_argument("--train", required=True, type=Path)
    p.add_argument("--valid", type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--params", help='critic settings as JSON, e.g. \'{"delta": 0.1}\'')
    _common(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("score", help="per-document T(x), M(x) as JSONL")
    p.add_argument("critic_dir", type=Path)
    p.add_argument("--input", required=True, type=Path)
    p.add_argument("--out", type=Path, help="JSONL file (default: stdout)")
    _common(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("compare", help="criticise candidate sets against a reference set")
    p.add_argument("critic_dir", type=Path)
    p.add_argument("--reference", required=True, type=Path)
    p.add_argument("--candidate", action="append", type=_named_file, default=[], metavar="NAME=FILE")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--n-bootstrap", type=int, default=1000)
    _common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("outliers", help="flag the documents least likely in latent space")
    p.add_argument("critic_dir", type=Path)
    p.add_argument("--reference", required=True, type=Path)
    p.add_argument("--input", required=True, type=Path)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--n-bootstrap", type=int, default=200)
    _common(p)
    p.set_defaults(func=cmd_outliers)

    p = sub.add_parser("run", help="run an experiment from a TOML config")
    p.add_argument("config", type=Path)
    p.add_argument("--out", type=Path)
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("data", help="build corpora")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    b = data_sub.add_parser("build", help="build a corpus into train/valid/test JSONL")
    b.add_argument("corpus", help="manpages")
    b.add_argument("--out", required=True, type=Path)
    b.add_argument("--root", default="/usr/share/man", help="man page root (default /usr/share/man)")
    b.add_argument("--no-install", action="store_true", help="never apt-get install missing pages")
    b.set_defaults(func=cmd_data_build)
    c = data_sub.add_parser("convert", help="convert a corpus format users bring into document JSONL")
    c.add_argument("format", choices=["cohan", "wikipedia"],
                   help="cohan: arXiv/PubMed JSON lines of Cohan et al. (2018); wikipedia: pages-articles XML[.bz2]")
    c.add_argument("input", type=Path)
    c.add_argument("--out", required=True, type=Path)
    c.set_defaults(func=cmd_data_convert)

    for module in registry.load_plugins().values():
        if hasattr(module, "add_commands"):
            module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if hasattr(args, "device"):
            resolve_device(args.device)
        if hasattr(args, "seed"):
            seed_everything(args.seed)
        return int(args.func(args) or 0)
    except (DocumentError, ValueError, KeyError, FileNotFoundError, RuntimeError) as exc:
        print(f"critic: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
