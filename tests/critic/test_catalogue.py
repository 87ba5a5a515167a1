"""The plugins' catalogue (``critic list``, ``critic fit [NAME] --help``): what the plugins register, read once in a
fresh interpreter and kept, rebuilt when a plugin's file changes; and a user's plugin that adds an input format, a
critic and its view, used end to end from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from critic import catalogue as catalogue_module
from critic import registry
from critic.catalogue import CriticCard, catalogue, fingerprint
from critic.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache folder of this test and no user plugin."""
    monkeypatch.setenv("CRITIC_CATALOGUE", str(tmp_path / "cache"))
    monkeypatch.setenv("CRITIC_PLUGINS", "")
    return tmp_path / "cache" / "catalogue.json"


def test_the_catalogue_describes_what_the_plugins_register(fresh):
    built = catalogue()
    kept = json.loads(fresh.read_text())
    assert kept["key"] == fingerprint()
    cached = catalogue_module.Catalogue.from_json(kept["catalogue"])  # what the fresh interpreter read
    registry.load_plugins()  # the same plugins here: each card is the class's own description
    assert {"sections", "sections-classifier", "lda", "ctm", "coref", "hsmm"} <= set(cached.critics)
    for name, card in cached.critics.items():
        assert card == CriticCard.of(name, registry.get_critic(name)) == built.critics[name]
    for table, listed in (("metrics", registry.list_metrics), ("corpora", registry.list_corpora),
                          ("converters", registry.list_converters), ("setups", registry.list_setups)):
        here = {name: entry.description for name, entry in listed().items()}
        assert getattr(cached, table) == {name: here[name] for name in getattr(cached, table)}, table
    assert "mauve_text" in cached.metrics and "manpages" in cached.corpora and cached.plugin_errors == {}
    plugins = {name: card.plugin for name, card in cached.critics.items()}  # what a saved critic's load imports
    assert {k: plugins[k] for k in ("sections", "sections-classifier", "lda", "ctm", "hsmm")} == {
        "sections": "sections", "sections-classifier": "sections", "lda": "topics", "ctm": "topics", "hsmm": "hsmm"}


def test_a_kept_catalogue_is_read_without_building_it_again(fresh, monkeypatch, capsys):
    assert main(["list"]) == 0
    first = capsys.readouterr().out

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(catalogue_module.subprocess, "run", no_build)
    assert main(["list"]) == 0
    assert capsys.readouterr().out == first and "  lda " in first


PLUGIN = '''
"""A user's plugin: a critic ({doc})."""

import torch
from torch.distributions import Poisson

from critic import Critic, Projection, register_critic
from critic.latent import PointMass


@register_critic("title-count")
class TitleCountCritic(Critic):
    """{doc}"""

    needs = "documents with section titles"

    def __init__(self, floor: float = 1e-3):
        self.floor = floor

    def fit(self, docs, *, validation=None):
        self.rate_ = max(sum(len(d.sections) for d in docs) / max(1, len(docs)), self.floor)
        return self

    def check(self, doc):
        return None if doc.sections else "document has no sections"

    def prior(self):
        return Poisson(torch.tensor(self.rate_, dtype=torch.float64))

    def project(self, docs):
        n = torch.tensor([float(len(d.sections)) for d in docs], dtype=torch.float64)
        return Projection([d.id for d in docs], PointMass(n), torch.ones(len(docs), dtype=torch.float64))

    def _get_state(self):
        return {{"rate": self.rate_}}, {{}}

    def _set_state(self, state, tensors):
        self.rate_ = state["rate"]
'''


def test_a_changed_plugin_file_rebuilds_the_catalogue_and_a_broken_one_is_named(fresh, tmp_path, monkeypatch,
                                                                                 capsys):
    plugin = tmp_path / "title_count.py"
    plugin.write_text(PLUGIN.format(doc="Poisson prior over the section count."))
    monkeypatch.setenv("CRITIC_PLUGINS", str(plugin))
    card = catalogue().critics["title-count"]
    assert (card.summary, card.needs) == ("Poisson prior over the section count.", "documents with section titles")
    assert card.settings == ("floor: a number (default 0.001)",) and card.plugin == str(plugin)
    assert "title-count" not in registry.list_critics(plugins=False)  # read in another interpreter, not here
    plugin.write_text(PLUGIN.format(doc="Section counts, Poisson."))
    os.utime(plugin, ns=(plugin.stat().st_atime_ns, plugin.stat().st_mtime_ns + 10**9))
    assert catalogue().critics["title-count"].summary == "Section counts, Poisson."
    plugin.write_text("raise ImportError('no such library')\n")
    os.utime(plugin, ns=(plugin.stat().st_atime_ns, plugin.stat().st_mtime_ns + 2 * 10**9))
    capsys.readouterr()
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert "title-count" not in captured.out and "lda" in captured.out
    assert f"critic: plugin '{plugin}' could not be loaded: {plugin}: ImportError: no such library" in captured.err


