"""Benchmark: scoring at scale -- one process, Dask workers, and the statistics at a million documents.

    python -m experiments.benchmarks.scale [--documents 1000000] [--small 100000] [--workers 2] [--rounds 3]
                                           [--root /usr/share/man] [--coref-documents 2000] [--quick]
                                           [--keep DIR] [--json out.json]

Every figure comes from ``critic`` commands run as child processes (their peak resident memory read from
``wait4``: the largest of the process and the children it waited for, Dask's worker processes included):

* **section critic, streamed**: ``critic score`` of ``--small`` and ``--documents`` man pages (the filtered
  train split of ``experiments/manpages/sections.toml`` repeated; each copy perturbed by a seeded draw:
  sections shuffled, one dropped or one repeated; section texts cut to 200 characters, which the section
  critic does not read), serially and with ``--workers N`` on an embedded Dask cluster, the large run ``--rounds``
  times in turn (serial, then Dask): documents/s and peak RSS of each side's median run, the median over rounds of
  serial seconds over Dask seconds, whether the Dask output is the serial bytes, and the Dask client's own CPU
  seconds per chunk (it only finds the input's newlines, sends each worker a span and writes the rows back), against
  a chunk's scoring time in one process: the number of workers one client keeps busy on a cluster;
* **comparison statistics at --documents vs --documents**: the bootstrap CIs of both sets and the
  comparison (:func:`critic.criticism.compare`: two permutation tests and two difference CIs, 2,000
  permutations and 1,000 resamples) on the scored rows of the serial run against a second, more perturbed
  set: seconds and peak RSS of that process;
* **coreference critic**: ``critic score`` of ``--coref-documents`` English Wikipedia people summaries
  (all but the 200 it is fitted on, when there are fewer) with neuralcoref resolution, in one process (whose
  resolver runs a neuralcoref worker per core) and with ``--workers N`` (one neuralcoref worker each)
  (skipped, saying why, when the neuralcoref venv is not set up).

``--quick``: 20,000 / 5,000 documents and 100 summaries, for a check that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

from critic.document import Document
from critic.io import atomic_open, atomic_write_text, sha256_file

from .corpus import filtered_manpages

__all__ = ["main", "perturbed_copies", "run_measured", "work_folder"]

CRITIC = [sys.executable, "-m", "critic.cli"]


def perturbed_copies(pages: Sequence[Document], n: int, *, seed: int, strength: float = 0.3) -> Iterator[Document]:
    """``n`` documents cycling through ``pages``, copy ``r`` of page ``id`` named ``id#r``; each copy's sections
    shuffled, one dropped or one repeated, each with probability ``strength`` (seeded), texts cut to 200
    characters."""
    rng = random.Random(seed)
    for i in range(n):
        page = pages[i % len(pages)]
        sections = [s.__class__(s.title, s.text[:200]) for s in page.sections]
        if rng.random() < strength:
            rng.shuffle(sections)
        if rng.random() < strength and len(sections) > 1:
            del sections[rng.randrange(len(sections))]
        if rng.random() < strength:
            k = rng.randrange(len(sections))
            sections.insert(k, sections[k])
        yield page.replace_sections(tuple(sections), id=f"{page.id}#{i // len(pages)}")


def write_documents(docs: Iterator[Document], path: Path) -> int:
    """Stream documents to a JSONL file (atomically); returns how many."""
    count = 0
    with atomic_open(path) as fh:
        for doc in docs:
            fh.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")
            count += 1
    return count


@contextlib.contextmanager
def work_folder(keep: Path | None) -> Iterator[Path]:
    """Where a benchmark writes its inputs and outputs: ``keep`` (made if absent, kept after), else a temporary
    folder removed after."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder


