"""critic report --track: a criticism logged to an offline experiment tracker (MLflow's store in a folder, or JSON
lines), read back with the tracker's own API; off unless asked."""

from __future__ import annotations

import json
import math

import pytest

from critic.cli import main
from critic.panel import load_results
from critic.tracking import TRACKING_ENV, Target, key, run_record, target_from


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, fixture_manpage_root):
    """A section critic fitted on the man-page fixture and its corpus folder."""
    tmp = tmp_path_factory.mktemp("tracking")
    data = tmp / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp / "sections"),
                 "--params", '{"delta": 0.1}']) == 0
    return tmp, data


def _report(fitted, tmp_path, *extra: str) -> list[str]:
    tmp, data = fitted
    return ["report", "--critic", str(tmp / "sections"), "--reference", str(data / "valid.jsonl"), "--candidate",
            f"gens={data / 'test.jsonl'}", "--out", str(tmp_path / "r"), "--n-bootstrap", "20", "--n-permutations",
            "20", *extra]


def _results(tmp_path) -> dict:
    return json.loads((tmp_path / "r" / "results.json").read_text())


def test_jsonl_tracking_appends_one_run_per_report_with_its_params_and_metrics(fitted, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    runs = tmp_path / "runs.jsonl"
    assert main(_report(fitted, tmp_path, "--track", f"jsonl:{runs}")) == 0
    assert "critic: tracked: run " in capsys.readouterr().err and runs.read_text().count("\n") == 1
    assert main(_report(fitted, tmp_path, "--track", f"jsonl:{runs}", "--seed", "3")) == 0
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["run_id"] != rows[1]["run_id"]
    row = rows[1]
    assert row["params"]["command"] == "report" and row["params"]["seed"] == "3"
    assert row["params"]["critic.sections"] == "sections" and row["params"]["critic.sections.params.delta"] == "0.1"
    assert row["params"]["settings.n_bootstrap"] == "20"
    gens = _results(tmp_path)["critics"]["sections"]["candidates"]["gens"]
    metrics = row["metrics"]
    assert metrics["sections.gens.n"] == gens["n"] == 4 and metrics["sections.gens.latent_ppl"] == gens["latent_ppl"]
    assert metrics["sections.gens.p_value"] == gens["ppl_comparison"]["p_value"]  # the headline's (Latent PPL)
    assert "sections.reference.p_value" not in metrics and "sections.gens.flagged" in metrics
    assert row["artifacts"] == str((tmp_path / "r").resolve())


def test_mlflow_tracking_is_read_back_with_mlflow_s_own_client_offline(fitted, tmp_path, capsys, monkeypatch):
    """The run in an MLflow store in a folder: params, metrics matching results.json, the report as artifacts."""
    pytest.importorskip("mlflow", reason="the tracking extra: pip install 'critic[tracking]'")
    from mlflow.tracking import MlflowClient

    from critic.tracking import EXPERIMENT, mlflow_uri

    monkeypatch.delenv(TRACKING_ENV, raising=False)
    store = tmp_path / "store"
    monkeypatch.setenv(TRACKING_ENV, f"mlflow:{store}")  # the environment's target, no option given
    assert main(_report(fitted, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "critic: tracked: MLflow run" in err and "mlflow.store" not in err  # MLflow's own INFO lines kept out
    client = MlflowClient(tracking_uri=mlflow_uri(str(store))[0])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "r"
    assert run.data.params["critic.sections"] == "sections" and run.data.params["command"] == "report"
    gens = _results(tmp_path)["critics"]["sections"]["candidates"]["gens"]
    metrics = run.data.metrics
    assert metrics["sections.gens.n"] == 4.0 and metrics["sections.gens.latent_ppl"] == gens["latent_ppl"]
    assert metrics["sections.gens.difference"] == gens["ppl_comparison"]["difference"]
    artifacts = {f.path for f in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/results.json", "report/index.html", "report/report.md"} <= artifacts
    assert (store / "mlflow.db").is_file() and (store / "artifacts").is_dir()


def test_targets_are_checked_before_any_work(tmp_path, monkeypatch, capsys, fitted):
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    assert target_from(None) is None  # off by default
    assert target_from("jsonl:x.jsonl") == Target("jsonl", "x.jsonl")
    monkeypatch.setenv(TRACKING_ENV, "off")
    assert target_from(None) is None
    monkeypatch.setenv(TRACKING_ENV, "wandb:runs")
    with pytest.raises(ValueError, match=r"\$CRITIC_TRACKING 'wandb:runs': expected mlflow:DIR"):
        target_from(None)
    monkeypatch.delenv(TRACKING_ENV)
    assert main(_report(fitted, tmp_path, "--track", "nowhere")) == 2
    assert capsys.readouterr().err == ("critic: error: --track 'nowhere': expected mlflow:DIR (an offline MLflow "
                                       "store) or jsonl:FILE\n")
    assert not (tmp_path / "r").exists()  # said before the report was written
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ValueError, match=r"MLflow is not installed: pip install 'critic\[tracking\]'"):
        Target.parse("mlflow:store")


def test_a_tracker_that_fails_after_the_report_says_the_report_is_written(fitted, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["-q", *_report(fitted, tmp_path, "--track", f"jsonl:{blocker}/runs.jsonl")]) == 2
    (err,) = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("critic: warning: ")]
    assert err.startswith(f"critic: error: the report is written ({tmp_path / 'r'}); tracking it failed: --track "
                          f"jsonl:{blocker}/runs.jsonl: cannot append the run")
    assert (tmp_path / "r" / "results.json").is_file()


def test_keys_keep_only_what_trackers_take(panel):
    assert key("critic", "my label<1>", "params", "δ") == "critic.my label_1_.params.δ"
    record = run_record(panel, command="compare")
    assert record.params["command"] == "compare"
    assert all(math.isfinite(v) for v in record.metrics.values())
    assert {f"{label}.{name}.n" for label in panel.results for name in panel.set_names} <= set(record.metrics)
    assert not any(k.endswith("reference.flagged") for k in record.metrics)


def test_critic_run_tracks_each_report_a_study_writes(tmp_path, capsys, monkeypatch, fixture_manpage_root):
    """``critic run --track``: the example study's report logged once, named STUDY/REPORT, its metrics those of
    its results.json; a rerun that writes nothing logs nothing."""
    from pathlib import Path

    monkeypatch.delenv(TRACKING_ENV, raising=False)
    study = Path(__file__).resolve().parents[2] / "docs" / "examples" / "shuffled_sections_study.py"
    config = tmp_path / "shuffled.toml"
    config.write_text(f'runner = "shuffled-sections"\n[corpus]\nroot = "{fixture_manpage_root}"\n'
                      "[criticism]\nn_bootstrap = 20\nn_permutations = 20\n")
    runs = tmp_path / "runs.jsonl"
    command = ["--plugin", str(study), "run", str(config), "--out", str(tmp_path / "out"), "--track", f"jsonl:{runs}"]
    assert main(command) == 0
    (row,) = [json.loads(line) for line in runs.read_text().splitlines()]
    report = Path(row["artifacts"])
    assert row["name"] == f"shuffled-sections/{report.name}" and report.parent == (tmp_path / "out").resolve()
    (label, result), = load_results(report).results.items()
    assert len(result.sets) == 2
    for s in result.sets:
        assert row["metrics"][f"{label}.{s.name}.latent_ppl"] == s.latent_ppl
    assert row["params"]["command"] == "run" and row["params"]["settings.n_bootstrap"] == "20"
    assert main(command) == 0 and runs.read_text().count("\n") == 1  # every stage up to date: nothing new to log


def test_a_runner_that_takes_no_track_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    plugin = tmp_path / "plain_runner.py"
    plugin.write_text("from critic.config import Schema\nfrom critic.registry import register_runner\n\n"
                      "@register_runner('plain-runner', Schema())\n"
                      "def main(config, *, out, seed=0, device='cpu'):\n    raise AssertionError('ran')\n")
    config = tmp_path / "plain.toml"
    config.write_text('runner = "plain-runner"\n')
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    assert main(["--plugin", str(plugin), "run", str(config), "--out", str(tmp_path / "o"), "--track",
                 f"jsonl:{tmp_path / 'runs.jsonl'}"]) == 2
    assert "--track: runner 'plain-runner' writes no report it can log" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "runs.jsonl").exists()
