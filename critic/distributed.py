"""Streamed scoring on Dask distributed: the chunks of :mod:`critic.streaming` scored by a cluster's workers.

``critic score --workers N`` starts an embedded ``LocalCluster`` (N worker processes of one thread each, on
loopback); ``--scheduler tcp://HOST:PORT`` uses an existing cluster.  The client plans the chunks exactly as a
serial run does, knowing the critic by its saved folder alone (:class:`critic.saved.SavedCritic`: it imports no
torch), and keeps at most ``window`` chunks in flight; each worker loads the fitted critic from its saved folder
once, on the device asked for, starting as soon as the client connects (checked against the client's state hash
and batch size: a worker that sees another critic refuses),
scores whole chunks, their Monte Carlo seeds following from the chunk's index, and returns their JSONL bytes,
which the client writes in chunk order.  So the output, the progress file, resuming and sharding are those of
:func:`critic.streaming.score_stream`, byte for byte.

Where the input is a :class:`~critic.inputs.LineInput` (JSON lines or one generation a line, uncompressed) the
client only finds its newlines (:func:`critic.spans.plan_spans`): each worker reads and parses its chunk's span
of lines itself, and the client merges what the reads counted and checks the ids across chunks.  So the
client's work per chunk is a task of a few hundred bytes out and the chunk's rows back, and the throughput
grows with the workers.  Other inputs are read by the client and each chunk's documents sent with it.

A chunk whose worker dies is sent again (its documents too: scattered data dies with its worker), ``retries``
times at most: a chunk is written once, when its result arrives.  The critic's folder, and a line input, must
be readable by every worker at the same path (one machine, or a shared file system); a worker refuses a file
changed since the client planned it (:attr:`critic.spans.Span.stamp`).
"""

from __future__ import annotations

import json
import os
import resource
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from . import collector
from .document import Document
from .inputs import LineInput
from .resources import require_memory
from .saved import CriticLoadError
from .streaming import Chunk, ChunkOutput, Scorer, StreamCritic, score_chunk

if TYPE_CHECKING:  # torch: the client plans chunks without it (a SavedCritic); each worker loads the critic
    from .critic import Critic

__all__ = ["dask_scorer", "local_cluster", "check_workers", "check_scheduler", "SCHEDULER_SECONDS", "RETRIES", "WORKER_BYTES", "WORKER_FILES",
           "WORKERS_PER_CORE"]

RETRIES = 3
"""Times a chunk is retried when its worker dies."""
WORKER_BYTES = 300 * 2**20
"""Memory of one worker process before any chunk: Python with torch, the critic and Dask's worker (about 300 MB)."""
WORKER_FILES = 64
"""Open files one worker takes of the client's limit (its pipes, sockets and the nanny's), generously."""
WORKERS_PER_CORE = 4
"""The most worker processes an embedded cluster runs per core: each runs one torch thread."""

_LOADED: dict[tuple[str, str, str], "Critic"] = {}
_LOADING = threading.Lock()


def _worker_critic(critic_dir: str, state_sha256: str, device: str, batch_size: int) -> "Critic":
    """The critic saved at ``critic_dir`` on ``device``, loaded once per worker process (by one of its threads)
    and checked against what the client planned with: its state hash and its ``batch_size`` (a chunk's Monte
    Carlo seeds follow from its batches)."""
    from .critic import Critic

    key = (critic_dir, state_sha256, device)
    with _LOADING:
        critic = _LOADED.get(key)
        if critic is None:
            critic = Critic.load(critic_dir, device=device)
            if critic.state_sha256() != state_sha256:
                raise CriticLoadError(f"{critic_dir}: the critic a worker loads (state {critic.state_sha256()[:12]}"
                                      f"...) is not the client's ({state_sha256[:12]}...): was it saved again "
                                      "meanwhile?")
            if critic.batch_size != batch_size:
                raise CriticLoadError(f"{critic_dir}: the critic a worker loads scores batches of "
                                      f"{critic.batch_size} documents, the client planned {batch_size}: is the "
                                      "same critic package installed on every machine?")
            _LOADED.clear()
            _LOADED[key] = critic
    return critic


def _load_on_worker(critic_dir: str, state_sha256: str, device: str, batch_size: int) -> None:
    """A worker's first task: load the critic (:func:`_worker_critic`) before its first chunk arrives."""
    _worker_critic(critic_dir, state_sha256, device, batch_size)


def _score_on_worker(critic_dir: str, state_sha256: str, device: str, batch_size: int, chunk: Chunk,
                     lines: LineInput | None, docs: bytes | None, seed: int) -> ChunkOutput:
    """A worker's task: a chunk's output, its span read here from ``lines`` or its documents given as JSON
    lines (``docs``), with the cyclic collector tuned as in the client's stream
    (:func:`critic.collector.frozen`)."""
    critic = _worker_critic(critic_dir, state_sha256, device, batch_size)
    # a worker holds Dask's objects besides torch's: 1.6x the CPU of a chunk without
    with collector.frozen(collector.STREAM_THRESHOLD):
        if docs is not None:
            chunk = replace(chunk, docs=[Document.from_dict(json.loads(line))
                                         for line in docs.decode("utf-8").splitlines()])
        return score_chunk(critic, chunk, seed=seed, lines=lines)


