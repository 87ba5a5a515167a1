"""Scoring that streams: documents read, projected and written in chunks, resumable, shardable.

``critic score`` on a million generations must neither hold them in memory nor lose finished work when
it is stopped.  :func:`score_stream` cuts the input into **chunks of** ``batches_per_chunk * batch_size``
**records** (about the critic's ``chunk_documents`` by default, 8,192 for most; :func:`plan_chunks`):

- a :class:`~critic.inputs.LineInput` (a plain file of JSON lines, or one generation a line) by its lines,
  found by newlines alone (:func:`critic.spans.plan_spans`); each chunk's span of lines is read, parsed and
  scored by whoever scores it (here, or a Dask worker), and what the reads counted and the ids they claimed are
  merged and checked in order (a duplicate id across chunks is named with both places);
- any other input by its documents and the generations its reader skipped, read here lazily
  (:func:`critic.inputs.iter_documents`).

Both cut the same chunks of the same file (a gzipped copy gives the plain file's bytes), blank lines of a JSON
lines file aside, which count as lines.  A chunk holds at most ``batches_per_chunk`` batches of checked
documents, and chunk ``c``'s k-th batch is seeded ``seed + c * batches_per_chunk + k``: where every document
passes :meth:`Critic.check` these are the batches and Monte Carlo seeds of one :meth:`Critic.score` call over
the whole input, and whatever is skipped, a chunk's numbers never depend on how or where the others are
scored.  Each chunk's rows are appended to the output JSONL and fsynced, then a small progress file beside it
(``OUT.progress.json``, written atomically) records the chunk's byte range, its SHA-256 and where the input
stands.  A second run writing the same output stops at once (:func:`critic.io.output_lock`).

- **Resume**: a rerun with the same settings truncates the output to the last recorded chunk (a chunk
  half-appended when the process died is dropped), skips the input already consumed and goes on; the
  finished file is byte-identical to an uninterrupted run's (the ids of a line input's new chunks are checked
  against those written before).  Other settings (critic, the input's content by SHA-256, seed, chunk size,
  shard, what a chunk counts) are refused with what differs, and a file at ``out`` that is not a streamed
  output (no progress file) is never overwritten.
- **Shards**: ``shard=(i, n)`` scores only the chunks ``c`` with ``c % n == i - 1`` (a line input's other
  chunks are not even read; any other input is read whole to cut the same chunks), under any launcher (a Slurm
  array, ``accelerate launch``, a loop); :func:`merge_shards` puts the shards' chunks back in order: the same
  bytes as one serial run, after checking each part's length and each chunk's SHA-256 against its progress file
  (a truncated or damaged part is named, with the chunk) and the ids across the parts of a line input.

Rows are those of ``critic score``: ``{"id", "latent_nll", "latent_steps", "latent_nll_per_step",
"unknown"[, "latent_nll_stderr", "estimator"]}`` for a scored document, ``{"id", "skipped"}`` for one that
could not be (in the order :meth:`Critic.score` gives: scored first, then skipped, per chunk), and for each
generation the reader skipped (an empty text) where it was read, ``{"id", "skipped", "read": false}``, after
its chunk's rows (the reader's :attr:`~critic.inputs.ReadReport.skipped_documents`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence, Union

from . import collector
from .document import Document, DocumentError, UniqueIds
from .inputs import LineInput, ReadReport
from .spans import Span, plan_spans
from .io import atomic_open, atomic_write_text, output_lock, sha256_bytes, sha256_file
from .terminal import json_line

if TYPE_CHECKING:  # torch: a process that only plans chunks for Dask workers never imports it
    from .critic import Critic, Scores

__all__ = ["Chunk", "Scorer", "StreamCritic", "chunk_batches", "plan_chunks", "score_chunk", "score_rows",
           "scored_chunks", "score_stream", "skipped_rows", "merge_shards", "progress_path", "parse_shard"]

class StreamCritic(Protocol):
    """What a stream is planned with: a fitted :class:`~critic.critic.Critic`, or a
    :class:`~critic.saved.SavedCritic` where every chunk is scored elsewhere (no torch in the planning process).
    ``chunk_documents``: about how many checked documents a chunk holds by default (the unit that is written,
    resumed and sharded), in whole batches of ``batch_size``."""

    name: str
    batch_size: int
    chunk_documents: int

    def state_sha256(self) -> str: ...


def chunk_batches(critic: StreamCritic, batches: int | None = None) -> int:
    """``batches`` when given, else the whole batches (at least one) that make about the critic's
    ``chunk_documents``."""
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


def _records(docs: Iterable[Document], read_skips: list[tuple[str, str]] | None) -> Iterator[Document | tuple]:
    """The records of ``docs`` in the order they were read: each document, and before it the generations the
    reader skipped since the last one (``(id, reason)`` each, taken out of ``read_skips``, the reader's list)."""
    read_skips = read_skips if read_skips is not None else []
    for doc in docs:
        taken = read_skips[:]
        read_skips.clear()
        yield from taken
        yield doc
    yield from read_skips[:]
    read_skips.clear()


def _chunks(docs: Iterable[Document], records: int, read_skips: list[tuple[str, str]] | None = None
            ) -> Iterator[tuple[int, list[Document], list[tuple[str, str]]]]:
    """``(records read so far, chunk, the generations the reader skipped in it)``: consecutive records
    (:func:`_records`), ``records`` a chunk (the last one may hold fewer), as the spans of a
    :class:`~critic.inputs.LineInput` cut its lines."""
    chunk: list[Document] = []
    skipped: list[tuple[str, str]] = []
    read = 0
    for record in _records(docs, read_skips):
        read += 1
        (chunk if isinstance(record, Document) else skipped).append(record)
        if len(chunk) + len(skipped) == records:
            yield read, chunk, skipped
            chunk, skipped = [], []
    if chunk or skipped:
        yield read, chunk, skipped


Documents = Union[Iterable[Document], LineInput]
"""What a stream scores: documents read by the caller, or a :class:`~critic.inputs.LineInput` whose spans of
lines are read by whoever scores them."""


@dataclass
class Chunk:
    """One chunk of the input: its index, the records read up to its end (lines of a
    :class:`~critic.inputs.LineInput`; else documents and skipped generations), the global index of its first
    batch (its Monte Carlo seed offset), whether this run scores it (``todo``: of this shard and not written
    yet), and what it holds: the ``span`` of lines that whoever scores it reads, or its ``docs`` with the
    generations the reader skipped among them (``read_skips``, ``(id, reason)`` each)."""

    index: int
    read: int
    first_batch: int
    todo: bool
    docs: list[Document] = field(default_factory=list)
    read_skips: list[tuple[str, str]] = field(default_factory=list)
    span: Span | None = None


@dataclass
class ChunkOutput:
    """A scored chunk: its output (UTF-8 JSON lines: the scored documents, those the check skipped, then the
    generations the reader skipped), how many documents it held and, for a span, what its read counted and the
    ids it claimed (the reader of the whole merges them: :meth:`~critic.inputs.ReadReport.merge`,
    :meth:`~critic.document.UniqueIds.claim_all`)."""

    data: bytes
    documents: int
    report: ReadReport | None = None
    ids: UniqueIds | None = None


def plan_chunks(critic: StreamCritic, docs: Documents, *, batches_per_chunk: int | None = None,
                shard: tuple[int, int] = (1, 1), done: int = 0, read_skips: list[tuple[str, str]] | None = None,
                spans: Sequence[Span] | None = None) -> Iterator[Chunk]:
    """The chunks of ``docs`` (see the module docstring), ``chunk_batches * batch_size`` records each: lines of a
    :class:`~critic.inputs.LineInput` (found by :func:`critic.spans.plan_spans`, nothing parsed; ``spans``: those
    found already, of that many lines each), else documents and skipped generations (``read_skips``: see
    :func:`_chunks`).  A chunk holds at most that many documents, so
    at most ``chunk_batches`` batches: chunk ``c``'s k-th batch is the stream's ``c * chunk_batches + k``-th.  A
    chunk is ``todo`` when it is of this ``shard`` and ends after the first ``done`` records."""
    batches = chunk_batches(critic, batches_per_chunk)
    records = batches * critic.batch_size

    def todo(index: int, read: int) -> bool:
        return read > done and index % shard[1] == shard[0] - 1

    if isinstance(docs, LineInput):
        for index, span in enumerate(spans if spans is not None else plan_spans(docs.path, records)):
            yield Chunk(index, span.last_line, index * batches, todo(index, span.last_line), span=span)
        return
    for index, (read, chunk, skipped) in enumerate(_chunks(docs, records, read_skips)):
        yield Chunk(index, read, index * batches, todo(index, read), chunk, skipped)


def score_chunk(critic: Critic, chunk: Chunk, *, seed: int, lines: LineInput | None = None) -> ChunkOutput:
    """Score one chunk: its documents (read from ``lines`` for a span),
    batch ``k`` seeded ``seed + chunk.first_batch + k``."""
    docs, skips, report, ids = chunk.docs, chunk.read_skips, None, None
    if chunk.span is not None:
        read = lines.read(chunk.span)
        docs, skips, report, ids = read.documents, read.report.skipped_documents, read.report, read.ids
        report.skipped_documents = None  # they are rows of the output
    rows = score_rows(critic.score(docs, seed=seed, first_batch=chunk.first_batch)) if docs else []
    return ChunkOutput("".join(json_line(row) for row in rows).encode("utf-8") + skipped_rows(skips), len(docs),
                       report, ids)


Scorer = Callable[[Iterable[Chunk]], Iterator[tuple[Chunk, "ChunkOutput | None"]]]
"""Scores planned chunks elsewhere (:func:`critic.distributed.dask_scorer`), yielding them in order with
their output (``None`` for a chunk that is not ``todo``)."""


def scored_chunks(critic: StreamCritic, docs: Documents, *, seed: int = 0, batches_per_chunk: int | None = None,
                  shard: tuple[int, int] = (1, 1), done: int = 0, scorer: Scorer | None = None,
                  report: ReadReport | None = None, ids: UniqueIds | None = None,
                  spans: Sequence[Span] | None = None) -> Iterator[tuple[Chunk, ChunkOutput | None]]:
    """Each chunk of ``docs`` in order with its output (``None`` when not ``todo``), scored here or by
    ``scorer``.  ``report``: the read's report -- for documents, the one their reader fills (its skipped
    generations become rows); for a :class:`~critic.inputs.LineInput`, each span's part is merged into it and it
    is finished after the last chunk.  Chunks of skipped generations alone are held back until a document is
    scored (an input that holds none fails its read and writes nothing).  ``ids``: the ids of the spans read before (a resumed run's), against which
    each span's are checked in order (a duplicate is a :class:`~critic.document.DocumentError` before its chunk
    is yielded).  ``spans``: a line input's spans, found already (:func:`plan_chunks`)."""
    lines = docs if isinstance(docs, LineInput) else None
    report = report if report is not None else lines.report() if lines else ReadReport()
    ids = UniqueIds() if ids is None else ids
    plans = plan_chunks(critic, docs, batches_per_chunk=batches_per_chunk, shard=shard, done=done,
                        read_skips=None if lines else report.skipped_documents, spans=spans)
    scored = (scorer(plans) if scorer is not None else
              ((chunk, score_chunk(critic, chunk, seed=seed, lines=lines) if chunk.todo else None)
               for chunk in plans))
    held: list[tuple[Chunk, ChunkOutput | None]] = []  # chunks of skipped generations before any document
    with collector.frozen(collector.STREAM_THRESHOLD):  # chunks of documents and rows, freed with the chunk
        for chunk, output in scored:
            if output is not None and output.report is not None:
                ids.claim_all(output.ids)
                report.merge(output.report)
            held.append((chunk, output))
            if output is None or output.documents:  # an input without documents writes nothing (its read fails)
                yield from held
                held.clear()
    if lines and shard == (1, 1) and not done:
        report.finish()
    yield from held


def _settings(critic: StreamCritic, source: str | Path, seed: int, batches_per_chunk: int, shard: tuple[int, int],
              records: str, input_sha256: str | None = None) -> dict:
    """What a resumed run must share with the run it continues: the critic, the input by its content (SHA-256 of
    its bytes, or of a folder's files, not its path, size and time: ``input_sha256`` when known already), seed,
    chunk size, shard and what a chunk counts (``records``: ``lines`` of a :class:`~critic.inputs.LineInput`,
    else ``documents``)."""
    return {"critic": critic.state_sha256(), "input": str(source),
            "input_sha256": input_sha256 or _content_sha256(Path(source)),
            "seed": seed, "chunk_batches": batches_per_chunk, "batch_size": critic.batch_size, "shard": list(shard),
            "records": records}


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


def score_stream(critic: StreamCritic, docs: Documents, out: str | Path, *, source: str | Path, seed: int = 0,
                 batches_per_chunk: int | None = None, shard: tuple[int, int] = (1, 1), progress: bool = False,
                 scorer: Scorer | None = None, report: ReadReport | None = None) -> dict:
    """Score ``docs`` (documents read lazily from ``source``, or ``source`` as a :class:`~critic.inputs.LineInput`)
    into ``out`` chunk by chunk, here or with ``scorer`` (the same bytes either way); resumes an earlier run with
    the same settings (see the module docstring).  ``report``: the read's report (see :func:`scored_chunks`).
    ``out`` is made when the first chunk is written (a read that fails before leaves no file).
    Returns the finished progress record."""
    out = Path(out)
    with output_lock(out):  # a second run writing the same output would append every chunk again
        return _score_stream(critic, docs, out, source=source, seed=seed, batches_per_chunk=batches_per_chunk,
                             shard=shard, progress=progress, scorer=scorer, report=report)


def _score_stream(critic: StreamCritic, docs: Documents, out: Path, *, source: str | Path, seed: int,
                  batches_per_chunk: int | None, shard: tuple[int, int], progress: bool, scorer: Scorer | None,
                  report: ReadReport | None) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    batches_per_chunk = chunk_batches(critic, batches_per_chunk)
    lines = isinstance(docs, LineInput)
    spans = digest = None
    if lines:  # one read of its bytes finds its spans and its SHA-256
        digest = hashlib.sha256()
        spans = list(plan_spans(docs.path, batches_per_chunk * critic.batch_size, digest=digest))
    settings = _settings(critic, source, seed, batches_per_chunk, shard, "lines" if lines else "documents",
                         digest.hexdigest() if digest else None)
    state = _resume(out, settings)
    if state["complete"]:
        return state
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"{critic.name}: scoring", unit="line" if lines else "doc", initial=state["read"])
    ids = _written_ids(out, state["chunks"]) if lines else None
    total = 0
    with contextlib.ExitStack() as stack:
        fh = None
        for chunk, output in scored_chunks(critic, docs, seed=seed, batches_per_chunk=batches_per_chunk,
                                           shard=shard, done=state["read"], scorer=scorer, report=report, ids=ids,
                                           spans=spans):
            total = chunk.index + 1
            if output is not None:
                data = output.data
                fh = fh or stack.enter_context(open(out, "ab"))
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                state["chunks"].append({"index": chunk.index, "start": state["bytes"],
                                        "end": state["bytes"] + len(data), "documents": output.documents,
                                        "sha256": sha256_bytes(data)})
                state["bytes"] += len(data)
            if chunk.read > state["read"]:
                if bar is not None:
                    bar.update(chunk.read - state["read"])
                state["read"] = chunk.read
                if output is not None:
                    atomic_write_text(progress_path(out), json.dumps(state) + "\n")
    state.update(complete=True, chunks_total=total)
    out.touch()  # a shard with no chunk of its own is an empty part
    atomic_write_text(progress_path(out), json.dumps(state) + "\n")
    if bar is not None:
        bar.close()
    return state


