"""Translated man pages (German, Spanish, French) as a corpus of sectioned documents.

``critic data build manpages-l10n`` reads the pages of Debian's ``manpages-de``, ``manpages-es`` and
``manpages-fr`` (the manpages-l10n project: po4a translations of the man-pages, coreutils, util-linux, ...
pages; GPL-3.0-or-later, see ``/usr/share/doc/manpages-de/copyright``), installed under
``/usr/share/man/<lang>/man[1-8]``.

**Which pages.**  ``/usr/share/man/de`` etc. also hold pages of other packages (dpkg, apt, man-db,
shadow, procps, ...: 376 files in the three folders on a Debian 12 machine before these packages were
installed).  So that the corpus depends only on the three packages, it takes exactly the files that
``dpkg -L manpages-xx`` lists under ``/usr/share/man/<lang>/man[1-8]/``; ``build.json`` lists the files of
other packages it left out (``source.languages.<lang>.other_files``).  With another ``root`` (a copy, the
test fixture) every entry under ``root/<lang>/man[1-8]/`` is read.

**Documents.**  One per page, parsed by :func:`~critic.corpora.manpages.parse_roff` (``.SH`` sections,
their translated titles as written: ``BEZEICHNUNG``, ``NOMBRE``, ``NOM``).  ``id`` is ``<lang>/<page>``
(``de/ls.1``), ``title`` the page's ``.TH`` name, metadata ``language``, ``package``, ``page``, ``path``
(relative to the root) and ``source`` (``"man"``).

**Exclusions** (``report.excluded["<lang>/man<n>/<file name>"]`` with the reason; counted in
``counts["excluded_<reason>"]``), checked in this order:

- ``link``: a symbolic link (the packages ship aliases such as ``de/man3/stat64.3.gz`` as links);
- ``alias``: a ``.so`` redirection to another page;
- ``unparseable``: a damaged gzip file, an unreadable file, or a page without ``.SH`` sections (on Debian 12
  all 30 are BSD mdoc pages, ``.Sh`` headings, such as ``biff.1``; the reason says so);
- ``short``: fewer than ``min_tokens`` (default 100) whitespace-separated tokens in all its sections.

``counts["files"]`` is the number of entries read (documents kept + ``excluded``); ``counts["<lang>"]`` the
documents kept per language.

**Split**: :func:`~critic.corpora.manpages.split_of` of the page name *without* the language (``ls.1``), so
the translations of one page share a split, and share it with the English page of the ``manpages``
corpus.

**Versions.**  ``build.json`` records each package's installed version (``dpkg-query``) next to
:data:`PINNED_VERSIONS`, the Debian 12 (bookworm) release the documented counts were measured on; another
version builds, with a warning and ``version_matches_pin: false``.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..document import Document, DocumentError, unique_ids, write_jsonl
from ..io import atomic_write_text
from .dpkg import dpkg_query, have_dpkg
from .manpages import (BuildReport, check_split_fractions, install_debian_packages, MAN_ROOT, _page_name,
                       parse_roff, _read_source, split_of, SplitFraction)

__all__ = ["build_manpages_l10n", "load_manpages_l10n", "find_l10n_files", "parse_languages", "package_versions",
           "write_splits_by", "SourcedReport", "LANGUAGES", "PINNED_VERSIONS", "REASONS"]

LANGUAGES = {"de": "manpages-de", "es": "manpages-es", "fr": "manpages-fr"}
"""Language code -> the Debian package of its translated man pages."""
PINNED_VERSIONS = {"manpages-de": "4.18.1-1", "manpages-es": "4.18.1-1", "manpages-fr": "4.18.1-1"}
"""The versions of Debian 12 (bookworm) that the documented counts are for."""
REASONS = ("link", "alias", "unparseable", "short")


@dataclass
class SourcedReport(BuildReport):
    """A :class:`BuildReport` that also records where the texts came from (packages, versions, options)."""

    source: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "source": self.source}


def parse_languages(language: str | Sequence[str] | None, choices: Iterable[str]) -> list[str]:
    """``None``/``"all"`` -> every choice; ``"de"``, ``"de,fr"`` or ``["de", "fr"]`` -> those, in the
    order of ``choices``.  An unknown code is a ValueError naming the choices."""
    choices = list(choices)
    if language is None or language == "all":
        return choices
    asked = [part.strip() for part in language.split(",")] if isinstance(language, str) else list(language)
    unknown = [code for code in asked if code not in choices]
    if unknown or not asked:
        raise ValueError(f"language {', '.join(map(repr, unknown)) or repr(language)}: not one of "
                         f"{', '.join(choices)} (or 'all', or several separated by commas)")
    return [code for code in choices if code in asked]


def package_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each Debian package (``dpkg-query -W``); ``None`` when not installed."""
    packages = sorted(set(packages))
    versions: dict[str, str | None] = dict.fromkeys(packages)
    if not packages or not have_dpkg():
        return versions
    done = dpkg_query("-W", "-f", "${binary:Package}\t${Package}\t${Version}\t${db:Status-Abbrev}\n", *packages)
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[3].startswith("ii") and parts[2]:
            for name in (parts[0], parts[1]):
                if name in versions:
                    versions[name] = parts[2]
    return versions


