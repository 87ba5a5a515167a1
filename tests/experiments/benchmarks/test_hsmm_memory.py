"""The HSMM memory benchmark at toy size: every copy scores, the documents both sizes score get the same numbers,
the ratios are those of the peaks measured; its relative difference counted by hand."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks.hsmm_memory import main, max_relative_difference


def test_max_relative_difference_by_hand():
    a = {"x": {"latent_nll": 10.0, "latent_steps": 4.0}, "y": {"latent_nll": 2.0, "latent_steps": 1.0},
         "only-a": {"latent_nll": 1.0, "latent_steps": 1.0}, "s": {"skipped": "empty"}}
    b = {"x": {"latent_nll": 10.5, "latent_steps": 4.0}, "y": {"latent_nll": 2.0, "latent_steps": 1.5},
         "s": {"skipped": "empty"}}
    assert max_relative_difference(a, b) == 0.5                  # y's steps: 0.5 / 1.0; x's T(x): 0.5 / 10
    assert max_relative_difference(a, {"x": a["x"]}) == 0.0
    with pytest.raises(ValueError, match="'s' is scored in one output and skipped in the other"):
        max_relative_difference(a, {"s": {"latent_nll": 1.0, "latent_steps": 1.0}})


def test_the_benchmark_at_toy_size(fixture_manpage_root, tmp_path, capsys):
    result = main(["--root", str(fixture_manpage_root), "--documents", "60", "20", "--params",
                   '{"num_states": 4, "max_len": 3, "epochs": 1, "pretrain_epochs": 0}', "--keep", str(tmp_path),
                   "--json", str(tmp_path / "bench.json")])
    assert [run["documents"] for run in result["score"]] == [20, 60] == [run["documents"] for run in result["fit"]]
    assert result["scored"] == {20: 20, 60: 60}                  # the critic has seen every token of every copy
    assert result["max_relative_difference"] <= 1e-12
    for key, runs in (("score_ratio", result["score"]), ("fit_ratio", result["fit"])):
        assert result[key] == runs[1]["peak_rss"] / runs[0]["peak_rss"]
        assert all(run["peak_rss"] > 50 * 2**20 and run["seconds"] > 0 for run in runs)
    rows = [json.loads(line) for line in (tmp_path / "scores-60.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and all(row["latent_nll"] > 0 for row in rows)
    assert json.loads((tmp_path / "bench.json").read_text())["score_ratio"] == result["score_ratio"]
    out = capsys.readouterr().out
    assert "peak RSS at 60 / at 20 documents" in out and "(the floor)" in out
