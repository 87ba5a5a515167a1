"""The ``critic`` command line.

Every command is registered in :mod:`critic.registry` (:func:`~critic.registry.register_command`) and built from
it: the core's commands here (``list``, ``fit``, ``score``, ``merge``, ``compare``, ``report``, ``outliers``,
``run``, ``data build|convert``, ``metric``, ``setup``; ``lm`` by reference to :mod:`critic.lm.cli`), those of
plugins where they register.  ``critic metric NAME``, ``critic setup NAME`` and ``critic data convert NAME`` have a
sub-command per registered metric, tool and format, whose options are a function's keyword parameters
(:func:`critic.cli_args.signature_options`); ``critic fit NAME`` one per critic, its settings in ``--help``.

Only the parser of the command asked for is filled, and the plugins are imported only when a command needs them,
so ``critic --help`` imports neither torch nor numpy (a plugin's own commands are listed by ``critic list``).

Bad input is never a traceback: an unreadable file, a malformed document, a
config that does not fit its runner's schema, a damaged saved critic or an
absent device prints one ``critic: error: ...`` line naming the file (and the
line or document where there is one) and exits with status 2; Ctrl-C prints
``critic: interrupted`` and exits with 130 (every output is written
atomically, so a rerun resumes).  ``critic --debug ...`` re-raises instead,
for bugs.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import progress, registry
from .cli_args import (add_input_arguments, called_options, common_options, flag_rule, fold_count, input_options,
                       named_file, named_number, outlier_options, positive_int, read_with_args, resampling_options,
                       set_name, signature_options)
from .config import (ConfigError, check_config, check_params, describe_settings, line_of, read_toml, seeded_params,
                     suggest)
from .helptext import plain_help
from .io import atomic_write_text, check_replaceable, claim_folder, output_lock
from .stages import is_run_folder
from .terminal import path_text, printable, printable_streams

__all__ = ["main", "build_parser", "seed_everything", "EXIT_ERROR", "EXIT_INTERRUPTED"]

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

_USER_ERRORS = (ValueError, KeyError, OSError, RuntimeError, EOFError)
"""What bad input raises (DocumentError, ConfigError, CriticLoadError, JSON and TOML decode errors are
ValueErrors; a missing file is an OSError; an absent device a RuntimeError)."""


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


_INVALID_CHOICE = re.compile(r"argument (?P<what>[\w -]+?): invalid choice: '(?P<given>[^']*)' "
                             r"\(choose from (?P<known>.*)\)")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors also name the plugins that failed to import
    (their commands and critics are missing, and this is why)."""

    def error(self, message: str):
        choice = _INVALID_CHOICE.fullmatch(message)
        if choice:  # "argument CRITIC: invalid choice: 'x' (choose from 'a', 'b')" -> unknown critic, closest name
            what, given, known = choice["what"].lower(), choice["given"], re.findall(r"'([^']*)'", choice["known"])
            message = f"unknown {what} {given!r}{suggest(given, known)}; known: {', '.join(known)}"
        for name, err in registry.plugin_errors().items():
            message += f"\nnote: plugin {name!r} failed to import ({err})"
        super().error(message)


# ------------------------------------------------------------------ commands
def cmd_list(args) -> int:
    print("Critics (critic fit NAME --help for settings):")
    for name, cls in registry.list_critics().items():
        doc = plain_help(cls.__doc__ or "").strip().splitlines()
        print(f"  {name:<18} {doc[0] if doc else ''}")
        print(f"  {'':<18}   needs: {cls.needs}")
    for title, entries in (("Metrics (critic metric NAME --help for options)", registry.list_metrics()),
                           ("Corpora (critic data build)", registry.list_corpora()),
                           ("Formats (critic data convert NAME)", registry.list_converters()),
                           ("Tools (critic setup NAME)", registry.list_setups())):
        print(f"{title}:")
        for name, entry in entries.items():
            print(f"  {name:<18} {entry.description}")
    print("Commands (critic COMMAND --help):")
    for name, entry in registry.list_commands().items():
        print(f"  {name:<18} {entry.help}")
    for name, err in registry.plugin_errors().items():
        print(f"critic: plugin {name!r} could not be loaded: {err}", file=sys.stderr)
    return 0


