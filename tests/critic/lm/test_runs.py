"""Output folders that resume: claiming, refusing other settings, derived seeds."""

from __future__ import annotations

import json

import pytest

from critic.lm.runs import claim_out_dir, derived_seed


def test_claim_checks_settings_once_outputs_exist(tmp_path):
    out = tmp_path / "run"
    claim_out_dir(out, {"n": 1, "seed": 0}, what="sampling")
    assert json.loads((out / "settings.json").read_text()) == {"n": 1, "seed": 0}
    claim_out_dir(out, {"seed": 0, "n": 1}, what="sampling")             # same settings: resumes
    claim_out_dir(out, {"n": 2, "seed": 0}, what="sampling")             # nothing written yet: starts afresh
    assert json.loads((out / "settings.json").read_text())["n"] == 2
    (out / "generations.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"run: holds a sampling run with other settings \(n: 2 there, 3 now\)"):
        claim_out_dir(out, {"n": 3, "seed": 0}, what="sampling")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file: exists and is not an LM run folder; refusing to write into it: it "
                                         "is not a folder"):
        claim_out_dir(tmp_path / "file", {}, what="sampling")


def test_a_folder_is_claimed_by_the_tool_s_one_rule(tmp_path):
    """The user's folder is refused naming what is in it; a run folder from before folders were marked (its
    settings.json) is taken and marked; a folder the tool made as another kind (a saved critic) is refused."""
    from critic.io import OUTPUT_MARKER, atomic_directory

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.md").write_text("keep")
    with pytest.raises(ValueError, match=r"notes: exists and is not an LM run folder; refusing to write into it: it "
                                         r"holds todo.md"):
        claim_out_dir(mine, {"n": 1}, what="sampling")
    assert sorted(p.name for p in mine.iterdir()) == ["todo.md"]
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "settings.json").write_text(json.dumps({"n": 1}))
    (old / "log.jsonl").write_text("")
    claim_out_dir(old, {"n": 1}, what="sampling")
    assert json.loads((old / OUTPUT_MARKER).read_text())["kind"] == "lm-run"
    with atomic_directory(tmp_path / "critic", "critic") as folder:
        (folder / "critic.json").write_text("{}")
    with pytest.raises(ValueError, match=r"critic: exists and is not an LM run folder"):
        claim_out_dir(tmp_path / "critic", {"n": 1}, what="sampling")


def test_derived_seeds_are_stable_distinct_and_63_bit():
    seeds = {derived_seed(s, "batch", b) for s in range(3) for b in range(50)}
    assert len(seeds) == 150 and all(0 <= x < 2**63 for x in seeds)
    assert derived_seed(0, "batch", 1) == derived_seed(0, "batch", 1) != derived_seed(0, "epoch", 1)
    assert derived_seed(-5, "x") >= 0