def _dpkg_files(package: str) -> list[str] | None:
    if not have_dpkg():
        return None
    done = dpkg_query("-L", package)
    return done.stdout.splitlines() if done.returncode == 0 else None


def find_l10n_files(language: str, root: Path = MAN_ROOT) -> tuple[list[Path], list[Path]]:
    """The page entries (files and links) to read for ``language``, sorted, and the regular files under
    ``root/<lang>/man[1-8]`` that are left out because another package owns them.

    Under the system root the entries are those ``dpkg -L`` lists for the language's package (a
    DocumentError when dpkg does not know it); elsewhere, every entry under ``root/<lang>/man[1-8]/``.
    """
    package = LANGUAGES[language]
    folder = root / language
    present = sorted(p for d in sorted(folder.glob("man[1-8]")) if d.is_dir() for p in d.iterdir())
    if root != MAN_ROOT:
        return present, []
    listed = _dpkg_files(package)
    if listed is None:
        raise DocumentError(f"{package} is not installed (dpkg does not know it): install it with "
                            f"`sudo apt-get install {package}` or build with install=True as root")
    prefix = f"{folder}/man"
    owned = sorted({Path(p) for p in listed if p.startswith(prefix) and p[len(prefix):len(prefix) + 1] in "12345678"
                    and p.count("/") == folder.as_posix().count("/") + 2})
    owned_set = set(owned)
    others = [p for p in present if p not in owned_set and p.is_file() and not p.is_symlink()]
    on_disk = [p for p in owned if p.is_symlink() or p.exists()]
    if owned and not on_disk:
        raise DocumentError(f"dpkg lists {len(owned)} pages of {package} under {folder}, but none is on disk: is "
                            f"/usr/share/man excluded by a dpkg path-exclude (/etc/dpkg/dpkg.cfg.d/, as in Debian's "
                            f"Docker images)? Remove it and reinstall {package}")
    return on_disk, others


def _is_mdoc(path: Path) -> bool:
    try:
        return any(line.startswith((".Dd", ".Sh ")) for line in _read_source(path).splitlines())
    except (DocumentError, OSError):
        return False


def load_manpages_l10n(language: str, *, root: str | Path = MAN_ROOT, min_tokens: int = 100,
                       report: BuildReport | None = None) -> tuple[list[Document], int]:
    """The pages of one language as documents (see the module docstring) and the number of entries read.

    What is left out goes to ``report`` (``excluded`` keyed ``<lang>/man<n>/<file name>``,
    ``counts["excluded_<reason>"]``).
    """
    root = Path(root)
    parse_languages(language, LANGUAGES)
    files, others = find_l10n_files(language, root)
    if isinstance(report, SourcedReport):
        report.source.setdefault("languages", {})[language] = {
            "package": LANGUAGES[language], "files": len(files),
            "other_files": [str(p.relative_to(root)) for p in others]}
    reasons: Counter[str] = Counter()
    excluded: dict[str, str] = {}

    def exclude(path: Path, reason: str, why: str) -> None:
        excluded[str(path.relative_to(root))] = f"{reason}: {why}"
        reasons[reason] += 1

    docs = []
    for path in files:
        page = _page_name(path)
        if path.is_symlink():
            target = path.readlink()
            exclude(path, "link", f"a symbolic link to {target}")
            continue
        try:
            doc = parse_roff(_read_source(path), page=page)
        except (DocumentError, OSError) as exc:
            exclude(path, "unparseable", str(exc))
            continue
        if doc is None:
            exclude(path, "alias", ".so redirection to another page")
            continue
        if not doc.sections:
            mdoc = " (an mdoc page: .Sh headings, which the roff parser does not read)" if _is_mdoc(path) else ""
            exclude(path, "unparseable", f"no .SH sections{mdoc}")
            continue
        tokens = sum(len(s.text.split()) for s in doc.sections)
        if tokens < min_tokens:
            exclude(path, "short", f"{tokens} tokens < min_tokens={min_tokens}")
            continue
        docs.append(Document(id=f"{language}/{page}", title=doc.title, sections=doc.sections, metadata={
            "source": "man", "language": language, "package": LANGUAGES[language], "page": page,
            "path": str(path.relative_to(root))}))
    if report is not None:
        report.excluded.update(excluded)
        for reason in REASONS:
            report.counts[f"excluded_{reason}"] = report.counts.get(f"excluded_{reason}", 0) + reasons[reason]
        report.counts[language] = len(docs)
    return docs, len(files)