def _params(cls: type, text: str | None) -> dict:
    """``--params`` JSON, checked against the critic's settings."""
    if not text:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--params: invalid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    return check_params(cls, params, where="--params")


def cmd_fit(args) -> int:
    cls = registry.get_critic(args.critic)
    params = seeded_params(cls, _params(cls, args.params), args.seed, where="--params")
    check_replaceable(args.out, "critic")
    train, _ = read_with_args(args, args.train)
    valid = read_with_args(args, args.valid)[0] if args.valid else None
    print(f"fitting {args.critic} on {len(train)} documents"
          + (f" (validation: {len(valid)})" if valid else "") + " ...", file=sys.stderr, flush=True)
    check = None
    if args.check_seeds:
        check = _fit_checking_seeds(args, cls, params, train, valid)
        critic = check.critics[0]
    else:
        with progress.shown():
            critic = cls(**params).to(args.device).fit(train, validation=valid)
    folds = critic.calibration_folds if args.calibration_folds is None else args.calibration_folds
    with progress.shown():
        critic.calibrate(train, valid, folds=folds, seed=args.seed,
                         log=lambda message: print(f"critic: {message}", file=sys.stderr, flush=True))
    critic.save(args.out)
    print(f"fitted {args.critic}: {critic.fit_summary(len(train))}; calibration: {critic.calibration.summary()}; "
          f"saved to {args.out}")
    if check is not None:  # beside the critic's folder, which holds the critic's own files only
        written = args.out.with_name(args.out.name + ".seed_check.json")
        atomic_write_text(written, json.dumps(check.to_json(), indent=1) + "\n")
        print(f"seed check ({'--valid' if valid else 'the training documents'}), written to {written}:\n"
              + "\n".join(check.lines()))
    for warning in critic.fit_warnings():
        print(f"critic: warning: {warning}", file=sys.stderr)
    return 0


def _fit_checking_seeds(args, cls: type, params: dict, train: list, valid: list | None):
    """``--check-seeds N``: fit with seeds ``--seed``, ``--seed + 1``, ..., and score ``--valid`` (else the training
    documents) with each fit (:mod:`critic.seeds`); the first seed's fit is the critic saved, the agreement is
    printed and written beside its folder (``OUT.seed_check.json``)."""
    from .seeds import check_seeds

    if args.check_seeds < 2:
        raise ConfigError(f"--check-seeds: compare at least 2 seeds, got {args.check_seeds}")
    if "seed" not in params:
        raise ConfigError(f"--check-seeds: critic {args.critic!r} has no seed setting, so its fits cannot differ "
                          "by seed")
    seeds = [params["seed"] + i for i in range(args.check_seeds)]
    scored = valid if valid else train
    with progress.shown():
        return check_seeds(lambda seed: cls(**{**params, "seed": seed}).to(args.device), train, scored, seeds,
                           validation=valid)


