"""Plugins: one that calls sys.exit on import is a named error, never an exit; two files of one name are two
plugins."""

from __future__ import annotations

import sys

import pytest

from critic import registry
from critic.cli import main


@pytest.fixture
def isolated(monkeypatch, request):
    """A clean plugin table and $CRITIC_PLUGINS; the modules the test imports are removed afterwards."""
    monkeypatch.setattr(registry, "_PLUGINS", {})
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", {})
    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    request.addfinalizer(lambda: [sys.modules.pop(k) for k in list(sys.modules) if k.startswith("critic_plugin_")])


def test_a_plugin_that_calls_sys_exit_on_import_is_an_error_not_an_exit(tmp_path, capsys, isolated):
    plugin = tmp_path / "quitter.py"
    plugin.write_text("import sys\nsys.exit(0)\n")
    assert main(["--plugin", str(plugin), "list"]) == 2
    err = capsys.readouterr().err
    assert f"--plugin: cannot import {plugin}: called sys.exit(0) while being imported" in err
    assert "Traceback" not in err


def test_two_plugin_files_of_the_same_name_are_two_plugins(tmp_path, isolated):
    first, second = tmp_path / "a" / "mine.py", tmp_path / "b" / "mine.py"
    for path, value in ((first, 1), (second, 2)):
        path.parent.mkdir()
        path.write_text(f"VALUE = {value}\n")
    registry.add_plugin(str(first))
    registry.add_plugin(str(second))
    loaded = registry.load_plugins()
    assert [loaded[str(p.resolve())].VALUE for p in (first, second)] == [1, 2]
    assert registry._import_plugin(str(first)) is loaded[str(first.resolve())]  # each file imported once
