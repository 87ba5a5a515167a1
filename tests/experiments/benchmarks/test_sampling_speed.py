"""The sampling benchmark runs at toy scale and its bookkeeping adds up (no timing is asserted)."""

from __future__ import annotations

import math
import re

import torch

from experiments.benchmarks.sampling_speed import QUICK, main


def test_quick_benchmark_prints_a_finite_ratio_and_consistent_counts(fixture_manpage_root, capsys):
    threads = torch.get_num_threads()
    try:
        res = main(["--quick", "--root", str(fixture_manpage_root)])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    printed = float(re.search(r"bound/sample = ([0-9.]+)", out).group(1))
    assert math.isfinite(printed) and printed > 0 and printed == round(res["ratio"], 3)
    assert res["ratio"] == res["bound_tokens_per_s"] / res["sample_tokens_per_s"]
    assert res["batch"] == QUICK["batch"] == res["written"] and res["tokens"] == QUICK["tokens"]
    # every row drew at least one token and at most the budget; rows that hit the end token stop early
    assert res["batch"] <= res["generated_tokens"] <= res["batch"] * res["tokens"]
    assert res["generated_tokens"] == res["batch"] * res["tokens"] or res["rows_finished_early"] > 0
    assert f"({res['generated_tokens']} tokens" in out