def cmd_score(args) -> int:
    from .critic import Critic
    from .inputs import ReadReport, iter_documents
    from .streaming import parse_shard, score_stream, scored_chunks

    critic = Critic.load(args.critic_dir, device=args.device)
    shard = parse_shard(args.shard) if args.shard else (1, 1)
    if shard != (1, 1) and not args.out:
        raise ValueError("--shard writes a part for critic merge: give --out FILE")
    if (args.workers or args.scheduler) and not args.out:
        raise ValueError("--workers / --scheduler write chunks as they finish: give --out FILE")
    read = ReadReport(skipped_documents=[])  # each generation the reader skips gets a row
    docs = iter_documents(args.input, input_options(args), report=read)
    if args.out:
        with _dask_client(args) as client:
            scorer = None
            if client is not None:
                from .distributed import dask_scorer

                scorer = dask_scorer(client, args.critic_dir, critic, seed=args.seed)
            state = score_stream(critic, docs, args.out, source=args.input, seed=args.seed,
                                 batches_per_chunk=args.chunk_batches, shard=shard, progress=True, scorer=scorer,
                                 read_skips=read.skipped_documents)
        print(f"scored {len(state['chunks'])} of {state['chunks_total']} chunks ({state['read']} documents read) "
              f"into {args.out}" + (f" (shard {shard[0]}/{shard[1]}: critic merge puts the parts together)"
                                    if shard != (1, 1) else ""), file=sys.stderr)
    else:
        for _, data in scored_chunks(critic, docs, seed=args.seed, batches_per_chunk=args.chunk_batches,
                                     read_skips=read.skipped_documents):
            sys.stdout.write(data.decode("utf-8"))
            sys.stdout.flush()
    if read.worth_saying():
        print(f"critic: {read.summary()}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _dask_client(args):
    """A Dask client for ``--workers N`` (an embedded LocalCluster) or ``--scheduler ADDRESS``, else ``None``."""
    if not (args.workers or args.scheduler):
        yield None
        return
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--workers / --scheduler need Dask distributed: pip install 'critic[dask]'") from None
    if args.workers and args.scheduler:
        raise ValueError("give --workers N (an embedded cluster) or --scheduler ADDRESS (an existing one), not both")
    from .distributed import SCHEDULER_SECONDS, check_scheduler, check_workers, local_cluster

    if args.scheduler:
        check_scheduler(args.scheduler)
        with Client(args.scheduler, timeout=f"{SCHEDULER_SECONDS:g}s") as client:
            yield client
        return

    check_workers(args.workers)
    with local_cluster(args.workers) as cluster, Client(cluster) as client:
        yield client


def cmd_merge(args) -> int:
    from .streaming import merge_shards

    done = merge_shards(args.parts, args.out)
    print(f"merged {done['chunks']} chunks from {done['parts']} shards into {args.out}")
    return 0


def _candidates(named: Sequence[tuple[str, Path]], reference_name: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for name, path in named:
        if name == reference_name:
            raise ValueError(f"--candidate {name}={path}: {name!r} is the reference set's name; choose another")
        if name in out:
            raise ValueError(f"--candidate {name}={path}: the name {name!r} is already used for {out[name]}")
        out[name] = path
    return out


def cmd_compare(args) -> int:
    from .critic import Critic
    from .criticism import criticize, require_comparable_shapes
    from .panel import PanelResult, explain_outliers
    from .report import write_report

    named = _candidates(args.candidate, "reference")
    check_replaceable(args.out, "report")  # before any work (and again when the report is swapped in)
    critic = Critic.load(args.critic_dir, device=args.device)
    reference, _ = read_with_args(args, args.reference, "reference", detect=True)
    candidates = {name: read_with_args(args, path, name)[0] for name, path in named.items()}
    require_comparable_shapes(reference, candidates, sections=args.sections)
    paths = {"reference": args.reference, **named}
    result = criticize(critic, reference, candidates, paths=paths, n_bootstrap=args.n_bootstrap,
                       n_permutations=args.n_permutations, outlier_score=args.outlier_score, seed=args.seed,
                       progress=True)
    documents = {"reference": reference, **candidates}
    explain_outliers(result, critic, documents, top=args.top)
    written = write_report(result, args.out, top=args.top, documents=documents, **flag_rule(args))
    panel = PanelResult({critic.name: result}, top=args.top, **flag_rule(args))
    print(result)
    print(f"\n{len(panel.flagged())} flagged document(s) ({panel.rule})")
    _say_power(panel)
    print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0


def cmd_outliers(args) -> int:
    from .critic import Critic, describe_skips
    from .criticism import criticize, require_comparable_shapes
    from .panel import PanelResult, explain_outliers
    from .report import outliers_table

    critic = Critic.load(args.critic_dir, device=args.device)
    reference = read_with_args(args, args.reference, "reference", detect=True)[0]
    documents = read_with_args(args, args.input)[0]
    require_comparable_shapes(reference, {"input": documents}, sections=args.sections)
    result = criticize(critic, reference, {"input": documents},
                       paths={"reference": args.reference, "input": args.input},
                       n_bootstrap=args.n_bootstrap, outlier_score=args.outlier_score, seed=args.seed)
    ranked = result.set("input")
    if ranked.n == 0:
        raise ValueError(f"{args.input}: no document could be scored, nothing to rank; {describe_skips(ranked.skipped)}")
    explain_outliers(result, critic, {"input": documents}, top=args.top, name="input")
    panel = PanelResult({critic.name: result}, top=len(documents), **flag_rule(args))
    print(outliers_table(result, top=args.top, name="input"))
    print(f"\n{len(panel.flagged())} of {ranked.n} documents flagged: {panel.rule}.")
    for name, path in (("input", args.input), ("reference", args.reference)):
        if result.set(name).skipped:  # not ranked (input) or not compared with (reference): said, never dropped
            line = f"{printable(path)}: {describe_skips(result.set(name).skipped)}"
            print(line)
            print(f"critic: warning: {line}", file=sys.stderr)
    _say_power(panel)
    return 0


def _say_power(panel) -> None:
    """What bounds the flags: on stdout, and the sets where flags cannot fire on stderr too."""
    for label, lines in panel.power().items():
        for line in lines:
            print(f"{label}: {line}")
            if line.startswith("cannot flag"):
                print(f"critic: warning: {label}: {line}", file=sys.stderr)


def _critic_dirs(named: Sequence[str]) -> dict[str, Path]:
    """``--critic [LABEL=]DIR`` values as label -> folder; the label defaults to the folder's name."""
    out: dict[str, Path] = {}
    for text in named:
        label, sep, path = text.partition("=")
        label, path = (label, path) if sep else (path_text(Path(text).name), text)
        if not label or not path:
            raise ValueError(f"--critic {text!r}: expected DIR or LABEL=DIR")
        try:
            set_name(label)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--critic {text!r}: {exc}") from None
        if label in out:
            raise ValueError(f"--critic {text}: the label {label!r} is already used for {out[label]}; "
                             f"name them: --critic LABEL=DIR")
        out[label] = Path(path)
    return out


def cmd_report(args) -> int:
    from .critic import Critic
    from .criticism import require_comparable_shapes
    from .panel import add_set_statistics, criticize_panel
    from .report import write_panel_report

    named = _candidates(args.candidate, "reference")
    if not named:
        raise ValueError("give at least one --candidate NAME=FILE (the generations to criticise)")
    args.word_ppl = dict(args.word_ppl)
    for name in args.word_ppl:
        if name not in named:
            raise ValueError(f"--word-ppl {name}=...: no candidate set {name!r} (the candidates: {', '.join(named)})")
    dirs = _critic_dirs(args.critic)
    check_replaceable(args.out, "report")  # before any work (and again when the report is swapped in)
    critics = {label: Critic.load(path, device=args.device) for label, path in dirs.items()}
    reads: dict[str, dict] = {}
    reference, reads["reference"] = read_with_args(args, args.reference, "reference", detect=True)
    candidates = {}
    for name, path in named.items():
        candidates[name], reads[name] = read_with_args(args, path, name)
    require_comparable_shapes(reference, candidates, sections=args.sections)
    panel = criticize_panel(critics, reference, candidates, reads=reads, **flag_rule(args), top=args.top,
                            paths={"reference": args.reference, **named}, n_bootstrap=args.n_bootstrap,
                            n_permutations=args.n_permutations, outlier_score=args.outlier_score, seed=args.seed,
                            progress=True)
    add_set_statistics(panel, reference, candidates, critics=critics, word_ppl=args.word_ppl, mauve=args.mauve,
                       seed=args.seed)
    written = write_panel_report(panel, args.out, documents={"reference": reference, **candidates}, critics=critics,
                                 extra={"critic_dirs": {k: str(v) for k, v in dirs.items()}})
    print(panel)
    print(f"\n{len(panel.flagged())} flagged document(s) ({panel.rule})")
    _say_power(panel)
    print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0


def cmd_run(args) -> int:
    path = Path(args.config)
    data, text = read_toml(path)
    spec = data.get("runner")
    line = line_of(text, None, "runner")
    where = f"{path}:{line}" if line else str(path)
    if not isinstance(spec, str):
        raise ConfigError(f"{where}: needs a top-level key runner = \"package.module:function\" (or a runner name)"
                          + ("" if spec is None else f", got {spec!r}"))
    try:
        runner = registry.get_runner(spec)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: {exc.args[0]}") from None
    config = check_config(data, runner.schema, where=str(path), text=text, allowed=("runner",))
    out = claim_folder(Path(args.out) if args.out else Path("runs") / path.stem, "run", legacy=is_run_folder)
    with output_lock(out, inside=True):  # two runs in one folder would recompute each other's stages
        runner.fn(config, out=out, seed=args.seed, device=args.device)
    return 0


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

    from .config import check_call

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
        print(f"critic: renamed a repeated document id {old_id!r} to {new_id!r}", file=sys.stderr)
    return 0


def _called(args, what: str, *leading):
    """Call the function of a ``critic metric|setup|data convert NAME`` sub-command with its options."""
    if args.unreadable:
        raise ValueError(f"{what} has no command-line form: no option can give its argument(s) "
                         f"{', '.join(args.unreadable)}; use it from Python")
    return args.call(*leading, **called_options(args))


def cmd_data_convert(args) -> int:
    from collections import Counter

    from .document import DocumentError, unique_ids, write_jsonl

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
            print(f"critic: {args.input}: repeated document id {old_id!r} written as {new_id!r}", file=sys.stderr)
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


# ------------------------------------------------------------------ parsers, one filler per command
def _function_command(sub, name: str, fn: Callable, help: str, func: Callable, *, skip: int = 0):
    """``critic ... NAME``: a sub-command whose options are ``fn``'s parameters after the first ``skip``."""
    doc = plain_help(inspect.getdoc(fn) or "")
    p = sub.add_parser(name, help=help, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=doc if doc.startswith(help) else "\n\n".join(t for t in (help, doc) if t))
    p.set_defaults(func=func, call=fn, unreadable=signature_options(p, fn, skip=skip))
    return p


def _add_list(p: argparse.ArgumentParser) -> None:
    p.set_defaults(func=cmd_list)


def _add_fit(p: argparse.ArgumentParser) -> None:
    fit_sub = p.add_subparsers(dest="critic", required=True, metavar="CRITIC")
    for name, cls in registry.list_critics().items():
        doc = plain_help(inspect.cleandoc(cls.__doc__ or ""))
        f = fit_sub.add_parser(name, help=doc.splitlines()[0] if doc else None,
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               description=f"{doc}\n\nNeeds: {cls.needs}",
                               epilog="settings (--params JSON):\n  " + "\n  ".join(describe_settings(cls)))
        f.add_argument("--train", required=True, type=Path, help="real documents to fit on")
        f.add_argument("--valid", type=Path, help="held-out real documents (settings chosen on them, where a "
                                                  "critic does)")
        f.add_argument("--out", required=True, type=Path, help="folder to save the fitted critic in")
        f.add_argument("--params", help='critic settings as JSON, e.g. \'{"delta": 0.1}\' (listed below)')
        f.add_argument("--check-seeds", type=positive_int, metavar="N",
                       help="fit with N seeds (--seed, --seed + 1, ...; N >= 2), score --valid (else the training "
                            "documents) with each and print how well they agree: Latent NLL correlation, top-20 "
                            "outliers shared, matched topics' cosine (OUT.seed_check.json); the first fit is saved")
        f.add_argument("--calibration-folds", type=fold_count, metavar="K",
                       help="calibration documents for outlier p-values: score each training document with a critic "
                            "fitted on the other K - 1 folds (K more fits), beside --valid scored by the critic; 0: "
                            f"--valid only (default for this critic: {cls.calibration_folds}; docs/outliers.md)")
        common_options(f)
        add_input_arguments(f)
        f.set_defaults(func=cmd_fit)


def _add_score(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--input", required=True, type=Path, help="documents to score")
    p.add_argument("--out", type=Path, help="JSONL file, written chunk by chunk; a rerun resumes (default: stdout)")
    p.add_argument("--shard", metavar="I/N", help="score only the I-th of N shards (cut on batch boundaries); "
                                                 "critic merge puts the parts together")
    p.add_argument("--workers", type=positive_int, help="score on an embedded Dask cluster of N worker processes")
    p.add_argument("--scheduler", metavar="ADDRESS", help="score on an existing Dask cluster (tcp://HOST:PORT)")
    p.add_argument("--chunk-batches", type=positive_int,
                   help="batches per chunk, the unit written, resumed, sharded and sent to a Dask worker "
                        "(default: the critic's chunk_documents, seconds of its work: 8,192 documents for most)")
    common_options(p)
    add_input_arguments(p)
    p.set_defaults(func=cmd_score)


def _add_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("parts", nargs="+", type=Path, help="the shards' output files")
    p.add_argument("--out", required=True, type=Path, help="JSONL file to write (the serial run's bytes)")
    p.set_defaults(func=cmd_merge)


def _add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--reference", required=True, type=Path, help="real documents to compare with")
    p.add_argument("--candidate", action="append", type=named_file, default=[], metavar="NAME=FILE",
                   help="a set to criticise (generations), repeatable")
    p.add_argument("--out", required=True, type=Path, help="report folder (results.json, report.md, figures)")
    p.add_argument("--top", type=positive_int, default=10, help="outliers listed per set (default 10)")
    resampling_options(p)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_compare)


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--critic", action="append", required=True, metavar="[LABEL=]DIR",
                   help="a saved critic's folder, repeatable (label: the folder's name unless given)")
    p.add_argument("--reference", required=True, type=Path, help="real documents to compare with")
    p.add_argument("--candidate", action="append", type=named_file, default=[], metavar="NAME=FILE",
                   help="generations to criticise, repeatable")
    p.add_argument("--out", required=True, type=Path, help="report folder (index.html, results.json, ...)")
    p.add_argument("--top", type=positive_int, default=20,
                   help="list (with a page each) at most this many flagged documents per critic and set, the least "
                        "likely; the report counts them all (default 20)")
    resampling_options(p)
    p.add_argument("--word-ppl", action="append", type=named_number, default=[], metavar="NAME=VALUE",
                   help="a candidate's word perplexity (from critic lm ppl), shown beside the critics; repeatable")
    p.add_argument("--mauve", action="store_true",
                   help="MAUVE of each candidate against the reference (offline MiniLM features; sets of at least "
                        "50 documents)")
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_report)


