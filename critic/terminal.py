"""What reaches a terminal from data: one sanitiser.

Document ids, set names and texts come from users' files; written raw to a terminal, escape sequences in them
can clear the screen, set the window title or write the clipboard.  :func:`printable` shows every control
character (C0 but tab and newline, DEL, C1) as a ``\\xNN`` escape; every table or line that carries data to a
terminal or a Markdown file goes through it (:func:`critic.results.markdown_cell`).  HTML is escaped by
:mod:`critic.html`.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """``str(text)`` with each control character but tab and newline shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
