"""English -> German / Spanish / French message pairs from the machine's gettext catalogs.

``critic data build gettext-pairs`` reads the compiled ``.mo`` catalogs under
``/usr/share/locale/<locale>/LC_MESSAGES/`` that installed packages ship (coreutils, apt, iso-codes, ...),
one pair per translated message: the English ``msgid`` and its ``msgstr``.

**Locales.**  A language's catalogs are those of the folder ``<lang>`` and, with ``variants=True`` (the
default), of its regional variants ``<lang>_<REGION>`` (``de_CH``, ``es_MX``, ``fr_CA``): the same
language, often partial.  Script or dialect variants (``<lang>@<modifier>``) are left out.  Catalogs are read
in sorted order of locale, then file name; each pair records its ``locale``.

**Reading.**  A small reader of the GNU ``.mo`` format (:func:`read_mo`) rather than
``gettext.GNUTranslations``, which raises ``UnicodeDecodeError`` on a catalog whose header is not UTF-8
before its charset is known (Debian 12's German ``net-tools.mo``, ISO-8859-1) and folds ``msgctxt`` into its
keys (``"ctx\\x04msgid"``).  The reader decodes with the catalog's ``charset`` and keeps the context apart; on
catalogs that ``GNUTranslations`` reads, its messages equal that class's ``_catalog`` (tested).

**Plurals.**  An entry with ``msgid_plural`` gives (``plurals="both"``, the default) two pairs: the singular
``msgid`` with the form the catalog's ``Plural-Forms`` expression selects for n = 1, and ``msgid_plural`` with
the form for n = 2 (Spanish catalogs with three forms pick the right one); ``"singular"`` keeps the first
only, ``"skip"`` leaves the entry out (reason ``plural``).

**Cleaning**, on both sides, in this order:

1. accelerators: a single ``_`` (GTK: ``_File``, ``Ö_ffnen``) or ``&`` (Qt: ``&File``; not ``&&`` nor an
   entity like ``&amp;``) before a letter or digit is dropped, when it is the side's only one and the word
   holding it does not occur on the other side, ignoring case (``max_connections``, ``krb5_priv`` in both is
   an identifier, kept);
2. format specifiers (with ``strip_specifiers=True``, the default): printf conversions (``%s``, ``%5.2f``,
   ``%1$s``, ``%'d``, ``%lu``, ``%zu``), Qt's ``%1``, Python's ``%(name)s`` and ``{name}``/``{0}``/``{}``,
   and ``%%`` (-> ``%``) are removed, then quotes or brackets left empty or holding only punctuation
   (``'%s'``, ``»%s.%s«``, ``(%d)``), a space left before ``.`` or ``,``, and punctuation left at either
   end (``%s: cannot open`` -> ``cannot open``; ``bogus netmask %s`` -> ``bogus netmask``);
3. whitespace (newlines, tabs) collapsed to single spaces.

**Exclusions** (each in ``report.excluded["<locale>/<catalog>#<index>"]``, ``#<index>p`` for a plural form,
with its reason and the msgid, counted in ``counts["excluded_<reason>"]``), checked in this order: ``plural``
(with ``plurals="skip"``), ``undecodable`` (not in the catalog's charset), ``untranslated`` (empty
``msgstr``), ``empty`` (nothing left after cleaning), ``identical`` (the same text on both sides, ignoring
case), ``not_alphabetic`` (on either side, letters are fewer than ``min_alpha`` (default 0.5) of the non-space
characters: paths, option lists, numbers, date formats), ``duplicate`` (the same cleaned source and target as
a pair kept before, from any catalog). A catalog that cannot be read at all is listed in ``source.unreadable``
and counted in ``counts["unreadable_catalogs"]``; a catalog that is a symbolic link to another one read
(iso-codes' ``iso_639_3.mo -> iso_639-3.mo``) is read once, listed in ``source.linked`` and counted in
``counts["linked_catalogs"]``.

**Documents**: one per pair, shaped for translation-model training and for the code-mixing critic alike:
its one section (titled with the language code, ``"de"``) holds the *target* text, so a document's text is
monolingual and the corpus is a plain German (Spanish, French) corpus; the pair itself is in the metadata:
``{"source": msgid, "target": msgstr, "language": "de", "locale": "de", "catalog": "coreutils.mo",
"package": "coreutils", "context": None, "plural": None | "singular" | "plural"}``.  ``sections="both"``
puts an ``"en"`` section with the source before it (two-language documents).  ``id`` is
``<lang>-<first 16 hex digits of the SHA-1 of source NUL target>``; ``title`` is ``None``.

**Split** by :func:`~critic.corpora.manpages.split_of` of the cleaned *source*: one English message never
lands in two splits, whatever its translations or language.

**Reproducibility.**  ``build.json`` lists every catalog read with its owning Debian package (``dpkg -S``),
that package's version (``dpkg-query``) and its number of entries, under ``source.catalogs``, and the
versions once more under ``source.packages``.
"""

