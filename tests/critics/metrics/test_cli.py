"""``critic metric`` / ``critic setup`` sub-commands and the metric registry."""

import argparse
import json
import math

import numpy as np
import pytest

import critics.metrics as metrics
from critics.metrics.cli import setup_main


@pytest.fixture
def parser():
    p = argparse.ArgumentParser(prog="critic")
    metrics.add_commands(p.add_subparsers(dest="command"))
    return p


def run(parser, argv, capsys):
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def test_kendall_tau_command(parser, capsys):
    out = run(parser, ["metric", "kendall_tau", "--pred", "2,0,1", "--gold", "0,1,2"], capsys)
    assert out["value"] == pytest.approx(-1 / 3)


def test_ordering_over_jsonl(parser, capsys, tmp_path):
    f = tmp_path / "orders.jsonl"
    f.write_text('{"pred": [0, 1, 2], "gold": [0, 1, 2]}\n{"pred": [1, 0, 2], "gold": [0, 1, 2]}\n')
    out = run(parser, ["metric", "pmr", "--jsonl", str(f)], capsys)
    assert out["value"] == 0.5 and out["n"] == 2


def test_pdd_commands(parser, capsys, tmp_path):
    out = run(parser, ["metric", "pdd", "--pred", "0,0,1,1", "--gold", "0,0,1,1", "--bins", "2"], capsys)
    assert out["value"] == pytest.approx(0.0, abs=1e-12) and out["num_bins"] == 2
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"labels": [0, 1, 2]}\n{"labels": [0, 1]}\n')
    b.write_text('{"labels": [2, 1, 0]}\n')
    out = run(parser, ["metric", "pdd_normalized", "--pred-jsonl", str(a), "--gold-jsonl", str(b), "--bins", "9"],
              capsys)
    assert out["num_bins"] == 3 and 0 < out["value"] < 1
    # by hand: N = min(9, 3, 3) = 3; a 2-sentence document puts its sentences in bins 0 and 2
    # (numpy.histogram edges 0, 1/3, 2/3, 1).  Pred bins pool [0, 0], [1], [2, 1]; gold bins hold [2], [1], [0].
    pred_dist = np.array([[1, 0, 0], [0, 1, 0], [0, 0.5, 0.5]])
    gold_dist = np.array([[0, 0, 1], [0, 1, 0], [1, 0, 0]])
    eps = 1e-8  # KL(gold + eps || pred + eps) per bin, averaged
    want = np.mean(np.sum((gold_dist + eps) * (np.log(gold_dist + eps) - np.log(pred_dist + eps)), axis=1))
    assert out["value"] == pytest.approx(1 / (1 + want), rel=1e-12)


def test_correlations_command(parser, capsys):
    out = run(parser, ["metric", "correlations", "--values", "1,2,3,4", "--judgments", "1,3,2,4"], capsys)
    assert out["pearson"] == pytest.approx(0.8)


def test_setup_parser(parser):
    args = parser.parse_args(["setup", "kenlm", "--cache", "/tmp/x", "--force"])
    assert args.tool == "kenlm" and args.force and args.func is setup_main
    assert str(args.cache) == "/tmp/x"


def test_metrics_are_registered():
    from critic import registry
    names = set(registry.list_metrics())
    for name in ("pmr", "kendall_tau", "wlcs_l", "ordered_bertscore", "pdd", "slor", "wpslor", "perplexity"):
        assert name in metrics.METRICS
        assert name in names


def test_a_metric_name_is_taken_once():
    from critic import registry

    with pytest.raises(ValueError, match="metric name 'pmr' is already taken by pmr"):
        registry.register_metric("pmr", lambda pred, gold: 0.0)
    assert registry.get_metric("pmr").fn is metrics.pmr
    registry.register_metric("pmr", metrics.pmr, "again")  # the same function again (a reload) is fine
    assert registry.get_metric("pmr").fn is metrics.pmr


def test_bad_orders_name_the_file_and_line(parser, tmp_path):
    f = tmp_path / "orders.jsonl"
    f.write_text('{"pred": [0, 1], "gold": [0, 1]}\n{"pred": [], "gold": []}\n')
    args = parser.parse_args(["metric", "kendall_tau", "--jsonl", str(f)])
    with pytest.raises(ValueError, match=rf"{f}:2: empty order"):
        args.func(args)
