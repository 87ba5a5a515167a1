"""``critic run experiments/manpages/sections.toml`` on the 30-page fixture: the printed report, stages that
resume when unchanged and recompute (with everything downstream) when their config changes, and Ctrl-C."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[3]
STAGES = ("data", "filtered", "critic", "report")


@pytest.fixture
def run(run_experiment):
    """``run(config, out)``: (what it printed, stage -> 'reused' or 'computed')."""
    return lambda config, out: run_experiment(config, out, "[manpages]", STAGES)


@pytest.fixture(scope="module")
def first(toy_job, manpage_job_config):
    """One uninterrupted run: (config, run directory)."""
    return toy_job("manpages", manpage_job_config)


def test_run_prints_the_report_and_writes_it_to_report_dir(first, run, report_json):
    config, out = first
    printed, how = run(config, out)
    assert how == dict.fromkeys(STAGES, "reused")
    assert "| real |" in printed and "| permuted |" in printed and "### Least likely documents (top 10)" in printed
    assert "## Top section-transition errors" in printed
    names = {p.name for p in (out / "report").iterdir()}
    assert names == {".critic-output.json", "results.json", "documents.jsonl", "report.md", "index.html", "documents", "transitions_permuted.png", "transitions_repeated.png",
                     "transitions_dropped.png"}
    pages = sorted((out / "report" / "documents").iterdir())  # one page per flagged document, with its text
    html = (out / "report" / "index.html").read_text()
    assert len(pages) == html.count('href="documents/') and "transitions_permuted" in html
    assert all("<pre class=\"doc\">" in page.read_text() for page in pages)
    results = report_json(out / "report" / "results.json")
    assert set(results["candidates"]) == {"permuted", "repeated", "dropped"}
    assert results["inputs"][0] == {**results["inputs"][0], "name": "real", "path": "filtered/test.jsonl"}
    markers = {s: json.loads((out / "stages" / f"{s}.json").read_text()) for s in STAGES}
    assert results["run"]["stages"] == {s: m["key"] for s, m in markers.items()}
    assert all(m["complete"] for m in markers.values())


@pytest.mark.parametrize("change, recomputed", [
    ({"n_bootstrap = 1000": "n_bootstrap = 200"}, ["report"]),
    ({'name = "sections"': 'name = "sections"\ndelta = 0.1'}, ["critic", "report"]),
    ({"min_sections = 3": "min_sections = 2"}, ["filtered", "critic", "report"]),
])
def test_a_changed_stage_recomputes_with_everything_downstream(first, run, tmp_path, manpage_job_config,
                                                              change, recomputed):
    config, base = first
    out = tmp_path / "run"
    shutil.copytree(base, out)
    changed = manpage_job_config(tmp_path / "changed.toml", **change)
    _, how = run(changed, out)
    assert [s for s in STAGES if how[s] == "computed"] == recomputed
    _, how = run(changed, out)
    assert how == dict.fromkeys(STAGES, "reused")


def test_results_never_mix_two_configs(first, run, tmp_path, manpage_job_config, report_json):
    config, base = first
    out = tmp_path / "run"
    shutil.copytree(base, out)
    fewer = manpage_job_config(tmp_path / "fewer.toml",
                         **{'corruptions = ["permuted", "repeated", "dropped"]': 'corruptions = ["repeated"]'})
    run(fewer, out)
    results = report_json(out / "report" / "results.json")
    assert set(results["candidates"]) == {"repeated"}
    assert results["run"]["config"]["criticism"]["corruptions"] == ["repeated"]
    assert not (out / "report" / "transitions_permuted.png").exists()


def test_a_stage_interrupted_before_its_marker_is_recomputed(first, run, tmp_path):
    config, base = first
    out = tmp_path / "run"
    shutil.copytree(base, out)
    marker = json.loads((out / "stages" / "critic.json").read_text())
    (out / "stages" / "critic.json").write_text(json.dumps({**marker, "complete": False}))
    _, how = run(config, out)
    assert [s for s in STAGES if how[s] == "computed"] == ["critic", "report"]
    assert (out / "report" / "results.json").read_bytes() == (base / "report" / "results.json").read_bytes()


def test_ctrl_c_exits_130_and_a_rerun_gives_the_same_results(first, tmp_path):
    config, base = first
    out = tmp_path / "interrupted"
    # the child waits after the data stage commits, so Ctrl-C lands mid-run however loaded the machine is
    child = ("import sys, time\n"
             "import critic.stages as stages\n"
             "commit = stages.Stage.commit\n"
             "def paused(self):\n"
             "    commit(self)\n"
             "    if self.name == 'data':\n"
             "        print('[test] data committed', flush=True)\n"
             "        time.sleep(120)\n"
             "    return self\n"
             "stages.Stage.commit = paused\n"
             "from critic.cli import main\n"
             "sys.exit(main(sys.argv[1:]))\n")
    # a job started in the background of a script inherits SIGINT ignored, and Python then keeps it ignored:
    # give the child the default disposition, as in a terminal where Ctrl-C is pressed
    proc = subprocess.Popen([sys.executable, "-u", "-c", child, "run", str(config), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:
        if line.startswith("[test] data committed"):
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130
    assert err.splitlines() == ["critic: interrupted"]
    assert (out / "stages" / "data.json").is_file() and not (out / "report").exists()

    again = subprocess.run([sys.executable, "-m", "critic.cli", "run", str(config), "--out", str(out)],
                           capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert "[manpages] data: up to date" in again.stdout
    assert (out / "report" / "results.json").read_bytes() == (base / "report" / "results.json").read_bytes()
