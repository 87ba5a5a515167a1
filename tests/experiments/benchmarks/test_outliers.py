"""The outlier-detection benchmark: its AUC is sklearn's, its ranking is the report's, and it runs at toy size."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.benchmarks.outliers import auc, calibration, detection, main, ranking_scores, seen_share


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
        assert set(r["calibration"]) == {"all", "tertiles", "vs_reference"} and len(r["calibration"]["tertiles"]) == 3
        assert len(r["calibration"]["vs_reference"]["tertiles"]) == 3
    seen = res["cases"]["sections"]["seen_share"]          # permuted titles rarely read like a real page
    assert set(seen) == {"permuted", "repeated", "dropped"} and seen["permuted"]["bad"] < seen["permuted"]["real"]
    printed = capsys.readouterr().out
    assert "permuted" in printed and "read exactly like a training document" in printed


def test_seen_share_by_hand():
    assert seen_share(list("aab"), list("abcd")) == 0.5 and seen_share(["x"], ["x", "x"]) == 1.0
    assert np.isnan(seen_share(["x"], []))


@pytest.mark.parametrize("argv", [["--lda-topics", "x"], ["--lda-topics", "1,3"], ["--cases", "sectons"],
                                  ["--passage-share", "1"], ["--passage-share", "x"], ["--ctm-fit", "adam"],
                                  ["--calibration-null", "0"]])
def test_bad_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "Traceback" not in capsys.readouterr().err


def _words(rng):
    return rng.integers(20, 130, 414), rng.integers(20, 130, 373)  # the ctm case's reference and real documents


def test_calibration_against_the_reference_is_not_fooled_by_its_finite_size():
    """Calibrated p-values (one statistic or two combined, exchangeable documents, the ctm case's sizes) fail the
    plain KS test in some length tertile often (observed 5 of 10 at 0.01), because they share one reference of
    about 40 documents a bin; against the simulated null of that reference the KS p-values are uniform (mean of
    40 observed 0.48)."""
    from critic.outliers import outlier_p_values

    rng = np.random.default_rng(0)
    ref_words, words = _words(rng)
    failed, vs_reference = 0, []
    for r in range(10):
        j = 1 + r % 2
        p = outlier_p_values(rng.random((414, j)), rng.random((373, j)), pool_words=ref_words, words=words, seed=r).p
        cal = calibration(p, words, reference_words=ref_words, outlier_score="length", statistics=j, n_null=39, seed=r)
        failed += min(cal["tertiles"]) < 0.01
        vs_reference += [cal["vs_reference"]["all"], *cal["vs_reference"]["tertiles"]]
    assert failed >= 2 and 0.35 <= np.mean(vs_reference) <= 0.65 and min(vs_reference) >= 1 / 40


def test_calibration_against_the_reference_finds_a_length_confounded_score():
    """A statistic that grows with length: its plain p-values fail in every tertile (the smallest p the null allows),
    its length-matched ones pass; a combination that is conservative (Bonferroni's 2 min p, capped at 1) fails."""
    from critic.outliers import outlier_p_values

    rng = np.random.default_rng(1)
    ref_words, words = _words(rng)
    ref, values = ref_words + rng.normal(0, 20, 414), words + rng.normal(0, 20, 373)
    for score in ("plain", "length"):
        p = outlier_p_values(ref, values, pool_words=ref_words, words=words, outlier_score=score).p
        tertiles = calibration(p, words, reference_words=ref_words, outlier_score=score, n_null=99)["vs_reference"]
        assert (max(tertiles["tertiles"]) == 0.01) if score == "plain" else (min(tertiles["tertiles"]) > 0.05)
    each = outlier_p_values(rng.random((414, 2)), rng.random((373, 2)), pool_words=ref_words, words=words).components
    bonferroni = np.minimum(1.0, 2 * each.min(axis=1))
    cal = calibration(bonferroni, words, reference_words=ref_words, outlier_score="length", statistics=2, n_null=99)
    assert cal["vs_reference"]["all"] == 0.01


def test_the_topic_corruptions_do_what_they_say():
    """An off-topic passage replaces a run of the share asked for (0.3 of 20 words: 6) by consecutive words of a
    man page, the rest in order; topic drift keeps the first half and takes the other document's second half, cut
    to the same length."""
    import random

    from critic.document import Document, Section
    from experiments.benchmarks.outliers import _drift, _passage

    real = [Document("p", (Section(None, " ".join(f"w{i}" for i in range(20))),))]
    page = Document("man", (Section("NAME", " ".join(f"m{i}" for i in range(500))),))
    other = Document("o", (Section(None, " ".join(f"o{i}" for i in range(30))),))
    [bad] = _passage([page], 0.3)(real, random.Random(0))
    words = bad.text.split()
    inserted = [i for i, w in enumerate(words) if w.startswith("m")]
    assert bad.id == "p#passage" and len(words) == 20 and len(inserted) == 6
    assert inserted == list(range(inserted[0], inserted[0] + 6))
    first = int(words[inserted[0]][1:])
    assert words[inserted[0]:inserted[0] + 6] == [f"m{first + i}" for i in range(6)]
    assert [w for w in words if w.startswith("w")] == [f"w{i}" for i in range(20) if not
                                                       inserted[0] <= i < inserted[0] + 6]
    [drift] = _drift([other])(real, random.Random(0))
    assert drift.id == "p#drift" and drift.text.split() == [f"w{i}" for i in range(10)] + [f"o{i}" for i in range(15, 25)]
