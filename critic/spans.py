"""Spans of whole lines of a file: an input cut into chunks by the positions of its newlines alone.

A file whose lines are read each on its own (JSON lines, one generation a line) need not be parsed to be cut
into chunks: :func:`plan_spans` finds every ``n``-th newline (a scan of the bytes, gigabytes a second) and
each :class:`Span` is read by whoever scores it (:func:`read_span`), a Dask worker on another machine included.
So the process that plans a stream reads the bytes once and parses none of them.

A span remembers the file's size and modification time when it was planned (:attr:`Span.stamp`): a file
changed since is refused by name, never read half old and half new.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterator

__all__ = ["Span", "file_stamp", "plan_spans", "read_span", "SCAN_BYTES"]

SCAN_BYTES = 16 * 2**20
"""Bytes read at a time while newlines are counted."""


@dataclass(frozen=True)
class Span:
    """Whole lines of the file ``path``: its bytes ``start:end``, ``lines`` lines from line ``first_line`` (lines
    counted from 1, the last line of a file maybe without its newline); ``stamp``: the file's
    :func:`file_stamp` when the span was planned.  Printed as its path (a reader's messages name the file)."""

    path: str
    start: int
    end: int
    first_line: int
    lines: int
    stamp: tuple[int, int]

    def __str__(self) -> str:
        return self.path

    @property
    def last_line(self) -> int:
        """The line number of its last line."""
        return self.first_line + self.lines - 1


def file_stamp(path: str | os.PathLike) -> tuple[int, int]:
    """``(size in bytes, modification time in ns)`` of ``path``."""
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns


def plan_spans(path: str | os.PathLike, lines_per_span: int, *, digest: "hashlib._Hash | None" = None
               ) -> Iterator[Span]:
    """The file at ``path`` as consecutive spans of ``lines_per_span`` lines each (the last one may hold fewer;
    an empty file has none), found by counting newlines (``bytes.count`` a block, ``bytes.find`` up to each span's
    end), so memory stays at :data:`SCAN_BYTES` whatever the file's size.  ``digest`` (a :mod:`hashlib` object),
    when given, is updated with every byte read: the file's hash from the same read.  ``ValueError`` for
    ``lines_per_span < 1``; ``OSError`` from reading."""
    if lines_per_span < 1:
        raise ValueError(f"lines_per_span must be at least 1, got {lines_per_span}")
    name, stamp = os.fspath(path), file_stamp(path)
    start = offset = counted = 0  # the open span's first byte and lines so far, the block's first byte
    first_line, last_byte = 1, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(SCAN_BYTES):
            if digest is not None:
                digest.update(block)
            newlines, at = block.count(b"\n"), 0  # the block's newlines; where the open span goes on in it
            while newlines >= lines_per_span - counted:
                newlines -= lines_per_span - counted
                for _ in range(lines_per_span - counted):
                    at = block.find(b"\n", at) + 1
                yield Span(name, start, offset + at, first_line, lines_per_span, stamp)
                start, first_line, counted = offset + at, first_line + lines_per_span, 0
            counted += newlines
            offset += len(block)
            last_byte = block[-1:]
    if offset > start:  # the last lines, the very last without a newline when the file does not end with one
        yield Span(name, start, offset, first_line, counted + (last_byte != b"\n"), stamp)


def read_span(span: Span) -> bytes:
    """The bytes of ``span``; ``ValueError`` naming the file when it changed since the span was planned (its
    size or modification time), ``OSError`` from reading."""
    with open(span.path, "rb") as fh:
        stamp = os.fstat(fh.fileno())
        if (stamp.st_size, stamp.st_mtime_ns) != span.stamp:
            raise ValueError(f"{span.path}: changed while it was being read (now {stamp.st_size} bytes, then "
                             f"{span.stamp[0]}); score it again once it is written")
        fh.seek(span.start)
        return fh.read(span.end - span.start)
