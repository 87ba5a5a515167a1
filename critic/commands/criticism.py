"""``critic compare``, ``critic outliers`` and ``critic report``: sets criticised against a reference, flags and
reports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from .. import progress
from ..cli_args import (add_criticism_options, add_input_arguments, common_options, input_options, named_file,
                        named_number, say, set_name)
from ..io import check_replaceable
from ..terminal import get_logger, path_text
from ..tracking import add_track_option

__all__ = ["cmd_compare", "cmd_outliers", "cmd_report", "add_compare", "add_report", "add_outliers"]

_log = get_logger(__name__)


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
    from ..critic import Critic
    from ..tracking import target_from

    named = _candidates(args.candidate, "reference")
    settings = args.criticism
    args.track = target_from(args.track)  # a bad target, or MLflow missing, said before any work
    check_replaceable(args.out, "report")  # before any work (and again when the report is swapped in)
    critic = Critic.load(args.critic_dir, device=args.device)
    return _criticise(args, {critic.name: critic}, {critic.name: args.critic_dir}, named, settings)


def cmd_outliers(args) -> int:
    from ..critic import Critic, describe_skips
    from ..panel import explain_outliers
    from ..report import outliers_table
    from ..workflows import criticise, read_sets

    settings = args.criticism
    critic = Critic.load(args.critic_dir, device=args.device)
    reference, sets, _ = read_sets(args.reference, {"input": args.input}, input_options(args), log=say)
    panel = criticise({critic.name: critic}, reference, sets, settings, seed=args.seed,
                      paths={"reference": args.reference, "input": args.input})
    result, ranked = panel.results[critic.name], panel.results[critic.name].set("input")
    if ranked.n == 0:
        raise ValueError(f"{args.input}: no document could be scored, nothing to rank; {describe_skips(ranked.skipped)}")
    explain_outliers(result, critic, sets, top=settings.top, name="input")
    print(outliers_table(result, top=settings.top, name="input"))
    print(f"\n{panel.flag_counts()[critic.name]['input']} of {ranked.n} documents flagged: {panel.rule}.")
    for name, path in (("input", args.input), ("reference", args.reference)):
        if result.set(name).skipped:  # not ranked (input) or not compared with (reference): said, never dropped
            line = f"{path}: {describe_skips(result.set(name).skipped)}"  # printed through printable_streams
            print(line)
            _log.warning("%s", line)
    _say_power(panel)
    return 0


def _say_power(panel) -> None:
    """What bounds the flags: on stdout, and the sets where flags cannot fire on stderr too."""
    for label, lines in panel.power().items():
        for line in lines:
            print(f"{label}: {line}")
            if line.startswith("cannot flag"):
                _log.warning("%s: %s", label, line)


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
    from ..critic import Critic
    from ..tracking import target_from

    named = _candidates(args.candidate, "reference")
    if not named:
        raise ValueError("give at least one --candidate NAME=FILE (the generations to criticise)")
    word_ppl = dict(args.word_ppl)
    for name in word_ppl:
        if name not in named:
            raise ValueError(f"--word-ppl {name}=...: no candidate set {name!r} (the candidates: {', '.join(named)})")
    settings = args.criticism
    dirs = _critic_dirs(args.critic)
    args.track = target_from(args.track)  # a bad target, or MLflow missing, said before any work
    check_replaceable(args.out, "report")  # before any work (and again when the report is swapped in)
    critics = {label: Critic.load(path, device=args.device) for label, path in dirs.items()}
    return _criticise(args, critics, dirs, named, settings, word_ppl=word_ppl, mauve=args.mauve)


def _criticise(args, critics: dict, dirs: dict[str, Path], named: dict[str, Path], settings, *,
               word_ppl: dict[str, float] | None = None, mauve: bool = False) -> int:
    """``critic compare`` and ``critic report``: read the sets, criticise them with the critics, write the report
    to ``--out`` and print its tables, the flags and what bounds them (:mod:`critic.workflows`)."""
    from ..report import write_report
    from ..workflows import criticise, read_sets

    reference, candidates, reads = read_sets(args.reference, named, input_options(args), log=say)
    panel = criticise(critics, reference, candidates, settings, seed=args.seed, reads=reads,
                      paths={name: read["path"] for name, read in reads.items()}, word_ppl=word_ppl, mauve=mauve,
                      progress=progress.enabled())
    written = write_report(panel, args.out, documents={"reference": reference, **candidates}, critics=critics,
                           extra={"critic_dirs": {label: str(path) for label, path in dirs.items()}})
    print(panel)
    print(f"\n{len(panel.flagged())} flagged document(s) ({panel.rule})")
    _say_power(panel)
    print(f"wrote {', '.join(str(p) for p in written.values())}")
    if args.track is not None:
        from ..tracking import track_report

        track_report(args.track, panel, command=args.command, report=args.out, settings=args.criticism,
                     critic_dirs=dirs, seed=args.seed)
    return 0


def add_candidate_option(p: argparse.ArgumentParser) -> None:
    """``--candidate NAME=FILE|DIR``, repeatable: the sets ``critic compare`` and ``critic report`` criticise."""
    p.add_argument("--candidate", action="append", type=named_file, default=[], metavar="NAME=FILE|DIR",
                   help="generations to criticise (an lm-eval --output_path folder: a set per samples file, "
                        "NAME/MODEL/TASK), repeatable")


def add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--reference", required=True, type=Path, help="real documents to compare with")
    add_candidate_option(p)
    p.add_argument("--out", required=True, type=Path, help="report folder (index.html, results.json, ...)")
    add_criticism_options(p, top=10)
    add_track_option(p)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_compare)


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--critic", action="append", required=True, metavar="[LABEL=]DIR",
                   help="a saved critic's folder, repeatable (label: the folder's name unless given)")
    p.add_argument("--reference", required=True, type=Path, help="real documents to compare with")
    add_candidate_option(p)
    p.add_argument("--out", required=True, type=Path, help="report folder (index.html, results.json, ...)")
    add_criticism_options(p)
    p.add_argument("--word-ppl", action="append", type=named_number, default=[], metavar="NAME=VALUE",
                   help="a candidate's word perplexity (from critic lm ppl), shown beside the critics; repeatable")
    p.add_argument("--mauve", action="store_true",
                   help="MAUVE of each candidate against the reference (offline MiniLM features; sets of at least "
                        "50 documents)")
    add_track_option(p)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_report)


def add_outliers(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--reference", required=True, type=Path, help="real documents that outliers are measured against")
    p.add_argument("--input", required=True, type=Path, help="documents to rank")
    add_criticism_options(p, keep=("top", "n_bootstrap", "outlier_score", "fdr", "flag_level"), top=10,
                          n_bootstrap=200)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_outliers)
