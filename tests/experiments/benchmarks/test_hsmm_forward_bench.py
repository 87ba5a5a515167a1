"""The benchmark script runs end to end at toy size and agrees with torch-struct."""

from __future__ import annotations

from experiments.benchmarks.hsmm_forward import main


def test_benchmark_toy_size(capsys):
    res = main(["--sizes", "3", "-B", "2", "-T", "8", "-K", "3", "--repeats", "1", "--mem-gb", "8", "--timeout", "120"])
    row = res["rows"][0]
    assert row["ours"]["ok"] and row["torch_struct"]["ok"]
    assert row["torch_struct"]["T"] == 8  # small enough for torch-struct at full size
    assert row["max_abs_log_z_diff"] < 1e-3
    assert row["speedup"] > 0 and row["speedup_forward_backward"] > 0
    assert "fwd ratio" in capsys.readouterr().out
