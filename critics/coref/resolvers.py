"""Getting a :class:`~critics.coref.resolution.Resolution` for each document, and keeping it.

Resolvers, named by the critic's ``resolver`` setting:

- ``"metadata"``: the resolution is in ``doc.metadata["coref"]`` (precomputed,
  by :func:`annotate` or by the user's own resolver);
- ``"neuralcoref"``: run neuralcoref (the Python 3.7 worker) on ``doc.text``;
- ``"auto"``: ``metadata`` where a document has it, neuralcoref for the rest.

Running neuralcoref is the slow step (about 25 ms per Wikipedia summary and core), so
:func:`annotate` writes its resolutions into the documents once, resumably:
the documents stream through the resolver's workers and ``resolutions.jsonl``
gets one fsynced line per document as each ``batch_size`` documents come back
(a torn last line from a kill is cut off and redone); a rerun resolves only the
documents missing there.  A document neuralcoref fails on is recorded with its
error and counted, never dropped.
"""

from __future__ import annotations

import json
import os
import typing
from collections import Counter
from contextlib import closing
from itertools import islice
from pathlib import Path
from typing import Iterable, Literal, Sequence

from critic.document import Document, DocumentError

from .resolution import Resolution, ResolutionError

__all__ = ["RESOLVERS", "Resolver", "METADATA_KEY", "resolve", "annotate"]

Resolver = Literal["auto", "metadata", "neuralcoref"]
"""Where a document's coreference resolution comes from (see :func:`resolve`)."""
RESOLVERS = typing.get_args(Resolver)
METADATA_KEY = "coref"


def _from_metadata(doc: Document) -> Resolution:
    return Resolution.from_dict(doc.metadata[METADATA_KEY], doc.text, where=f"document {doc.id!r}: metadata.coref")


def resolve(docs: Sequence[Document], *, resolver: str = "auto", neuralcoref=None
            ) -> tuple[dict[str, Resolution], dict[str, str]]:
    """``({doc id: resolution}, {doc id: why not})`` for ``docs``.

    ``neuralcoref`` is a :class:`~critics.coref.neuralcoref.NeuralcorefResolver` to reuse (its worker
    processes and its cache); one is started when needed and none is given.
    """
    if resolver not in RESOLVERS:
        raise ValueError(f"resolver must be one of {', '.join(RESOLVERS)}, got {resolver!r}")
    out: dict[str, Resolution] = {}
    failures: dict[str, str] = {}
    todo: list[Document] = []
    for doc in docs:
        if not doc.text.strip():
            failures[doc.id] = "empty text"
        elif resolver != "neuralcoref" and METADATA_KEY in doc.metadata:
            try:
                out[doc.id] = _from_metadata(doc)
            except ResolutionError as exc:
                failures[doc.id] = f"bad coreference resolution: {exc}"
        elif resolver == "metadata":
            failures[doc.id] = f"no coreference resolution in metadata[{METADATA_KEY!r}]"
        else:
            todo.append(doc)
    if todo:
        if neuralcoref is None:
            from .neuralcoref import NeuralcorefResolver

            with NeuralcorefResolver() as worker:
                _collect(_neuralcoref_stream(worker, todo), out, failures)
        else:
            _collect(_neuralcoref_stream(neuralcoref, todo), out, failures)
    return out, failures


def _collect(stream, out: dict, failures: dict) -> None:
    for doc, resolution, why in stream:
        if resolution is None:
            failures[doc.id] = why
        else:
            out[doc.id] = resolution


def _neuralcoref_stream(worker, docs: Sequence[Document]):
    """``(doc, resolution, None)`` or ``(doc, None, why not)`` per document as neuralcoref returns them:
    documents with an empty text first, then the others in order."""
    for doc in docs:
        if not doc.text.strip():
            yield doc, None, "empty text"
    texts = [d for d in docs if d.text.strip()]
    with closing(worker.resolve(((d.id, d.text) for d in texts), on_error="report")) as replies:
        for reply, doc in zip(replies, texts):
            if "error" in reply:
                yield doc, None, f"neuralcoref failed: {reply['error']}"
                continue
            try:
                resolution = Resolution.from_dict(reply, doc.text, where=f"document {doc.id!r}: neuralcoref")
            except ResolutionError as exc:
                yield doc, None, f"bad coreference resolution: {exc}"
            else:
                yield doc, resolution, None


# --------------------------------------------------------------------------- annotate, resumably
def _read_log(path: Path) -> dict[str, dict]:
    """Complete lines of the log, by document id; a torn last line is cut off the file."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    out = {}
    for lineno, raw in enumerate(data[:keep].splitlines(), start=1):
        try:
            obj = json.loads(raw)
            out[obj["id"]] = obj
        except (ValueError, KeyError, TypeError) as exc:
            raise DocumentError(f"{path}:{lineno}: not a resolution line ({exc})") from None
    return out


def annotate(docs: Iterable[Document], out_dir: str | os.PathLike, *, batch_size: int = 16,
             neuralcoref=None, progress: bool = False) -> tuple[list[Document], Counter]:
    """Resolve ``docs`` with neuralcoref into ``out_dir``, resumably; return the documents with
    ``metadata["coref"]`` (those that resolved) and counts (``resolved``, ``failed: <reason>``).

    ``out_dir/resolutions.jsonl`` is the log: ``{"id", "text_sha256", "coref"}`` or ``{"id", "error"}``
    per document, appended ``batch_size`` documents at a time (``neuralcoref``, when given, keeps its own
    batch size and workers).  A logged line whose text hash no longer matches its document is resolved
    again.
    """
    from .resolution import text_sha256

    docs = list(docs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "resolutions.jsonl"
    log = _read_log(log_path)
    todo = [d for d in docs if d.id not in log or log[d.id].get("text_sha256") != text_sha256(d.text)]
    if todo:
        own = neuralcoref is None
        if own:
            from .neuralcoref import NeuralcorefResolver

            neuralcoref = NeuralcorefResolver(batch_size=batch_size)
        try:
            bar = None
            if progress:  # counts documents, with a rate and an ETA
                from tqdm.auto import tqdm

                bar = tqdm(total=len(docs), initial=len(docs) - len(todo), desc="neuralcoref", unit="doc")
            with closing(_neuralcoref_stream(neuralcoref, todo)) as stream, \
                    open(log_path, "a", encoding="utf-8") as f:
                while batch := list(islice(stream, batch_size)):
                    lines = []
                    for d, resolution, why in batch:
                        entry = {"id": d.id, "text_sha256": text_sha256(d.text)}
                        entry.update({"coref": resolution.to_dict()} if resolution is not None else {"error": why})
                        log[d.id] = entry
                        lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
                    f.write("".join(lines))
                    f.flush()
                    os.fsync(f.fileno())
                    if bar is not None:
                        bar.update(len(batch))
            if bar is not None:
                bar.close()
        finally:
            if own:
                neuralcoref.close()
    counts: Counter = Counter()
    annotated = []
    for d in docs:
        entry = log[d.id]
        if "coref" in entry:
            counts["resolved"] += 1
            annotated.append(Document(d.id, d.sections, d.title, {**d.metadata, METADATA_KEY: entry["coref"]}))
        else:
            counts[f"failed: {entry['error']}"] += 1
    return annotated, counts