def write_splits_by(docs: Sequence[Document], out: str | Path, report: BuildReport, *, key: Callable[[Document], str],
                    files: int, valid_fraction: float = 0.1, test_fraction: float = 0.1) -> BuildReport:
    """As :func:`~critic.corpora.manpages.write_splits`, but each document goes to the split
    :func:`~critic.corpora.manpages.split_of` gives ``key(doc)`` (not its id)."""
    docs, report.renamed = unique_ids(docs)
    splits: dict[str, list[Document]] = {"train": [], "valid": [], "test": []}
    for doc in docs:
        splits[split_of(key(doc), valid_fraction=valid_fraction, test_fraction=test_fraction)].append(doc)
    out = Path(out)
    for name, part in splits.items():
        write_jsonl(part, out / f"{name}.jsonl")
        report.counts[name] = len(part)
    report.counts.update(files=files, excluded=len(report.excluded), renamed=len(report.renamed))
    atomic_write_text(out / "build.json", json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    return report


def _ensure_installed(languages: list[str], install: bool) -> dict[str, str | None]:
    packages = [LANGUAGES[code] for code in languages]
    versions = package_versions(packages)
    missing = [p for p in packages if versions[p] is None]
    if missing:
        where = f"{', '.join(missing)} not installed (no pages under {', '.join(str(MAN_ROOT / c) for c in languages)})"
        if not install:
            raise DocumentError(f"{where}: install with `sudo apt-get install {' '.join(missing)}` "
                                f"(or build with install=True as root)")
        install_debian_packages(missing, where)
        versions = package_versions(packages)
    return versions


def build_manpages_l10n(out: str | Path, *, language: str | Sequence[str] | None = None,
                        root: str | Path = MAN_ROOT, install: bool = True, min_tokens: int = 100,
                        valid_fraction: SplitFraction = 0.1, test_fraction: SplitFraction = 0.1) -> SourcedReport:
    """Write ``out/{train,valid,test}.jsonl`` and ``out/build.json`` from the translated man pages.

    ``language``: ``de``, ``es``, ``fr``, several (``"de,fr"`` or a list) or ``None``/``"all"`` (all three).
    ``install``: under the system root, ``apt-get install`` the missing packages (as root); else a missing
    package is a DocumentError naming it.  ``min_tokens``: shorter pages are left out (``short``).
    """
    check_split_fractions(valid_fraction, test_fraction)
    languages = parse_languages(language, LANGUAGES)
    root = Path(root)
    min_tokens = int(min_tokens)
    report = SourcedReport()
    report.source.update(languages={}, root=str(root), min_tokens=min_tokens, packages={})
    if root == MAN_ROOT:
        versions = _ensure_installed(languages, install)
        for code in languages:
            package = LANGUAGES[code]
            pinned = PINNED_VERSIONS[package]
            report.source["packages"][package] = {"version": versions[package], "pinned": pinned,
                                                  "version_matches_pin": versions[package] == pinned}
            if versions[package] != pinned:
                warnings.warn(f"{package} {versions[package]} is installed; the documented counts are for {pinned}",
                              stacklevel=2)
    elif not root.is_dir():
        raise DocumentError(f"{root}: no such directory (the man page root, holding <lang>/man[1-8])")
    docs: list[Document] = []
    files = 0
    for code in languages:
        kept, read = load_manpages_l10n(code, root=root, min_tokens=min_tokens, report=report)
        if read == 0:
            raise DocumentError(f"{root / code}: no man page files for language {code!r} "
                                f"(expected {root / code}/man[1-8]/*)")
        docs.extend(kept)
        files += read
    return write_splits_by(docs, out, report, key=lambda d: d.metadata["page"], files=files,
                           valid_fraction=valid_fraction, test_fraction=test_fraction)
