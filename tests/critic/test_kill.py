"""``kill -9`` of ``critic run experiments/manpages/sections.toml`` in each stage: the rerun finishes with the
outputs of an uninterrupted run and leaves no temporary behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from critic.io import is_temporary

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("data", "filtered", "critic", "report")

# ``critic run`` in which the first rename into the stage argv[1]'s output (its folder, or the temporary folder
# being built to replace it) waits: the stage has begun and is half-way through writing when the test kills it,
# on every machine however loaded -- no timing luck
CHILD = """
import os, sys, time
stage = sys.argv[1]
out = os.path.abspath(sys.argv[sys.argv.index("--out") + 1])
replace = os.replace
def waiting(src, dst, *args, **kwargs):
    first = os.path.relpath(os.path.abspath(dst), out).split(os.sep)[0]
    if first == stage or first.startswith("." + stage + "."):
        print("[test] writing", os.path.relpath(dst, out), flush=True)
        time.sleep(600)
    return replace(src, dst, *args, **kwargs)
os.replace = waiting
from critic.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def uninterrupted(toy_job, manpage_job_config):
    return toy_job("kill", manpage_job_config)


def outputs(out: Path) -> dict[str, bytes | dict]:
    """Every file of a run but its stage markers; results.json without the environment (git hash, versions)."""
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and p.parent.name != "stages"}
    for name in [n for n in files if n.endswith("results.json")]:
        results = json.loads(files[name])
        results.pop("environment", None)
        files[name] = results
    return files


def leftovers(out: Path) -> list[str]:
    return [p.relative_to(out).as_posix() for p in out.rglob("*")
            if is_temporary(p.name) or p.name.endswith((".tmp", ".old"))]


@pytest.mark.parametrize("stage", STAGES)
def test_kill_9_in_a_stage_then_rerun_gives_the_uninterrupted_outputs(uninterrupted, tmp_path, stage):
    config, base = uninterrupted
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-u", "-c", CHILD, stage, "run", str(config), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        for line in proc.stdout:
            if line.startswith("[test] writing"):
                break
        else:
            pytest.fail(f"the run never wrote into {stage}/")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    marker = json.loads((out / "stages" / f"{stage}.json").read_text())
    assert marker["complete"] is False  # killed while the stage ran
    left = leftovers(out)
    assert any(f".{proc.pid}." in name for name in left), f"the kill left no temporary to clean: {left}"

    again = subprocess.run([sys.executable, "-m", "critic.cli", "run", str(config), "--out", str(out)],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr
    before = STAGES[:STAGES.index(stage)]
    assert [s for s in STAGES if f"[manpages] {s}: up to date" in again.stdout] == list(before)
    assert leftovers(out) == []
    assert outputs(out) == outputs(base)
    for s in STAGES:
        assert json.loads((out / "stages" / f"{s}.json").read_text()) == \
            json.loads((base / "stages" / f"{s}.json").read_text())