def _add_outliers(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--reference", required=True, type=Path, help="real documents that outliers are measured against")
    p.add_argument("--input", required=True, type=Path, help="documents to rank")
    p.add_argument("--top", type=positive_int, default=10, help="documents listed (default 10)")
    p.add_argument("--n-bootstrap", type=positive_int, default=200, help="bootstrap resamples of the CIs (default 200)")
    outlier_options(p)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_outliers)


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the experiment's TOML config (runner = NAME or module:function)")
    p.add_argument("--out", type=Path, help="run directory (default runs/CONFIG-NAME)")
    common_options(p)
    p.set_defaults(func=cmd_run)


def _add_data(p: argparse.ArgumentParser) -> None:
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


def _add_metric(p: argparse.ArgumentParser) -> None:
    p.description = "Compute a metric; its result is printed as JSON.  critic metric NAME --help gives its options."
    metrics = p.add_subparsers(dest="metric", required=True, metavar="METRIC")
    for name, entry in registry.list_metrics().items():
        _function_command(metrics, name, entry.command or entry.fn, entry.description, cmd_metric)


def _add_setup(p: argparse.ArgumentParser) -> None:
    p.description = "Build an optional tool (idempotent: a tool already built is kept); prints where it is."
    tools = p.add_subparsers(dest="tool", required=True, metavar="TOOL")
    for name, entry in registry.list_setups().items():
        _function_command(tools, name, entry.fn, entry.description, cmd_setup)


