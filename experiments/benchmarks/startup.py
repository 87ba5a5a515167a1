"""Benchmark: what a user waits for before a command does anything, against ``import torch``.

    python -m experiments.benchmarks.startup [--repeat 5] [--json out.json]

Each command runs as a whole process, best and median of ``--repeat`` runs, beside ``python -c "import torch"``
timed the same way in the same rounds (each round runs every command once, in turn; the floor of any command
that scores): ``critic list``, ``critic fit --help``,
``critic fit lda --help``, ``critic report --help``, and two bad inputs (``critic score`` of a missing file,
``critic report --top 0``), each one line on stderr. Printed: the seconds and each command's ratio to ``import
torch``, best over best and the median over rounds of its time over ``import torch``'s in the same round (judged
against the targets: issue 39's, at most 0.35); a first round is not counted. Every process reads compiled bytecode,
as from an installed package (:func:`installed_env`). ``critic list`` and ``critic fit`` read the plugins' catalogue
(:mod:`critic.catalogue`); it is built once first, in a cache folder of this run, and that first (cold) call is
printed too.

``critic score``'s fixed cost (issue 40's target: at most 1.15x ``import torch``): a section critic is fitted once
in this run's folder (``critic fit sections`` on :data:`TRAIN_DOCUMENTS` man-page-like documents), then ``critic
score`` of :data:`SCORED_DOCUMENTS` documents is timed, whole process, output to stdout; a second row scores one
document with a title word the critic never saw (``HISTORY``), which reads simplemma's dictionary to lemmatise it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from critic.io import atomic_write_text

__all__ = ["main", "installed_env", "COMMANDS", "SCORE_COMMANDS", "TARGET", "SCORE_TARGET"]

CRITIC = [sys.executable, "-m", "critic.cli"]
TARGET = 0.35
"""Issue 39: a command that shows help or refuses bad input takes at most this share of ``import torch``."""
SCORE_TARGET = 1.15
"""Issue 40: ``critic score`` of a few documents with a fitted section critic takes at most this share of ``import
torch`` (the floor of a process that scores)."""
COMMANDS: dict[str, tuple[list[str], int]] = {
    "critic list": (["list"], 0),
    "critic fit --help": (["fit", "--help"], 0),
    "critic fit lda --help": (["fit", "lda", "--help"], 0),
    "critic report --help": (["report", "--help"], 0),
    "critic score MISSING": (["score", "critic-dir", "--input", "missing.jsonl"], 2),
    "critic report --top 0": (["report", "--critic", "c", "--reference", "r", "--out", "o", "--top", "0"], 2),
}
"""Name -> (arguments, the exit status expected)."""
SCORE_COMMANDS: dict[str, tuple[list[str], int]] = {
    "critic score": (["score", "sections", "--input", "few.jsonl"], 0),
    "critic score, new title word": (["score", "sections", "--input", "new-word.jsonl"], 0),
}
"""Name -> (arguments, the exit status expected), run in the folder where the section critic ``sections`` and the
inputs were written (:func:`_fit_sections`); timed against :data:`SCORE_TARGET`."""

TITLES = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "RETURN VALUE", "ERRORS", "ENVIRONMENT", "FILES",
          "EXAMPLES", "NOTES", "BUGS", "SEE ALSO")
"""The section titles of the documents the critic is fitted on and scores, in man-page order."""
TRAIN_DOCUMENTS = 24
SCORED_DOCUMENTS = 5


def _documents(prefix: str, n: int, *, extra: str | None = None) -> list[dict]:
    """``n`` man-page-like documents: NAME, SYNOPSIS, DESCRIPTION, then a varying run of the other titles (and
    ``extra``, a section title of its own, before the last)."""
    docs = []
    for i in range(n):
        rest = [t for k, t in enumerate(TITLES[3:]) if (i + k) % 3 != 0]
        titles = [*TITLES[:3], *rest[:-1], *([extra] if extra else []), *rest[-1:]]
        docs.append({"id": f"{prefix}{i}", "title": f"{prefix}{i}",
                     "sections": [{"title": t, "text": f"{t.lower()} of page {i}: some words here"} for t in titles]})
    return docs


def _fit_sections(folder: Path, env: dict) -> None:
    """Fit the section critic ``folder/sections`` once (fixed delta: no validation set) and write the inputs the
    :data:`SCORE_COMMANDS` score."""
    for name, docs in (("train.jsonl", _documents("train", TRAIN_DOCUMENTS)),
                       ("few.jsonl", _documents("doc", SCORED_DOCUMENTS)),
                       ("new-word.jsonl", _documents("new", 1, extra="HISTORY"))):
        atomic_write_text(folder / name, "".join(json.dumps(d) + "\n" for d in docs))
    seconds([*CRITIC, "fit", "sections", "--train", "train.jsonl", "--out", "sections", "--params",
             '{"delta": 0.1}'], status=0, env=env, cwd=folder)


def seconds(cmd: list[str], *, status: int, env: dict, cwd: Path) -> float:
    """Wall seconds of one run of ``cmd``; RuntimeError with its stderr when it exits otherwise than ``status``."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd)
    took = time.perf_counter() - start
    if done.returncode != status:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}, expected {status}:\n"
                           f"{done.stderr.decode('utf-8', 'replace')[-2000:]}")
    return took


