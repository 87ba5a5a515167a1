"""Progress bars for long work inside critics (an SVI fit's steps), shown when a command asks.

Library calls stay quiet; the command line turns bars on around the work it runs (``with shown():``),
so ``critic fit ctm`` counts its optimisation steps with a rate and an ETA instead of being silent.
``critic -q`` hides every bar (:func:`enabled`: the ``critic`` logger says nothing below WARNING), and the commands
ask for the bars of the work they pass ``progress=`` to only when :func:`enabled`.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from .terminal import LOGGER, get_logger

__all__ = ["shown", "bar", "enabled"]

_SHOWN = False


def enabled() -> bool:
    """Whether progress may be shown at all: the ``critic`` logger says INFO (not ``critic -q``)."""
    return get_logger(LOGGER).isEnabledFor(logging.INFO)


@contextmanager
def shown() -> Iterator[None]:
    """Show the progress bars of the work done inside this block (unless :func:`enabled` says not)."""
    global _SHOWN
    before, _SHOWN = _SHOWN, True
    try:
        yield
    finally:
        _SHOWN = before


def bar(total: int, desc: str, unit: str):
    """A tqdm bar over ``total`` ``unit``s, disabled outside :func:`shown` and under ``critic -q``."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not (_SHOWN and enabled()), mininterval=1.0)
