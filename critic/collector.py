"""Python's cyclic garbage collector, tuned where the tool allocates in bulk: one place for every setting of it.

A process that has imported torch holds about 170,000 objects that live until it exits; each of the collector's
full collections walks them all (60-80 ms here), and a young collection fires every 700 new containers.  Three
blocks change that, each putting the collector back as it found it when the block ends, however it ends:

- :func:`paused`: no collection while a whole file is read into memory (parsed documents hold no cycles, yet
  reading a large file into a list takes about twice as long with the collector on);
- :func:`frozen`: what exists when the block starts kept out of every collection while it runs (:func:`gc.freeze`),
  and, given a ``threshold``, young collections that wait for that many allocations: a command's start-up
  (a full collection set off while its last modules import) and a stream's chunks (1.5x the CPU of ``critic
  score`` over 200,000 man pages otherwise, for the same bytes and the same peak memory).  Cycles made inside
  the block are still collected.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["paused", "frozen", "STREAM_THRESHOLD"]

STREAM_THRESHOLD = 100_000
"""Allocations between two young collections while a stream is scored (Python's default: 700)."""


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection while the block runs (a collector the caller paused stays paused)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def frozen(threshold: int | None = None) -> Iterator[None]:
    """What exists now left out of the collector's collections while the block runs, and young collections every
    ``threshold`` allocations when given; after the block the threshold is put back.  Frozen objects become
    collectable again when the outermost such block ends (a block inside another, a stream inside a command,
    leaves what it froze to the outer one)."""
    before = gc.get_threshold()
    outermost = gc.get_freeze_count() == 0
    gc.freeze()  # no collection first (60-80 ms with torch loaded): what is garbage now is collected after unfreeze
    if threshold is not None:
        gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if outermost:
            gc.unfreeze()
