"""The outlier-detection benchmark: its AUC is sklearn's, its ranking is the report's, and it runs at toy size."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.benchmarks.outliers import auc, detection, main, ranking_scores


def test_auc_is_sklearn_s_and_the_ranking_is_the_report_s():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    scores, bad = rng.integers(0, 5, 40).astype(float), rng.random(40) < 0.3  # ties on purpose
    assert auc(scores, bad) == pytest.approx(roc_auc_score(bad, scores), abs=1e-12)
    p, per_step = np.array([0.5, 0.1, 0.1, 0.9]), np.array([1.0, 2.0, 3.0, 0.5])
    assert list(np.argsort(-ranking_scores(p, per_step))) == [2, 1, 0, 3]  # smaller p first, then larger T/M
    found = detection(np.array([4.0, 3.0, 2.0, 1.0]), np.array([True, False, True, False]), n_bootstrap=50)
    assert found["auc"] == 0.75 and found["precision_at_k"] == 0.5 and found["k"] == 2


def test_the_benchmark_runs_on_the_fixture_pages(fixture_manpage_root, capsys):
    res = main(["--cases", "sections", "--root", str(fixture_manpage_root), "--bootstrap", "20", "--rate", "0.2"])
    permuted = res["cases"]["sections"]["corruptions"]["permuted"]
    for score in ("length", "plain"):
        r = permuted[score]
        assert 0.0 <= r["auc_ci"][0] <= r["auc"] <= r["auc_ci"][1] <= 1.0 and r["k"] >= 1
        assert set(r["calibration"]) == {"all", "tertiles"} and len(r["calibration"]["tertiles"]) == 3
    assert "permuted" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--lda-topics", "x"], ["--lda-topics", "1,3"], ["--cases", "sectons"]])
def test_bad_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "Traceback" not in capsys.readouterr().err
