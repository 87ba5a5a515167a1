"""The Ordered BERTScore benchmark runs end to end on the fixture, and the batched path equals
the per-document path of the bert-score package."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.benchmarks.obs_speed import PerDocumentBertScore, load_pairs, main


def test_benchmark_on_fixture(fixture_manpage_root, capsys):
    res = main(["--root", str(fixture_manpage_root), "--docs", "2", "--corruptions", "permuted,dropped",
                "--check", "4"])
    assert res["pairs"] == 4 and res["checked_pairs"] == 4
    assert res["max_abs_diff_vs_unpadded"] <= 1e-5
    assert "docs/s" in capsys.readouterr().out


def test_batched_matrices_equal_bert_score_pair_by_pair(fixture_manpage_root):
    from critics.metrics.encoders import BertScoreSimilarity

    golds, preds = load_pairs(fixture_manpage_root, 2, ["permuted", "repeated"])
    golds, preds = [g[:4] for g in golds], [p[:4] for p in preds]
    batched = BertScoreSimilarity(batch_tokens=512).matrices(list(zip(golds, preds)))
    alone = PerDocumentBertScore(batch_size=1)
    for g, p, got in zip(golds, preds, batched):
        np.testing.assert_allclose(got, alone.matrix(g, p), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="at least one sentence"):
        BertScoreSimilarity().matrices([(["a"], [])])
