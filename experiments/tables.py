"""Formatting shared by the studies' Markdown tables."""

from __future__ import annotations

import math

__all__ = ["cell", "interval"]


def cell(value, fmt: str = ".2f") -> str:
    """``value`` formatted with ``fmt``, or ``—`` for a value a set does not have (``None``, NaN, inf)."""
    return "—" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)


def interval(bounds, fmt: str = ".2f") -> str:
    """``[lo, hi]`` formatted with ``fmt``, or ``—`` when either bound is missing or not finite (a CI from
    fewer than two documents is never printed as a finding)."""
    lo, hi = bounds
    if "—" in (cell(lo), cell(hi)):
        return "—"
    return f"[{format(lo, fmt)}, {format(hi, fmt)}]"
