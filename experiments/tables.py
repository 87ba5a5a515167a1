"""Formatting shared by the studies' Markdown tables."""

from __future__ import annotations

import math

__all__ = ["cell"]


def cell(value, fmt: str = ".2f") -> str:
    """``value`` formatted with ``fmt``, or ``—`` for a value a set does not have (``None``, NaN, inf)."""
    return "—" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)
