"""What the package declares (issue 41): one version, a license, typing, and an extra for each critic that needs
more than the core -- the extra `critic list` names is one pyproject declares, with what the critic imports."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_version_has_one_source():
    import critic

    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "critic.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", critic.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(critic.__version__)}\b", changelog, re.M)


def test_license_typing_and_classifiers():
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License") and "the critic authors" in license_text
    assert PROJECT["project"]["license"] == {"text": "MIT"}
    classifiers = PROJECT["project"]["classifiers"]
    assert "License :: OSI Approved :: MIT License" in classifiers and "Typing :: Typed" in classifiers
    assert (ROOT / "critic" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["critic"]


def test_each_critic_s_extra_is_declared_and_installs_what_it_imports():
    from critic.registry import list_critics

    extras = PROJECT["project"]["optional-dependencies"]
    named = {name: getattr(cls, "extra", "") for name, cls in list_critics().items()}
    assert named["sections"] == "" and named["sections-classifier"] == "sections-classifier"
    for name, extra in named.items():
        assert not extra or extra in extras, (name, extra)
    requirements = {extra: " ".join(extras[extra]) for extra in set(named.values()) if extra}
    assert "scikit-learn" in requirements["sections-classifier"]  # the classifier critic's sklearn
    assert "pyro-ppl" in requirements["ctm"] and "gensim" in requirements["lda"]
    assert "torch-struct" in requirements["hsmm"] and "kenlm" in requirements["coref"]
    everything = extras["all"][0]
    assert all(extra in everything for extra in requirements)
