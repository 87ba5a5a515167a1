"""Atomic file output: a file or a directory the project writes is complete or absent.

Every writer goes through these helpers: the content is written to a
temporary sibling (same filesystem), flushed, then renamed over the target
with :func:`os.replace`, which is atomic on POSIX.  A crash or Ctrl-C in the
middle leaves the previous version (or nothing), never half a file.

- :func:`atomic_write_text` / :func:`atomic_write_bytes`: a whole file at once;
- :func:`atomic_open`: a context manager for streaming writers (JSONL);
- :func:`atomic_directory`: a directory built in a temporary sibling and
  swapped in when the block ends without an exception;
- :func:`sha256_file`: the hash recorded in results and saved critics.

What a file or folder written here looks like to the user:

- *Modes*: the temporary file (or folder) gets the mode a plain ``open()``
  (``mkdir()``) would give a new one, ``0o666 & ~umask`` (``0o777 & ~umask``),
  not :mod:`tempfile`'s private 0600 (0700).  The umask is read from the
  ``Umask:`` line of ``/proc/self/status`` (Linux 4.7+), which does not touch
  it; elsewhere :func:`os.umask` is set and restored under a lock, and for that
  instant the mask is 077, so a file another thread creates then is at worst
  more private than asked, never less.
- *Stale temporaries*: a temporary is named ``.NAME.HOST.PID.XXXXXXXX.tmp``
  (``.old`` for the previous version of a directory being swapped out), where
  HOST is a short hash of the host name, PID the writer's process id and
  XXXXXXXX :mod:`tempfile`'s eight random characters.  A process killed
  mid-write (``kill -9``, power loss) leaves it behind; the next atomic write of
  NAME in the same folder (and :meth:`critic.stages.Stage.begin`) removes the
  siblings that match this pattern exactly, were made on this host and whose
  writer is no longer running (:func:`remove_stale_temporaries`).  Nothing else
  is touched: another host's temporaries, a live writer's, a name that only
  looks alike.  A writer's PID reused since by another process keeps its
  temporaries until that process ends -- a leak, never a loss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_open", "atomic_directory", "check_replaceable",
           "OUTPUT_MARKER", "OUTPUT_KINDS", "output_lock", "claim_folder",
           "sha256_file", "sha256_bytes", "current_umask", "remove_stale_temporaries", "is_temporary", "user_cache"]

_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]
"""This host's tag in temporary names: temporaries made elsewhere (another machine sharing the folder, a
container with its own PIDs) are never judged by this machine's process table."""

_TAIL = r"(?P<host>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\.[a-z0-9_]{8}\.(?:tmp|old)"
_TAIL_RE = re.compile(_TAIL)
_TEMPORARY_RE = re.compile(r"\..+\." + _TAIL)
_UMASK_LOCK = threading.Lock()


def _prefix(name: str) -> str:
    """Prefix of this process's temporaries for the target ``name`` (PID read each time: forks differ)."""
    return f".{name}.{_HOST}.{os.getpid()}."


