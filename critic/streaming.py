"""Scoring that streams: documents read, projected and written in chunks, resumable, shardable.

``critic score`` on a million generations must neither hold them in memory nor lose finished work when
it is stopped.  :func:`score_stream` reads documents lazily (:func:`critic.inputs.iter_documents`), cuts
them into **chunks of whole batches** -- a chunk closes when ``batches_per_chunk * batch_size`` of its
documents pass :meth:`Critic.check` (about :data:`CHUNK_DOCUMENTS` by default) -- and scores each with
:meth:`Critic.score` starting at its global batch index, so every Monte Carlo seed is the one an
uninterrupted single call would use.  Each chunk's rows are appended to the output JSONL and fsynced,
then a small progress file beside it (``OUT.progress.json``, written atomically) records the chunk's byte
range, its SHA-256 and where the input stands.  A second run writing the same output stops at once
(:func:`critic.io.output_lock`).

- **Resume**: a rerun with the same settings truncates the output to the last recorded chunk (a chunk
  half-appended when the process died is dropped), skips the input already consumed and goes on; the
  finished file is byte-identical to an uninterrupted run's.  Other settings (critic, the input's content by
  SHA-256, seed, chunk size, shard) are refused with what differs, and a file at ``out`` that is not a
  streamed output (no progress file) is never overwritten.
- **Shards**: ``shard=(i, n)`` scores only the chunks ``c`` with ``c % n == i - 1`` (every shard reads the
  input to cut the same chunks), under any launcher (a Slurm array, ``accelerate launch``, a loop);
  :func:`merge_shards` puts the shards' chunks back in order: the same bytes as one serial run, after checking
  each part's length and each chunk's SHA-256 against its progress file (a truncated or damaged part is named,
  with the chunk).

Rows are those of ``critic score``: ``{"id", "latent_nll", "latent_steps", "latent_nll_per_step",
"unknown"[, "latent_nll_stderr", "estimator"]}`` for a scored document, ``{"id", "skipped"}`` for one that
could not be (in the order :meth:`Critic.score` gives: scored first, then skipped, per chunk), and for each
generation the reader skipped (an empty text) where it was read, ``{"id", "skipped", "read": false}``, after
its chunk's rows (``read_skips``: the reader's :attr:`~critic.inputs.ReadReport.skipped_documents`).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from .critic import Critic, Scores
from .document import Document, DocumentError
from .io import atomic_open, atomic_write_text, output_lock, sha256_bytes, sha256_file
from .terminal import json_line

__all__ = ["CHUNK_DOCUMENTS", "Chunk", "Scorer", "chunk_batches", "plan_chunks", "score_chunk", "score_rows",
           "scored_chunks", "score_stream", "skipped_rows", "merge_shards", "progress_path", "parse_shard"]

CHUNK_DOCUMENTS = Critic.chunk_documents
"""About how many checked documents a chunk holds by default (the unit that is written, resumed and sharded):
whole batches, at least one; :func:`chunk_batches` turns a critic's ``chunk_documents`` into batches."""


