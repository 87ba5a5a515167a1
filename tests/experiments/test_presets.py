"""Every shipped study preset (``experiments/<study>/*.toml``) passes its runner's schema, so a typo in a
preset that only a GPU or a long run would reach (``paper.toml``) fails here, naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from critic import registry
from critic.config import check_config, read_toml
from critic.lm.format import DocumentFormat

PRESETS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*/*.toml"))


def test_every_study_has_presets():
    assert {p.parent.name for p in PRESETS} >= {"codemixing", "coherence", "coreference", "manpages", "synthetic",
                                               "topics"}
    assert {p.name for p in PRESETS if p.parent.name != "manpages"} >= {"cpu.toml", "paper.toml"}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_preset_passes_its_runners_schema(path):
    data, text = read_toml(path)
    runner = registry.get_runner(data["runner"])
    config = check_config(data, runner.schema, where=str(path), text=text, allowed=("runner",))
    if "lm" in config:  # the document format the LM stages will build
        DocumentFormat(with_titles=True, section_marker=config["lm"]["section_marker"],
                       end_of_document=config["lm"]["end_of_document"])


def test_a_preset_typo_is_named_with_its_line(tmp_path):
    from critic.config import ConfigError

    topics = next(p for p in PRESETS if p.parent.name == "topics" and p.name == "paper.toml")
    text = topics.read_text().replace("num_topics = 100", "num_topic = 100")
    bad = tmp_path / "paper.toml"
    bad.write_text(text)
    data, text = read_toml(bad)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("num_topic "))
    with pytest.raises(ConfigError, match=rf"paper\.toml:{line}: .*num_topic"):
        check_config(data, registry.get_runner(data["runner"]).schema, where=str(bad), text=text,
                     allowed=("runner",))


WITH_HEADS = [p for p in PRESETS if p.name == "cpu.toml" and any(
    "heads" in read_toml(p)[0].get(t, {}) for t in ("lm", "translation", "transformer"))]


def test_the_head_check_has_presets_to_check():
    assert {p.parent.name for p in WITH_HEADS} >= {"codemixing", "synthetic"}   # the LM studies fine-tune SmolLM2


@pytest.mark.parametrize("path", WITH_HEADS, ids=lambda p: p.parent.name)
def test_attention_heads_that_do_not_divide_the_width_are_refused_with_the_config(path, tmp_path):
    """An impossible model is named with its line when the config is read, not when training starts."""
    from critic.config import ConfigError

    data, text = read_toml(path)
    table = next(t for t in ("lm", "translation", "transformer") if "heads" in data.get(t, {}))
    rows = text.splitlines()
    start = next(i for i, row in enumerate(rows) if row.strip() == f"[{table}]")
    at = next(i for i in range(start, len(rows)) if rows[i].startswith("heads ="))
    rows[at] = "heads = 7"
    bad = tmp_path / path.name
    bad.write_text("\n".join(rows) + "\n")
    data, text = read_toml(bad)
    width = check_config({**data, table: {k: v for k, v in data[table].items() if k != "heads"}},
                         registry.get_runner(data["runner"]).schema, allowed=("runner",))[table].get("dim")
    assert width % 7
    with pytest.raises(ConfigError, match=rf"cpu\.toml:{at + 1}: \[{table}\] heads = 7 does not divide dim = {width}"):
        check_config(data, registry.get_runner(data["runner"]).schema, where=str(bad), text=text, allowed=("runner",))


def test_a_coreference_prior_without_context_is_refused_with_the_config(tmp_path):
    from critic.config import ConfigError

    path = next(p for p in PRESETS if p.parent.name == "coreference" and p.name == "cpu.toml")
    data, text = read_toml(path)
    data["critic"] = {**data.get("critic", {}), "order": 1}
    with pytest.raises(ConfigError, match=r"order must be >= 2"):
        check_config(data, registry.get_runner(data["runner"]).schema, where=str(path), allowed=("runner",))


def test_an_opening_that_is_not_a_regular_expression_is_refused_with_the_config(tmp_path):
    """The coherence study's W/O Title opening pattern is compiled when the config is read, not at the report."""
    from critic.config import ConfigError

    path = next(p for p in PRESETS if p.parent.name == "coherence" and p.name == "cpu.toml")
    text = path.read_text().replace("[manpages]\n", "[manpages]\nopening = \"(ls\"\n", 1)
    bad = tmp_path / "cpu.toml"
    bad.write_text(text)
    data, text = read_toml(bad)
    line = text.splitlines().index('opening = "(ls"') + 1
    with pytest.raises(ConfigError, match=rf"cpu\.toml:{line}: \[manpages\] opening = '\(ls' is not a regular "
                                          r"expression: missing \), unterminated subpattern"):
        check_config(data, registry.get_runner(data["runner"]).schema, where=str(bad), text=text, allowed=("runner",))


def _out_of_range(key) -> object | None:
    """A value just outside a key's bounds (``None`` when it has none)."""
    if key.gt is not None:
        return key.gt
    if key.min is not None:
        return key.min - (1 if key.type is int else 0.5)
    if key.max is not None:
        return key.max + 1
    return None


@pytest.mark.parametrize("path", [p for p in PRESETS if p.name == "cpu.toml"], ids=lambda p: p.parent.name)
def test_every_bounded_setting_of_a_study_is_refused_out_of_range(path):
    """Issue 39: the bounds of every setting (a critic's ``Range``, the criticism settings') are the config's
    keys', checked with the config, before any stage runs."""
    from critic.config import ConfigError

    data, text = read_toml(path)
    schema = registry.get_runner(data["runner"]).schema
    checked = 0
    for table, keys in schema.tables.items():
        for name, key in keys.items():
            value = _out_of_range(key)
            if value is None or table not in data:
                continue
            bad = {**data, table: {**data[table], name: value}}
            with pytest.raises(ConfigError, match=rf"\[{table}\] {name} must be"):
                check_config(bad, schema, where=str(path), allowed=("runner",))
            checked += 1
    assert checked >= 5


def test_a_topic_count_of_one_stops_the_study_before_any_stage(tmp_path, capsys):
    from critic.cli import main

    topics = next(p for p in PRESETS if p.parent.name == "topics" and p.name == "cpu.toml")
    bad = tmp_path / "topics.toml"
    bad.write_text(topics.read_text().replace("num_topics = ", "num_topics = 1 #", 1))
    assert main(["run", str(bad), "--out", str(tmp_path / "run")]) == 2
    assert "[critic] num_topics must be >= 2, got 1" in capsys.readouterr().err
    assert not (tmp_path / "run" / "stages").exists()
