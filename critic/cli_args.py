"""Options and argument types that every command line of the package shares (``critic``, ``critic lm``, the
metrics' commands): argparse types that name what they expected, and the option groups of computing commands."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["positive_int", "probability", "named_number", "named_file", "common_options", "resampling_options",
           "outlier_options"]


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def probability(text: str) -> float:
    """A number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {value}")
    return value


def named_number(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` with a positive, finite value."""
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not name or not (number > 0 and number < float("inf")):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with a positive number, got {text!r}")
    return name, number


def named_file(text: str) -> tuple[str, Path]:
    """``NAME=FILE``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return name, Path(path)


def common_options(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--device`` and ``--threads``: every command that computes."""
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (default 0); a critic fitted here takes it as its own seed setting")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda[:N]; never a silent fallback")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads of this process (default 1: the same bytes on any machine, and 3.7-4x faster "
                        "than one per core beside another job; more can help on an idle many-core machine; Dask "
                        "workers use 1; a study's own threads setting applies to its stages); recorded in "
                        "results.json")


def resampling_options(p: argparse.ArgumentParser) -> None:
    """``--n-bootstrap`` and ``--n-permutations``: every command that compares sets."""
    p.add_argument("--n-bootstrap", type=positive_int, default=1000,
                   help="bootstrap resamples of the CIs (default 1000)")
    p.add_argument("--n-permutations", type=positive_int, default=2000,
                   help="permutations of the two-sample tests (default 2000; exact when the two sets have no more "
                        "splits)")
    outlier_options(p)


def outlier_options(p: argparse.ArgumentParser) -> None:
    """``--outlier-score``: every command that ranks documents."""
    p.add_argument("--outlier-score", choices=("length", "plain"), default="length",
                   help="what a document's outlier p-value compares it with: reference documents of similar "
                        "length (default; a document is not flagged for being short or long) or the whole "
                        "reference set (plain, kept beside it in documents.jsonl)")
