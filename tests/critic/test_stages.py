"""Resumable stages keyed by their config (critic.stages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import critic.io as critic_io
from critic.stages import Stage, config_key

MANPAGE_STAGES = ("data", "filtered", "critic", "report")


def test_key_depends_on_config_and_upstream_only(tmp_path):
    a = Stage(tmp_path, "data", {"root": "/x", "n": [1, 2]})
    assert a.key == Stage(tmp_path / "elsewhere", "data", {"n": (1, 2), "root": "/x"}).key  # order, tuple/list
    assert a.key != Stage(tmp_path, "data", {"root": "/y", "n": [1, 2]}).key
    down = Stage(tmp_path, "fit", {"k": 1}, upstream=[a])
    other = Stage(tmp_path, "fit", {"k": 1}, upstream=[Stage(tmp_path, "data", {"root": "/y"})])
    assert down.key != other.key
    assert config_key({"b": 1, "a": 2}) == config_key({"a": 2, "b": 1})


def test_done_only_after_commit_under_the_same_key(tmp_path):
    stage = Stage(tmp_path, "data", {"root": "/x"})
    assert not stage.done()
    stage.begin()
    (stage.path / "train.jsonl").parent.mkdir()
    (stage.path / "train.jsonl").write_text("x\n")
    assert not stage.done()  # pending: an interruption here means recompute
    stage.commit()
    assert stage.done()
    assert not Stage(tmp_path, "data", {"root": "/y"}).done()
    marker = json.loads(stage.marker.read_text())
    assert marker == {"stage": "data", "key": stage.key, "complete": True, "config": {"root": "/x"},
                      "upstream": {}, "outputs": ["data"], "files": {"data/train.jsonl": 2}}
    assert sorted(p.name for p in stage.marker.parent.iterdir()) == ["data.json"]  # no temporary files


def test_outputs_made_under_another_key_are_removed(tmp_path):
    old = Stage(tmp_path, "fit", {"delta": 0.1}).begin()
    old.path.mkdir()
    (old.path / "model.pt").write_text("old")
    old.commit()
    new = Stage(tmp_path, "fit", {"delta": 0.2})
    assert not new.done()
    new.begin()
    assert not new.path.exists()
    assert json.loads(new.marker.read_text())["complete"] is False


def test_pending_work_under_the_same_key_is_kept(tmp_path):
    files = ("model.ckpt", "results.json")
    stage = Stage(tmp_path, "train", {"epochs": 3}, outputs=files).begin()
    (tmp_path / "model.ckpt").write_text("epoch 2")
    resumed = Stage(tmp_path, "train", {"epochs": 3}, outputs=files).begin()  # a rerun after Ctrl-C
    assert (tmp_path / "model.ckpt").read_text() == "epoch 2"
    (tmp_path / "results.json").write_text("{}")
    resumed.commit()
    assert json.loads(stage.marker.read_text())["outputs"] == list(files)
    Stage(tmp_path, "train", {"epochs": 4}, outputs=files).begin()  # another config starts over
    assert not (tmp_path / "model.ckpt").exists() and not (tmp_path / "results.json").exists()


def test_a_stage_whose_outputs_were_deleted_is_not_done(tmp_path):
    stage = Stage(tmp_path, "data", {}).begin()
    stage.path.mkdir()
    stage.commit()
    assert stage.done()
    stage.path.rmdir()
    assert not stage.done()


def committed(tmp_path, **files):
    stage = Stage(tmp_path, "data", {}).begin()
    for rel, text in files.items():
        (stage.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage.path / rel).write_text(text)
    return stage.commit()


def test_a_file_deleted_from_a_finished_output_folder_means_recompute(tmp_path):
    stage = committed(tmp_path, **{"train.jsonl": "a\n", "sub/deep.json": "{}"})
    assert stage.done() and stage.missing() is None
    (stage.path / "sub" / "deep.json").unlink()  # the folder is still there
    assert not stage.done()
    assert stage.missing() == "data/sub/deep.json deleted"


def test_a_file_cut_short_means_recompute_a_file_added_does_not(tmp_path):
    stage = committed(tmp_path, **{"train.jsonl": "abc\n"})
    (stage.path / "notes.txt").write_text("mine")  # the user's own file beside the outputs
    assert stage.done()
    (stage.path / "train.jsonl").write_text("ab")
    assert stage.missing() == "data/train.jsonl changed size (4 -> 2 bytes)"


def test_files_of_a_stage_listing_its_own_paths(tmp_path):
    files = ("model.ckpt", "results.json")
    stage = Stage(tmp_path, "train", {}, outputs=files).begin()
    for rel in files:
        (tmp_path / rel).write_text("x")
    stage.commit()
    assert stage.recorded()["files"] == {"model.ckpt": 1, "results.json": 1}
    (tmp_path / "results.json").unlink()
    assert stage.missing() == "results.json deleted"


def test_a_marker_from_before_the_file_listing_checks_outputs_only(tmp_path):
    stage = committed(tmp_path, **{"train.jsonl": "a\n"})
    record = stage.recorded()
    del record["files"]
    stage.marker.write_text(json.dumps(record))
    (stage.path / "train.jsonl").unlink()
    assert stage.done()
    stage.path.rmdir()
    assert not stage.done()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_are_not_listed_and_stale_ones_go_at_begin(tmp_path):
    stage = Stage(tmp_path, "data", {}).begin()
    stage.path.mkdir()
    (stage.path / "train.jsonl").write_text("a\n")
    pid = dead_pid()
    inner = stage.path / f".train.jsonl.{critic_io._HOST}.{pid}.abcd_123.tmp"  # a writer killed inside the stage
    inner.write_text("half")
    stage.commit()
    assert stage.recorded()["files"] == {"data/train.jsonl": 2}
    beside = tmp_path / f".data.{critic_io._HOST}.{pid}.x1y2z3w4.tmp"  # the stage's folder being built, killed
    beside.mkdir()
    (beside / "train.jsonl").write_text("half")
    kept = [tmp_path / ".data.tmp", tmp_path / f".data.{critic_io._HOST}.{os.getpid()}.abcdefgh.tmp",
            tmp_path / f".data.00000000.{pid}.abcdefgh.tmp"]  # not ours / a live writer / another host
    for path in kept:
        path.write_text("")
    Stage(tmp_path, "data", {"root": "/y"}).begin()
    assert not beside.exists() and not stage.path.exists()
    assert all(path.exists() for path in kept)


@pytest.fixture(scope="module")
def manpage_run(toy_job, manpage_job_config):
    """One uninterrupted ``critic run experiments/manpages/sections.toml`` of the fixture."""
    return toy_job("stages", manpage_job_config)


@pytest.mark.parametrize("damage, recomputed", [
    ("report/results.json", ["report"]),
    ("critic/critic.json", ["critic", "report"]),
    ("filtered/test.jsonl", ["filtered", "critic", "report"]),
])
def test_a_finished_stage_whose_file_was_deleted_is_recomputed(manpage_run, run_experiment, tmp_path, damage,
                                                                 recomputed):
    config, base = manpage_run
    out = tmp_path / "run"
    shutil.copytree(base, out)
    (out / damage).unlink()
    assert (out / damage).parent.is_dir()
    printed, how = run_experiment(config, out, "[manpages]", MANPAGE_STAGES)
    assert [s for s in MANPAGE_STAGES if how[s] == "computed"] == recomputed
    assert f"[manpages] {recomputed[0]}: recomputing ({damage} deleted)" in printed  # the log says why
    assert (out / damage).read_bytes() == (base / damage).read_bytes()
    _, how = run_experiment(config, out, "[manpages]", MANPAGE_STAGES)
    assert how == dict.fromkeys(MANPAGE_STAGES, "reused")


def test_a_damaged_marker_means_recompute(tmp_path):
    stage = Stage(tmp_path, "data", {}).begin()
    stage.path.mkdir()
    stage.commit()
    stage.marker.write_text("{not json")
    assert not stage.done() and stage.recorded() is None


@pytest.mark.parametrize("name", ["", "stages", "a/b"])
def test_bad_stage_names(tmp_path, name):
    with pytest.raises(ValueError, match="stage name"):
        Stage(tmp_path, name, {})
