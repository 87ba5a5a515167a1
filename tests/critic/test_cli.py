"""The command line, end to end on the shipped man-page fixture."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from critic.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "critic.cli", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("list", "fit", "score", "compare", "outliers", "run", "data"):
        assert cmd in out.stdout


def test_list_shows_the_section_critic(capsys):
    assert main(["list"]) == 0
    assert "sections" in capsys.readouterr().out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, fixture_manpage_root):
    out = tmp_path_factory.mktemp("corpus")
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out", str(out)]) == 0
    return out


def test_fit_score_compare_outliers(corpus, tmp_path, capsys):
    model = tmp_path / "model"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}']) == 0
    scored = tmp_path / "scores.jsonl"
    assert main(["score", str(model), "--input", str(corpus / "train.jsonl"), "--out", str(scored)]) == 0
    rows = [json.loads(line) for line in scored.read_text().splitlines()]
    assert rows and all(r["latent_nll"] > 0 for r in rows if "latent_nll" in r)

    report = tmp_path / "report"
    assert main(["compare", str(model), "--reference", str(corpus / "train.jsonl"),
                 "--candidate", f"same={corpus / 'train.jsonl'}", "--out", str(report), "--n-bootstrap", "100"]) == 0
    results = json.loads((report / "results.json").read_text())
    same = results["candidates"]["same"]
    for key in ("n", "latent_nll", "latent_nll_ci", "latent_ppl", "latent_ppl_ci", "p_value"):
        assert key in same
    assert same["latent_nll"] == pytest.approx(results["reference"]["latent_nll"])  # identical sets
    assert same["p_value"] == 1.0
    assert results["environment"]["packages"]["torch"]
    assert {p.name for p in report.iterdir()} >= {"results.json", "documents.jsonl", "report.md", "latent_nll_hist.png"}

    capsys.readouterr()
    assert main(["outliers", str(model), "--reference", str(corpus / "train.jsonl"),
                 "--input", str(corpus / "train.jsonl"), "--top", "3"]) == 0
    assert capsys.readouterr().out.count("| input |") == 3


def test_bad_input_gives_clear_error(corpus, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "sections": [}\n')
    assert main(["fit", "sections", "--train", str(bad), "--out", str(tmp_path / "m")]) == 2
    assert f"{bad}:1: invalid JSON" in capsys.readouterr().err


def test_device_is_never_a_silent_fallback(corpus, tmp_path, capsys):
    import torch

    count = torch.cuda.device_count()
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(tmp_path / "m"),
                 "--device", f"cuda:{count}"]) == 2
    err = capsys.readouterr().err
    assert f"device 'cuda:{count}' was asked for" in err
    assert not (tmp_path / "m").exists()


def test_run_main_job_on_fixture(fixture_manpage_root, tmp_path, capsys):
    config = tmp_path / "job.toml"
    base = (ROOT / "experiments" / "manpages" / "sections.toml").read_text()
    config.write_text(base.replace('root = "/usr/share/man"', f'root = "{fixture_manpage_root}"')
                      .replace("min_title_count = 5", "min_title_count = 1")
                      .replace("n_bootstrap = 1000", "n_bootstrap = 100"))
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| real |" in printed and "| permuted |" in printed and "Top 10 flagged outliers" in printed
    results = json.loads((out / "results.json").read_text())
    assert set(results["candidates"]) == {"permuted", "repeated", "dropped"}
    # a rerun resumes from the fitted critic instead of refitting
    assert main(["run", str(config), "--out", str(out)]) == 0
    assert "loaded fitted critic" in capsys.readouterr().out