def is_temporary(name: str) -> bool:
    """Whether a file name has the pattern of this module's temporaries (any target, host or writer)."""
    return _TEMPORARY_RE.fullmatch(name) is not None


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows (see the module docstring)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not: it can write nothing more).  In doubt: yes."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or a number we cannot judge: keep its files
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporaries of ``path`` left by writers of this host that no longer run; returns them.

    Only siblings named exactly ``.NAME.HOST.PID.XXXXXXXX.tmp`` (or ``.old``) with this host's tag and
    a PID that is not a running process are removed (a folder with what it holds).  Best effort: one
    that cannot be removed (another user's folder) is left, and the write that called this goes on.
    Costs one listing of the folder per atomic write.
    """
    path = Path(path)
    start = f".{path.name}."
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if not entry.name.startswith(start):
            continue
        match = _TAIL_RE.fullmatch(entry.name, len(start))
        if match is None or match["host"] != _HOST or _alive(int(match["pid"])):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # cleaned by another process first, or not ours to remove after all: the write goes on
        removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` on success.

    On an exception (KeyboardInterrupt included) the temporary file is removed
    and ``path`` is left as it was.  Text that cannot be encoded (the lone surrogates Python keeps for bytes of a
    file name that are not UTF-8) is written as ``\\udcff``: a valid JSON escape, and no failure after the work.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding,
                       errors=None if "b" in mode else "backslashreplace") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~current_umask())  # mkstemp's 0600 -> what open() would give
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_directory(path: str | Path, kind: str | None = None) -> Iterator[Path]:
    """Build a directory in a temporary sibling; it replaces ``path`` when the block succeeds.

    Yields the temporary directory to write into.  An existing ``path`` is
    moved aside and deleted only after the new one is in place; on an exception
    the temporary directory is removed and ``path`` is untouched.  With ``kind``
    the folder gets the :data:`OUTPUT_MARKER` listing what was written, so that
    :func:`check_replaceable` knows it as this tool's ``kind`` of folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(path.name), suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 -> what mkdir() would give
        yield tmp
        if kind is not None:
            OUTPUT_KINDS[kind]  # a known kind, or KeyError before anything is swapped in
            atomic_write_text(tmp / OUTPUT_MARKER, json.dumps({"kind": kind, "files": _files_under(tmp)},
                                                              indent=1) + "\n")
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=_prefix(path.name), suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


OUTPUT_MARKER = ".critic-output.json"
"""The file written into every folder this tool makes as a whole (a saved critic, a report): its kind and the
files it wrote there.  Such a folder is replaced only when it is absent, empty, or holds this marker of the same
kind and no file the tool did not write (:func:`check_replaceable`): an lm-eval output folder (which holds a
``results.json`` of its own) or a report folder where the user left notes is never replaced."""


def _files_under(path: Path) -> list[str]:
    """The files under ``path`` (recursive, links included as files), relative POSIX paths, the marker left out."""
    out = []
    for root, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = Path(root, name).relative_to(path).as_posix()
            if rel != OUTPUT_MARKER:
                out.append(rel)
    return sorted(out)


def _read_marker(path: Path) -> dict | None:
    try:
        marker = json.loads((path / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and isinstance(marker.get("kind"), str) and isinstance(marker.get("files"), list)
    return marker if ok else None


OUTPUT_KINDS = {"critic": "a saved critic", "report": "a report directory", "run": "a run folder",
                "lm-run": "an LM run folder", "catalogue": "the plugins' catalogue folder"}
"""The kinds of folder this tool writes (as a whole: :func:`atomic_directory`; over time: :func:`claim_folder`),
and how messages name them."""


def claim_folder(path: str | Path, kind: str, *, legacy=None) -> Path:
    """The folder ``path`` for this tool to write into over time (a run folder, whose stages come and go): made and
    marked (:data:`OUTPUT_MARKER`) when absent or empty; taken when marked as ``kind``, or when ``legacy(path)``
    recognises one written before folders were marked (then marked); else ``ValueError`` naming the folder and what
    is in it, before anything is written."""
    what = OUTPUT_KINDS[kind]
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ValueError(f"{path}: exists and is not {what}; refusing to write into it: it is not a folder")
    entries = sorted(e.name for e in path.iterdir()) if path.is_dir() else []
    marker = _read_marker(path) if entries else None
    if marker is not None and marker["kind"] == kind:
        return path
    if entries and (marker is not None or legacy is None or not legacy(path)):
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(f"{path}: exists and is not {what}; refusing to write into it: it holds {shown}, which this "
                         "tool did not write as one (choose a new or an empty folder)")
    path.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path / OUTPUT_MARKER, json.dumps({"kind": kind, "files": []}, indent=1) + "\n")
    return path


def check_replaceable(path: str | Path, kind: str) -> None:
    """Refuse to replace anything at ``path`` but an empty folder or one this tool wrote as ``kind`` (a key of
    :data:`OUTPUT_KINDS`; :data:`OUTPUT_MARKER`) that holds nothing else.  Raises ``ValueError`` naming the
    folder and what is in it."""
    what = OUTPUT_KINDS[kind]
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        raise ValueError(f"{path}: exists and is not {what}; refusing to replace it: it is not a folder")
    entries = sorted(e.name for e in path.iterdir())
    if not entries:
        return
    marker = _read_marker(path)
    if marker is None or marker["kind"] != kind:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(f"{path}: exists and is not {what}; refusing to replace it: it holds {shown}, which this "
                         "tool did not write as one (choose a new or an empty folder)")
    extra = sorted(set(_files_under(path)) - set(marker["files"]))
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise ValueError(f"{path}: is {what} but also holds files this tool did not write ({shown}); refusing to "
                         "replace it, which would delete them: move them out or choose another folder")


@contextlib.contextmanager
def output_lock(path: str | Path, *, inside: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the output ``path`` while a run writes it: a second run asking for the same output
    stops at once with a ``ValueError`` naming it and the process that holds it.  The lock is ``fcntl.flock`` on
    ``.NAME.lock`` beside ``path`` (``inside``: ``.lock`` in the folder ``path``, for a run folder), holding the
    holder's PID; the kernel releases it when the process ends, however it ends.  The holder removes the file
    before releasing it; a run that locked a file removed meanwhile (its path now names another file, or none)
    tries again, so two runs never hold two different files."""
    import fcntl

    path = Path(path)
    lock = path / ".lock" if inside else path.with_name(f".{path.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~current_umask())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(f"{path}: another run (process {holder}) is writing it; wait for it to end or choose "
                             "another output") from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed it after we opened it: lock the file the path names now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def user_cache(*parts: str) -> Path:
    """``$XDG_CACHE_HOME/critic/PARTS``, else ``~/.cache/critic/PARTS``: where the tool keeps what it builds or
    fetches once (the tools it compiles, a corpus wheel, the plugins' catalogue)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "critic", *parts)
