"""The CTM batches benchmark at toy size: its padding is counted by hand, a page's T(x) in the batches is the page's
alone, and the layout by width holds no more cells than the old one."""

from __future__ import annotations

import numpy as np

from critics.topics.ctm.words import BagOfWords
from experiments.benchmarks.ctm_batches import main, padding


def test_padding_counts_the_cells_of_each_batch_by_hand():
    counts = np.zeros((4, 6), dtype=np.float32)
    for row, width in enumerate((1, 5, 2, 6)):
        counts[row, :width] = 1
    bow = BagOfWords.from_dense(counts)
    assert padding(bow, [np.array([0, 1]), np.array([2, 3])]) == (2 * 5 + 2 * 6) / 14
    assert padding(bow, bow.batches(2)) == (2 * 2 + 2 * 6) / 14      # by width: (1, 2) and (5, 6)
    assert [list(rows) for rows in bow.batches(3)] == [[0, 1, 2], [3]]


def test_the_benchmark_runs_on_the_fixture_pages(fixture_manpage_root, tmp_path):
    out = main(["--root", str(fixture_manpage_root), "--topics", "3", "--pages", "12", "--json",
                str(tmp_path / "b.json")])
    assert out["alone_vs_batch_nats"]["now_max"] <= 1e-6
    assert 1.0 <= out["padding"]["now"] <= out["padding"]["old"]
    assert out["fit_cpu_s"]["ratio"] == out["fit_cpu_s"]["ctm"] / out["fit_cpu_s"]["lda"]
    assert (tmp_path / "b.json").is_file()
