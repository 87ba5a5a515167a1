"""``critic metric NAME`` / ``critic setup kenlm``: a sub-command per metric, its options from its command-line
form's signature; and the metric registry."""

import argparse
import json
import typing
from pathlib import Path

import numpy as np
import pytest

import critics.metrics as metrics
from critic import registry
from critic.cli import build_parser, main
from critic.commands.tools import cmd_setup
from critic.cli_args import called_options
from critics.metrics.cli import COMMANDS, setup_kenlm


@pytest.fixture
def parser():
    return build_parser(["metric", "setup"])


def _sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


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
    assert args.tool == "kenlm" and args.func is cmd_setup and args.call is setup_kenlm
    assert called_options(args) == {"cache": Path("/tmp/x"), "sdist": None, "force": True}


def test_every_metric_is_a_sub_command_with_only_its_own_options(capsys):
    """The options of `critic metric NAME` are NAME's: another metric's option is a usage error naming it."""
    metric = _sub_commands(build_parser(["metric"]))["metric"]
    assert set(_sub_commands(metric)) == set(registry.list_metrics()) >= set(metrics.METRICS)
    assert main(["metric", "kendall_tau", "--pred", "0,1", "--gold", "0,1", "--bins", "3"]) == 2
    assert "unrecognized arguments: --bins 3" in capsys.readouterr().err
    assert main(["metric", "pdd", "--pred", "0,1", "--gold", "0,1", "--bins", "0"]) == 2
    assert "argument --bins: must be an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["metric", "ordered_bertscore", "--pred-jsonl", "p", "--gold-jsonl", "g", "--n", "2.5"]) == 2
    assert "argument --n: expected an integer >= 1 or 'inf', got '2.5'" in capsys.readouterr().err
    assert main(["metric", "mauve", "--pred-jsonl", "p"]) == 2
    assert "the following arguments are required: --gold-jsonl" in capsys.readouterr().err


def test_every_option_of_a_metric_is_declared_with_its_help():
    """Each command-line form declares every option's help in its annotation (not only a type)."""
    for name, form in COMMANDS.items():
        hints = typing.get_type_hints(form, include_extras=True)
        for param in hints.keys() - {"return"}:
            extras = typing.get_args(hints[param])[1:] if typing.get_origin(hints[param]) is typing.Annotated else ()
            assert any(isinstance(e, str) and e for e in extras), f"{name} --{param} has no help"
    assert set(COMMANDS) == set(metrics.METRICS)


def test_a_metric_without_a_form_takes_its_own_parameters_as_options(monkeypatch, capsys):
    """A plain function of numbers is its own command-line form; one whose argument no text can give says so."""
    from typing import Annotated

    from critic.config import Range

    def scaled(x: float, times: Annotated[int, Range(min=1), "how many times"] = 2) -> float:
        """x times an integer"""
        return x * times

    def of_arrays(features: np.ndarray) -> float:
        return 0.0

    monkeypatch.setattr(registry, "_METRICS", registry._METRICS.copy())
    registry.register_metric("scaled", scaled)
    registry.register_metric("of-arrays", of_arrays, "needs arrays")
    assert main(["metric", "scaled", "--x", "1.5", "--times", "3"]) == 0
    assert json.loads(capsys.readouterr().out) == {"metric": "scaled", "value": 4.5}
    assert main(["metric", "scaled", "--x", "1.5", "--times", "0"]) == 2
    assert "argument --times: must be an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["metric", "scaled"]) == 2
    assert "the following arguments are required: --x" in capsys.readouterr().err
    assert main(["metric", "of-arrays"]) == 2
    assert "metric 'of-arrays' has no command-line form: no option can give its argument(s) features" in \
        capsys.readouterr().err


def test_metrics_are_registered():
    names = set(registry.list_metrics())
    for name in ("pmr", "kendall_tau", "wlcs_l", "ordered_bertscore", "pdd", "slor", "wpslor", "perplexity"):
        assert name in metrics.METRICS
        assert name in names


def test_a_metric_name_is_taken_once(monkeypatch):
    monkeypatch.setattr(registry, "_METRICS", registry._METRICS.copy())  # the re-registration below stays here
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
