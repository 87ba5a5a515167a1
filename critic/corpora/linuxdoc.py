"""The Linux kernel documentation (Debian's ``linux-doc-6.1``) as a corpus of sectioned documents.

Each reStructuredText file under ``/usr/share/doc/linux-doc-6.1/Documentation``
(``*.rst.gz``) becomes a :class:`Document` whose sections are its top-level
sections, as the paper takes the top-level sections of Wikipedia articles:

- **Headings** are found as docutils finds them: a non-indented title line
  underlined (and optionally overlined) by one punctuation character repeated
  at least as wide as the title (docutils also takes a shorter underline of 4
  or more with a warning; this parser does not), the line before being blank,
  the start, another heading or a one-line ``..`` target.  An overline and its
  underline must be the same.  Levels are the adornment *styles* (character,
  overlined or not) in order of first appearance.  On linux-doc 6.1 the top-level
  section titles agree with docutils' on 2,803 of the 2,841 English files; the
  rest are files excluded here for having no text, and three whose ``sectnum``
  numbers docutils adds to the titles.
- **Title.** When the first level occurs exactly once it is the document title
  and the second level gives the sections; otherwise the document has no title
  and the first level gives the sections.  Deeper headings stay in their
  section's text (their words, as Wikipedia's subsection titles do).
- **Abstract.** Text before the first section (after the title) is a section
  titled ``"abstract"`` (paper app. E: the introduction of a Wikipedia article
  counts as its "abstract" section); it is left out when it has no words.
  Every other section is kept even when its text is empty (only code, say):
  titles are kept as written, the critic's filters decide (app. E).
- **Text** is plain words: directives and their bodies are dropped (code,
  images, tables, toctrees, API stubs, raw output), except the prose
  containers ``note``/``warning``/other admonitions, ``topic``, ``sidebar``,
  ``container``, whose text is kept; comments, hyperlink targets, footnotes,
  citations and substitution definitions are dropped; literal blocks after
  ``::`` are dropped (code, as the paper strips code); metadata fields
  (``:Author: ...``, ``:Date: ...``) and directive options are dropped, other
  fields (``:Returns: ...``) kept as ``Returns: ...``; table
  borders and other lines with no letter or digit are dropped; inline markup
  is reduced to its text (``:ref:`text <target>``` -> ``text``,
  ````literal```` -> ``literal``, ``*emph*``, ``**strong**``,
  ```link <url>`_`` -> ``link``, ``|subst|`` -> ``subst``, footnote
  references removed); bullets are removed and whitespace collapsed.
  Bare ``word_`` references are left alone (they are rare in the kernel docs
  and ``CONFIG_`` is not one).

**Exclusions** (each counted in the build report with its reason, never
silently dropped): a translation (``translations/``: not English); a damaged
gzip file or one that is not UTF-8; a file with no headings; a file whose only
content is toctree entries (``index.rst`` files, mostly); a file with headings
but no words at all.  :func:`parse_rst` returns ``None`` for the last three.

The split is deterministic (:func:`~critic.corpora.manpages.split_of` of the
document id, ``admin-guide/cgroup-v2``), so adding files never moves others.
"""

from __future__ import annotations

import gzip
import re
import unicodedata
from pathlib import Path
from typing import Iterable

from ..document import Document, DocumentError, Section
from .manpages import BuildReport, check_split_fractions, install_debian_packages, SplitFraction, write_splits

__all__ = ["parse_rst", "find_linuxdoc_files", "load_linuxdoc", "build_linuxdoc", "ensure_linuxdoc_installed",
           "ROOT", "PACKAGE", "ABSTRACT"]

PACKAGE = "linux-doc-6.1"
ROOT = Path("/usr/share/doc") / PACKAGE / "Documentation"
ABSTRACT = "abstract"
"""Title of the introductory section (text before the first section), as for Wikipedia in app. E."""

_SUFFIXES = (".rst.gz", ".rst")
_TRANSLATIONS = "translations"

# -- block structure ---------------------------------------------------------------------------------