from __future__ import annotations

import gettext
import hashlib
import re
import struct
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from ..document import Document, DocumentError, Section
from .dpkg import dpkg_query, have_dpkg
from .manpages import BuildReport, check_split_fractions, SplitFraction
from .manpages_l10n import SourcedReport, package_versions, parse_languages, write_splits_by

__all__ = ["build_gettext_pairs", "load_gettext_pairs", "find_catalogs", "read_mo", "MoEntry", "MoCatalog",
           "strip_accelerators", "strip_specifiers", "clean_pair", "catalog_packages", "LANGUAGES", "LOCALE_ROOT",
           "REASONS"]

LANGUAGES = ("de", "es", "fr")
LOCALE_ROOT = Path("/usr/share/locale")
REASONS = ("plural", "undecodable", "untranslated", "empty", "identical", "not_alphabetic", "duplicate")
PLURALS = ("both", "singular", "skip")
SECTIONS = ("target", "both")


# ---------------------------------------------------------------------------------------------- .mo reading
class MoEntry(NamedTuple):
    """One message of a catalog: ``context`` (``None`` without ``msgctxt``), ``msgid``, ``msgid_plural``
    (``None`` for a plain message) and the translated forms (one for a plain message)."""

    context: str | None
    msgid: str
    msgid_plural: str | None
    msgstr: tuple[str, ...]


class MoCatalog(NamedTuple):
    """A read catalog: its header fields, charset, the plural-form selector and the messages (header
    excluded) in file order; ``undecodable`` holds the indices of messages not in ``charset``."""

    header: dict[str, str]
    charset: str
    plural: Callable[[int], int]
    entries: list[MoEntry]
    undecodable: list[int]


def _germanic(n: int) -> int:
    return int(n != 1)


