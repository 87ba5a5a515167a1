"""Spans of lines: found by newlines alone, they cover a file exactly as its line reader splits it, at any block
size (and the file's SHA-256 from the same read); a span's lines keep their numbers; a file changed since it was planned is refused by name."""

from __future__ import annotations

import hashlib
import io
import os

import numpy as np
import pytest

from critic import spans
from critic.document import DocumentError, iter_input_lines
from critic.spans import Span, plan_spans, read_span


def random_file(rng: np.random.Generator) -> bytes:
    """Lines of 0-9 bytes of a small alphabet with newlines and carriage returns; maybe no final newline."""
    lines = [bytes(rng.choice(list(b"ab \r{}"), size=int(rng.integers(0, 10)))) for _ in range(int(rng.integers(0, 40)))]
    data = b"\n".join(lines)
    return data + b"\n" if rng.random() < 0.5 else data


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_spans_cover_the_file_as_its_line_reader_splits_it(tmp_path, monkeypatch, block):
    monkeypatch.setattr(spans, "SCAN_BYTES", block)
    rng = np.random.default_rng(block)
    for case in range(60):
        data = random_file(rng)
        path = tmp_path / f"f{case}.txt"
        path.write_bytes(data)
        want = list(io.BytesIO(data))  # what iterating the open file gives: lines split at b"\n" only
        for per_span in (1, 2, 3, 10):
            digest = hashlib.sha256()
            planned = list(plan_spans(path, per_span, digest=digest))
            assert digest.hexdigest() == hashlib.sha256(data).hexdigest()  # the file's hash, from the same read
            assert [(s.start, s.end) for s in planned] == [
                (len(b"".join(want[:i])), len(b"".join(want[:i + per_span]))) for i in range(0, len(want), per_span)]
            assert [(s.first_line, s.lines) for s in planned] == [
                (i + 1, len(want[i:i + per_span])) for i in range(0, len(want), per_span)]
            assert [raw for s in planned for _, raw in iter_input_lines(s)] == want
            assert [n for s in planned for n, _ in iter_input_lines(s)] == list(range(1, len(want) + 1))
    with pytest.raises(ValueError, match="lines_per_span must be at least 1, got 0"):
        next(plan_spans(path, 0))


def test_a_span_drops_the_byte_order_mark_only_at_the_start_of_the_file(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbfa\n\xef\xbb\xbfb\nc\n")
    first, second = list(plan_spans(path, 1))[:2]
    assert list(iter_input_lines(first)) == [(1, b"a\n")] == list(iter_input_lines(path))[:1]
    assert list(iter_input_lines(second)) == [(2, b"\xef\xbb\xbfb\n")]


def test_a_file_changed_since_its_spans_were_planned_is_refused_by_name(tmp_path):
    path = tmp_path / "gens.jsonl"
    path.write_bytes(b"a\nb\n")
    span = next(plan_spans(path, 1))
    assert read_span(span) == b"a\n" and str(span) == str(path) and span.last_line == 1
    path.write_bytes(b"a\nb\nc\n")
    with pytest.raises(DocumentError, match=rf"^{path}: changed while it was being read \(now 6 bytes, then 4\)"):
        list(iter_input_lines(span))
    stamp = os.stat(path)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))  # same size, touched
    with pytest.raises(ValueError, match="changed while it was being read"):
        read_span(Span(str(path), 0, 2, 1, 1, (6, stamp.st_mtime_ns)))
