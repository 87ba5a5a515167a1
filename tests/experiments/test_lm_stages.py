"""The LM stages on the study kit: with ``[lm] shared_dir`` a second study with the same corpus, settings and seed
reuses the tokenizer and the LM the first one trained (and samples from them the same generations), while a
change of a setting trains a new one beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from critic.corpora.manpages import build_manpages
from critic.study import Pipeline, study_schema
from experiments.lm_stages import LM_TABLE, SAMPLE_TABLE, LmStages

SCHEMA = study_schema({"data": {}, "lm": LM_TABLE, "sample": SAMPLE_TABLE})
TOY_LM = {"model": "tiny", "vocab_size": 300, "layers": 1, "heads": 2, "dim": 16, "context": 64, "batch_size": 4,
          "learning_rate": 3e-3, "epochs": 1, "max_tokens": 800}


def study(out: Path, manroot: Path, shared: Path, **lm) -> tuple[list[str], LmStages]:
    log: list[str] = []
    run = Pipeline("toy", {"data": {}, "lm": {**TOY_LM, **lm, "shared_dir": str(shared)},
                           "sample": {"n": 2, "batch_size": 2, "max_new_tokens": 16}},
                   SCHEMA, out=out, log=log.append)
    data = run.stage("data", {"root": str(manroot)})
    stages = LmStages(run, data)
    if run.needs(data):
        with run.computing(data):
            build_manpages(data.path, root=manroot)
    stages.compute()
    return log, stages


def test_a_second_study_reuses_the_shared_model_and_a_changed_setting_trains_another(tmp_path, fixture_manpage_root):
    shared = tmp_path / "models"
    first_log, first = study(tmp_path / "a", fixture_manpage_root, shared)
    lm = first.lms["lm"]
    assert lm.root == shared and lm.name.startswith("lm-") and (lm.path / "best").is_dir()
    second_log, second = study(tmp_path / "b", fixture_manpage_root, shared)
    assert second.lms["lm"].path == lm.path
    assert any(line.startswith(f"{lm.name}: up to date") for line in second_log)
    assert any(line.startswith(f"{first.tokenizer.name}: up to date") for line in second_log)
    assert not any(line.startswith("training") for line in second_log)
    generations = [(s.samples["lm"].path / "generations.jsonl").read_text() for s in (first, second)]
    assert generations[0] == generations[1] and generations[0]
    _, third = study(tmp_path / "c", fixture_manpage_root, shared, learning_rate=1e-3)
    assert third.lms["lm"].path != lm.path and (third.lms["lm"].path / "best").is_dir()
    assert third.tokenizer.path == first.tokenizer.path  # the tokenizer does not depend on the learning rate


def test_a_shared_dir_that_is_a_file_is_refused_before_any_stage_runs(tmp_path, fixture_manpage_root):
    taken = tmp_path / "models"
    taken.write_text("not a folder")
    with pytest.raises(ValueError, match=r"\[lm\] shared_dir: .*models exists and is not a folder"):
        study(tmp_path / "a", fixture_manpage_root, taken)
    assert not (tmp_path / "a").exists()


def test_eval_every_validates_the_study_lm_every_k_steps_and_at_the_end(tmp_path, fixture_manpage_root):
    _, stages = study(tmp_path / "a", fixture_manpage_root, tmp_path / "models", eval_every=2)
    training = json.loads((stages.lms["lm"].path / "best" / "training.json").read_text())
    planned = training["planned_steps"]
    assert planned >= 3 and training["settings"]["config"]["eval_every"] == 2
    result = json.loads((stages.lms["lm"].path / "result.json").read_text())
    expected = sorted(set(range(2, planned + 1, 2)) | {planned})   # every 2nd step, and the last
    assert [int(step) for step, _, _ in result["history"]] == expected
