"""Results as DataFrames (critic.frame): a row per document and critic holding each document's result as it is, a
row per critic and set holding each set's statistics, the flags by the panel's rule, and a clear error without
pandas."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest


def test_a_row_per_document_and_critic_holds_its_result(panel):
    frame = panel.to_pandas()
    assert list(frame.columns[:10]) == ["critic", "set", "id", "latent_nll", "latent_steps", "latent_nll_per_step",
                                        "outlier_p_value", "q_value", "flagged", "skipped"]
    expected = [(label, s.name, d) for label, r in panel.results.items() for s in r.sets for d in s.documents]
    assert len(frame) == len(expected) == sum(s.n + s.n_skipped for r in panel.results.values() for s in r.sets)
    for (_, row), (label, name, d) in zip(frame.iterrows(), expected):
        assert (row["critic"], row["set"], row["id"]) == (label, name, d.id)
        assert [row["latent_nll"], row["latent_steps"], row["outlier_p_value"], row["q_value"], row["words"]] == \
            [d.latent_nll, d.latent_steps, d.outlier_p_value, d.q_value, d.words]
        assert row["skipped"] is None and row["extras"] == d.extras


def test_flagged_is_the_panel_s_rule_and_never_a_reference_document(panel):
    frame = panel.to_pandas()
    flagged = {(label, f.set, f.id) for f in panel.flagged(listed=False) for label in f.by}
    assert flagged and {tuple(k) for k in frame[frame.flagged][["critic", "set", "id"]].values} == flagged
    assert not frame[frame.set == "reference"].flagged.any()
    assert frame[frame.set != "reference"].flagged.tolist() == \
        [d.outlier_p_value <= 0.2 for r in panel.results.values() for s in r.candidates.values() for d in s.documents]


def test_a_row_per_critic_and_set_holds_its_statistics(panel):
    summary = panel.summary()
    assert list(summary[["critic", "set"]].itertuples(index=False, name=None)) == \
        [(label, s.name) for label, r in panel.results.items() for s in r.sets]
    counts = panel.flag_counts()
    for _, row in summary.iterrows():
        s = panel.results[row["critic"]].set(row["set"])
        assert [row["n"], row["latent_ppl"], row["latent_ppl_ci_low"], row["latent_ppl_ci_high"], row["latent_nll"],
                row["latent_nll_ci_low"], row["latent_nll_ci_high"]] == \
            [s.n, s.latent_ppl, *s.latent_ppl_ci, s.latent_nll, *s.latent_nll_ci]
        assert row["headline"] == "latent_ppl" and row["warnings"] == s.warnings
        if row["set"] == "reference":
            assert math.isnan(row["latent_ppl_p_value"]) and row["flagged"] == 0
        else:
            assert [row["latent_ppl_difference"], row["latent_ppl_p_value"], row["latent_nll_difference"],
                    row["latent_nll_p_value"]] == [s.ppl_comparison.difference, s.ppl_comparison.p_value,
                                                   s.comparison.difference, s.comparison.p_value]
            assert [row["latent_nll_difference_ci_low"], row["latent_nll_difference_ci_high"]] == \
                list(s.comparison.difference_ci)
            assert row["flagged"] == counts[row["critic"]][row["set"]]


def test_one_critic_s_result_one_set_and_the_outliers_have_frames_too(panel):
    result = panel.results["sharp"]
    frame = result.to_pandas()
    assert set(frame.critic) == {"sections"} and "flagged" not in frame  # the flag rule is the panel's
    assert frame[["set", "id", "latent_nll"]].equals(
        panel.to_pandas().query("critic == 'sharp'")[["set", "id", "latent_nll"]].reset_index(drop=True))
    assert result.summary()["latent_ppl"].tolist() == [s.latent_ppl for s in result.sets]
    permuted = result.set("permuted").to_pandas()
    assert list(permuted.columns[:3]) == ["set", "id", "latent_nll"] and len(permuted) == result.set("permuted").n
    top = result.outliers(top=4)
    listed = top.to_pandas()
    assert listed["rank"].tolist() == [1, 2, 3, 4] and listed.columns[0] == "rank"
    assert list(listed[["set", "id"]].itertuples(index=False, name=None)) == [(name, d.id) for name, d in top]


def test_a_skipped_document_is_a_row_with_its_reason_and_no_numbers(panel):
    s = dataclasses.replace(panel.results["smooth"].set("dropped"), skipped={"ghost": "document has no sections"})
    frame = s.to_pandas()
    assert len(frame) == s.n + 1
    last = frame.iloc[-1]
    assert (last["id"], last["skipped"]) == ("ghost", "document has no sections") and math.isnan(last["latent_nll"])


def test_without_pandas_the_error_says_how_to_install_it(panel, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"results as DataFrames need pandas: pip install pandas"):
        panel.to_pandas()
    with pytest.raises(ImportError, match=r"pip install pandas"):
        panel.results["smooth"].summary()
