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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_open", "atomic_directory", "check_replaceable",
           "sha256_file", "sha256_bytes"]


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
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
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
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
