"""The scale benchmark runs end to end at toy size: the Dask run writes the serial bytes, memory is measured, and
the statistics child reports the Latent PPL difference of the two scored sets."""

from __future__ import annotations

import json
import math

import pytest

from experiments.benchmarks.scale import main, perturbed_copies

pytest.importorskip("distributed")


def _ppl(path) -> float:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    t = sum(r["latent_nll"] for r in rows if "latent_nll" in r)
    return math.exp(t / sum(r["latent_steps"] for r in rows if "latent_nll" in r))


def test_the_benchmark_at_toy_size(fixture_manpage_root, tmp_path, capsys):
    result = main(["--root", str(fixture_manpage_root), "--documents", "300", "--small", "100", "--workers", "2",
                   "--coref-documents", "0", "--keep", str(tmp_path)])
    sections = result["sections"]
    assert sections["dask_large"]["identical"] is True
    assert sections["dask_large"]["chunks"] == sections["serial_large"]["chunks"] == 1  # 8,192 documents a chunk
    ratios = sections["dask_large"]["round_ratios"]
    assert len(ratios) == 3 and sections["dask_large"]["ratio"] == sorted(ratios)[1]  # the median of 3 rounds
    out = capsys.readouterr().out
    assert 0 < sections["dask_large"]["client_cpu"] and "one client keeps about" in out
    assert sections["serial_large"]["documents"] == 300 and sections["serial_large"]["peak_rss"] > 50 * 2**20
    stats = sections["statistics"]
    assert stats["ppl_difference"] == pytest.approx(
        _ppl(tmp_path / "candidate.serial.jsonl") - _ppl(tmp_path / "large.serial.jsonl"), rel=1e-9)
    assert result["coref"] == {"skipped": "--coref-documents 0"}
    assert "output identical: True" in out


def test_perturbed_copies_are_seeded_named_by_copy_and_keep_titles():
    from critic.document import Document, Section

    pages = [Document(f"p{i}", tuple(Section(f"t{k}", "x" * 300) for k in range(4))) for i in range(3)]
    first = list(perturbed_copies(pages, 7, seed=0))
    assert first == list(perturbed_copies(pages, 7, seed=0)) != list(perturbed_copies(pages, 7, seed=1))
    assert [d.id for d in first] == ["p0#0", "p1#0", "p2#0", "p0#1", "p1#1", "p2#1", "p0#2"]
    for doc in first:
        assert 3 <= len(doc.sections) <= 5 and {s.title for s in doc.sections} <= {"t0", "t1", "t2", "t3"}
        assert all(len(s.text) == 200 for s in doc.sections)
