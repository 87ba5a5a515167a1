"""Benchmark: what a user waits for before a command does anything, against ``import torch``.

    python -m experiments.benchmarks.startup [--repeat 5] [--json out.json]

Each command runs as a whole process, best and median of ``--repeat`` runs, beside ``python -c "import torch"``
timed the same way in the same run (the floor of any command that scores): ``critic list``, ``critic fit --help``,
``critic fit lda --help``, ``critic report --help``, and two bad inputs (``critic score`` of a missing file,
``critic report --top 0``), each one line on stderr.  Printed: the seconds and each command's ratio to ``import
torch`` (issue 39's target: at most 0.35).  ``critic list`` and ``critic fit`` read the plugins' catalogue
(:mod:`critic.catalogue`); it is built once first, in a cache folder of this run, and that first (cold) call is
printed too.
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

__all__ = ["main", "COMMANDS", "TARGET"]

CRITIC = [sys.executable, "-m", "critic.cli"]
TARGET = 0.35
"""Issue 39: a command that shows help or refuses bad input takes at most this share of ``import torch``."""
COMMANDS: dict[str, tuple[list[str], int]] = {
    "critic list": (["list"], 0),
    "critic fit --help": (["fit", "--help"], 0),
    "critic fit lda --help": (["fit", "lda", "--help"], 0),
    "critic report --help": (["report", "--help"], 0),
    "critic score MISSING": (["score", "critic-dir", "--input", "missing.jsonl"], 2),
    "critic report --top 0": (["report", "--critic", "c", "--reference", "r", "--out", "o", "--top", "0"], 2),
}
"""Name -> (arguments, the exit status expected)."""


def seconds(cmd: list[str], *, status: int, env: dict, cwd: Path) -> float:
    """Wall seconds of one run of ``cmd``; RuntimeError with its stderr when it exits otherwise than ``status``."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd)
    took = time.perf_counter() - start
    if done.returncode != status:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}, expected {status}:\n"
                           f"{done.stderr.decode('utf-8', 'replace')[-2000:]}")
    return took


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command (best and median printed)")
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CRITIC_CATALOGUE": str(Path(tmp) / "cache")}
        cold = seconds([*CRITIC, "list"], status=0, env=env, cwd=Path(tmp))
        runs = {"import torch": [seconds([sys.executable, "-c", "import torch"], status=0, env=env, cwd=Path(tmp))
                                 for _ in range(args.repeat)]}
        for name, (arguments, status) in COMMANDS.items():
            runs[name] = [seconds([*CRITIC, *arguments], status=status, env=env, cwd=Path(tmp))
                          for _ in range(args.repeat)]
    floor = min(runs["import torch"])
    rows = {name: {"best": min(times), "median": statistics.median(times), "ratio": min(times) / floor}
            for name, times in runs.items()}
    print(f"{'command':<24} {'best s':>8} {'median s':>9} {'/ import torch':>15}")
    for name, row in rows.items():
        mark = "" if name == "import torch" or row["ratio"] <= TARGET else f"  (above {TARGET})"
        print(f"{name:<24} {row['best']:8.3f} {row['median']:9.3f} {row['ratio']:15.2f}{mark}")
    print(f"critic list with no catalogue yet (the first call after an install or a change): {cold:.3f} s "
          f"({cold / floor:.2f}x import torch)")
    out = {"rows": rows, "cold_list_seconds": cold, "target": TARGET, "repeat": args.repeat}
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
