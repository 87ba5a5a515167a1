"""Config schemas (critic.config): types, ranges, choices, unknown names with suggestions, file and line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from critic.config import (REQUIRED, ConfigError, Key, Schema, check_config, check_params, check_value,
                           keys_from_dataclass, load_config)

SCHEMA = Schema(
    keys={"threads": Key(int, min=1)},
    tables={
        "corpus": {"root": Key(str, "/usr/share/man"), "min_count": Key(int, 1, min=1),
                   "limit": Key(int | None, None), "rate": Key(float, gt=0, max=1)},
        "criticism": {"corruptions": Key(list[str], ["permuted"], choices=("permuted", "repeated")),
                      "grid": Key(list[float], [0.1], gt=0), "name": Key(str, REQUIRED)},
    },
)


@pytest.mark.parametrize("key, value, problem", [
    (Key(int), True, "x must be an integer, got boolean True"),
    (Key(int), 1.5, "x must be an integer, got number 1.5"),
    (Key(float), "1", "x must be a number, got string '1'"),
    (Key(bool), 1, "x must be a boolean, got integer 1"),
    (Key(list[float]), [1, "a"], "x must be a list of numbers, got list [1, 'a']"),
    (Key(list[str]), "abc", "x must be a list of strings, got string 'abc'"),
    (Key(int, min=1), 0, "x must be >= 1, got 0"),
    (Key(float, max=1), 1.5, "x must be <= 1, got 1.5"),
    (Key(float, gt=0), 0.0, "x must be > 0, got 0.0"),
    (Key(list[float], gt=0), [0.1, -1], "x must be > 0, got -1"),
    (Key(str, choices=("permuted",)), "permute", "x: 'permute' is not one of 'permuted' (did you mean 'permuted'?)"),
    (Key(list[str], choices=("a", "b")), ["a", "a"], "x lists 'a' more than once"),
])
def test_values_that_do_not_fit(key, value, problem):
    assert check_value("x", value, key) == problem


@pytest.mark.parametrize("key, value", [
    (Key(float), 3), (Key(int | None), None), (Key(list[float], gt=0), [1, 0.5]), (Key(float, gt=0, max=1), 1),
    (Key(list[str], choices=("a", "b")), ["b", "a"]),
])
def test_values_that_fit(key, value):
    assert check_value("x", value, key) is None


def test_defaults_are_filled_and_optional_keys_stay_absent():
    out = check_config({"criticism": {"name": "n"}}, SCHEMA)
    assert out == {"corpus": {"root": "/usr/share/man", "min_count": 1, "limit": None},
                   "criticism": {"corruptions": ["permuted"], "grid": [0.1], "name": "n"}}


def test_required_key():
    with pytest.raises(ConfigError, match=r"\[criticism\] missing key 'name'"):
        check_config({}, SCHEMA)


TEXT = """runner = "x:y"
threads = 2

[corpus]
root = "/tmp"
min_count = 5

[criticism]
name = "n"
"""


def test_a_valid_config_loads(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(TEXT)
    out = load_config(path, SCHEMA, allowed=("runner",))
    assert out["runner"] == "x:y" and out["threads"] == 2 and out["corpus"]["min_count"] == 5


@pytest.mark.parametrize("old, new, message", [
    ("min_count = 5", "min_cont = 5", ":6: [corpus] unknown key 'min_cont' (did you mean 'min_count'?)"),
    ("[criticism]", "[critcism]", ":8: unknown table [critcism] (did you mean [criticism]?)"),
    ("threads = 2", "thread = 2", ":2: unknown top-level key 'thread' (did you mean 'threads'?)"),
    ("threads = 2", "threads = 0", ":2: threads must be >= 1, got 0"),
    ("min_count = 5", "rate = 2.0", ":6: [corpus] rate must be <= 1, got 2.0"),
    ("min_count = 5", "min_count = 5\n[corpus.sub]\na = 1", ":7: [corpus] unknown key 'sub'"),
    ("min_count = 5", "min_count = [1", ":8: invalid TOML at column 1: Unclosed array"),
    ('runner = "x:y"', 'runner = "x:y" =', ":1: invalid TOML at column 16"),
])
def test_config_errors_name_file_and_line(tmp_path, old, new, message):
    path = tmp_path / "job.toml"
    path.write_text(TEXT.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_config(path, SCHEMA, allowed=("runner",))
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)


class Toy:
    def __init__(self, delta: float | None = None, grid: tuple[float, ...] = (0.1,), flag: bool = True,
                 other=None):
        self.delta = delta


class Needs:
    def __init__(self, size: int):
        self.size = size


@pytest.mark.parametrize("cls, params, message", [
    (Toy, {"detla": 1}, "--params: critic 'Toy' has no setting 'detla' (did you mean 'delta'?)"),
    (Toy, {"delta": "1"}, "--params: critic 'Toy' setting delta must be a number or null, got string '1'"),
    (Toy, {"grid": [0.1, "x"]}, "--params: critic 'Toy' setting grid must be a list of numbers"),
    (Toy, {"flag": 0}, "--params: critic 'Toy' setting flag must be a boolean, got integer 0"),
    (Toy, [1], "--params: expected a JSON object of settings, got list [1]"),
    (Needs, {}, "--params: critic 'Needs' needs the setting(s) size"),
])
def test_params_are_checked_against_the_signature(cls, params, message):
    with pytest.raises(ConfigError) as err:
        check_params(cls, params, where="--params")
    assert str(err.value).startswith(message)


def test_params_that_fit():
    assert check_params(Toy, {"delta": 1, "grid": [0.5], "flag": False, "other": {"any": 1}}) == \
        {"delta": 1, "grid": [0.5], "flag": False, "other": {"any": 1}}


@dataclass
class Settings:
    layers: int = 2
    lr: float = 0.1


def test_keys_from_a_dataclass():
    keys = keys_from_dataclass(Settings, lr={"gt": 0})
    assert check_config({"t": {}}, Schema(tables={"t": keys}))["t"] == {"layers": 2, "lr": 0.1}
    assert check_config({"t": {}}, Schema(tables={"t": keys_from_dataclass(Settings, defaults=False)}))["t"] == {}
    with pytest.raises(ConfigError, match=r"\[t\] lr must be > 0"):
        check_config({"t": {"lr": 0}}, Schema(tables={"t": keys}))
    with pytest.raises(ValueError, match="no fields"):
        keys_from_dataclass(Settings, depth={"min": 1})


def test_a_list_setting_s_bounds_hold_for_each_item():
    """One declaration (``Annotated[Sequence[float], Range]``) bounds every item, named by its index, in the one
    check every entry point uses: the section critics' delta_grid, refused before any work."""
    from critics.sections import ClassifierSectionCritic, SectionTransitionCritic

    for cls in (SectionTransitionCritic, ClassifierSectionCritic):
        check_params(cls, {"delta_grid": [0.1, 1.0]})
        with pytest.raises(ConfigError, match=r"setting delta_grid\[1\] must be >= 1e-12 and <= 1e\+12, got number "
                                              r"1e\+20"):
            check_params(cls, {"delta_grid": [0.1, 1e20]})
        with pytest.raises(ConfigError, match=r"delta_grid\[0\]"):
            cls(delta_grid=(0.0,)).check_params()
