"""``generations.jsonl``: the append-only log of finished generations, robust to a kill mid-write.

One line per generation, written with one ``write`` then ``flush`` + ``fsync``::

    {"index": 17, "text": "...<|endofdoc|>", "n_tokens": 212, "finished": true, "parse_error": null}

A generation counts once its line ends with a newline.  :func:`read_log` keeps every complete line,
discards a torn last line (no newline: the process died while writing it), truncates the file
back to the last complete line so that appending continues cleanly, and reports how many lines it
discarded.  Anything else that is wrong (bad JSON or fields in a complete line, an index out of
range or repeated) is a :class:`~critic.document.DocumentError` naming the file and line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..document import DocumentError

__all__ = ["Generation", "read_log", "LogWriter"]


@dataclass(frozen=True)
class Generation:
    """One generation: its index, decoded text (end token included when ``finished``), token count
    (end token included), whether it drew the end token, and why it does not parse (or ``None``)."""

    index: int
    text: str
    n_tokens: int
    finished: bool
    parse_error: str | None

    def to_json(self) -> str:
        return json.dumps({"index": self.index, "text": self.text, "n_tokens": self.n_tokens,
                           "finished": self.finished, "parse_error": self.parse_error}, ensure_ascii=False)


_FIELDS = {"index": int, "text": str, "n_tokens": int, "finished": bool, "parse_error": (str, type(None))}


def _generation(obj: Any, where: str, n: int | None) -> Generation:
    if not isinstance(obj, dict) or set(obj) != set(_FIELDS):
        raise DocumentError(f"{where}: expected an object with the keys {', '.join(_FIELDS)}")
    for key, kind in _FIELDS.items():
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise DocumentError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    if obj["index"] < 0 or (n is not None and obj["index"] >= n):
        raise DocumentError(f"{where}: index {obj['index']} is outside 0..{'' if n is None else n - 1}")
    return Generation(**obj)


def read_log(path: str | Path, *, n: int | None = None, repair: bool = True) -> tuple[dict[int, Generation], int]:
    """``({index: generation}, torn lines discarded)`` of a log (empty when the file is absent).

    With ``repair`` a torn last line is cut off the file; without, the file is left as it is.
    """
    path = Path(path)
    if not path.is_file():
        return {}, 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1              # bytes up to and including the last newline
    torn = int(keep < len(data))
    out: dict[int, Generation] = {}
    for lineno, raw in enumerate(data[:keep].split(b"\n")[:-1], start=1):
        where = f"{path}:{lineno}"
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DocumentError(f"{where}: not a generation line ({exc})") from None
        gen = _generation(obj, where, n)
        if gen.index in out:
            raise DocumentError(f"{where}: generation {gen.index} is written twice")
        out[gen.index] = gen
    if torn and repair:
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            os.fsync(fh.fileno())
    return out, torn


class LogWriter:
    """Appends generations to a log, each line flushed and fsynced before :meth:`write` returns."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, gen: Generation) -> None:
        data = (gen.to_json() + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
