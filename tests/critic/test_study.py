"""The study kit: shared keys declared once, a critic's table derived from its ``__init__``, stages recomputed
with everything downstream of them, and a registered study that runs from ``critic run``."""

from __future__ import annotations

from typing import Annotated

import pytest

from critic import registry
from critic.cli import main as cli
from critic.config import ConfigError, Key, Range, check_config
from critic.study import CRITICISM_KEYS, RUNTIME_KEYS, Pipeline, settings_table, register_study, study_schema


class Toy:
    def __init__(self, *, k: Annotated[int, Range(min=2)] = 3, rate: float = 0.5, names: tuple[str, ...] = ("a",),
                 seed: int = 0):
        pass


def test_schema_holds_the_shared_keys_and_refuses_to_redeclare_them():
    schema = study_schema({"data": {"n": Key(int, 1)}}, criticism={"extra": Key(int, 2)})
    assert set(schema.keys) == set(RUNTIME_KEYS)
    assert set(schema.tables["criticism"]) == {*CRITICISM_KEYS, "extra"}
    with pytest.raises(ValueError, match="n_bootstrap"):
        study_schema({}, criticism={"n_bootstrap": Key(int, 5)})
    with pytest.raises(ValueError, match="threads"):
        study_schema({}, keys={"threads": Key(int, 2)})
    with pytest.raises(ValueError, match="criticism="):
        study_schema({"criticism": {}})


def test_critic_table_takes_types_defaults_and_bounds_from_the_signature():
    table = settings_table(Toy, defaults={"rate": 0.25}, notes={"k": "topics"})
    assert list(table) == ["k", "rate", "names"]  # seed is the run's
    assert (table["k"].min, table["k"].default, table["k"].help) == (2, 3, "topics")
    assert table["rate"].default == 0.25 and table["names"].default == ["a"]
    schema = study_schema({"critic": table})
    assert check_config({"critic": {"k": 5}}, schema)["critic"] == {"k": 5, "rate": 0.25, "names": ["a"]}
    with pytest.raises(ConfigError, match=r"\[critic\] k must be >= 2"):
        check_config({"critic": {"k": 1}}, schema)
    with pytest.raises(ConfigError, match="rate"):
        check_config({"critic": {"rate": "fast"}}, schema)
    with pytest.raises(ValueError, match="no settings"):
        settings_table(Toy, keep=("kk",))


def test_a_stage_is_recomputed_with_everything_downstream(tmp_path):
    schema = study_schema({"data": {"n": Key(int, 1)}})
    computed = []

    def run_once(n: int, log: list) -> None:
        run = Pipeline("toy", {"data": {"n": n}}, schema, out=tmp_path, log=log.append)
        data = run.stage("data", run.config["data"])
        other = run.stage("other", {})
        model = run.stage("model", {}, upstream=[data])
        for stage in (data, other, model):
            if run.needs(stage):
                with run.computing(stage):
                    (stage.path).mkdir(parents=True, exist_ok=True)
                    (stage.path / "out.txt").write_text(str(n))
                computed.append(stage.name)

    run_once(1, [])
    assert computed == ["data", "other", "model"]
    computed.clear()
    log: list[str] = []
    run_once(1, log)
    assert computed == [] and all("up to date" in line for line in log)
    run_once(2, [])
    assert computed == ["data", "model"]  # model only because data was redone: its own config is unchanged


def test_a_failed_computation_is_not_committed(tmp_path):
    run = Pipeline("toy", {}, study_schema({}), out=tmp_path, log=lambda m: None)
    stage = run.stage("data", {})
    with pytest.raises(RuntimeError):
        with run.computing(stage):
            raise RuntimeError("boom")
    assert stage.missing() == "interrupted before it finished"


def test_a_registered_study_runs_from_the_command_line(tmp_path, capsys):
    schema = study_schema({"data": {"n": Key(int, 1, min=1)}})

    @register_study("toy-study-test", schema, "a toy")
    def toy(run: Pipeline) -> int:
        stage = run.stage("data", run.config["data"])
        if run.needs(stage):
            with run.computing(stage):
                stage.path.mkdir(parents=True)
                (stage.path / "n.txt").write_text(str(run.config["data"]["n"] * (run.seed + 1)))
        return run.config["data"]["n"]

    assert registry.get_runner("toy-study-test").schema is schema
    config = tmp_path / "toy.toml"
    config.write_text('runner = "toy-study-test"\n[data]\nn = 3\n')
    assert cli(["run", str(config), "--out", str(tmp_path / "out"), "--seed", "1"]) == 0
    assert (tmp_path / "out" / "data" / "n.txt").read_text() == "6"
    config.write_text('runner = "toy-study-test"\n[data]\nn = 0\n')
    assert cli(["run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "toy.toml:3: [data] n must be >= 1" in capsys.readouterr().err


def test_two_flag_rules_are_refused_before_any_stage(tmp_path):
    from critic.config import ConfigError

    with pytest.raises(ConfigError, match=r"toy config: \[criticism\] fdr = 0.2 and flag_level = 0.05 are two flag "
                                          "rules"):
        Pipeline("toy", {"criticism": {"fdr": 0.2, "flag_level": 0.05}}, study_schema({}), out=tmp_path)
    assert list(tmp_path.iterdir()) == []
    run = Pipeline("toy", {"criticism": {"flag_level": 0.05, "top": 3}}, study_schema({}), out=tmp_path)
    assert (run.settings.flag_rule, run.settings.top) == ({"fdr": None, "level": 0.05}, 3)
