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
import os
import re
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_open", "atomic_directory", "check_replaceable",
           "sha256_file", "sha256_bytes", "current_umask", "remove_stale_temporaries", "is_temporary"]

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
    and ``path`` is left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
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
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a directory in a temporary sibling; it replaces ``path`` when the block succeeds.

    Yields the temporary directory to write into.  An existing ``path`` is
    moved aside and deleted only after the new one is in place; on an exception
    the temporary directory is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(path.name), suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 -> what mkdir() would give
        yield tmp
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


def check_replaceable(path: str | Path, marker: str, what: str) -> None:
    """Refuse to replace anything at ``path`` but an empty directory or an earlier ``what``.

    ``what`` is recognised by the file ``marker`` inside it (``critic.json``
    for a saved critic, ``results.json`` for a report).  Raises ``ValueError``.
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / marker).is_file())):
        raise ValueError(f"{path}: exists and is not {what}; refusing to replace it")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
