"""Resumable stages keyed by their config (critic.stages)."""

from __future__ import annotations

import json

import pytest

from critic.stages import Stage, config_key


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
                      "upstream": {}, "outputs": ["data"]}
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
