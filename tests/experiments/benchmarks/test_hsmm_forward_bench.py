"""The benchmark script runs end to end at toy size, prints its ratios and agrees with torch-struct and the edge scan."""

from __future__ import annotations

import re

from experiments.benchmarks.hsmm_forward import main


def test_benchmark_toy_size(capsys):
    res = main(["--sizes", "3", "-B", "2", "-T", "8", "-K", "3", "--repeats", "1", "--mem-gb", "8", "--timeout", "120"])
    out = capsys.readouterr().out
    row = res["rows"][0]
    for dt in ("float64", "float32"):
        ours = row["ours"][dt]
        assert ours["ok"] and ours["floor_s"] > 0
        assert ours["ratio_floor"] == ours["forward_s"] / ours["floor_s"]
        printed = re.search(rf"C=3 +{dt}: .*ours/floor ([0-9.]+)x", out)
        assert printed and float(printed.group(1)) == round(ours["ratio_floor"], 2)
    assert max(abs(a - b) for a, b in zip(row["ours"]["float32"]["log_z"], row["ours"]["float64"]["log_z"])) < 1e-4
    for impl, label in (("torch_struct", "torch-struct partition"), ("edge_scan", "linear edge scan")):
        r = row[impl]
        assert (r["B"], r["T"]) == (2, 8)  # small enough to run at full size
        assert r["max_abs_log_z_diff"] < 1e-9  # float64 throughout
        assert r["ratio"] == r["forward_s"] / r["ours_same_size"]["forward_s"]
        printed = re.search(rf"C=3 +{label} \(float64\) at B=2 T=8: \S+ s vs ours \S+ s, ratio ([0-9.]+)x", out)
        assert printed and float(printed.group(1)) == round(r["ratio"], 1)
    assert row["torch_struct"]["ratio_forward_backward"] > 0
    assert "ours/floor:" in out and "edge-scan ratio:" in out and "torch-struct ratio:" in out


def test_benchmark_floor_only(capsys):
    res = main(["--floor-only", "--sizes", "3", "-B", "2", "-T", "8", "-K", "3", "--repeats", "1", "--dtypes", "float64",
                "--timeout", "120"])
    out = capsys.readouterr().out
    row = res["rows"][0]
    assert row["ours"]["float64"]["ok"] and "torch_struct" not in row and "edge_scan" not in row
    assert re.search(r"C=3 +float64: .*ours/floor [0-9.]+x", out) and "torch-struct partition" not in out
