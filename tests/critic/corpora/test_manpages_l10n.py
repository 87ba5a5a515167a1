"""The manpages-l10n corpus: real translated pages (tests/data/manpages_l10n) and the installed packages."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import critic.corpora.manpages_l10n as l10n
from critic.cli import main
from critic.corpora.manpages import MAN_ROOT, split_of
from critic.corpora.manpages_l10n import (LANGUAGES, PINNED_VERSIONS, build_manpages_l10n, find_l10n_files,
                                          package_versions, parse_languages)
from critic.document import DocumentError, iter_jsonl

FIXTURE = Path(__file__).parents[2] / "data" / "manpages_l10n"
SPLITS = ("train", "valid", "test")


def docs_of(out: Path) -> dict[str, list]:
    return {s: list(iter_jsonl(out / f"{s}.jsonl")) for s in SPLITS}


@pytest.fixture
def fixture_root(tmp_path) -> Path:
    root = tmp_path / "man"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


def test_fixture_build_counts_every_file(fixture_root, tmp_path):
    report = build_manpages_l10n(tmp_path / "out", root=fixture_root, install=False)
    c = report.counts
    assert (c["de"], c["es"], c["fr"]) == (2, 2, 2)
    assert c["train"] + c["valid"] + c["test"] == 6
    assert c["files"] == 10 == 6 + c["excluded"]
    assert {k: c[f"excluded_{k}"] for k in ("link", "alias", "unparseable", "short")} == dict.fromkeys(
        ("link", "alias", "unparseable", "short"), 1)
    assert report.excluded == {
        "de/man1/link.1.gz": "link: a symbolic link to true.1.gz",
        "de/man1/alias.1": "alias: .so redirection to another page",
        "de/man1/biff.1": "unparseable: no .SH sections (an mdoc page: .Sh headings, which the roff parser "
                          "does not read)",
        "de/man8/getkeycodes.8": "short: 80 tokens < min_tokens=100"}
    docs = {d.id: (name, d) for name, part in docs_of(tmp_path / "out").items() for d in part}
    assert sorted(docs) == ["de/true.1", "de/yes.1", "es/true.1", "es/yes.1", "fr/pwd.1", "fr/true.1"]
    for doc_id, (name, doc) in docs.items():
        language, page = doc_id.split("/")
        assert name == split_of(page)  # by the page name: the translations of a page share a split
        assert doc.metadata["language"] == language and doc.metadata["page"] == page
        assert doc.metadata["package"] == f"manpages-{language}"
    de_true = docs["de/true.1"][1]
    assert de_true.section_titles[:3] == ["BEZEICHNUNG", "ÜBERSICHT", "BESCHREIBUNG"]  # read from the .gz
    assert de_true.sections[0].text.startswith("true - nichts tun")
    assert de_true.metadata["path"] == "de/man1/true.1.gz"
    assert docs["fr/pwd.1"][1].section_titles[0] == "NOM"
    assert docs["es/yes.1"][1].section_titles[0] == "NOMBRE"
    build = json.loads((tmp_path / "out" / "build.json").read_text(encoding="utf-8"))
    assert build["counts"] == c and build["source"]["min_tokens"] == 100


def test_build_is_deterministic(fixture_root, tmp_path):
    build_manpages_l10n(tmp_path / "a", root=fixture_root, install=False)
    build_manpages_l10n(tmp_path / "b", root=fixture_root, install=False)
    for name in (*(f"{s}.jsonl" for s in SPLITS), "build.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_language_and_min_tokens_options(fixture_root, tmp_path):
    report = build_manpages_l10n(tmp_path / "de", root=fixture_root, language="de", min_tokens=50)
    assert report.counts["de"] == 3 and report.counts["excluded_short"] == 0 and "es" not in report.counts
    assert {d.metadata["language"] for part in docs_of(tmp_path / "de").values() for d in part} == {"de"}
    report = build_manpages_l10n(tmp_path / "two", root=fixture_root, language="fr,es")
    assert (report.counts["es"], report.counts["fr"]) == (2, 2) and "de" not in report.counts
    report = build_manpages_l10n(tmp_path / "list", root=fixture_root, language=["es"], min_tokens=190)
    assert report.counts["es"] == 1 and report.excluded == {"es/man1/yes.1": "short: 176 tokens < min_tokens=190"}
    assert parse_languages("all", LANGUAGES) == parse_languages(None, LANGUAGES) == ["de", "es", "fr"]


def test_damaged_gzip_is_counted_unparseable(fixture_root, tmp_path):
    (fixture_root / "fr/man1/broken.1.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    report = build_manpages_l10n(tmp_path / "out", root=fixture_root, language="fr")
    assert report.counts["excluded_unparseable"] == 1 and report.counts["fr"] == 2
    assert report.excluded["fr/man1/broken.1.gz"].startswith("unparseable: ") and "damaged gzip" in \
        report.excluded["fr/man1/broken.1.gz"]


def test_clear_errors(fixture_root, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"'it'.*de, es, fr"):
        build_manpages_l10n(tmp_path / "o", root=fixture_root, language="it")
    with pytest.raises(DocumentError, match="no such directory"):
        build_manpages_l10n(tmp_path / "o", root=tmp_path / "nowhere")
    shutil.rmtree(fixture_root / "es")
    with pytest.raises(DocumentError, match=r"no man page files for language 'es'"):
        build_manpages_l10n(tmp_path / "o", root=fixture_root, language="es")
    # the system root with the package missing: install=False names it; install=True installs exactly it
    monkeypatch.setattr(l10n, "package_versions", lambda packages: dict.fromkeys(packages))
    with pytest.raises(DocumentError, match=r"manpages-es not installed.*apt-get install manpages-es"):
        build_manpages_l10n(tmp_path / "o", language="es", install=False)
    asked = []

    def fake_install(packages, missing):
        asked.append(list(packages))
        raise RuntimeError(f"{missing}: (test) no apt here")

    monkeypatch.setattr(l10n, "install_debian_packages", fake_install)
    with pytest.raises(RuntimeError, match="manpages-de, manpages-fr not installed"):
        build_manpages_l10n(tmp_path / "o", language="de,fr", install=True)
    assert asked == [["manpages-de", "manpages-fr"]]


def test_cli_passes_options(fixture_root, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["data", "build", "manpages-l10n", "--out", str(out), "--root", str(fixture_root),
                 "--option", "language=es", "--option", "min_tokens=10"]) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["es"] == 2 and counts["files"] == 2
    assert main(["data", "build", "manpages-l10n", "--out", str(out), "--root", str(fixture_root),
                 "--option", "language=xx"]) == 2
    assert "de, es, fr" in capsys.readouterr().err


def test_installed_packages(tmp_path):
    versions = package_versions(LANGUAGES.values())
    missing = [p for p, v in versions.items() if v is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (.ci/install.sh installs them)")
    report = build_manpages_l10n(tmp_path, install=False)
    c = report.counts
    assert c["de"] > 500 and c["es"] > 200 and c["fr"] > 300
    assert c["train"] + c["valid"] + c["test"] == c["de"] + c["es"] + c["fr"] == c["files"] - c["excluded"]
    for package, info in report.source["packages"].items():
        assert info["version"] == versions[package] and info["pinned"] == PINNED_VERSIONS[package]
    # only the packages' own files: every document's file is one dpkg lists for its language's package
    owned = {lang: set(subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True, check=True).stdout.split())
             for lang, pkg in LANGUAGES.items()}
    for name, part in docs_of(tmp_path).items():
        for d in part:
            assert str(MAN_ROOT / d.metadata["path"]) in owned[d.metadata["language"]]
            assert split_of(d.metadata["page"]) == name
    files, others = find_l10n_files("de")
    assert not set(others) & set(files)
