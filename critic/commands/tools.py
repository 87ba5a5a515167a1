"""``critic data build | convert``, ``critic metric`` and ``critic setup``: a sub-command per registered corpus,
format, metric and tool, its options from a function's signature."""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import Callable

from .. import registry
from ..cli_args import called_options, signature_options
from ..helptext import plain_help
from ..terminal import get_logger

__all__ = ["cmd_data_build", "cmd_data_convert", "cmd_metric", "cmd_setup", "add_data", "add_metric", "add_setup"]

_log = get_logger(__name__)


def _build_option(text: str) -> tuple[str, object]:
    """``--option KEY=VALUE`` of ``critic data build``: VALUE as JSON when it parses (true, 0.2, null,
    "People"), else the string as written."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE (topic=People, film=true)")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _builder_options(name: str, build, options: dict, given: set[str]) -> dict:
    """``options`` the builder accepts, the ones the user gave (``--root``, ``--option``) checked against its
    signature (names, types, ranges) before any work; one it lacks that the user did not give (``install``
    for a plugin's builder without it) is left out."""
    import inspect

    from ..config import check_call

    try:
        params = list(inspect.signature(build).parameters.values())
    except (TypeError, ValueError):
        return options
    names = [p.name for p in params[1:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params)
    check_call(build, {k: v for k, v in options.items() if k in given}, where="--option", what="option",
               owner=f"corpus {name!r}", skip=(params[0].name,) if params else ())
    return options if open_ended else {k: v for k, v in options.items() if k in names}


def cmd_data_build(args) -> int:
    corpus = registry.get_corpus(args.corpus)
    options = {"install": not args.no_install}
    given = set()
    if args.root is not None:
        options["root"] = Path(args.root)
        given.add("root")
    for key, value in args.option:
        options[key] = value
        given.add(key)
    report = corpus.build(args.out, **_builder_options(args.corpus, corpus.build, options, given))
    print(json.dumps(report.counts))
    for new_id, old_id in list(getattr(report, "renamed", {}).items())[:5]:
        _log.info("renamed a repeated document id %r to %r", old_id, new_id)
    return 0


def _called(args, what: str, *leading):
    """Call the function of a ``critic metric|setup|data convert NAME`` sub-command with its options."""
    if args.unreadable:
        raise ValueError(f"{what} has no command-line form: no option can give its argument(s) "
                         f"{', '.join(args.unreadable)}; use it from Python")
    return args.call(*leading, **called_options(args))


def cmd_data_convert(args) -> int:
    from collections import Counter

    from ..document import DocumentError, unique_ids, write_jsonl

    counts: Counter = Counter()
    docs = list(_called(args, f"format {args.format!r}", args.input, counts))
    report = dict(counts)
    if not docs:
        raise DocumentError(f"{args.input}: no documents to convert"
                            + (f" (skipped: {json.dumps(report)})" if report else ""))
    docs, renamed = unique_ids(docs)
    if renamed:
        report["renamed duplicate ids"] = len(renamed)
        for new_id, old_id in list(renamed.items())[:5]:
            _log.info("%s: repeated document id %r written as %r", args.input, old_id, new_id)
    write_jsonl(docs, args.out)
    print(json.dumps(report))
    return 0


def cmd_metric(args) -> int:
    value = _called(args, f"metric {args.metric!r}")
    print(json.dumps({"metric": args.metric, **(value if isinstance(value, dict) else {"value": value})},
                     indent=2, default=float))
    return 0


def cmd_setup(args) -> int:
    print(_called(args, f"tool {args.tool!r}"))
    return 0


def _function_command(sub, name: str, fn: Callable, help: str, func: Callable, *, skip: int = 0):
    """``critic ... NAME``: a sub-command whose options are ``fn``'s parameters after the first ``skip``."""
    doc = plain_help(inspect.getdoc(fn) or "")
    p = sub.add_parser(name, help=help, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=doc if doc.startswith(help) else "\n\n".join(t for t in (help, doc) if t))
    p.set_defaults(func=func, call=fn, unreadable=signature_options(p, fn, skip=skip))
    return p


def add_data(p: argparse.ArgumentParser) -> None:
    data_sub = p.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    b = data_sub.add_parser("build", help="build a corpus into train/valid/test JSONL")
    b.add_argument("corpus", help="registered corpus name (see `critic list`): manpages, linux-doc, wiki-summaries")
    b.add_argument("--out", required=True, type=Path, help="folder for train.jsonl, valid.jsonl and test.jsonl")
    b.add_argument("--root", default=None, help="source root (manpages: default /usr/share/man)")
    b.add_argument("--no-install", action="store_true", help="never apt-get install (or download) missing sources")
    b.add_argument("--option", action="append", default=[], type=_build_option, metavar="KEY=VALUE",
                   help="a keyword option of the corpus builder, repeatable; VALUE is read as JSON when it "
                        "parses, else as a string (wiki-summaries: topic=People, film=true, language=es, wheel=PATH)")
    b.set_defaults(func=cmd_data_build)
    c = data_sub.add_parser("convert", help="convert a corpus format users bring into document JSONL")
    formats = c.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for name, entry in registry.list_converters().items():
        f = _function_command(formats, name, entry.convert, entry.description, cmd_data_convert, skip=2)
        f.add_argument("input", type=Path, help=f"the file to convert ({entry.description})")
        f.add_argument("--out", required=True, type=Path, help="document JSONL to write")


def add_metric(p: argparse.ArgumentParser) -> None:
    p.description = "Compute a metric; its result is printed as JSON.  critic metric NAME --help gives its options."
    metrics = p.add_subparsers(dest="metric", required=True, metavar="METRIC")
    for name, entry in registry.list_metrics().items():
        _function_command(metrics, name, entry.command or entry.fn, entry.description, cmd_metric)


def add_setup(p: argparse.ArgumentParser) -> None:
    p.description = "Build an optional tool (idempotent: a tool already built is kept); prints where it is."
    tools = p.add_subparsers(dest="tool", required=True, metavar="TOOL")
    for name, entry in registry.list_setups().items():
        _function_command(tools, name, entry.fn, entry.description, cmd_setup)
