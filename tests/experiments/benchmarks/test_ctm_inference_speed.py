"""The CTM inference benchmark runs at toy scale, times both ways and finds them equal."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks.ctm_inference_speed import M_TOL, V_REL_TOL, main


def test_benchmark_toy_scale(tmp_path, capsys):
    out = tmp_path / "bench.json"
    res = main(["--topics", "8", "--vocab", "300", "--docs", "60", "--single-docs", "6", "--steps", "40",
                "--batch-size", "30", "--tol", "1e-3", "--json", str(out)])
    assert res["docs"] == 60 and res["single_docs"] == 6 and res["threads"] == 1
    for way, n in (("batched", 60), ("single", 6)):
        assert res[way]["docs_per_s"] == pytest.approx(n / res[way]["seconds"])
        assert 1 <= res[way]["mean_steps"] <= 40
    assert res["ratio"] == pytest.approx(res["batched"]["docs_per_s"] / res["single"]["docs_per_s"])
    assert res["ratio"] > 1  # even at toy scale one batch of 30 beats 30 separate optimisations
    assert res["compared"] + res["stopped_differently"] == 6 and res["compared"] >= 5
    assert res["agree"] and res["max_abs_m_diff"] <= M_TOL and res["max_rel_v_diff"] <= V_REL_TOL
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    printed = capsys.readouterr().out
    assert "docs/s" in printed and "ratio batched/single" in printed