def chunk_batches(critic: Critic, batches: int | None = None) -> int:
    """``batches`` when given, else the whole batches that make about the critic's ``chunk_documents``
    (:data:`CHUNK_DOCUMENTS` unless a slow critic asks for fewer)."""
    return batches if batches is not None else max(1, critic.chunk_documents // critic.batch_size)


def progress_path(out: str | Path) -> Path:
    """The progress file beside a streamed output."""
    out = Path(out)
    return out.with_name(out.name + ".progress.json")


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (1 <= i <= n) as ``(i, n)``; ValueError naming the option otherwise."""
    i, sep, n = text.partition("/")
    try:
        shard = (int(i), int(n))
    except ValueError:
        shard = (0, 0)
    if not sep or not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 2/4")
    return shard


def score_rows(scores: Scores) -> list[dict[str, Any]]:
    """The output rows of one :class:`Scores`: scored documents, then skipped ones."""
    stderr = scores.latent_nll_stderr
    rows = [{"id": doc_id, "latent_nll": float(t), "latent_steps": float(m), "latent_nll_per_step": float(t / m),
             "unknown": scores.unknown.get(doc_id, 0),
             **({} if stderr is None else {"latent_nll_stderr": float(stderr[i]), "estimator": scores.estimator})}
            for i, (doc_id, t, m) in enumerate(zip(scores.doc_ids, scores.latent_nll, scores.latent_steps))]
    return rows + [{"id": doc_id, "skipped": reason} for doc_id, reason in scores.skipped.items()]


def skipped_rows(skipped: Sequence[tuple[str, str]]) -> bytes:
    """The output rows of generations the reader skipped, ``(id, reason)`` each, as UTF-8 JSON lines."""
    return "".join(json_line({"id": doc_id, "skipped": reason, "read": False})
                   for doc_id, reason in skipped).encode("utf-8")


def _chunks(critic: Critic, docs: Iterable[Document], kept_per_chunk: int,
            read_skips: list[tuple[str, str]] | None = None
            ) -> Iterator[tuple[int, list[Document], list[tuple[str, str]], int]]:
    """``(records read so far, chunk, the generations the reader skipped in it, how many of it pass the check)``:
    consecutive documents, each chunk closing when ``kept_per_chunk`` of them pass :meth:`Critic.check` (the
    last one may hold fewer, or only skipped generations).  ``read_skips``: the reader's list of skipped
    generations, emptied into the chunk being read."""
    chunk: list[Document] = []
    skipped: list[tuple[str, str]] = []
    kept = read = 0

    def take_skips() -> int:
        taken = len(read_skips or ())
        if taken:
            skipped.extend(read_skips)
            read_skips.clear()
        return taken

    for doc in docs:
        read += take_skips() + 1
        chunk.append(doc)
        kept += critic.check(doc) is None
        if kept == kept_per_chunk:
            yield read, chunk, skipped, kept
            chunk, skipped, kept = [], [], 0
    read += take_skips()
    if chunk or skipped:
        yield read, chunk, skipped, kept


@dataclass
class Chunk:
    """One chunk of the input: its index, the records read up to its end (documents and skipped generations), its
    documents, the global index of its first batch of checked documents (its Monte Carlo seed offset), whether
    this run scores it (``todo``: of this shard and not written yet) and the generations the reader skipped in
    it (``(id, reason)``)."""

    index: int
    read: int
    docs: list[Document]
    first_batch: int
    todo: bool
    read_skips: list[tuple[str, str]]


def plan_chunks(critic: Critic, docs: Iterable[Document], *, batches_per_chunk: int | None = None,
                shard: tuple[int, int] = (1, 1), done: int = 0, read_skips: list[tuple[str, str]] | None = None
                ) -> Iterator[Chunk]:
    """The chunks of ``docs`` (see the module docstring); a chunk is ``todo`` when it is of this ``shard`` and
    ends after the first ``done`` records (those are written already)."""
    batches = 0
    per_chunk = chunk_batches(critic, batches_per_chunk) * critic.batch_size
    for index, (read, chunk, skipped, kept) in enumerate(_chunks(critic, docs, per_chunk, read_skips)):
        yield Chunk(index, read, chunk, batches, read > done and index % shard[1] == shard[0] - 1, skipped)
        batches += -(-kept // critic.batch_size)


def score_chunk(critic: Critic, docs: Sequence[Document], *, seed: int, first_batch: int) -> bytes:
    """A chunk's output: its rows as UTF-8 JSON lines (none for no document)."""
    if not docs:
        return b""
    rows = score_rows(critic.score(docs, seed=seed, first_batch=first_batch))
    return "".join(json_line(row) for row in rows).encode("utf-8")


Scorer = Callable[[Iterable[Chunk]], Iterator[tuple[Chunk, "bytes | None"]]]
"""Scores planned chunks elsewhere (:func:`critic.distributed.dask_scorer`), yielding them in order with
their output (``None`` for a chunk that is not ``todo``)."""


def scored_chunks(critic: Critic, docs: Iterable[Document], *, seed: int = 0, batches_per_chunk: int | None = None,
                  shard: tuple[int, int] = (1, 1), done: int = 0, scorer: Scorer | None = None,
                  read_skips: list[tuple[str, str]] | None = None) -> Iterator[tuple[Chunk, bytes | None]]:
    """Each chunk of ``docs`` in order with its output (``None`` when not ``todo``), scored here or by
    ``scorer``, the rows of the generations the reader skipped in it after its own (``read_skips``: the
    reader's list of them, see :func:`_chunks`).  The k-th batch of checked documents is seeded ``seed + k``,
    as in one :meth:`Critic.score`."""
    plans = plan_chunks(critic, docs, batches_per_chunk=batches_per_chunk, shard=shard, done=done,
                        read_skips=read_skips)
    scored = (scorer(plans) if scorer is not None else
              ((chunk, score_chunk(critic, chunk.docs, seed=seed, first_batch=chunk.first_batch)
                if chunk.todo else None) for chunk in plans))
    with fewer_collections():
        for chunk, data in scored:
            yield chunk, None if data is None else data + skipped_rows(chunk.read_skips)


GC_THRESHOLD = 100_000
"""Allocations between two of the cyclic collector's young collections while a stream is scored (Python's
default: 700)."""


@contextlib.contextmanager
def fewer_collections(threshold: int = GC_THRESHOLD):
    """Python's cyclic garbage collector, tuned for a stream while the block runs: what exists when it starts (torch,
    the critic: hundreds of thousands of objects) is frozen out of its collections (:func:`gc.freeze`), and a
    young collection waits for ``threshold`` allocations.  A chunk's documents and rows (tens of thousands of
    objects, freed with the chunk) otherwise set off collections that scan everything: 1.5x the CPU time of
    ``critic score`` over 200,000 man pages, for the same bytes and the same peak memory.  Cycles are still
    collected; the collector's settings are put back after."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _settings(critic: Critic, source: str | Path, seed: int, batches_per_chunk: int, shard: tuple[int, int]) -> dict:
    """What a resumed run must share with the run it continues: the critic, the input by its content (SHA-256 of
    its bytes, or of a folder's files, not its path, size and time), seed, chunk size and shard."""
    return {"critic": critic.state_sha256(), "input": str(source), "input_sha256": _content_sha256(Path(source)),
            "seed": seed, "chunk_batches": batches_per_chunk, "batch_size": critic.batch_size, "shard": list(shard)}


def _content_sha256(source: Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (their relative paths and bytes, in name order); a pipe
    (read once) is named by its path alone."""
    if source.exists() and not (source.is_file() or source.is_dir()):
        return f"not a regular file: {source}"
    if not source.is_dir():
        return sha256_file(source)
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(source).as_posix()}\0{sha256_file(path)}\0".encode("utf-8",
                                                                                          "surrogateescape"))
    return digest.hexdigest()


def _resume(out: Path, settings: dict) -> dict:
    """The progress of an earlier run with the same settings (the output truncated to its last chunk), or a
    fresh one; ValueError naming what differs from an earlier run's settings."""
    path = progress_path(out)
    if out.is_dir():
        raise ValueError(f"{out}: is a directory (--out names the JSONL file to write)")
    if not path.is_file():
        if out.exists() and out.stat().st_size:
            raise ValueError(f"{out}: exists without {path.name}: not a streamed output of critic score; "
                             "remove it or choose another --out")
        return {"settings": settings, "chunks": [], "read": 0, "bytes": 0, "complete": False}
    try:
        progress = json.loads(path.read_text(encoding="utf-8"))
        recorded = progress["settings"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}: damaged progress file; remove it and {out} to start again") from None
    changed = sorted(k for k in set(settings) | set(recorded) if settings.get(k) != recorded.get(k))
    if changed:
        raise ValueError(f"{out}: was started with other settings ({', '.join(changed)} differ); remove it and "
                         f"{path.name}, or choose another --out")
    size = out.stat().st_size if out.exists() else 0
    if size < progress["bytes"]:
        raise ValueError(f"{out}: shorter ({size} bytes) than its progress file records ({progress['bytes']}); "
                         f"remove it and {path.name} to start again")
    if size > progress["bytes"]:
        with open(out, "r+b") as fh:  # a chunk half-appended when the process stopped
            fh.truncate(progress["bytes"])
    _check_chunks(out, progress["chunks"])
    return progress


def _check_chunks(out: Path, chunks: Sequence[dict]) -> None:
    """Each recorded chunk of ``out`` still has the SHA-256 it was written with; ValueError naming the chunk."""
    if not chunks:
        return
    with open(out, "rb") as fh:
        for chunk in chunks:
            fh.seek(chunk["start"])
            if "sha256" in chunk and sha256_bytes(fh.read(chunk["end"] - chunk["start"])) != chunk["sha256"]:
                raise ValueError(f"{out}: chunk {chunk['index']} (bytes {chunk['start']}..{chunk['end']}) differs from "
                                 f"what was written (SHA-256); remove it and {progress_path(out).name} to start again")


def score_stream(critic: Critic, docs: Iterable[Document], out: str | Path, *, source: str | Path, seed: int = 0,
                 batches_per_chunk: int | None = None, shard: tuple[int, int] = (1, 1), progress: bool = False,
                 scorer: Scorer | None = None, read_skips: list[tuple[str, str]] | None = None) -> dict:
    """Score ``docs`` (read lazily from ``source``) into ``out`` chunk by chunk, here or with ``scorer`` (the
    same bytes either way); resumes an earlier run with the same settings (see the module docstring).
    ``out`` is made when the first chunk is written (a read that fails before leaves no file).
    Returns the finished progress record."""
    out = Path(out)
    with output_lock(out):  # a second run writing the same output would append every chunk again
        return _score_stream(critic, docs, out, source=source, seed=seed, batches_per_chunk=batches_per_chunk,
                             shard=shard, progress=progress, scorer=scorer, read_skips=read_skips)


def _score_stream(critic: Critic, docs: Iterable[Document], out: Path, *, source: str | Path, seed: int,
                  batches_per_chunk: int | None, shard: tuple[int, int], progress: bool, scorer: Scorer | None,
                  read_skips: list[tuple[str, str]] | None) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    batches_per_chunk = chunk_batches(critic, batches_per_chunk)
    settings = _settings(critic, source, seed, batches_per_chunk, shard)
    state = _resume(out, settings)
    if state["complete"]:
        return state
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"{critic.name}: scoring", unit="doc", initial=state["read"])
    total = 0
    with contextlib.ExitStack() as stack:
        fh = None
        for chunk, data in scored_chunks(critic, docs, seed=seed, batches_per_chunk=batches_per_chunk,
                                         shard=shard, done=state["read"], scorer=scorer, read_skips=read_skips):
            index, read, size = chunk.index, chunk.read, len(chunk.docs)
            total = index + 1
            if data is not None:
                fh = fh or stack.enter_context(open(out, "ab"))
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                state["chunks"].append({"index": index, "start": state["bytes"], "end": state["bytes"] + len(data),
                                        "documents": size, "sha256": sha256_bytes(data)})
                state["bytes"] += len(data)
            if read > state["read"]:
                state["read"] = read
                if data is not None:
                    atomic_write_text(progress_path(out), json.dumps(state) + "\n")
                if bar is not None:
                    bar.update(size)
    state.update(complete=True, chunks_total=total)
    out.touch()  # a shard with no chunk of its own is an empty part
    atomic_write_text(progress_path(out), json.dumps(state) + "\n")
    if bar is not None:
        bar.close()
    return state


def _check_merge_output(out: Path, parts: Sequence[Path]) -> None:
    """``out`` may be written by a merge only when it is none of the ``parts`` and is absent or a finished
    streamed output (its progress file says so and its length matches): never a user's file or link."""
    if any(out.resolve() == Path(part).resolve() for part in parts):
        raise ValueError(f"{out}: is one of the parts being merged; choose another --out")
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise ValueError(f"{out}: exists and is not a file this tool wrote (a link or a folder); choose another --out")
    if out.exists():
        try:
            state = json.loads(progress_path(out).read_text(encoding="utf-8"))
            ours = state.get("complete") is True and state.get("bytes") == out.stat().st_size
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours:
            raise ValueError(f"{out}: exists and is not a finished critic score output (no matching "
                             f"{progress_path(out).name}); refusing to replace it: choose another --out")


def merge_shards(parts: Sequence[str | Path], out: str | Path) -> dict:
    """Put the finished shards' chunks back in their global order into ``out`` (atomically), with the progress
    file of one serial run beside it: the bytes and the record of one serial run.  ValueError naming the part
    when one is unfinished, missing a chunk or from another run, and ``out`` when it is a part or a file the
    tool did not write."""
    out = Path(out)
    with output_lock(out):  # checked under the lock: another merge cannot write it between check and write
        _check_merge_output(out, [Path(p) for p in parts])
        return _merge_shards(parts, out)


def _merge_shards(parts: Sequence[str | Path], out: Path) -> dict:
    states = []
    for part in parts:
        path = progress_path(part)
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise DocumentError(f"{part}: no readable {path.name} (not a streamed critic score output)") from None
        if not state.get("complete"):
            raise ValueError(f"{part}: its shard is not finished; rerun its critic score to complete it")
        states.append((Path(part), state))
    first = {k: v for k, v in states[0][1]["settings"].items() if k != "shard"}
    shards = sorted(tuple(s["settings"]["shard"]) for _, s in states)
    n = shards[0][1]
    if shards != [(i, n) for i in range(1, n + 1)]:
        raise ValueError(f"the parts are shards {', '.join(f'{i}/{m}' for i, m in shards)}: give each of 1/{n} .. "
                         f"{n}/{n} once")
    for part, state in states:
        if {k: v for k, v in state["settings"].items() if k != "shard"} != first:
            raise ValueError(f"{part}: scored with other settings than {states[0][0]} (critic, input, seed or "
                             "chunk size)")
    located = {c["index"]: (part, c) for part, state in states for c in state["chunks"]}
    total = states[0][1]["chunks_total"]
    missing = [i for i in range(total) if i not in located]
    if missing:
        raise ValueError(f"chunk {missing[0]} of {total} is in no part")
    for part, state in states:
        size = part.stat().st_size if part.exists() else 0
        if size != state["bytes"]:
            raise ValueError(f"{part}: {size} bytes where its progress file records {state['bytes']}: damaged or "
                             "truncated; rerun its critic score from scratch")
    merged = {"settings": {**states[0][1]["settings"], "shard": [1, 1]}, "chunks": [], "bytes": 0,
              "read": max(state["read"] for _, state in states), "complete": True, "chunks_total": total}
    with atomic_open(out, "wb") as dst:
        for index in range(total):
            part, chunk = located[index]
            with open(part, "rb") as src:
                src.seek(chunk["start"])
                data = src.read(chunk["end"] - chunk["start"])
            if "sha256" in chunk and sha256_bytes(data) != chunk["sha256"]:
                raise ValueError(f"{part}: chunk {index} (bytes {chunk['start']}..{chunk['end']}) differs from what "
                                 "was written (SHA-256); rerun its critic score from scratch")
            dst.write(data)
            merged["chunks"].append({**chunk, "start": merged["bytes"], "end": merged["bytes"] + len(data)})
            merged["bytes"] += len(data)
    atomic_write_text(progress_path(out), json.dumps(merged) + "\n")
    return {"chunks": total, "parts": len(states)}
