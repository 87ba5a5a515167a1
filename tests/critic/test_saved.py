"""A saved critic read without loading it (:class:`critic.saved.SavedCritic`): what a Dask client plans a stream
with is what the loaded critic says, found without importing torch, and a damaged folder fails as a load does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from critic import Critic, CriticLoadError
from critic.catalogue import Catalogue
from critic.document import Document, Section
from critic.saved import SavedCritic, check_device_name
from critics.sections import SectionTransitionCritic

ROOT = Path(__file__).resolve().parents[2]
TRAIN = [Document(f"d{i}", tuple(Section(t, "text") for t in ("NAME", "SYNOPSIS", "OPTIONS")[: 2 + i % 2]))
         for i in range(12)]


@pytest.fixture
def saved(tmp_path):
    return SectionTransitionCritic(delta=0.1).fit(TRAIN).save(tmp_path / "sections")


def _planned(critic) -> tuple:
    return critic.name, critic.state_sha256(), critic.batch_size, critic.chunk_documents


def test_a_saved_critic_plans_with_what_the_loaded_critic_says(saved, monkeypatch):
    loaded = Critic.load(saved)
    assert _planned(SavedCritic.read(saved)) == _planned(loaded) == (
        "sections", loaded.state_sha256(), SectionTransitionCritic.batch_size, SectionTransitionCritic.chunk_documents)
    # a critic the catalogue does not describe: its class is imported and read, the same numbers
    monkeypatch.setattr("critic.catalogue.catalogue", lambda: Catalogue())
    assert _planned(SavedCritic.read(saved)) == _planned(loaded)


def test_reading_a_saved_critic_imports_no_torch(saved):
    code = ("import json, sys\nfrom critic.saved import SavedCritic\ns = SavedCritic.read(sys.argv[1])\n"
            "print(json.dumps([s.name, s.state_sha256(), s.batch_size, 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    loaded = Critic.load(saved)
    assert json.loads(done.stdout.splitlines()[-1]) == ["sections", loaded.state_sha256(), loaded.batch_size, False]


@pytest.mark.parametrize("damage", [
    lambda p: (p / "critic.json").write_text("{\"format_version\": 2,"),
    lambda p: (p / "critic.json").unlink(),
    lambda p: (p / "critic.json").write_text(json.dumps({**json.loads((p / "critic.json").read_text()),
                                                         "critic": "no-such"})),
    lambda p: (p / "critic.json").write_text(json.dumps({**json.loads((p / "critic.json").read_text()),
                                                         "format_version": 1})),
], ids=["bad-json", "no-json", "unknown-kind", "old-version"])
def test_a_damaged_folder_is_named_as_a_load_names_it(saved, damage):
    damage(saved)
    with pytest.raises(CriticLoadError) as loading:
        Critic.load(saved)
    with pytest.raises(CriticLoadError) as reading:
        SavedCritic.read(saved)
    assert str(reading.value) == str(loading.value) and str(saved) in str(reading.value)


@pytest.mark.parametrize("name, ok", [("cpu", True), ("cuda", True), ("cuda:1", True), ("gpu", False),
                                      ("cuda:", False), ("CPU", False), (None, False)])
def test_device_names(name, ok):
    if ok:
        assert check_device_name(name) == name
    else:
        with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda"):
            check_device_name(name)
