"""Benchmark: the HSMM critic's peak memory against the number of documents it scores and fits.

    python -m experiments.benchmarks.hsmm_memory [--documents 500 5000] [--root /usr/share/man]
                                                 [--params '{"epochs": 1}'] [--no-fit] [--keep DIR] [--json out.json]

The filtered man pages of ``experiments/manpages/sections.toml`` (train split) as perturbed copies
(:func:`~experiments.benchmarks.scale.perturbed_copies`: sections shuffled, one dropped or repeated, texts cut to
200 characters; about 130 whitespace tokens a document).  Every figure comes from ``critic`` commands run as
child processes, one torch thread, their peak resident memory read from ``wait4``
(:func:`~experiments.benchmarks.scale.run_measured`):

* **critic**: ``critic fit hsmm`` (``--params``, the critic's defaults otherwise: ``C = 16`` states, segments of
  up to ``K = 8`` tokens) on one copy of every page, so that every copy scored below has only tokens it has
  seen; validation on the first 100 pages; no calibration folds;
* **floor**: ``critic score`` of one document: the process with torch and the critic loaded;
* **score**: ``critic score`` of the first ``N`` copies for each ``--documents N``: seconds, documents/s and
  peak RSS, and the ratio of the largest size's peak to the smallest's (issue 40's target: at most 1.3);
* **identical numbers**: the documents both sizes score (the smallest size's, the same copies in the same order,
  in other batches and width groups) -- the largest relative difference of their ``T(x)`` and ``M(x)``;
* **fit** (unless ``--no-fit``): ``critic fit hsmm`` on the first ``N`` copies for each ``N`` (same
  validation): seconds and peak RSS, and the same ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from critic.io import atomic_write_text

from .corpus import filtered_manpages
from .scale import perturbed_copies, run_measured, work_folder, write_documents

__all__ = ["main", "max_relative_difference"]

CRITIC = [sys.executable, "-m", "critic.cli"]
VALIDATION_PAGES = 100


def _measured(cmd: Sequence[str]) -> tuple[float, int]:
    """:func:`~experiments.benchmarks.scale.run_measured` of ``cmd`` with this checkout first on its path."""
    return run_measured(cmd, env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path.cwd()),
                                                                            os.environ.get("PYTHONPATH", "")])))


def _fit(train: Path, valid: Path, out: Path, params: str) -> tuple[float, int]:
    return _measured([*CRITIC, "fit", "hsmm", "--train", str(train), "--valid", str(valid), "--out", str(out),
                         "--params", params, "--calibration-folds", "0", "--threads", "1"])


def _score(critic_dir: Path, source: Path, out: Path) -> tuple[float, int]:
    out.unlink(missing_ok=True)
    out.with_name(out.name + ".progress.json").unlink(missing_ok=True)
    return _measured([*CRITIC, "score", str(critic_dir), "--input", str(source), "--out", str(out),
                         "--threads", "1"])


def _rows(path: Path) -> dict[str, dict]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {row["id"]: row for row in rows}


def max_relative_difference(a: dict[str, dict], b: dict[str, dict]) -> float:
    """Largest ``|x - y| / |x|`` over the ``latent_nll`` and ``latent_steps`` of the documents scored in both
    ``a`` and ``b`` (rows by id); ValueError when a document is scored in one and skipped in the other."""
    worst = 0.0
    for doc_id in a.keys() & b.keys():
        x, y = a[doc_id], b[doc_id]
        if ("latent_nll" in x) != ("latent_nll" in y):
            raise ValueError(f"{doc_id!r} is scored in one output and skipped in the other")
        for key in ("latent_nll", "latent_steps") if "latent_nll" in x else ():
            worst = max(worst, abs(x[key] - y[key]) / abs(x[key]))
    return worst


def _ratio(runs: list[dict]) -> float:
    return runs[-1]["peak_rss"] / runs[0]["peak_rss"]


def measure(args, tmp: Path) -> dict:
    pages = filtered_manpages(args.root)["train"]
    train, valid = tmp / "pages.jsonl", tmp / "valid.jsonl"
    write_documents(perturbed_copies(pages, len(pages), seed=0, strength=0.0), train)
    write_documents(perturbed_copies(pages[:VALIDATION_PAGES], VALIDATION_PAGES, seed=0, strength=0.0), valid)
    sizes = sorted(args.documents)
    sources = {n: tmp / f"documents-{n}.jsonl" for n in [1, *sizes]}
    for n, path in sources.items():
        write_documents(perturbed_copies(pages, n, seed=0), path)
    tokens = [len(doc.text.split()) for doc in perturbed_copies(pages, sizes[-1], seed=0)]
    critic_dir = tmp / "critic"
    seconds, rss = _fit(train, valid, critic_dir, args.params)
    result = {"pages": len(pages), "params": json.loads(args.params), "mean_tokens": sum(tokens) / len(tokens),
              "max_tokens": max(tokens), "critic_fit": {"documents": len(pages), "seconds": seconds, "peak_rss": rss},
              "floor": {"peak_rss": _score(critic_dir, sources[1], tmp / "scores-1.jsonl")[1]}, "score": []}
    for n in sizes:
        seconds, rss = _score(critic_dir, sources[n], tmp / f"scores-{n}.jsonl")
        result["score"].append({"documents": n, "seconds": seconds, "docs_per_s": n / seconds, "peak_rss": rss})
    result["score_ratio"] = _ratio(result["score"])
    smallest, largest = (_rows(tmp / f"scores-{n}.jsonl") for n in (sizes[0], sizes[-1]))
    result["scored"] = {n: sum("latent_nll" in row for row in _rows(tmp / f"scores-{n}.jsonl").values())
                        for n in sizes}
    result["max_relative_difference"] = max_relative_difference(smallest, largest)
    if args.fit:
        result["fit"] = []
        for n in sizes:
            seconds, rss = _fit(sources[n], valid, tmp / f"critic-{n}", args.params)
            result["fit"].append({"documents": n, "seconds": seconds, "peak_rss": rss})
        result["fit_ratio"] = _ratio(result["fit"])
    return result


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def report(result: dict) -> None:
    first, last = result["score"][0], result["score"][-1]
    print(f"HSMM critic ({result['params'] or 'default settings'}) on {result['pages']} filtered man pages as "
          f"perturbed copies ({result['mean_tokens']:.0f} tokens a document on average, at most "
          f"{result['max_tokens']}); one thread; peak RSS of the child process")
    fit = result["critic_fit"]
    print(f"  critic fit hsmm   {fit['documents']:>7,} documents  {fit['seconds']:7.1f} s  peak RSS {_mb(fit['peak_rss'])}")
    print(f"  critic score            1 document                    peak RSS {_mb(result['floor']['peak_rss'])} "
          f"(the floor)")
    for run in result["score"]:
        print(f"  critic score      {run['documents']:>7,} documents  {run['seconds']:7.1f} s  "
              f"{run['docs_per_s']:6.0f} docs/s  peak RSS {_mb(run['peak_rss'])}  "
              f"({result['scored'][run['documents']]:,} scored)")
    print(f"  score: peak RSS at {last['documents']:,} / at {first['documents']:,} documents: "
          f"{result['score_ratio']:.2f}x (target <= 1.3x)")
    print(f"  the {first['documents']:,} documents both score: T(x) and M(x) differ by at most "
          f"{result['max_relative_difference']:.1e} relative")
    for run in result.get("fit", []):
        print(f"  critic fit hsmm   {run['documents']:>7,} documents  {run['seconds']:7.1f} s  "
              f"peak RSS {_mb(run['peak_rss'])}")
    if "fit" in result:
        print(f"  fit: peak RSS at {last['documents']:,} / at {first['documents']:,} documents: "
              f"{result['fit_ratio']:.2f}x (target <= 1.3x)")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, nargs="+", default=[500, 5000], help="sizes scored (and fitted)")
    ap.add_argument("--root", default="/usr/share/man", help="man page root")
    ap.add_argument("--params", default='{"epochs": 1}', help="critic settings (JSON) of every fit")
    ap.add_argument("--no-fit", dest="fit", action="store_false", help="measure scoring only")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    with work_folder(args.keep) as tmp:
        result = measure(args, tmp)
    report(result)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