_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s+(.*))?$")
_DIRECTIVE = re.compile(r"([A-Za-z0-9][-\w.:+]*?)::(?:\s+(.*))?$")
_FIELD = re.compile(r"^\s*:(?![\s:`])([^:`]*)(?<!\s):(?:\s+|$)")
_BULLET = re.compile(r"^(?:[-*+\u2022]|#\.)\s+")

_KEEP_DIRECTIVES = frozenset({
    "note", "warning", "attention", "caution", "danger", "error", "hint", "important", "tip", "admonition",
    "topic", "sidebar", "container",
})
"""Directives whose text is prose of the section; every other directive is dropped with its body."""

_BIBLIOGRAPHIC = frozenset({
    "author", "authors", "organization", "address", "contact", "version", "revision", "status", "date",
    "copyright", "dedication", "updated", "updated by", "last updated", "last update", "last revised", "revised",
    "time-stamp", "license", "license terms", "maintainer", "maintainers", "original", "original author",
    "original reviewers", "reviewers", "email", "e-mail", "orphan", "manual section", "manual group",
})
"""Field names of document metadata (``:Author:``, ``:Date:``): dropped with their bodies; other fields'
(``:Returns:``, ``:Parameters:``) names and bodies are prose of the section and kept."""


def _width(text: str) -> int:
    """Display columns of ``text`` (wide East Asian characters count twice), as docutils measures titles."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_adornment(line: str) -> bool:
    return bool(line) and line[0] != " " and _ADORNMENT.fullmatch(line) is not None


def _find_headings(lines: list[str]) -> list[tuple[int, int, str, tuple[str, bool]]]:
    """``(first line, line after, title, style)`` of each section heading, in order.

    ``lines`` are right-stripped with tabs expanded; a heading's title line must
    follow a blank line, the start, or another heading.
    """
    headings = []
    n = len(lines)
    i = 0
    fresh = True  # the previous line is blank, the start, or the end of a heading
    while i < n:
        line = lines[i]
        if fresh and _is_adornment(line) and i + 2 < n and lines[i + 2] == line:
            title = lines[i + 1].strip()
            if title and not _is_adornment(lines[i + 1]) and _width(title) <= len(line):
                headings.append((i, i + 3, title, (line[0], True)))
                i += 3
                continue
        if (fresh and line and line[0] != " " and not _is_adornment(line) and i + 1 < n
                and _is_adornment(lines[i + 1]) and _width(line) <= len(lines[i + 1])
                and not _EXPLICIT.match(line)):
            headings.append((i, i + 2, line.strip(), (lines[i + 1][0], False)))
            i += 2
            continue
        fresh = not line or _EXPLICIT.match(line) is not None  # a title may follow a one-line target
        i += 1
    return headings


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index of the first non-blank line at or after ``start`` indented no deeper than ``indent``."""
    i = start
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        i += 1
    return i


def _dedent(lines: list[str]) -> list[str]:
    cut = min((_indent(x) for x in lines if x.strip()), default=0)
    return [x[cut:] for x in lines]


def _text_lines(lines: list[str]) -> list[str]:
    """The prose lines of a run of body lines: directives, comments, literal blocks and fields dropped."""
    out: list[str] = []
    literal_after: int | None = None  # indent of a paragraph that ended with "::"
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = _indent(line)
        if literal_after is not None:
            if indent > literal_after:  # the literal block: code, dropped
                i = _block_end(lines, i, literal_after)
                literal_after = None
                continue
            literal_after = None
        explicit = _EXPLICIT.match(line)
        if explicit:
            rest = explicit.group(2) or ""
            if not rest and (i + 1 == n or not lines[i + 1].strip()):
                i += 1  # an empty comment ends a construct and swallows nothing
                continue
            end = _block_end(lines, i + 1, indent)
            directive = _DIRECTIVE.match(rest)
            if directive and directive.group(1).lower() in _KEEP_DIRECTIVES:
                body = _dedent(lines[i + 1:end])
                while body and _FIELD.match(body[0]):  # directive options
                    body.pop(0)
                out.extend(_text_lines([directive.group(2) or ""] + body))
            i = end
            continue
        text = line.strip()
        field = _FIELD.match(line)
        if field and field.group(1).strip().lower() in _BIBLIOGRAPHIC:
            i = _block_end(lines, i + 1, indent)
            continue
        if field:
            text = f"{field.group(1)}: {line[field.end():].strip()}"
        if text.endswith("::"):
            literal_after = indent
            text = text[:-1] if len(text) > 2 and text[-3] != " " else text[:-2].rstrip()  # "x::" -> "x:"
        out.append(_BULLET.sub("", text))
        i += 1
    return out


