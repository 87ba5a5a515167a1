"""The CTM inference benchmark runs at toy scale: both methods timed, Newton's stopping rule converges, batched and
one-at-a-time Newton agree, and the agreement figures are what their definition says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.benchmarks.ctm_inference_speed import M_TOL, V_REL_TOL, agreement, main


def test_benchmark_toy_scale(tmp_path, capsys):
    out = tmp_path / "bench.json"
    res = main(["--topics", "8", "--vocab", "300", "--docs", "60", "--single-docs", "6", "--steps", "40",
                "--iterations", "40", "--batch-size", "30", "--tol", "1e-3", "--json", str(out)])
    assert res["docs"] == 60 and res["single"]["docs"] == 6 and res["threads"] == 1
    for way, n in (("today", 60), ("newton", 60), ("single", 6)):
        assert res[way]["docs_per_s"] == pytest.approx(n / res[way]["seconds"])
        assert 1 <= res[way]["mean_steps"] <= 2 * 40  # Newton's two stages are capped at 40 each
    assert res["ratio"] == pytest.approx(res["newton"]["docs_per_s"] / res["today"]["docs_per_s"])
    assert res["newton"]["converged"] == 1.0  # the stopping rule triggers on every toy document
    single = res["single"]
    assert single["compared"] + single["stopped_differently"] == 6 and single["compared"] >= 5
    assert single["agree"] and single["max_abs_m_diff"] <= M_TOL and single["max_rel_v_diff"] <= V_REL_TOL
    assert res["newton_vs_today"]["m"]["corr"] > 0.9
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert "ratio newton/today" in capsys.readouterr().out


def test_agreement_by_hand():
    t_a, t_b = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 3.0])
    m_a, m_b = np.array([[0.0, 1.0], [2.0, 3.0], [1.0, 1.0]]), np.array([[0.0, 1.0], [2.0, 2.0], [1.0, 1.5]])
    got = agreement(t_a, t_b, m_a, m_b)
    assert got["latent_nll"]["max_abs"] == 1.0 and got["latent_nll"]["median_abs"] == 0.5
    assert got["m"]["max_abs"] == 1.0 and got["m"]["median_abs"] == 0.0
    assert got["latent_nll"]["corr"] == pytest.approx(np.corrcoef(t_a, t_b)[0, 1])