_COMMANDS: tuple[tuple[str, Callable | str, str], ...] = (
    ("list", _add_list, "list critics, metrics, corpora, formats, tools and commands (plugins' included)"),
    ("fit", _add_fit, "fit a critic on real documents and save it (critic fit NAME --help)"),
    ("score", _add_score, "per-document T(x), M(x) as JSONL, streamed in chunks (resumable, shardable)"),
    ("merge", _add_merge, "put the shards of critic score --shard together (the serial run's bytes)"),
    ("compare", _add_compare, "criticise candidate sets against a reference set"),
    ("report", _add_report, "criticise generations with several critics: one report (HTML, JSON)"),
    ("outliers", _add_outliers, "flag the documents least likely in latent space"),
    ("run", _add_run, "run an experiment from a TOML config (stages resume when unchanged)"),
    ("data", _add_data, "build or convert corpora"),
    ("lm", "critic.lm.cli:add_parser", "fine-tune a causal LM, sample documents, measure perplexity"),
    ("metric", _add_metric, "compute a registered metric (critic metric NAME --help)"),
    ("setup", _add_setup, "build an optional tool that a critic or metric needs (critic setup TOOL --help)"),
)
"""The core's commands: name, the function filling its parser (or ``module:function``), its line in --help."""


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``critic`` parser with every registered command, the parsers of ``commands`` filled (all when ``None``).

    The plugins are imported only when a command needs them: one of ``commands`` that is not the core's (it may be
    a plugin's), or filling a command that lists what they register (``critic fit``, ``critic metric``).
    """
    for name, add, help in _COMMANDS:
        registry.register_command(name, add, help)
    parser = _Parser(prog="critic", description="Model criticism in latent space.",
                     epilog="Plugins add commands of their own: critic list shows every command.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of any error (for bug reports)")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                        help="import a module (or .py file) of your own critics first, e.g. critic --plugin "
                             "my_critics.py fit my-critic ...; repeatable, also read from $CRITIC_PLUGINS")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    core = [name for name, _, _ in _COMMANDS]
    everything = registry.list_commands(plugins=commands is None or not set(commands) <= set(core))
    for name in core + [name for name in everything if name not in core]:
        p = sub.add_parser(name, help=everything[name].help, description=everything[name].help)
        if commands is None or name in commands:
            everything[name].fill(p)
    return parser


class _Ahead(argparse.ArgumentParser):
    """The parser that reads ahead; a usage error is left to the full parser to report."""

    def error(self, message: str):
        raise ValueError(message)


def _ahead(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """The ``--plugin`` values and the command, read ahead of the full parse (which needs the plugins' critics and
    fills only the command's parser)."""
    ahead = _Ahead(add_help=False)
    ahead.add_argument("--debug", action="store_true")
    ahead.add_argument("--plugin", action="append", default=[])
    ahead.add_argument("command", nargs="?")
    try:
        known = ahead.parse_known_args(list(argv))[0]
    except ValueError:
        return [], None
    return known.plugin, known.command


def _message(exc: BaseException) -> str:
    """What an error says on stderr: its message, or, where that is a bare word (a ``KeyError``'s key, an
    empty message), what kind of error it is and where to look, so no error reads ``critic: error: error``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename2 or exc.filename}: {exc.strerror}"  # a rename names its target second
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if " " in text.strip():
        return text
    what = f"no {text!r} where one was expected" if isinstance(exc, KeyError) else repr(text) if text else "no message"
    return f"{type(exc).__name__}: {what} (rerun with --debug to see where)"


_INPUT_OPTIONS = ("input", "reference", "train", "valid", "candidate")
"""The options that name documents to read: each must be there before a command starts (a missing file is said
at once, before torch, a critic or a plugin loads)."""


def _require_inputs(args) -> None:
    from .document import DocumentError

    for option in _INPUT_OPTIONS:
        value = getattr(args, option, None)
        for path in ([p for _, p in value] if option == "candidate" else [value]) if value else []:
            if isinstance(path, Path) and not os.path.lexists(path):
                raise DocumentError(f"{path}: no such file or folder")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, 2 for bad input or usage, 130 on Ctrl-C).  Whatever it
    prints passes :func:`critic.terminal.printable_streams`: data never acts on the terminal."""
    with printable_streams():
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    debug = "--debug" in argv
    try:
        plugins, command = _ahead(argv)
        for spec in plugins:
            registry.add_plugin(spec)  # before the parser: a plugin's critics become `critic fit NAME` choices
        parser = build_parser([command] if command else [])
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # usage errors (status 2) and --help (0)
            return exc.code if isinstance(exc.code, int) else EXIT_ERROR
        _require_inputs(args)
        if hasattr(args, "device"):
            from .critic import resolve_device

            resolve_device(args.device)
        if hasattr(args, "seed"):
            seed_everything(args.seed)
        if hasattr(args, "threads"):
            import torch

            torch.set_num_threads(args.threads)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print("critic: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _USER_ERRORS as exc:
        if debug:
            raise
        print(f"critic: error: {_message(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    from critic.cli import main as _main  # critic.cli's functions are the registered commands, not __main__'s

    sys.exit(_main())
