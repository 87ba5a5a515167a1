"""The Linux man pages as a corpus of sectioned documents.

Each page of Debian's ``manpages`` and ``manpages-dev`` packages (roff
sources under ``/usr/share/man/man[1-8]``) becomes a :class:`Document` whose
sections are the page's ``.SH`` headings, in order, with their text stripped
of roff markup.  Links and ``.so`` redirections (aliases of other pages) are
not documents of their own and are counted, not silently dropped.

The split is deterministic: a page goes to test, valid or train by the SHA-1
of its name (``open.2``), so adding pages never moves existing ones.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Iterable, Sequence

from ..config import Range
from ..document import Document, DocumentError, Section, unique_ids, write_jsonl
from ..io import atomic_write_text
from .dpkg import dpkg_query, have_dpkg

__all__ = ["parse_roff", "find_manpage_files", "load_manpages", "split_of", "build_manpages", "write_splits",
           "ensure_manpages_installed", "install_debian_packages", "BuildReport"]

PACKAGES = ("manpages", "manpages-dev")
MAN_ROOT = Path("/usr/share/man")

_FONT_MACROS = {"B", "I", "BR", "RB", "BI", "IB", "IR", "RI", "SM", "SB"}
_TEXT_MACROS = {"TP", "IP", "TQ", "SS"}  # their arguments (if any) are text
_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),   # font changes
    (re.compile(r"\\s[+-]?\d"), ""),                # size changes
    (re.compile(r"\\\*\((lq|rq)"), '"'),
    (re.compile(r"\\\*\[[^\]]*\]|\\\*\(..|\\\*."), ""),  # strings
    (re.compile(r"\\\((em|en|hy)"), "-"),
    (re.compile(r"\\\((aq|cq|oq)"), "'"),
    (re.compile(r"\\\((dq|lq|rq)"), '"'),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\((..)"), " "),
    (re.compile(r"\\\[[^\]]*\]"), " "),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[&|^%:,/)]"), ""),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\ "), " "),
    (re.compile(r"\\c$"), ""),
]


def _unescape(text: str) -> str:
    for pattern, repl in _ESCAPES:
        text = pattern.sub(repl, text)
    return text.replace("\\\\", "\\")


def _macro_args(rest: str) -> list[str]:
    """Split roff macro arguments, honouring double quotes."""
    return [a[1:-1] if a.startswith('"') and a.endswith('"') and len(a) > 1 else a
            for a in re.findall(r'"[^"]*"|\S+', rest)]


def parse_roff(source: str, *, page: str) -> Document | None:
    """Parse a man page's roff source into a document; ``None`` for a ``.so`` alias.

    Sections are the ``.SH`` headings (title kept as written; normalisation is
    the critic's job); the text is the plain words of the body.
    """
    sections: list[Section] = []
    title: str | None = None
    body: list[str] = []
    name = page
    for raw in source.splitlines():
        line = raw.rstrip()
        if line.startswith(".so ") and not sections and title is None:
            return None
        if line.startswith(('.\\"', "'\\\"", '\\"')) or line in (".", "'"):
            continue
        if line.startswith((".", "'")) and len(line) > 1:
            macro, _, rest = line[1:].strip().partition(" ")
            if macro == "TH":
                args = _macro_args(rest)
                if args:
                    name = f"{args[0]}.{args[1]}" if len(args) > 1 else args[0]
                continue
            if macro == "SH":
                if title is not None:
                    sections.append(Section(title=title, text=" ".join(" ".join(body).split())))
                title = _unescape(" ".join(_macro_args(rest))).strip() or None
                body = []
                continue
            if macro in _FONT_MACROS:
                body.append(_unescape("".join(_macro_args(rest)) if macro != "SM" else rest))
            elif macro in _TEXT_MACROS and rest:
                args = _macro_args(rest)
                body.append(_unescape(args[0] if macro == "IP" else " ".join(args)))  # .IP tag [indent]
            continue
        if title is not None:
            body.append(_unescape(line))
    if title is not None:
        sections.append(Section(title=title, text=" ".join(" ".join(body).split())))
    return Document(id=page, title=name, sections=tuple(sections), metadata={"source": "man"})


def install_debian_packages(packages: Sequence[str], missing: str) -> None:
    """``apt-get install`` ``packages`` when running as root with apt; else a RuntimeError:
    ``missing`` (what is absent, and where) and the command that installs them."""
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        subprocess.run([apt, "update"], check=True)
        subprocess.run([apt, "install", "-y", "--no-install-recommends", *packages], check=True)
        return
    raise RuntimeError(f"{missing}: install with `sudo apt-get install {' '.join(packages)}`")


def ensure_manpages_installed(root: Path = MAN_ROOT) -> None:
    """Install Debian's ``manpages`` and ``manpages-dev`` when absent (as root), else explain how."""
    if not ((root / "man2").is_dir() and any((root / "man2").iterdir())):
        install_debian_packages(PACKAGES, f"no man pages under {root}")


def find_manpage_files(root: Path = MAN_ROOT) -> list[Path]:
    """Regular (non-link) page files of the two packages, sorted.

    Uses ``dpkg-query -L`` when ``root`` is the system folder and dpkg knows the
    packages; otherwise every regular file under ``root/man[1-8]``.
    """
    files: list[Path] = []
    if root == MAN_ROOT and have_dpkg():
        out = dpkg_query("-L", *PACKAGES)
        if out.returncode == 0:
            files = [Path(p) for p in out.stdout.split() if re.match(r"^/usr/share/man/man[1-8]/", p)]
    if not files:
        files = [p for d in sorted(root.glob("man[1-8]")) for p in d.iterdir()]
    return sorted(p for p in files if p.is_file() and not p.is_symlink())


def _page_name(path: Path) -> str:
    name = path.name
    return name[:-3] if name.endswith(".gz") else name


def _read_source(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # not gzip, truncated, or a corrupt deflate stream
            raise DocumentError(f"{path}: damaged gzip file ({type(exc).__name__}: {exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


@dataclass
class BuildReport:
    """What a corpus build kept and what it left out, with reasons."""

    counts: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    """Pages whose name repeats another's (``x.1`` and ``x.1.gz``): new id -> page name."""

    def to_dict(self) -> dict:
        return {"counts": self.counts, "excluded": self.excluded, "renamed": self.renamed}


def load_manpages(files: Iterable[Path], report: BuildReport | None = None) -> list[Document]:
    """Parse page files into documents; aliases and pages without sections go to ``report``."""
    docs = []
    for path in files:
        page = _page_name(path)
        doc = parse_roff(_read_source(path), page=page)
        if doc is None:
            if report is not None:
                report.excluded[page] = "alias (.so redirection to another page)"
            continue
        if not doc.sections:
            if report is not None:
                report.excluded[page] = "no .SH sections"
            continue
        docs.append(doc)
    return docs


SplitFraction = Annotated[float, Range(min=0, max=1)]
"""A split's share of the documents, from 0 to 1 (checked before a build starts)."""


def check_split_fractions(valid_fraction: float, test_fraction: float) -> None:
    """Each held-out share lies in [0, 1] and together they are at most 1 (1: the whole corpus held out, e.g.
    as a reference set); a ValueError naming the options otherwise."""
    for name, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")
    if valid_fraction + test_fraction > 1:
        raise ValueError(f"valid_fraction + test_fraction = {valid_fraction + test_fraction:g}: the held-out shares "
                         "add up to more than the whole corpus (at most 1)")


def split_of(doc_id: str, *, valid_fraction: float = 0.1, test_fraction: float = 0.1) -> str:
    """``"train"``, ``"valid"`` or ``"test"`` by the SHA-1 of the page name."""
    u = int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:8], 16) / 0x1_0000_0000
    if u < test_fraction:
        return "test"
    if u < test_fraction + valid_fraction:
        return "valid"
    return "train"


def build_manpages(out: str | Path, *, root: str | Path = MAN_ROOT, install: bool = True,
                   valid_fraction: SplitFraction = 0.1, test_fraction: SplitFraction = 0.1) -> BuildReport:
    """Write ``out/{train,valid,test}.jsonl`` and ``out/build.json`` from the man pages.

    Two files with the same page name keep both pages: the second is renamed
    (``open.2#2``) and listed in the report.
    """
    check_split_fractions(valid_fraction, test_fraction)
    root = Path(root)
    if install and root == MAN_ROOT:
        ensure_manpages_installed(root)
    if not root.is_dir():
        raise DocumentError(f"{root}: no such directory (the man page root)")
    files = find_manpage_files(root)
    if not files:
        raise DocumentError(f"{root}: no man page files found")
    report = BuildReport()
    docs = load_manpages(files, report)
    return write_splits(docs, out, report, files=len(files), valid_fraction=valid_fraction,
                        test_fraction=test_fraction)


def write_splits(docs: Sequence[Document], out: str | Path, report: BuildReport, *, files: int,
                 valid_fraction: float = 0.1, test_fraction: float = 0.1) -> BuildReport:
    """Give ``docs`` distinct ids, split them by :func:`split_of` and write ``out/{train,valid,test}.jsonl``
    and ``out/build.json`` (atomically); ``report.counts`` gets the split sizes, ``files`` (read),
    ``excluded`` and ``renamed``."""
    import json

    docs, report.renamed = unique_ids(docs)
    splits: dict[str, list[Document]] = {"train": [], "valid": [], "test": []}
    for doc in docs:
        splits[split_of(doc.id, valid_fraction=valid_fraction, test_fraction=test_fraction)].append(doc)
    out = Path(out)
    for name, part in splits.items():
        write_jsonl(part, out / f"{name}.jsonl")
        report.counts[name] = len(part)
    report.counts.update(files=files, excluded=len(report.excluded), renamed=len(report.renamed))
    atomic_write_text(out / "build.json", json.dumps(report.to_dict(), indent=1) + "\n")
    return report
