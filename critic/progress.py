"""Progress bars for long work inside critics (an SVI fit's steps), shown when a command asks.

Library calls stay quiet; the command line turns bars on around the work it runs (``with shown():``),
so ``critic fit ctm`` counts its optimisation steps with a rate and an ETA instead of being silent.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

__all__ = ["shown", "bar"]

_SHOWN = False


@contextmanager
def shown() -> Iterator[None]:
    """Show the progress bars of the work done inside this block."""
    global _SHOWN
    before, _SHOWN = _SHOWN, True
    try:
        yield
    finally:
        _SHOWN = before


def bar(total: int, desc: str, unit: str):
    """A tqdm bar over ``total`` ``unit``s, disabled outside :func:`shown`."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not _SHOWN, mininterval=1.0)