def read_mo(path: str | Path) -> MoCatalog:
    """Read a GNU ``.mo`` file (either byte order).  A DocumentError names the file when it is not one."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 20:
        raise DocumentError(f"{path}: not a .mo catalog ({len(data)} bytes)")
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x950412DE:
        order = "<"
    elif magic == 0xDE120495:
        order = ">"
    else:
        raise DocumentError(f"{path}: not a .mo catalog (magic number {magic:#010x})")
    revision, count, ids_at, strs_at = struct.unpack(order + "4I", data[4:20])
    if revision >> 16 > 1:
        raise DocumentError(f"{path}: .mo revision {revision >> 16}.{revision & 0xFFFF} is not supported")

    def string(table: int, i: int) -> bytes:
        at = table + 8 * i
        if at + 8 > len(data):
            raise DocumentError(f"{path}: truncated .mo catalog (string table entry {i})")
        length, offset = struct.unpack(order + "2I", data[at:at + 8])
        if offset + length > len(data):
            raise DocumentError(f"{path}: truncated .mo catalog (string {i} runs past the end)")
        return data[offset:offset + length]

    raw = [(string(ids_at, i), string(strs_at, i)) for i in range(count)]
    header: dict[str, str] = {}
    for msgid, msgstr in raw:
        if msgid == b"":
            for line in msgstr.decode("latin-1").splitlines():
                key, sep, value = line.partition(":")
                if sep:
                    header[key.strip().lower()] = value.strip()
    charset = "utf-8"
    match = re.search(r"charset=\s*([^\s;]+)", header.get("content-type", ""))
    if match and match.group(1).upper() != "CHARSET":
        charset = match.group(1)
    try:
        "".encode(charset)
    except LookupError:
        raise DocumentError(f"{path}: unknown charset {charset!r} in its header") from None
    plural: Callable[[int], int] = _germanic
    match = re.search(r"plural=(.*?);?\s*$", header.get("plural-forms", ""))
    if match:
        try:
            plural = gettext.c2py(match.group(1))
        except (ValueError, RecursionError):
            raise DocumentError(f"{path}: unreadable Plural-Forms {header['plural-forms']!r}") from None
    entries: list[MoEntry] = []
    undecodable: list[int] = []
    for msgid, msgstr in raw:
        if msgid == b"":
            continue
        try:
            ids = msgid.decode(charset)
            strs = msgstr.decode(charset)
        except UnicodeDecodeError:
            undecodable.append(len(entries))
            ids, strs = msgid.decode(charset, "replace"), msgstr.decode(charset, "replace")
        context, sep, ids = ids.rpartition("\x04")
        singular, _, plural_id = ids.partition("\x00")
        forms = tuple(strs.split("\x00"))
        entries.append(MoEntry(context if sep else None, singular, plural_id if "\x00" in ids else None, forms))
    return MoCatalog(header, charset, plural, entries, undecodable)


# ------------------------------------------------------------------------------------------------ cleaning
_ACCEL = re.compile(r"(?<![_&])([_&])(?=[^\W_])")
_ENTITY = re.compile(r"&(?:[A-Za-z]+|#\d+|#x[0-9A-Fa-f]+);")
_SPECIFIER = re.compile(
    r"%%"                                              # a literal percent sign
    r"|%\([A-Za-z_]\w*\)[-#0 +']*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"   # %(name)s
    r"|%(?:\d+\$)?[-#0 +'I]*(?:\d+|\*(?:\d+\$)?)?(?:\.(?:\d+|\*(?:\d+\$)?))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t)?[diouxXeEfFgGaAcCsSpnm]"   # printf
    r"|%\d+"                                           # Qt: %1
    r"|\{(?:[A-Za-z_]\w*|\d+)?(?:![rsa])?(?::[^{}]*)?\}"  # str.format
)
_GAP = r"[\s.,:;/=\-]*"  # what a quote or bracket around removed specifiers still holds ("%s.%s" -> " . ")
_EMPTY_PAIRS = re.compile("|".join(f"{re.escape(a)}{_GAP}{re.escape(b)}" for a, b in (
    ("'", "'"), ('"', '"'), ("“", "”"), ("„", "“"), ("‘", "’"), ("‚", "‘"), ("«", "»"), ("»", "«"), ("‹", "›"),
    ("`", "'"), ("(", ")"), ("[", "]"), ("「", "」"))))
_ENDS = re.compile(r"^[\s:;,.\-–—=/]+|[\s:;,\-–—=/]+$")
_SPACE_BEFORE = re.compile(r"\s+(?=[.,](?:\s|$))")


def strip_accelerators(text: str, other: str = "") -> str:
    """``text`` without its keyboard accelerator (``_File``, ``Ö_ffnen``, ``&File``): the one ``_`` or ``&``
    before a letter or digit, unless the word holding it occurs verbatim in ``other`` (an identifier such as
    ``max_connections`` that the translation copies).  Two or more candidates: left as it is."""
    candidates = [m for m in _ACCEL.finditer(text)
                  if not (m.group(1) == "&" and _ENTITY.match(text, m.start()))]
    if len(candidates) != 1:
        return text
    at = candidates[0].start()
    word = re.match(r"\w*", text[at + 1:]).group(0)
    word = re.search(r"\w*$", text[:at]).group(0) + text[at] + word
    if word.casefold() in {w.casefold() for w in re.findall(r"[\w&]+", other)}:
        return text
    return text[:at] + text[at + 1:]


def strip_specifiers(text: str) -> str:
    """``text`` without format specifiers (``%s``, ``%1$d``, ``%(name)s``, ``{0}``; ``%%`` -> ``%``), quotes
    and brackets they leave empty, punctuation they leave at the start, and extra whitespace."""
    stripped = _SPECIFIER.sub(lambda m: "%" if m.group(0) == "%%" else " ", text)
    if stripped == text:
        return text
    previous = None
    while previous != stripped:
        previous, stripped = stripped, _EMPTY_PAIRS.sub(" ", stripped)
    return _ENDS.sub("", _SPACE_BEFORE.sub("", " ".join(stripped.split())))


def clean_pair(source: str, target: str, *, strip_format: bool = True) -> tuple[str, str]:
    """Both sides cleaned as the module docstring says (accelerators, specifiers, whitespace)."""
    source, target = strip_accelerators(source, target), strip_accelerators(target, source)
    if strip_format:
        source, target = strip_specifiers(source), strip_specifiers(target)
    return " ".join(source.split()), " ".join(target.split())


def _alpha_share(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in chars) / len(chars) if chars else 0.0


# ------------------------------------------------------------------------------------------------- sources
def find_catalogs(language: str, root: str | Path = LOCALE_ROOT, *, variants: bool = True) -> list[tuple[str, Path]]:
    """``(locale, path)`` of every ``.mo`` file of ``language`` under ``root``, sorted by locale then name."""
    root = Path(root)
    locales = [language] + (sorted(p.name for p in root.glob(f"{language}_*") if p.is_dir()) if variants else [])
    return [(locale, path) for locale in locales
            for path in sorted((root / locale / "LC_MESSAGES").glob("*.mo")) if path.is_file()]


def catalog_packages(paths: Iterable[Path]) -> dict[Path, str | None]:
    """The Debian package owning each path (``dpkg-query -S``), ``None`` for a file no package owns.
    A package database that cannot be read is a :class:`~critic.corpora.dpkg.DpkgError`, not ``None``."""
    paths = list(paths)
    owners: dict[Path, str | None] = dict.fromkeys(paths)
    if not paths or not have_dpkg():
        return owners
    by_name = {str(p): p for p in paths}
    for start in range(0, len(paths), 200):
        done = dpkg_query("-S", *(str(p) for p in paths[start:start + 200]))
        for line in done.stdout.splitlines():
            packages, sep, name = line.rpartition(": ")
            if sep and name in by_name and not line.startswith("diversion by"):
                owners[by_name[name]] = packages.split(", ")[0].split(":")[0]
    return owners


# ---------------------------------------------------------------------------------------------------- build
def load_gettext_pairs(language: str, *, root: str | Path = LOCALE_ROOT, variants: bool = True,
                       plurals: str = "both", strip_format: bool = True, min_alpha: float = 0.5,
                       sections: str = "target", seen: set[tuple[str, str]] | None = None,
                       report: BuildReport | None = None) -> tuple[list[Document], int]:
    """The pairs of one language as documents (see the module docstring), and the number of candidate pairs
    read (= documents + exclusions: a message gives one, a plural entry two with ``plurals="both"``).
    ``seen``: the (source, target) pairs kept so far, for deduplication."""
    language = parse_languages(language, LANGUAGES)[0]
    if plurals not in PLURALS:
        raise ValueError(f"plurals {plurals!r}: one of {', '.join(PLURALS)}")
    if sections not in SECTIONS:
        raise ValueError(f"sections {sections!r}: one of {', '.join(SECTIONS)}")
    root = Path(root)
    catalogs = find_catalogs(language, root, variants=variants)
    if not catalogs:
        raise DocumentError(f"{root}: no .mo catalogs for language {language!r} (looked in {root / language}"
                            f"{f' and {root / language}_*' if variants else ''}/LC_MESSAGES/*.mo)")
    owners = catalog_packages(path for _, path in catalogs)
    versions = package_versions(p for p in owners.values() if p)
    info = report.source if isinstance(report, SourcedReport) else None
    seen = set() if seen is None else seen
    reasons: Counter[str] = Counter()
    excluded: dict[str, str] = {}
    docs: list[Document] = []
    messages = candidates_read = 0
    real = {path.resolve(): path for _, path in catalogs if not path.is_symlink()}
    for locale, path in catalogs:
        where = f"{locale}/{path.name}"
        if path.is_symlink() and real.get(path.resolve(), path) != path:
            if info is not None:  # iso-codes ships iso_639_3.mo -> iso_639-3.mo: read once
                info.setdefault("linked", {})[str(path)] = str(real[path.resolve()])
            if report is not None:
                report.counts["linked_catalogs"] = report.counts.get("linked_catalogs", 0) + 1
            continue
        try:
            catalog = read_mo(path)
        except (DocumentError, OSError) as exc:
            if info is not None:
                info.setdefault("unreadable", {})[str(path)] = str(exc)
            if report is not None:
                report.counts["unreadable_catalogs"] = report.counts.get("unreadable_catalogs", 0) + 1
            continue
        package = owners[path]
        if info is not None:
            info.setdefault("catalogs", []).append({
                "path": str(path), "locale": locale, "package": package,
                "version": versions.get(package) if package else None, "entries": len(catalog.entries),
                "charset": catalog.charset})
        bad = set(catalog.undecodable)
        messages += len(catalog.entries)
        for index, entry in enumerate(catalog.entries):
            def exclude(reason: str, kind: str | None = None) -> None:
                excluded[f"{where}#{index}{'p' if kind == 'plural' else ''}"] = f"{reason}: {entry.msgid[:80]!r}"
                reasons[reason] += 1

            candidates_read += 1
            if entry.msgid_plural is not None and plurals == "skip":
                exclude("plural")
                continue
            if entry.msgid_plural is not None and plurals == "both":
                candidates_read += 1
            if index in bad:
                exclude("undecodable")
                if entry.msgid_plural is not None and plurals == "both":
                    exclude("undecodable", "plural")
                continue
            if entry.msgid_plural is None:
                candidates = [(entry.msgid, entry.msgstr[0], None)]
            else:
                def form(n: int) -> str:
                    k = catalog.plural(n)
                    return entry.msgstr[k] if 0 <= k < len(entry.msgstr) else ""
                candidates = [(entry.msgid, form(1), "singular")]
                if plurals == "both":
                    candidates.append((entry.msgid_plural, form(2), "plural"))
            for raw_source, raw_target, kind in candidates:
                if not raw_target.strip():
                    exclude("untranslated", kind)
                    continue
                source, target = clean_pair(raw_source, raw_target, strip_format=strip_format)
                if not source or not target:
                    exclude("empty", kind)
                elif source.casefold() == target.casefold():
                    exclude("identical", kind)
                elif min(_alpha_share(source), _alpha_share(target)) < min_alpha:
                    exclude("not_alphabetic", kind)
                elif (source, target) in seen:
                    exclude("duplicate", kind)
                else:
                    seen.add((source, target))
                    digest = hashlib.sha1(f"{source}\0{target}".encode("utf-8")).hexdigest()[:16]
                    body = (Section(title="en", text=source),) if sections == "both" else ()
                    docs.append(Document(id=f"{language}-{digest}", title=None,
                                         sections=body + (Section(title=language, text=target),), metadata={
                        "source": source, "target": target, "language": language, "locale": locale,
                        "catalog": path.name, "package": package, "context": entry.context, "plural": kind}))
    if report is not None:
        report.excluded.update(excluded)
        for reason in REASONS:
            report.counts[f"excluded_{reason}"] = report.counts.get(f"excluded_{reason}", 0) + reasons[reason]
        report.counts[language] = len(docs)
        report.counts["catalogs"] = report.counts.get("catalogs", 0) + len(catalogs)
        report.counts["messages"] = report.counts.get("messages", 0) + messages
    return docs, candidates_read


def build_gettext_pairs(out: str | Path, *, language: str | Sequence[str] | None = None,
                        root: str | Path = LOCALE_ROOT, variants: bool = True, plurals: str = "both",
                        strip_format: bool = True, min_alpha: float = 0.5, sections: str = "target",
                        valid_fraction: SplitFraction = 0.1, test_fraction: SplitFraction = 0.1) -> SourcedReport:
    """Write ``out/{train,valid,test}.jsonl`` and ``out/build.json`` from the gettext catalogs.

    ``language``: ``de``, ``es``, ``fr``, several (``"de,fr"`` or a list) or ``None``/``"all"`` (all three;
    a pair is deduplicated within its language).  ``root``: the locale folder (default
    ``/usr/share/locale``).  Other options as :func:`load_gettext_pairs`.  ``counts``: the split sizes,
    ``files`` (candidate pairs read = documents + ``excluded``: a plural entry counts twice with
    ``plurals="both"``), ``messages`` (catalog entries, header excluded), ``<lang>`` (pairs kept),
    ``catalogs``, ``unreadable_catalogs``, ``excluded_<reason>``, ``excluded`` and ``renamed``.
    """
    check_split_fractions(valid_fraction, test_fraction)
    languages = parse_languages(language, LANGUAGES)
    root = Path(root)
    if not root.is_dir():
        raise DocumentError(f"{root}: no such directory (the locale folder, holding <lang>/LC_MESSAGES/*.mo)")
    min_alpha = float(min_alpha)
    report = SourcedReport()
    report.source.update(root=str(root), languages=languages, variants=bool(variants), plurals=plurals,
                         strip_format=bool(strip_format), min_alpha=min_alpha, sections=sections)
    report.counts["unreadable_catalogs"] = report.counts["linked_catalogs"] = 0
    docs: list[Document] = []
    candidates = 0
    for code in languages:
        kept, read = load_gettext_pairs(code, root=root, variants=variants, plurals=plurals, strip_format=strip_format,
                                        min_alpha=min_alpha, sections=sections, report=report)
        docs.extend(kept)
        candidates += read
    packages: dict[str, Any] = {}
    for entry in report.source.get("catalogs", []):
        if entry["package"]:
            packages[entry["package"]] = entry["version"]
    report.source["packages"] = dict(sorted(packages.items()))
    return write_splits_by(docs, out, report, key=lambda d: d.metadata["source"], files=candidates,
                           valid_fraction=valid_fraction, test_fraction=test_fraction)