# -- inline markup -----------------------------------------------------------------------------------

_LITERAL = re.compile(r"``(.+?)``")
_INLINE = [
    (re.compile(r":[\w.+:-]+:`([^`]*?)\s*<[^`<>]*>`"), r"\1"),               # :role:`text <target>`
    (re.compile(r":[\w.+:-]+:`[~!]?([^`]*)`"), r"\1"),                        # :role:`text`
    (re.compile(r"`([^`]*)`:[\w.+:-]+:"), r"\1"),                              # `text`:role:
    (re.compile(r"`([^`]*?)\s*<[^`<>]*>`_{1,2}"), r"\1"),                      # `link <url>`_
    (re.compile(r"(?<!\w)_`([^`]*)`"), r"\1"),                                        # _`inline target`
    (re.compile(r"`([^`]*)`_{0,2}"), r"\1"),                                    # `ref`_, `interpreted`
    (re.compile(r"\s?\[(?:#[\w-]*|\*|\d+|[A-Za-z][\w.-]*)\]_"), ""),           # footnote/citation refs
    (re.compile(r"\*\*(\S(?:.*?\S)?)\*\*"), r"\1"),                             # **strong**
    (re.compile(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])"), r"\1"),          # *emphasis*
    (re.compile(r"(?<![\w|])\|(\S(?:[^|]*?\S)?)\|(?:_{1,2})?(?![\w|])"), r"\1"),  # |substitution|
    (re.compile(r"(?:^|(?<=\s))\|(?=\s|$)"), " "),                              # table / line-block bars
    (re.compile(r"\\ "), ""),
    (re.compile(r"\\(.)"), r"\1"),                                               # backslash escapes
]


def _inline(text: str) -> str:
    """``text`` with inline markup reduced to its words and whitespace collapsed."""
    literals: list[str] = []

    def hold(m: re.Match) -> str:
        literals.append(m.group(1))
        return f"\x00{len(literals) - 1}\x00"

    text = _LITERAL.sub(hold, text)
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: literals[int(m.group(1))], text)
    return " ".join(text.split())


def _plain(lines: list[str]) -> str:
    words = (x for x in _text_lines(lines) if any(c.isalnum() for c in x))
    return _inline(" ".join(words))


# -- documents ---------------------------------------------------------------------------------------

def _parse(source: str, doc_id: str) -> tuple[Document | None, str | None]:
    """The document, or ``None`` and the reason it is not one."""
    lines = [x.rstrip().expandtabs(8) for x in source.splitlines()]
    headings = _find_headings(lines)
    if not headings:
        return None, "no section headings"
    styles: list[tuple[str, bool]] = []
    for *_, style in headings:
        if style not in styles:
            styles.append(style)
    first = [h for h in headings if h[3] == styles[0]]
    title = _inline(first[0][2]) if len(first) == 1 else None
    top = styles[1] if title is not None and len(styles) > 1 else (styles[0] if title is None else None)

    sections: list[Section] = []
    body: list[str] = []
    current: str | None = ABSTRACT
    start = 0
    for begin, end, text, style in headings:
        body.extend(lines[start:begin])
        if style == top:
            sections.append(Section(title=current, text=_plain(body)))
            current, body = _inline(text), []
        elif not (title is not None and style == styles[0]):  # a deeper heading: its words stay
            body.extend(["", text, ""])
        start = end
    body.extend(lines[start:])
    sections.append(Section(title=current, text=_plain(body)))
    if sections[0].title == ABSTRACT and not sections[0].text:
        sections.pop(0)
    if not any(s.text for s in sections):
        toctree = any(re.match(r"\s*\.\.\s+toctree::", x) for x in lines)
        return None, "toctree index only (no text)" if toctree else "headings but no text"
    return Document(id=doc_id, title=title, sections=tuple(sections)), None