def installed_env(folder: Path) -> dict:
    """The environment of the timed commands: a catalogue folder of their own, and Python's bytecode written and
    read as an installed package has it (``pip install`` compiles every module), in ``folder/bytecode``
    (``PYTHONPYCACHEPREFIX``) rather than beside the sources, whatever the calling shell says: a shell that sets
    ``PYTHONDONTWRITEBYTECODE`` (this machine's do) would have every command compile the tool's modules from
    source on each start, and ``import torch`` not (its bytecode came with its wheel)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "CRITIC_CATALOGUE": str(folder / "cache"), "PYTHONPYCACHEPREFIX": str(folder / "bytecode")}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command (best and median printed)")
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = installed_env(Path(tmp))
        seconds([*CRITIC, "list"], status=0, env={**env, "CRITIC_CATALOGUE": str(Path(tmp) / "warm-up")},
                cwd=Path(tmp))  # every plugin's bytecode written once, as an install writes it
        cold = seconds([*CRITIC, "list"], status=0, env=env, cwd=Path(tmp))
        _fit_sections(Path(tmp), env)
        commands = {"import torch": ([sys.executable, "-c", "import torch"], 0)} | {
            name: ([*CRITIC, *arguments], status) for name, (arguments, status) in (COMMANDS | SCORE_COMMANDS).items()}
        runs: dict[str, list[float]] = {name: [] for name in commands}
        for counted in [False] + [True] * args.repeat:  # in turn, round after round: a drift hits every row alike
            for name, (cmd, status) in commands.items():
                took = seconds(cmd, status=status, env=env, cwd=Path(tmp))
                if counted:
                    runs[name].append(took)
        targets = {name: TARGET for name in COMMANDS} | {name: SCORE_TARGET for name in SCORE_COMMANDS}
    floor, torch_runs = min(runs["import torch"]), runs["import torch"]
    rows = {name: {"best": min(times), "median": statistics.median(times), "ratio": min(times) / floor,
                   "round_ratio": statistics.median(t / f for t, f in zip(times, torch_runs)),
                   "target": targets.get(name)} for name, times in runs.items()}
    print(f"{'command':<30} {'best s':>8} {'median s':>9} {'best / best':>12} {'median of rounds':>17}")
    for name, row in rows.items():
        target = row["target"]
        mark = "" if target is None or row["round_ratio"] <= target else f"  (above {target})"
        print(f"{name:<30} {row['best']:8.3f} {row['median']:9.3f} {row['ratio']:12.2f} {row['round_ratio']:17.2f}"
              f"{mark}")
    print(f"critic list with no catalogue yet (the first call after an install or a change): {cold:.3f} s "
          f"({cold / floor:.2f}x import torch)")
    score = rows["critic score"]["round_ratio"]
    verdict = "within" if score <= SCORE_TARGET else "above"
    print(f"critic score of {SCORED_DOCUMENTS} documents with a fitted section critic: {score:.2f}x import torch, the "
          f"median over rounds of its time over import torch's in the same round ({verdict} issue 40's target of "
          f"{SCORE_TARGET}x)")
    out = {"rows": rows, "cold_list_seconds": cold, "target": TARGET, "score_target": SCORE_TARGET,
           "repeat": args.repeat}
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
