"""The studies' shared Markdown cells: numbers, and ``—`` for what a set does not have."""

from __future__ import annotations

import math

import pytest

from experiments.tables import cell, interval


@pytest.mark.parametrize("value, fmt, text", [(1.23456, ".2f", "1.23"), (-0.5, "+.2f", "-0.50"), (3, ".3f", "3.000"),
                                              (None, ".2f", "—"), (math.nan, ".2f", "—"), (math.inf, ".3g", "—")])
def test_cell(value, fmt, text):
    assert cell(value, fmt) == text


@pytest.mark.parametrize("bounds, fmt, text", [
    ((1.234, 2.5), ".2f", "[1.23, 2.50]"), ((-0.86, 0.11), ".3f", "[-0.860, 0.110]"),
    ((None, None), ".2f", "—"), ((1.0, None), ".2f", "—"), ((math.nan, 2.0), ".2f", "—"), ((1.0, -math.inf), ".2f", "—"),
])
def test_interval(bounds, fmt, text):
    assert interval(bounds, fmt) == text