def _written_ids(out: Path, chunks: Sequence[dict]) -> UniqueIds:
    """The ids of the documents in ``out``'s recorded ``chunks``, claimed where they were written: a resumed run
    checks the spans it reads against them."""
    ids = UniqueIds()
    if chunks:
        with open(out, "rb") as fh:
            for chunk in chunks:
                fh.seek(chunk["start"])
                _claim_rows(ids, fh.read(chunk["end"] - chunk["start"]), f"{out}, chunk {chunk['index']}")
    return ids


def _claim_rows(ids: UniqueIds, data: bytes, where: str) -> None:
    """Claim the id of every document among the output rows ``data`` (not those of generations the reader
    skipped, which have none of their own to check) as read at ``where``."""
    for line in data.splitlines():
        row = json.loads(line)
        if row.get("read", True):
            ids.claim(row["id"], where)


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
    lines, ids = first.get("records") == "lines", UniqueIds()
    with atomic_open(out, "wb") as dst:
        for index in range(total):
            part, chunk = located[index]
            with open(part, "rb") as src:
                src.seek(chunk["start"])
                data = src.read(chunk["end"] - chunk["start"])
            if "sha256" in chunk and sha256_bytes(data) != chunk["sha256"]:
                raise ValueError(f"{part}: chunk {index} (bytes {chunk['start']}..{chunk['end']}) differs from what "
                                 "was written (SHA-256); rerun its critic score from scratch")
            if lines:  # each shard read its own spans: the ids are checked across them here
                _claim_rows(ids, data, f"{part}, chunk {index}")
            dst.write(data)
            merged["chunks"].append({**chunk, "start": merged["bytes"], "end": merged["bytes"] + len(data)})
            merged["bytes"] += len(data)
    atomic_write_text(progress_path(out), json.dumps(merged) + "\n")
    return {"chunks": total, "parts": len(states)}
