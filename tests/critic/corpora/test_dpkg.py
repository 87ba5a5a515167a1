"""Package-database questions against a real dpkg-query over a small database of our own (DPKG_ADMINDIR),
so the tests neither read nor wait on the machine's own database (which apt may be writing)."""

import threading
from pathlib import Path

import pytest

from critic.corpora import dpkg
from critic.corpora.dpkg import DpkgError, dpkg_query
from critic.corpora.gettext_pairs import catalog_packages
from critic.corpora.manpages_l10n import package_versions

pytestmark = pytest.mark.skipif(not dpkg.have_dpkg(), reason="no dpkg-query on this machine")

OWNED = "/usr/share/locale/de/LC_MESSAGES/demo.mo"


@pytest.fixture
def admindir(tmp_path, monkeypatch):
    """A package database with one installed package, ``demo`` 1.0-1, owning OWNED."""
    root = tmp_path / "dpkg"
    (root / "info").mkdir(parents=True)
    (root / "updates").mkdir()
    (root / "status").write_text("Package: demo\nStatus: install ok installed\nPriority: optional\nSection: misc\n"
                                 "Maintainer: Demo <demo@example.org>\nArchitecture: all\nVersion: 1.0-1\n"
                                 "Description: demo\n\n")
    (root / "info" / "demo.list").write_text(f"/.\n/usr/share/locale\n{OWNED}\n")
    monkeypatch.setenv("DPKG_ADMINDIR", str(root))
    monkeypatch.setattr(dpkg, "WAIT_SECONDS", 0.0)
    return root


def _interrupt(root: Path) -> None:
    """What apt leaves while it installs: a journal entry a reader cannot parse."""
    (root / "updates" / "0001").write_text("half-written\n")


def test_owners_versions_and_files_from_the_database(admindir):
    owners = catalog_packages([Path(OWNED), Path("/usr/share/locale/de/LC_MESSAGES/nobody.mo")])
    assert owners == {Path(OWNED): "demo", Path("/usr/share/locale/de/LC_MESSAGES/nobody.mo"): None}
    assert package_versions(["demo", "absent"]) == {"demo": "1.0-1", "absent": None}
    assert dpkg_query("-L", "demo").stdout.split() == ["/.", "/usr/share/locale", OWNED]
    assert dpkg_query("-L", "absent").returncode == 1  # not installed: an answer, not an error


def test_a_database_mid_install_is_an_error_naming_dpkg_not_an_unowned_file(admindir):
    _interrupt(admindir)
    with pytest.raises(DpkgError, match=r"dpkg-query -S .* failed 3 times .*parsing file .*updates/0001"):
        dpkg_query("-S", OWNED, attempts=3)
    with pytest.raises(DpkgError, match="failed 5 times"):
        catalog_packages([Path(OWNED)])
    with pytest.raises(DpkgError, match="dpkg-query -W"):
        package_versions(["demo"])


def test_a_busy_database_is_retried_until_it_answers(admindir):
    _interrupt(admindir)
    repair = threading.Timer(0.5, (admindir / "updates" / "0001").unlink)
    repair.start()
    try:
        done = dpkg_query("-S", OWNED, attempts=4, wait=0.4)  # tries at 0, 0.4, 1.2 s: the repair lands at 0.5
    finally:
        repair.join()
    assert done.returncode == 0 and done.stdout.strip() == f"demo: {OWNED}"
