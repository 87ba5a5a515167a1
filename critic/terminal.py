"""What reaches a terminal from data: one sanitiser.

Document ids, set names and texts come from users' files; written raw to a terminal, escape sequences in them
can clear the screen, set the window title or write the clipboard.  :func:`printable` shows every control
character (C0 but tab and newline, DEL, C1) as a ``\\xNN`` escape; every table or line that carries data to a
Markdown file goes through it (:func:`critic.results.markdown_cell`), and every command's stdout and stderr
(:func:`printable_streams`, entered by :func:`critic.cli.main`); JSON printed or streamed is written by
:func:`json_line`, which escapes them as JSON does.  HTML is escaped by
:mod:`critic.html`.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any, Iterator, TextIO

__all__ = ["printable", "json_line", "path_text", "PrintableStream", "printable_streams"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def printable(text: object, keep: str = "") -> str:
    """``str(text)`` with each control character but tab, newline and those in ``keep`` shown as ``\\xNN``, and
    the bytes of a file name that are not UTF-8 (:func:`path_text`) too."""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else f"\\x{ord(m.group()):02x}",
                        path_text(text))


def path_text(path: object) -> str:
    """A path as text any UTF-8 writer takes (results.json, a report): bytes of its name that are not UTF-8 (kept
    by Python as lone surrogates) shown as ``\\xNN``."""
    return _SURROGATE.sub(_show_surrogate, str(path))


def _show_surrogate(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if 0xdc80 <= code <= 0xdcff else f"\\u{code:04x}"


def json_line(obj: Any) -> str:
    """``obj`` as one JSON line of UTF-8 text with every control character escaped (``\\u009b``): JSON escapes
    C0 itself, not DEL, C1 or the line separators, which a terminal (or a line reader) would act on; a lone
    surrogate (an id read from JSON's ``"\\ud800"``) is escaped too, so the line always encodes as UTF-8."""
    text = json.dumps(obj, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


class PrintableStream:
    """A text stream that writes through :func:`printable` (``keep``: control characters let through, the
    carriage return of a progress bar on stderr); everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO, keep: str = "") -> None:
        self._stream, self._keep = stream, keep

    def write(self, text: str) -> int:
        self._stream.write(printable(text, self._keep))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def printable_streams() -> Iterator[None]:
    """While the block runs, ``sys.stdout`` and ``sys.stderr`` write through :func:`printable` (stderr keeps
    ``\\r`` for progress bars): the one boundary every line a command prints crosses, whatever data it holds."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(sys.stdout), PrintableStream(sys.stderr, keep="\r")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