def run_measured(cmd: Sequence[str], *, env: dict | None = None, stderr: bool = False) -> tuple:
    """Run ``cmd``; its wall seconds and peak RSS in bytes (the largest of it and its waited-for children), and its
    stderr when ``stderr``.  RuntimeError with its stderr when it fails."""
    with tempfile.TemporaryFile() as written:  # a file, not a pipe: a chatty child never blocks on a full pipe
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=written, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        written.seek(0)
        err = written.read().decode("utf-8", "replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return (seconds, usage.ru_maxrss * 1024) + ((err,) if stderr else ())


CLIENT = [sys.executable, "-c", "import resource, sys; from critic.cli import main; code = main(sys.argv[1:]); "
          "usage = resource.getrusage(resource.RUSAGE_SELF); "
          "print(f'client CPU {usage.ru_utime + usage.ru_stime}', file=sys.stderr); sys.exit(code)"]
"""``critic`` that says on its last line of stderr the CPU seconds of its own process (its threads, not the
worker processes it starts)."""


def command_env(tmp: Path) -> dict:
    """The environment of the measured commands: this checkout importable, and a catalogue of their own in ``tmp``,
    built once before any is timed (as the first command after an install builds it; :mod:`critic.catalogue`)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
               CRITIC_CATALOGUE=str(tmp / "catalogue"))
    subprocess.run([*CRITIC, "list"], env=env, stdout=subprocess.DEVNULL, check=True)
    return env


def _score(critic_dir: Path, source: Path, out: Path, env: dict, workers: int = 0) -> dict:
    """``critic score`` of ``source`` into ``out`` (here, or on ``workers`` Dask workers), run with ``env``: its
    wall seconds, peak RSS, the client's own CPU seconds and the chunks it wrote."""
    out.unlink(missing_ok=True)
    out.with_name(out.name + ".progress.json").unlink(missing_ok=True)
    extra = ["--workers", str(workers)] if workers else []
    seconds, rss, err = run_measured([*CLIENT, "score", str(critic_dir), "--input", str(source), "--out", str(out),
                                      "--threads", "1", *extra], env=env, stderr=True)
    cpu = float(err.strip().splitlines()[-1].removeprefix("client CPU "))
    chunks = json.loads(out.with_name(out.name + ".progress.json").read_text())["chunks_total"]
    return {"seconds": seconds, "peak_rss": rss, "client_cpu": cpu, "chunks": chunks}


def statistics_child(reference: str, candidate: str) -> None:
    """In a child process: the set CIs and the comparison of two scored outputs; prints its seconds as JSON."""
    import numpy as np

    from critic import stats
    from critic.critic import Scores
    from critic.criticism import compare

    def rows(path: str) -> Scores:
        t, m = [], []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                if "latent_nll" in row:
                    t.append(row["latent_nll"])
                    m.append(row["latent_steps"])
        return Scores([""] * len(t), np.array(t), np.array(m))

    ref, cand = rows(reference), rows(candidate)
    start = time.perf_counter()
    for scores in (ref, cand):
        stats.bootstrap_cis(stats.document_rows(scores.latent_nll, scores.latent_steps),
                            [stats.MEAN, stats.LATENT_PPL], n_resamples=1000, seed=0)
    mean_cmp, ppl_cmp = compare(ref, cand, n_bootstrap=1000, n_permutations=2000, level=0.95, seed=0)
    print(json.dumps({"seconds": time.perf_counter() - start, "n": [ref.n, cand.n],
                      "ppl_difference": ppl_cmp.difference, "ppl_p_value": ppl_cmp.p_value}))


def _sections(args, tmp: Path) -> dict:
    from critics.sections import SectionTransitionCritic

    train = filtered_manpages(args.root)["train"]
    critic_dir = tmp / "sections-critic"
    SectionTransitionCritic(delta=0.1).fit(train).save(critic_dir)
    result = {"pages": len(train)}
    inputs = {}
    for label, n, seed, strength in (("small", args.small, 0, 0.3), ("large", args.documents, 0, 0.3),
                                     ("candidate", args.documents, 1, 0.6)):
        inputs[label] = tmp / f"{label}.jsonl"
        write_documents(perturbed_copies(train, n, seed=seed, strength=strength), inputs[label])
    env = command_env(tmp)
    run = _score(critic_dir, inputs["small"], tmp / "small.serial.jsonl", env)
    result["serial_small"] = {"documents": args.small, "docs_per_s": args.small / run["seconds"], **run}
    rounds = []
    for _ in range(args.rounds):  # in turn: a drift of the machine's speed hits both
        serial = _score(critic_dir, inputs["large"], tmp / "large.serial.jsonl", env)
        dask = _score(critic_dir, inputs["large"], tmp / "large.dask.jsonl", env, workers=args.workers)
        dask["identical"] = sha256_file(tmp / "large.dask.jsonl") == sha256_file(tmp / "large.serial.jsonl")
        rounds.append((serial, dask))
    serial, dask = (median_run([r[k] for r in rounds]) for k in (0, 1))
    result["serial_large"] = {"documents": args.documents, "docs_per_s": args.documents / serial["seconds"], **serial}
    result["dask_large"] = {"documents": args.documents, "workers": args.workers,
                            "docs_per_s": args.documents / dask["seconds"], **dask,
                            "identical": all(r[1]["identical"] for r in rounds),
                            "round_ratios": [r[0]["seconds"] / r[1]["seconds"] for r in rounds],
                            "ratio": statistics.median(r[0]["seconds"] / r[1]["seconds"] for r in rounds)}
    _score(critic_dir, inputs["candidate"], tmp / "candidate.serial.jsonl", env)
    out = tmp / "statistics.json"
    with open(out, "w") as fh:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "experiments.benchmarks.scale", "--statistics",
                                 str(tmp / "large.serial.jsonl"), str(tmp / "candidate.serial.jsonl")], stdout=fh)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the statistics child failed")
    result["statistics"] = {**json.loads(out.read_text()), "process_seconds": time.perf_counter() - start,
                            "peak_rss": usage.ru_maxrss * 1024}
    return result


