"""What reaches a terminal from data: one sanitiser.

Document ids, set names and texts come from users' files; written raw to a terminal, escape sequences in them
can clear the screen, set the window title or write the clipboard.  :func:`printable` shows every control
character (C0 but tab and newline, DEL, C1) as a ``\\xNN`` escape; every table or line that carries data to a
Markdown file goes through it (:func:`critic.results.markdown_cell`), and every command's stdout and stderr
(:func:`printable_streams`, entered by :func:`critic.cli.main`); JSON printed or streamed is written by
:func:`json_line`, which escapes them as JSON does.  HTML is escaped by
:mod:`critic.html`.

What critic says beside a command's output -- what it read, what it is doing, warnings, the one error line -- is
logged, on the ``critic`` logger hierarchy (``critic.cli``, ``critic.commands.scoring``, ...: :func:`get_logger`),
and written to stderr by one handler (:class:`StderrHandler`) as ``critic: message``, ``critic: warning: ...``,
``critic: error: ...`` (``critic: debug: [logger] ...`` with ``-v``), every line printable.  The handler is the
``critic`` logger's from the first :func:`get_logger` on, at level INFO, so a library call says what it said
before; :func:`verbosity` sets the level for a command's ``-v`` / ``-q``; an application that logs on its own
hands critic's records to its handlers with :func:`use_application_logging`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from typing import Any, Iterator, TextIO

__all__ = ["printable", "json_line", "path_text", "PrintableStream", "printable_streams", "LOGGER", "StderrHandler",
           "get_logger", "verbosity", "level_of", "use_application_logging"]

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


# ------------------------------------------------------------------ what critic says on stderr: logging

LOGGER = "critic"
"""The root of critic's loggers: every module logs on ``logging.getLogger(__name__)`` below it."""

_LABELS = {logging.DEBUG: "debug: ", logging.INFO: "", logging.WARNING: "warning: ", logging.ERROR: "error: ",
           logging.CRITICAL: "error: "}


class _Formatter(logging.Formatter):
    """``critic: [LABEL: ]message``: the label says the level (none for INFO; a record's ``label`` attribute, given as
    ``extra={"label": ""}``, overrides it); a DEBUG line names its logger, and a record with an exception its
    traceback."""

    def format(self, record: logging.LogRecord) -> str:
        label = getattr(record, "label", None)
        if label is None:
            label = _LABELS.get(record.levelno, f"{record.levelname.lower()}: ")
        where = f"[{record.name}] " if record.levelno < logging.INFO else ""
        text = f"critic: {label}{where}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class StderrHandler(logging.Handler):
    """Writes each record as one printable line (:func:`printable`) to whatever ``sys.stderr`` is when it is
    emitted (a command's :func:`printable_streams`, pytest's capture), flushed at once."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.setFormatter(_Formatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = printable(self.format(record))
            stream = sys.stderr
            if stream is None:  # pythonw: nowhere to write
                return
            stream.write(text + "\n")
            stream.flush()
        except RecursionError:  # pragma: no cover - as logging.StreamHandler does
            raise
        except Exception:  # pragma: no cover
            self.handleError(record)


_HANDLER = StderrHandler()
_HANDED_OVER = False


def _install() -> logging.Logger:
    """The ``critic`` logger with :data:`_HANDLER` on it (once, unless an application took the records over): level
    INFO where none is set, and not propagated (the handler is the one place its records are written)."""
    root = logging.getLogger(LOGGER)
    if not _HANDED_OVER and _HANDLER not in root.handlers:
        root.addHandler(_HANDLER)
        root.propagate = False
        if root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
    return root


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` (a module's ``__name__`` under ``critic``, or a plugin's own name, put under
    ``critic.``), with critic's stderr handler installed on the ``critic`` logger."""
    _install()
    return logging.getLogger(name if name == LOGGER or name.startswith(LOGGER + ".") else f"{LOGGER}.{name}")


def level_of(count: int) -> int:
    """The level of a command's ``-v`` / ``-q`` count (``-v`` counts +1, ``-q`` -1): ``-qq`` ERROR (the error line
    only), ``-q`` WARNING, none INFO, ``-v`` DEBUG."""
    return {-1: logging.WARNING, 0: logging.INFO}.get(count, logging.DEBUG if count > 0 else logging.ERROR)


@contextlib.contextmanager
def verbosity(count: int) -> Iterator[logging.Logger]:
    """While the block runs, the ``critic`` logger's level is :func:`level_of` ``count`` (then restored)."""
    root = _install()
    before = root.level
    root.setLevel(level_of(count))
    try:
        yield root
    finally:
        root.setLevel(before)


def use_application_logging() -> None:
    """Hand critic's records to the application's logging: the stderr handler is removed, the ``critic`` logger
    propagates to the root logger again, and its level is left to the application (unset)."""
    global _HANDED_OVER
    _HANDED_OVER = True
    root = logging.getLogger(LOGGER)
    root.removeHandler(_HANDLER)
    root.propagate = True
    root.setLevel(logging.NOTSET)
