"""``critic compare``, ``critic outliers`` and ``critic report``: sets criticised against a reference, flags and
reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from ..cli_args import (add_input_arguments, common_options, flag_rule, named_file, named_number, outlier_options,
                        positive_int, read_with_args, resampling_options, set_name)
from ..io import check_replaceable
from ..terminal import path_text

__all__ = ["cmd_compare", "cmd_outliers", "cmd_report", "add_compare", "add_report", "add_outliers"]


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
    from ..criticism import criticize, require_comparable_shapes
    from ..panel import PanelResult, explain_outliers
    from ..report import write_report

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
    from ..critic import Critic, describe_skips
    from ..criticism import criticize, require_comparable_shapes
    from ..panel import PanelResult, explain_outliers
    from ..report import outliers_table

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
            line = f"{path}: {describe_skips(result.set(name).skipped)}"  # printed through printable_streams
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
    from ..critic import Critic
    from ..criticism import require_comparable_shapes
    from ..panel import add_set_statistics, criticize_panel
    from ..report import write_panel_report

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


def add_compare(p: argparse.ArgumentParser) -> None:
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


def add_report(p: argparse.ArgumentParser) -> None:
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


def add_outliers(p: argparse.ArgumentParser) -> None:
    p.add_argument("critic_dir", type=Path, help="a fitted critic's folder (critic fit --out)")
    p.add_argument("--reference", required=True, type=Path, help="real documents that outliers are measured against")
    p.add_argument("--input", required=True, type=Path, help="documents to rank")
    p.add_argument("--top", type=positive_int, default=10, help="documents listed (default 10)")
    p.add_argument("--n-bootstrap", type=positive_int, default=200, help="bootstrap resamples of the CIs (default 200)")
    outlier_options(p)
    common_options(p)
    add_input_arguments(p, reference=True)
    p.set_defaults(func=cmd_outliers)
