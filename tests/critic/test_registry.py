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


def test_one_plugin_is_imported_alone_and_found_from_its_modules(tmp_path, isolated, monkeypatch):
    """Issue 40: a saved critic's load imports the one plugin that defines it (:func:`registry.load_plugin`), found
    from the critic's module (:func:`registry.plugin_of`); a broken one is recorded as load_plugins records it."""
    good, broken = tmp_path / "good.py", tmp_path / "broken.py"
    good.write_text("VALUE = 1\n")
    broken.write_text("raise ImportError('no such library')\n")
    monkeypatch.setenv(registry.PLUGINS_ENV, f"{good}{registry.os.pathsep}{broken}")
    assert registry.plugin_of("critics.sections.critic") == "sections" and registry.plugin_of("critics") is None
    assert registry.plugin_of(registry._file_module(good)) == str(good)
    assert registry.load_plugin(str(good)) and list(registry._PLUGINS) == [str(good)]
    assert not registry.load_plugin(str(broken)) and not registry.load_plugin("no-such-plugin")
    assert registry.plugin_errors() == {str(broken): f"{broken}: ImportError: no such library"}