def _coref(args, tmp: Path) -> dict:
    from critic.corpora.wikisummaries import load_wiki_summaries
    from critics.coref import CorefChainCritic
    from critics.coref.neuralcoref import NeuralcorefNotInstalled, default_venv

    if args.coref_documents == 0:
        return {"skipped": "--coref-documents 0"}
    if not default_venv().exists():
        return {"skipped": f"no neuralcoref venv at {default_venv()} (critic setup neuralcoref)"}
    try:
        docs = load_wiki_summaries(language="en", topic="People", install=False)
    except (OSError, ValueError) as err:
        return {"skipped": f"no Wikipedia summaries wheel in the cache ({err}): critic data build wiki-summaries"}
    train, scored = docs[:200], docs[200:200 + args.coref_documents]
    critic_dir = tmp / "coref-critic"
    try:
        CorefChainCritic().fit(train).save(critic_dir)
    except NeuralcorefNotInstalled as err:
        return {"skipped": str(err)}
    source = tmp / "summaries.jsonl"
    write_documents(iter(scored), source)
    env = command_env(tmp)
    result = {"documents": len(scored)}
    for label, workers in (("serial", 0), ("dask", args.workers)):
        run = _score(critic_dir, source, tmp / f"coref.{label}.jsonl", env, workers=workers)
        result[label] = {"docs_per_s": len(scored) / run["seconds"], **run}
    result["identical"] = sha256_file(tmp / "coref.serial.jsonl") == sha256_file(tmp / "coref.dask.jsonl")
    return result


def median_run(runs: Sequence[dict]) -> dict:
    """The run of median wall seconds (the upper of the two middle ones for an even count)."""
    return sorted(runs, key=lambda run: run["seconds"])[len(runs) // 2]


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def report(result: dict) -> None:
    s = result["sections"]
    print(f"section critic, man pages ({s['pages']} filtered train pages, perturbed copies), critic score:")
    for key in ("serial_small", "serial_large"):
        r = s[key]
        print(f"  serial      {r['documents']:>9,} documents  {r['seconds']:8.1f} s  {r['docs_per_s']:>9,.0f} docs/s  "
              f"peak RSS {_mb(r['peak_rss'])}")
    d, serial = s["dask_large"], s["serial_large"]
    print(f"  {d['workers']} workers   {d['documents']:>9,} documents  {d['seconds']:8.1f} s  {d['docs_per_s']:>9,.0f} "
          f"docs/s  peak RSS {_mb(d['peak_rss'])} (any process)  output identical: {d['identical']}")
    print(f"  {d['workers']} workers against one process, serial seconds over Dask seconds in the same round: median "
          f"{d['ratio']:.2f}x over {len(d['round_ratios'])} rounds "
          f"({', '.join(f'{r:.2f}' for r in d['round_ratios'])}; the rows above: each side's median run)")
    per_chunk = d["client_cpu"] / d["chunks"]
    print(f"  the Dask client's own CPU: {d['client_cpu']:.1f} s for {d['chunks']:,} chunks ({per_chunk * 1000:.0f} ms a "
          f"chunk, start-up included); one process scores a chunk in {serial['seconds'] / serial['chunks']:.2f} s, so "
          f"one client keeps about {serial['seconds'] / serial['chunks'] / per_chunk:.0f} workers busy")
    st = s["statistics"]
    print(f"  statistics {st['n'][0]:,} vs {st['n'][1]:,} documents (2 set CIs + comparison; 1,000 resamples, "
          f"2,000 permutations): {st['seconds']:.1f} s, peak RSS {_mb(st['peak_rss'])}; "
          f"Δ Latent PPL {st['ppl_difference']:+.4f}, p = {st['ppl_p_value']:.4f}")
    c = result["coref"]
    if "skipped" in c:
        print(f"coreference critic: skipped ({c['skipped']})")
        return
    print(f"coreference critic, {c['documents']:,} Wikipedia people summaries with neuralcoref resolution: "
          f"one process (its resolver: a neuralcoref worker per core) {c['serial']['docs_per_s']:.1f} docs/s, "
          f"{result['workers']} Dask workers (one neuralcoref worker each) {c['dask']['docs_per_s']:.1f} "
          f"docs/s (ratio {c['dask']['docs_per_s'] / c['serial']['docs_per_s']:.2f}x), output identical: "
          f"{c['identical']}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=1_000_000, help="documents of the large run")
    ap.add_argument("--small", type=int, default=100_000, help="documents of the small run (memory must be flat)")
    ap.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the large run, serial then Dask, for their ratio")
    ap.add_argument("--root", default="/usr/share/man", help="man page root")
    ap.add_argument("--coref-documents", type=int, default=2000, help="people summaries scored by the coref critic (0: none)")
    ap.add_argument("--quick", action="store_true", help="20,000 / 5,000 documents, 100 summaries")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--statistics", nargs=2, metavar=("REFERENCE", "CANDIDATE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.statistics:
        statistics_child(*args.statistics)
        return {}
    if args.quick:
        args.documents, args.small, args.coref_documents = 20_000, 5_000, 100
    with work_folder(args.keep) as tmp:
        result = {"workers": args.workers, "sections": _sections(args, tmp), "coref": _coref(args, tmp)}
    report(result)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
