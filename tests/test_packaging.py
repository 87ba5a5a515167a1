"""What the package declares (issue 41): one version, a license, typing, and an extra for each critic that needs
more than the core -- the extra `critic list` names is one pyproject declares, with what the critic imports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
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


def test_the_wheel_installs_no_top_level_experiments(tmp_path):
    """``pip install .`` puts ``critic`` and ``critics`` into site-packages and nothing else: the studies stay a
    source folder (a top-level ``experiments`` would collide with any other project's)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("critic", "critics", "experiments"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path / "wheel"), str(source)], check=True)
    (wheel,) = (tmp_path / "wheel").glob("critic-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"critic", "critics"}
    assert "critics/sections/__init__.py" in names and "critic/py.typed" in names


def test_critic_run_finds_the_studies_beside_the_config(tmp_path):
    """Outside the checkout the studies are not importable; ``critic run`` finds the package above the config."""
    probe = ("import sys; from pathlib import Path; from critic import registry\n"
             "try:\n    registry.get_runner('experiments.synthetic.run:main')\n"
             "except ValueError as exc:\n    print('refused:', exc)\n"
             "entry = registry.get_runner('experiments.synthetic.run:main', source_roots=(Path(sys.argv[1]),))\n"
             "print('found:', sys.modules[entry.fn.__module__].__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", probe, str(ROOT / "experiments" / "synthetic")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("refused: runner 'experiments.synthetic.run:main': cannot import") and \
        "No module named 'experiments'" in out[0]
    assert out[1] == f"found: {ROOT / 'experiments' / 'synthetic' / 'run.py'}"
