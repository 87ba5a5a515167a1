"""The copy factorisation against an independent quadratic reference, and by hand."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from critics.repetition.factorize import Factorisation, encode, factorize


def brute_force(codes: list, min_copy: int) -> list[tuple[int, int, int]]:
    """Greedy LZ77 by definition: at each position try every earlier start, keep the longest match (overlap
    allowed), the leftmost on ties; a match of ``min_copy`` or more is a copy, else one NEW unit joins the NEW
    segment before it.  ``(start, length, source)`` per segment, ``source = -1`` for NEW."""
    out, i, n = [], 0, len(codes)
    while i < n:
        best, source = 0, -1
        for j in range(i):
            k = 0
            while i + k < n and codes[j + k] == codes[i + k]:
                k += 1
            if k > best:
                best, source = k, j
        if best >= min_copy:
            out.append((i, best, source))
            i += best
        else:
            if out and out[-1][2] == -1:
                out[-1] = (out[-1][0], out[-1][1] + 1, -1)
            else:
                out.append((i, 1, -1))
            i += 1
    return out


def segments(f: Factorisation) -> list[tuple[int, int, int]]:
    return list(zip(f.starts.tolist(), f.lengths.tolist(), f.sources.tolist()))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.integers(1, 5))
def test_matches_the_quadratic_reference(codes, min_copy):
    f = factorize(codes, min_copy)
    assert segments(f) == brute_force(codes, min_copy)
    assert f.units == len(codes) and (f.starts == np.cumsum(f.lengths) - f.lengths).all()  # they tile the sequence


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=12), st.integers(2, 6), st.lists(st.integers(3, 9), max_size=8))
def test_loops_of_random_periods_match_the_reference(period, times, tail):
    codes = period * times + tail  # a loop, then other text
    assert segments(factorize(codes, 2)) == brute_force(codes, 2)


def test_a_paragraph_written_three_times_is_one_copy_of_twice_its_length():
    paragraph = [0, 1, 2, 3]
    f = factorize(paragraph * 3 + [9])
    assert segments(f) == [(0, 4, -1), (4, 8, 0), (12, 1, -1)]
    assert f.offsets.tolist() == [0, 4, 0]  # the period
    assert f.copied_units == 8 and f.looped_units == 8 and f.copies == [(4, 8, 0)]


def test_one_unit_repeated_overlaps_its_source():
    f = factorize([7, 7, 7, 7, 7])
    assert segments(f) == [(0, 1, -1), (1, 4, 0)] and f.offsets.tolist() == [0, 1]


def test_a_distant_copy_is_not_a_loop_and_its_source_is_the_first_writing():
    codes = [0, 1, 5, 0, 1, 6, 0, 1]  # "0 1" written three times apart: each copy points at the first
    f = factorize(codes, 2)
    assert f.copies == [(3, 2, 0), (6, 2, 0)]
    assert f.offsets[f.is_copy].tolist() == [3, 6] and f.looped_units == 0


def test_a_copy_of_another_source_right_after_a_copy():
    codes = [0, 1, 9, 2, 3, 0, 1, 2, 3]
    assert segments(factorize(codes, 2)) == [(0, 5, -1), (5, 2, 0), (7, 2, 3)]


def test_min_copy_turns_short_matches_into_new_text():
    codes = [0, 1, 2, 9, 0, 1, 2]
    assert segments(factorize(codes, 3)) == [(0, 4, -1), (4, 3, 0)]
    assert segments(factorize(codes, 4)) == [(0, 7, -1)]
    assert segments(factorize([], 1)) == []


def test_from_copies_rebuilds_the_factorisation():
    for codes in ([0, 1, 0, 1, 0, 1, 2], [3, 3, 3], [0, 1, 2], [0, 1, 9, 2, 3, 0, 1, 2, 3]):
        f = factorize(codes, 2)
        assert segments(Factorisation.from_copies(f.copies, len(codes))) == segments(f)


def test_encode_gives_equal_keys_equal_codes():
    assert encode(["b", "a", "b", "c", "a"]) == [0, 1, 0, 2, 1]