def test_a_cache_folder_that_cannot_be_written_lists_all_the_same(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CRITIC_CATALOGUE", str(blocker / "cache"))
    monkeypatch.setenv("CRITIC_PLUGINS", "")
    assert set(catalogue().critics) >= {"sections", "lda", "ctm"}
    assert blocker.read_text() == "not a folder"


def test_list_and_fit_help_import_no_critic_stack_once_the_catalogue_is_kept(tmp_path):
    env = {**os.environ, "CRITIC_CATALOGUE": str(tmp_path / "cache"), "CRITIC_PLUGINS": ""}
    code = ("import json, sys\nfrom critic.cli import main\ntry:\n    status = main(sys.argv[1:])\n"
            "except SystemExit as exc:\n    status = exc.code\n"
            "print(json.dumps([status, 'torch' in sys.modules]))")

    def run(*argv):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                             check=True)
        return json.loads(out.stdout.splitlines()[-1]), out.stdout

    assert run("list")[0] == [0, False]  # built in a child interpreter: not even the first call imports torch here
    (status, torch), shown = run("fit", "lda", "--help")
    assert (status, torch) == (0, False) and "num_topics: an integer (>= 2)" in shown
    assert run("fit", "--help")[0] == [0, False]
    assert run("metric", "--help")[0] == [0, True]  # the check can fail: the metrics' options are their functions


def test_plugins_add_a_format_and_a_critic_with_its_view(tmp_path, monkeypatch, fixture_manpage_root):
    """A user's plugins: the ``title-count`` critic and its view, and a ``tsv`` input format; fitted, and its
    report written from ``.tsv`` generations, all from the command line in fresh processes."""
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN.format(doc="Poisson prior over the section count.") + '''

from critic.views import CriticView, register_view


class TitleCountView(CriticView):
    def document_view(self, critic, doc, result):
        return f'<p class="title-count">{len(doc.sections)} sections against a rate of {critic.rate_:.2f}</p>'


register_view(TitleCountCritic, TitleCountView())
''')
    tsv = Path(__file__).parent / "plugins" / "tsv_format.py"  # and an input format of another file
    env = {**os.environ, "CRITIC_CATALOGUE": str(tmp_path / "cache"), "CRITIC_PLUGINS": f"{plugin}{os.pathsep}{tsv}"}

    def critic(*argv):
        done = subprocess.run([sys.executable, "-m", "critic.cli", *map(str, argv)], capture_output=True, text=True,
                              env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "title-count" in critic("list") and "floor: a number" in critic("fit", "title-count", "--help")
    data = tmp_path / "data"
    critic("data", "build", "manpages", "--root", fixture_manpage_root, "--no-install", "--out", data)
    critic("fit", "title-count", "--train", data / "train.jsonl", "--out", tmp_path / "m")
    gens = tmp_path / "gens.tsv"
    long = "\\n".join(f"# S{k}\\ntext" for k in range(30))  # 30 sections: far above the man pages' counts
    gens.write_text("".join(f"g{k}\t# NAME\\nx\\n# DESCRIPTION\\ny\n" for k in range(12)) + f"long\t{long}\n")
    critic("report", "--critic", tmp_path / "m", "--reference", data / "test.jsonl", "--candidate", f"mine={gens}",
           "--n-bootstrap", "20", "--n-permutations", "20", "--out", tmp_path / "r")
    rows = [json.loads(line) for line in (tmp_path / "r" / "documents.jsonl").read_text().splitlines()]
    mine = {r["id"]: r for r in rows if r["set"] == "mine"}
    assert set(mine) == {*(f"g{k}" for k in range(12)), "long"} and mine["long"]["latent_steps"] == 1
    flagged = json.loads((tmp_path / "r" / "results.json").read_text())
    pages = [p.read_text() for p in sorted((tmp_path / "r" / "documents").glob("*.html"))]
    page = next(p for p in pages if ">long <" in p)  # the flagged 30-section generation, shown by the plugin's view
    assert '<p class="title-count">30 sections against a rate of' in page
    assert flagged["critics"]["m"]["critic"]["name"] == "title-count"


def test_the_catalogue_is_read_by_this_critic_whatever_the_working_folder_holds(tmp_path):
    """The child interpreter imports the critic package the command runs from, not a ``critic`` folder of the
    user's working folder."""
    (tmp_path / "critic").mkdir()
    (tmp_path / "critic" / "__init__.py").write_text("raise ImportError('not this one')\n")
    env = {**os.environ, "CRITIC_CATALOGUE": str(tmp_path / "cache"), "CRITIC_PLUGINS": ""}
    done = subprocess.run([str(Path(sys.executable).parent / "critic"), "list"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0 and "  lda " in done.stdout and "could not be loaded" not in done.stderr
    assert json.loads((tmp_path / "cache" / "catalogue.json").read_text())["catalogue"]["critics"]["lda"]


def test_a_catalogue_folder_holding_someone_else_s_files_is_left_untouched(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "catalogue.json").write_text("my own notes")
    monkeypatch.setenv("CRITIC_CATALOGUE", str(mine))
    monkeypatch.setenv("CRITIC_PLUGINS", "")
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert "  lda " in captured.out
    assert f"critic: warning: $CRITIC_CATALOGUE: {mine}: exists and is not the plugins' catalogue folder" in captured.err
    assert sorted(p.name for p in mine.iterdir()) == ["catalogue.json"] and (mine / "catalogue.json").read_text() == \
        "my own notes"