def parse_rst(source: str, *, doc_id: str) -> Document | None:
    """Parse a reStructuredText source into a document of its top-level sections (see the module docstring).

    Returns ``None`` for a file with no headings, one that is only a toctree
    index, or one with no words at all.
    """
    return _parse(source, doc_id)[0]


# -- files -------------------------------------------------------------------------------------------

def ensure_linuxdoc_installed(root: Path = ROOT) -> None:
    """Install Debian's ``linux-doc-6.1`` when absent (as root), else explain how."""
    if not (root.is_dir() and any(root.glob("*.rst.gz"))):
        install_debian_packages([PACKAGE], f"no kernel documentation under {root}")


def find_linuxdoc_files(root: Path = ROOT) -> list[Path]:
    """Every regular (non-link) ``*.rst.gz`` and ``*.rst`` file under ``root``, sorted."""
    root = Path(root)
    return sorted(p for p in root.rglob("*") if p.name.endswith(_SUFFIXES) and p.is_file() and not p.is_symlink())


def _doc_id(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    return next(rel[:-len(s)] for s in _SUFFIXES if rel.endswith(s))


def _read(path: Path) -> tuple[str | None, str | None]:
    """The file's text, or ``None`` and why it cannot be read (naming the file)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:  # not gzip, or truncated
            return None, f"{path}: damaged gzip file ({type(exc).__name__}: {exc})"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})"


def load_linuxdoc(files: Iterable[Path], report: BuildReport | None = None, *, root: Path = ROOT) -> list[Document]:
    """Parse kernel documentation files into documents; what is left out goes to ``report`` with its reason.

    A damaged gzip file or one that is not UTF-8 is an excluded document (the
    reason names the file), not an error: one bad file should not stop a build
    of three thousand.  Ids are paths relative to ``root`` without the suffix.
    """
    root = Path(root)
    docs = []
    for path in files:
        doc_id = _doc_id(path, root)
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        if doc_id.split("/", 1)[0] == _TRANSLATIONS:
            doc, reason = None, "translation (not English)"
        else:
            source, reason = _read(path)
            doc, reason = _parse(source, doc_id) if source is not None else (None, reason)
        if doc is None:
            if report is not None:
                report.excluded[doc_id if doc_id not in report.excluded else rel] = reason
            continue
        doc.metadata.update({"source": "linux-doc", "path": rel})
        docs.append(doc)
    return docs


def build_linuxdoc(out: str | Path, *, root: str | Path = ROOT, install: bool = True,
                   valid_fraction: SplitFraction = 0.1, test_fraction: SplitFraction = 0.1) -> BuildReport:
    """Write ``out/{train,valid,test}.jsonl`` and ``out/build.json`` from the kernel documentation.

    ``counts`` holds ``files`` (= documents kept + ``excluded``), the split
    sizes and ``renamed`` (``x.rst`` next to ``x.rst.gz``: the second is
    renamed ``x#2``).  A missing ``root`` or one without files is a
    :class:`DocumentError` naming it.
    """
    check_split_fractions(valid_fraction, test_fraction)
    root = Path(root)
    if install and root == ROOT:
        ensure_linuxdoc_installed(root)
    if not root.is_dir():
        raise DocumentError(f"{root}: no such directory (the kernel documentation root)")
    files = find_linuxdoc_files(root)
    if not files:
        raise DocumentError(f"{root}: no .rst or .rst.gz files found")
    report = BuildReport()
    return write_splits(load_linuxdoc(files, report, root=root), out, report, files=len(files),
                        valid_fraction=valid_fraction, test_fraction=test_fraction)
