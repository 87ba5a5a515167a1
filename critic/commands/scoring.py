"""``critic score`` and ``critic merge``: per-document scores streamed in chunks, here, in shards or on Dask."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from .. import progress
from ..cli_args import add_input_arguments, common_options, input_options, positive_int
from ..terminal import get_logger

__all__ = ["cmd_score", "cmd_merge", "add_score", "add_merge"]

_log = get_logger(__name__)


def cmd_score(args) -> int:
    from ..inputs import ReadReport, iter_documents, line_input
    from ..streaming import parse_shard, score_stream, scored_chunks

    if args.workers or args.scheduler:  # the workers load it: this process plans chunks without torch
        from ..saved import SavedCritic

        critic = SavedCritic.read(args.critic_dir)
    else:
        from ..critic import Critic

        critic = Critic.load(args.critic_dir, device=args.device)
    shard = parse_shard(args.shard) if args.shard else (1, 1)
    if shard != (1, 1) and not args.out:
        raise ValueError("--shard writes a part for critic merge: give --out FILE")
    if (args.workers or args.scheduler) and not args.out:
        raise ValueError("--workers / --scheduler write chunks as they finish: give --out FILE")
    options = input_options(args)
    lines = line_input(args.input, options)  # read in spans of lines by whoever scores them
    read = lines.report() if lines else ReadReport(skipped_documents=[])  # each skipped generation gets a row
    docs = lines or iter_documents(args.input, options, report=read)
    if args.out:
        with _dask_client(args) as client:
            scorer = None
            if client is not None:
                from ..distributed import dask_scorer

                scorer = dask_scorer(client, args.critic_dir, critic, seed=args.seed, device=args.device,
                                     lines=lines)
            state = score_stream(critic, docs, args.out, source=args.input, seed=args.seed,
                                 batches_per_chunk=args.chunk_batches, shard=shard, progress=progress.enabled(), scorer=scorer,
                                 report=read)
        scored = sum(chunk["documents"] for chunk in state["chunks"])
        _log.info("scored %d of %d chunks (%d documents) into %s%s", len(state["chunks"]), state["chunks_total"],
                  scored, args.out, f" (shard {shard[0]}/{shard[1]}: critic merge puts the parts together)"
                  if shard != (1, 1) else "")
    else:
        for _, output in scored_chunks(critic, docs, seed=args.seed, batches_per_chunk=args.chunk_batches,
                                       report=read):
            sys.stdout.write(output.data.decode("utf-8"))
            sys.stdout.flush()
    if read.worth_saying():
        _log.info("%s", read.summary())
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
    from ..distributed import SCHEDULER_SECONDS, check_scheduler, check_workers, local_cluster

    if args.scheduler:
        check_scheduler(args.scheduler)
        with Client(args.scheduler, timeout=f"{SCHEDULER_SECONDS:g}s") as client:
            yield client
        return

    check_workers(args.workers)
    with local_cluster(args.workers) as cluster, Client(cluster) as client:
        yield client


def cmd_merge(args) -> int:
    from ..streaming import merge_shards

    done = merge_shards(args.parts, args.out)
    print(f"merged {done['chunks']} chunks from {done['parts']} shards into {args.out}")
    return 0


def add_score(p: argparse.ArgumentParser) -> None:
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


def add_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("parts", nargs="+", type=Path, help="the shards' output files")
    p.add_argument("--out", required=True, type=Path, help="JSONL file to write (the serial run's bytes)")
    p.set_defaults(func=cmd_merge)