def dask_scorer(client, critic_dir: str | Path, critic: StreamCritic, *, seed: int, device: str = "cpu",
                lines: LineInput | None = None, window: int | None = None, retries: int = RETRIES) -> Scorer:
    """A :data:`~critic.streaming.Scorer` that scores chunks on ``client``'s workers, yielding them in order;
    ``window`` chunks in flight at most (default: twice the workers).  ``critic``: the critic saved at
    ``critic_dir`` as the client plans with it (a :class:`~critic.saved.SavedCritic` will do: the client need not
    load it); each worker loads it on ``device`` and checks it against the client's.  Every worker known now
    starts loading it at once (its torch, its files), while the client still reads the input.  A chunk of a span
    is read by its worker from ``lines`` (the input's path must open there too); a chunk of documents is sent with
    them.  A chunk whose worker dies (its task killed, or its scattered documents lost with it) is sent again, up
    to ``retries`` times."""
    from concurrent.futures import CancelledError

    from distributed import wait
    from distributed.scheduler import KilledWorker

    planned = (str(critic_dir), critic.state_sha256(), device, critic.batch_size)
    workers = list(client.scheduler_info().get("workers", {}))
    window = window or 2 * max(1, len(workers))
    warming = [client.submit(_load_on_worker, *planned, workers=[address], allow_other_workers=True, pure=False)
               for address in workers]  # one a worker; where that worker died, any other

    def submit(chunk: Chunk, docs: bytes | None):
        data = None if docs is None else client.scatter(docs, hash=False)  # data, not part of the task graph
        return client.submit(_score_on_worker, *planned, replace(chunk, docs=[]), lines, data, seed, pure=False)

    def result(chunk: Chunk, docs: bytes | None, future) -> ChunkOutput | None:
        for attempt in range(retries + 1):
            if future is None:
                return None
            try:
                return future.result()
            except (CancelledError, KilledWorker):
                if attempt == retries:
                    raise
                future = submit(chunk, docs)
        return None

    def run(plans: Iterable[Chunk]) -> Iterator[tuple[Chunk, ChunkOutput | None]]:
        pending: deque = deque()
        for chunk in plans:
            docs = future = None
            if chunk.todo:
                if chunk.span is None:
                    docs = "".join(json.dumps(d.to_dict(), ensure_ascii=False) + "\n"
                                   for d in chunk.docs).encode("utf-8")
                future = submit(chunk, docs)
            pending.append((chunk, docs, future))
            while len(pending) > window:
                done = pending.popleft()
                yield done[0], result(*done)
        while pending:
            done = pending.popleft()
            yield done[0], result(*done)
        wait(warming)  # not stopped half-way when the cluster closes; one that failed failed a chunk, which said why

    return run


def check_workers(workers: int) -> None:
    """Refuse an embedded cluster this machine cannot hold, before any process starts: at most
    :data:`WORKERS_PER_CORE` per core, :data:`WORKER_FILES` open files each within the process's limit, and
    :data:`WORKER_BYTES` each of the memory available.  ``ValueError`` naming ``--workers`` and the bound."""
    cores = os.cpu_count() or 1
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    files = files if files != resource.RLIM_INFINITY else 1 << 20
    limit = max(1, min(WORKERS_PER_CORE * cores, files // WORKER_FILES))
    if workers > limit:
        raise ValueError(f"--workers {workers}: this machine runs at most {limit} worker processes ({cores} cores, "
                         f"{WORKERS_PER_CORE} a core; an open-file limit of {files}, {WORKER_FILES} a worker); for "
                         "more, give --scheduler ADDRESS of a cluster")
    require_memory(workers * WORKER_BYTES, f"--workers {workers} (about {WORKER_BYTES >> 20} MB a worker process)",
                   "--workers")


SCHEDULER_SECONDS = 30.0
"""How long ``--scheduler ADDRESS`` may take to connect and say what it is."""


def check_scheduler(address: str, timeout: float = SCHEDULER_SECONDS) -> None:
    """Ask ``address`` what it is (Dask's ``identity`` call) within ``timeout`` seconds in all, before a client is
    made: ``ValueError`` naming ``--scheduler`` when nothing listens there, when something accepts and never
    answers (the client's own timeout does not bound its handshake), and when what answers is no Dask scheduler
    (an HTTP server's reply read as a Dask frame asks for exabytes)."""
    import asyncio
    import socket

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    where = f"--scheduler {address}"
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: not a scheduler address ({exc}); expected tcp://HOST:PORT") from None
    if host is not None:  # a closed port is said at once (Dask's connect retries it until its timeout)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as exc:
            raise ValueError(f"{where}: cannot connect ({exc.strerror or exc})") from None

    async def identity() -> object:
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise ValueError(f"{where}: no answer within {timeout:g} s (something accepts connections there but does "
                         "not speak Dask's protocol, or the scheduler is stuck)") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot connect ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{where}: not a scheduler address ({exc}); expected tcp://HOST:PORT") from None
    except Exception as exc:  # noqa: BLE001 -- whatever a non-Dask server's bytes make of the protocol
        raise ValueError(f"{where}: what answers there is not a Dask scheduler ({type(exc).__name__} reading its "
                         "reply)") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise ValueError(f"{where}: what answers there is not a Dask scheduler (it says it is {kind!r})")


def local_cluster(workers: int):
    """An embedded Dask cluster on loopback: ``workers`` processes of one thread each (its web server on a free
    loopback port)."""
    from distributed import LocalCluster

    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address="127.0.0.1:0")
