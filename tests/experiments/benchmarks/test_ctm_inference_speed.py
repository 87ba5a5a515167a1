"""The CTM inference benchmark runs at toy scale: both methods timed (CPU and wall time), Newton's stopping rule
converges, batched and one-at-a-time Newton agree, the long reference and the grid are measured, and the agreement
figures are what their definition says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.benchmarks import ctm_inference_speed
from experiments.benchmarks.ctm_inference_speed import M_TOL, V_REL_TOL, agreement, main


def test_benchmark_toy_scale(tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    grid = {"draws": (8,), "active_topics": (4, 24), "tol": (1e-5,), "first_stage_draws": (0, 4)}
    monkeypatch.setattr(ctm_inference_speed, "GRID", grid)
    res = main(["--topics", "8", "--vocab", "300", "--docs", "60", "--single-docs", "6", "--steps", "40",
                "--iterations", "40", "--batch-size", "30", "--tol", "1e-3", "--reference-docs", "20",
                "--reference-draws", "256", "--grid", "--json", str(out)])
    assert res["docs"] == 60 and res["single"]["docs"] == 6 and res["threads"] == 1
    for way, n in (("today", 60), ("other_seed", 60), ("newton", 60), ("single", 6)):
        assert res[way]["docs_per_s"] == pytest.approx(n / res[way]["seconds"])
        assert res[way]["docs_per_cpu_s"] == pytest.approx(n / res[way]["cpu_seconds"])
        assert 1 <= res[way]["mean_steps"] <= 40
    assert res["ratio"] == pytest.approx(res["newton"]["docs_per_cpu_s"] / res["today"]["docs_per_cpu_s"])
    assert res["ratio_wall"] == pytest.approx(res["newton"]["docs_per_s"] / res["today"]["docs_per_s"])
    assert res["newton"]["converged"] == 1.0  # the stopping rule triggers on every toy document
    single = res["single"]
    assert single["compared"] + single["stopped_differently"] == 6 and single["compared"] >= 5
    assert single["agree"] and single["max_abs_m_diff"] <= M_TOL and single["max_rel_v_diff"] <= V_REL_TOL
    assert res["newton_vs_today"]["m"]["corr"] > 0.9
    ref = res["reference"]
    assert (ref["docs"], ref["draws"], ref["tol"], ref["converged"]) == (20, 256, 1e-7, 1.0)
    # the bar: on the toy model too, Newton's 24 draws are closer to the long run than Adam's 40 steps
    assert ref["newton_meets_bar"] and ref["newton"]["latent_nll_median_abs"] <= ref["today"]["latent_nll_median_abs"]
    for name in ("today", "other_seed", "newton"):
        a = ref[name]
        assert 0 <= a["latent_nll_median_abs"] <= a["latent_nll_max_abs"] and a["m_median_abs"] >= 0
    rows = res["grid"]
    assert [(r["draws"], r["active_topics"], r["first_stage_draws"]) for r in rows] == \
        [(8, 4, 0), (8, 4, 4), (8, 24, 0), (8, 24, 4)]
    for row in rows:
        assert row["converged"] >= 0.95 and row["ratio"] == pytest.approx(
            row["docs_per_cpu_s"] / res["today"]["docs_per_cpu_s"])
        assert row["latent_nll_median_abs"] <= row["latent_nll_max_abs"]
    # the first stage adds iterations; fewer active topics than K (4 of 8) changes the path
    assert rows[1]["mean_steps"] > rows[0]["mean_steps"] and rows[0]["mean_steps"] != rows[2]["mean_steps"]
    from critics.topics.ctm import infer as ctm
    assert (ctm._ACTIVE_TOPICS, ctm._COARSE_DRAWS) == (24, 0)  # the grid restores Newton's constants
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    printed = capsys.readouterr().out
    assert "ratio newton/adam" in printed and "meets the bar" in printed and "grid (newton" in printed


def test_agreement_by_hand():
    t_a, t_b = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 3.0])
    m_a, m_b = np.array([[0.0, 1.0], [2.0, 3.0], [1.0, 1.0]]), np.array([[0.0, 1.0], [2.0, 2.0], [1.0, 1.5]])
    got = agreement(t_a, t_b, m_a, m_b)
    assert got["latent_nll"]["max_abs"] == 1.0 and got["latent_nll"]["median_abs"] == 0.5
    assert got["m"]["max_abs"] == 1.0 and got["m"]["median_abs"] == 0.0
    assert got["latent_nll"]["corr"] == pytest.approx(np.corrcoef(t_a, t_b)[0, 1])
    assert got["latent_nll"]["mean_shift"] == pytest.approx(0.5 / 3)
