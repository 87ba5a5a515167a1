"""The gettext-pairs corpus: hand-written test catalogs compiled here, and the machine's own catalogs."""

from __future__ import annotations

import ast
import gettext
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from critic.cli import main
from critic.corpora.gettext_pairs import (LOCALE_ROOT, build_gettext_pairs, clean_pair, find_catalogs, read_mo,
                                          strip_accelerators, strip_specifiers)
from critic.corpora.manpages import split_of
from critic.document import DocumentError, iter_jsonl

DATA = Path(__file__).parents[2] / "data" / "gettext"
SPLITS = ("train", "valid", "test")


# ----------------------------------------------------------------------- a .po reader and a .mo writer for tests
def parse_po(text: str) -> list[tuple[str | None, str, str | None, list[str]]]:
    """``(context, msgid, msgid_plural, msgstrs)`` of a simple .po file (no fuzzy or obsolete entries)."""
    entries, current, key = [], {}, None

    def flush():
        if "msgid" in current:
            forms = [current[k] for k in sorted((k for k in current if k.startswith("msgstr")),
                                                key=lambda k: int(k[7:-1]) if "[" in k else 0)]
            entries.append((current.get("msgctxt"), current["msgid"], current.get("msgid_plural"), forms))
        current.clear()

    for line in text.splitlines() + [""]:
        line = line.strip()
        if not line or line.startswith("#"):
            if not line and "msgid" in current and any(k.startswith("msgstr") for k in current):
                flush()
            continue
        if line.startswith('"'):
            current[key] += ast.literal_eval(line)
            continue
        key, _, value = line.partition(" ")
        if key in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in current):
            flush()
        current[key] = ast.literal_eval(value)
    flush()
    return entries


def write_mo(entries, path: Path, *, encoding: str = "utf-8", big_endian: bool = False) -> Path:
    """A GNU .mo file (revision 0, no hash table) of ``parse_po``-style entries, the header included."""
    pairs = []
    for context, msgid, plural, forms in entries:
        key = (f"{context}\x04" if context is not None else "") + msgid
        key += f"\x00{plural}" if plural is not None else ""
        pairs.append((key.encode(encoding), "\x00".join(forms).encode(encoding)))
    pairs.sort()
    order = ">" if big_endian else "<"
    n = len(pairs)
    ids_at, strs_at = 28, 28 + 8 * n
    offset = strs_at + 8 * n
    table_ids, table_strs, blob = b"", b"", b""
    for table in (0, 1):
        for pair in pairs:
            data = pair[table]
            entry = struct.pack(order + "2I", len(data), offset + len(blob))
            if table == 0:
                table_ids += entry
            else:
                table_strs += entry
            blob += data + b"\x00"
    header = struct.pack(order + "7I", 0x950412DE, 0, n, ids_at, strs_at, 0, offset)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + table_ids + table_strs + blob)
    return path


def compile_po(name: str, path: Path) -> Path:
    return write_mo(parse_po((DATA / name).read_text(encoding="utf-8")), path)


@pytest.fixture
def locale_root(tmp_path) -> Path:
    """<tmp>/locale with de, de_CH, es, fr demo catalogs, a copy (duplicates), a link, a broken catalog and a
    script variant (de@test) that is never read."""
    root = tmp_path / "locale"
    for name in ("de", "de_CH", "es", "fr"):
        compile_po(f"{name}.po", root / name / "LC_MESSAGES" / "demo.mo")
    shutil.copy(root / "de/LC_MESSAGES/demo.mo", root / "de/LC_MESSAGES/zcopy.mo")
    (root / "de/LC_MESSAGES/link.mo").symlink_to("demo.mo")
    (root / "de/LC_MESSAGES/broken.mo").write_bytes(b"this is not a catalog at all")
    compile_po("fr.po", root / "de@test" / "LC_MESSAGES" / "demo.mo")
    return root


def pairs_of(out: Path) -> dict[str, list]:
    return {s: list(iter_jsonl(out / f"{s}.jsonl")) for s in SPLITS}


# ----------------------------------------------------------------------------------------------- reading
def test_read_mo_matches_python_gettext_and_keeps_context_apart(tmp_path):
    path = compile_po("de.po", tmp_path / "de.mo")
    catalog = read_mo(path)
    with open(path, "rb") as fh:
        reference = gettext.GNUTranslations(fh)._catalog
    mine = {}
    for e in catalog.entries:
        key = (f"{e.context}\x04" if e.context else "") + e.msgid
        if e.msgid_plural is None:
            mine[key] = e.msgstr[0]
        else:
            mine.update({(key, i): form for i, form in enumerate(e.msgstr)})
    assert mine == {k: v for k, v in reference.items() if k != ""}
    quit_ = next(e for e in catalog.entries if e.msgid == "Quit")
    assert quit_.context == "menu" and quit_.msgstr == ("Beenden",)
    plural = next(e for e in catalog.entries if e.msgid_plural)
    assert plural.msgid_plural == "%d files removed" and len(plural.msgstr) == 2
    assert catalog.plural(1) == 0 and catalog.plural(2) == 1
    assert len(catalog.entries) == 12  # the header is not a message


def test_read_mo_reads_a_latin1_header_that_python_gettext_cannot(tmp_path):
    entries = [(None, "", None, ["Last-Translator: Ralf Bächle\nContent-Type: text/plain; charset=ISO-8859-1\n"]),
               (None, "Unknown host", None, ["Unbekannter Rechner für Zugriff"])]
    path = write_mo(entries, tmp_path / "net.mo", encoding="latin-1", big_endian=True)
    with open(path, "rb") as fh, pytest.raises(UnicodeDecodeError):
        gettext.GNUTranslations(fh)  # why critic reads .mo files itself (Debian 12's German net-tools.mo)
    catalog = read_mo(path)
    assert catalog.charset == "ISO-8859-1"
    assert catalog.entries[0].msgstr == ("Unbekannter Rechner für Zugriff",)


def test_read_mo_rejects_what_is_not_a_catalog(tmp_path):
    (tmp_path / "x.mo").write_bytes(b"\x00" * 40)
    with pytest.raises(DocumentError, match="not a .mo catalog"):
        read_mo(tmp_path / "x.mo")


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU msgfmt (Debian gettext) is not installed")
def test_test_writer_agrees_with_gnu_msgfmt(tmp_path):
    for name in ("de.po", "es.po", "fr.po"):
        ours = read_mo(compile_po(name, tmp_path / f"ours-{name}.mo"))
        subprocess.run(["msgfmt", "-o", str(tmp_path / f"gnu-{name}.mo"), str(DATA / name)], check=True,
                       capture_output=True)
        gnu = read_mo(tmp_path / f"gnu-{name}.mo")
        assert sorted(gnu.entries, key=repr) == sorted(ours.entries, key=repr) and gnu.header == ours.header


# ---------------------------------------------------------------------------------------------- cleaning
@pytest.mark.parametrize("source, target, expected", [
    ("_File", "_Datei", ("File", "Datei")),
    ("&Open", "Ö&ffnen", ("Open", "Öffnen")),
    ("C_onnect", "_Verbinden", ("Connect", "Verbinden")),
    ("Save _As…", "Speichern _unter …", ("Save As…", "Speichern unter …")),
    ("max_connections must be positive", "max_connections muss positiv sein",
     ("max_connections must be positive", "max_connections muss positiv sein")),
    ('use "recovery_prefetch"', "»recovery_prefetch« verwenden",
     ('use "recovery_prefetch"', "»recovery_prefetch« verwenden")),
    ("Bad krb5_priv structure", "falsche Krb5_priv-Struktur",
     ("Bad krb5_priv structure", "falsche Krb5_priv-Struktur")),
    ("Tom &amp; Jerry", "Tom &amp; Jerry", ("Tom &amp; Jerry", "Tom &amp; Jerry")),
    ("cannot open '%s': %s", "»%s« kann nicht geöffnet werden: %s", ("cannot open", "kann nicht geöffnet werden")),
    ('checking index "%s.%s"', "prüfe Index »%s.%s«", ("checking index", "prüfe Index")),
    ("stat(%s) failed", "stat(%s) fehlgeschlagen", ("stat failed", "stat fehlgeschlagen")),
    ("%s: invalid option -- '%c'\n", "%s : option non valide -- '%c'\n", ("invalid option", "option non valide")),
    ("100%% of %1$s, {count} and %(name)s", "100 %% von %1$s, {count} und %(name)s",
     ("100% of, and", "100 % von, und")),
    ("line one\n\tline two", "Zeile eins\n\tZeile zwei", ("line one line two", "Zeile eins Zeile zwei")),
])
def test_clean_pair(source, target, expected):
    assert clean_pair(source, target) == expected


def test_cleaning_can_keep_specifiers_and_leaves_two_accelerators_alone():
    assert clean_pair("cannot open %s", "%s kann nicht geöffnet werden", strip_format=False) == (
        "cannot open %s", "%s kann nicht geöffnet werden")
    assert strip_accelerators("_a and _b") == "_a and _b"
    assert strip_specifiers("no specifiers: (kept)") == "no specifiers: (kept)"


# ------------------------------------------------------------------------------------------------- build
def test_build_fixture_counts_and_shapes(locale_root, tmp_path):
    out = tmp_path / "out"
    report = build_gettext_pairs(out, root=locale_root)
    c = report.counts
    assert (c["de"], c["es"], c["fr"]) == (11, 4, 3)
    assert c["train"] + c["valid"] + c["test"] == 18
    assert c["files"] == 18 + c["excluded"] == 18 + len(report.excluded)
    # de: 13 pairs from demo.mo (12 messages, one plural) + the same 13 from zcopy.mo + 2 from de_CH
    assert c["excluded_duplicate"] == 10 + 1
    assert c["excluded_identical"] == 2 and c["excluded_empty"] == 2 and c["excluded_not_alphabetic"] == 2
    assert c["linked_catalogs"] == 1 and c["unreadable_catalogs"] == 1
    assert "not a .mo catalog" in report.source["unreadable"][str(locale_root / "de/LC_MESSAGES/broken.mo")]
    assert c["catalogs"] == 4 + 1 + 1 + 1  # de: demo, zcopy, link, broken; de_CH; es; fr (de@test: never)
    reasons = {k: v for k, v in report.excluded.items() if k.startswith("de/demo.mo#")}
    assert sorted(reasons.values()) == ["empty: '%s: %s\\n'", "identical: 'OK'", "not_alphabetic: '[-p] [-v] FILE...'"]
    splits = pairs_of(out)
    docs = [d for part in splits.values() for d in part]
    assert len({d.id for d in docs}) == len(docs) == 18
    for name, part in splits.items():
        assert all(split_of(d.metadata["source"]) == name for d in part)  # by the English message
    by = {(d.metadata["language"], d.metadata["source"]): d for d in docs}
    assert {k[1] for k in by if k[0] == "de"} >= {"File", "Open", "Save As…", "Quit", "Close",
                                                    "max_connections must be positive", "cannot open"}
    quit_ = by["de", "Quit"]
    assert [(s.title, s.text) for s in quit_.sections] == [("de", "Beenden")] and quit_.title is None
    assert quit_.metadata == {"source": "Quit", "target": "Beenden", "language": "de", "locale": "de",
                              "catalog": "demo.mo", "package": None, "context": "menu", "plural": None}
    assert by["de", "Close"].metadata["locale"] == "de_CH"
    assert by["de", "Print the lines of each FILE to standard output."].metadata["target"] == (
        "Die Zeilen jeder DATEI auf die Standardausgabe schreiben.")
    # plural entries: singular with the form for n=1, plural with the form the catalog picks for n=2
    assert by["de", "file removed"].metadata["target"] == "Datei entfernt"
    assert by["de", "files removed"].metadata["plural"] == "plural"
    assert by["es", "files removed"].metadata["target"] == "archivos eliminados"  # form 2 of 3, not 1
    assert by["fr", "invalid option"].metadata["target"] == "option non valide"
    assert len({split_of(d.metadata["source"]) for d in docs if d.metadata["source"] == "File"}) == 1
    build = json.loads((out / "build.json").read_text(encoding="utf-8"))
    assert build["counts"] == c and build["source"]["plurals"] == "both"
    assert [e["locale"] for e in build["source"]["catalogs"]].count("de_CH") == 1


def test_build_is_deterministic(locale_root, tmp_path):
    build_gettext_pairs(tmp_path / "a", root=locale_root)
    build_gettext_pairs(tmp_path / "b", root=locale_root)
    for name in (*(f"{s}.jsonl" for s in SPLITS), "build.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_options_language_plurals_variants_sections(locale_root, tmp_path):
    report = build_gettext_pairs(tmp_path / "es", root=locale_root, language="es", plurals="skip")
    assert report.counts["es"] == 2 and report.counts["excluded_plural"] == 1 and "de" not in report.counts
    assert all(d.metadata["language"] == "es" for part in pairs_of(tmp_path / "es").values() for d in part)
    report = build_gettext_pairs(tmp_path / "sg", root=locale_root, language="es", plurals="singular")
    assert report.counts["es"] == 3
    report = build_gettext_pairs(tmp_path / "two", root=locale_root, language="de,fr", variants=False,
                                 sections="both")
    assert report.counts["de"] == 10 and report.counts["fr"] == 3 and "es" not in report.counts
    doc = next(d for part in pairs_of(tmp_path / "two").values() for d in part if d.metadata["target"] == "Quitter")
    assert [(s.title, s.text) for s in doc.sections] == [("en", "Quit"), ("fr", "Quitter")]
    report = build_gettext_pairs(tmp_path / "raw", root=locale_root, language=["fr"], strip_format=False)
    assert report.counts["fr"] == 3  # '%s: invalid option...' kept with its specifiers


def test_clear_errors(locale_root, tmp_path):
    with pytest.raises(ValueError, match=r"'it'.*de, es, fr"):
        build_gettext_pairs(tmp_path / "o", root=locale_root, language="it")
    with pytest.raises(ValueError, match="plurals 'some'.*both, singular, skip"):
        build_gettext_pairs(tmp_path / "o", root=locale_root, plurals="some")
    shutil.rmtree(locale_root / "fr")
    with pytest.raises(DocumentError, match=r"no .mo catalogs for language 'fr'"):
        build_gettext_pairs(tmp_path / "o", root=locale_root, language="fr")
    with pytest.raises(DocumentError, match="no such directory"):
        build_gettext_pairs(tmp_path / "o", root=tmp_path / "nowhere")


def test_cli_builds_with_options(locale_root, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["data", "build", "gettext-pairs", "--out", str(out), "--root", str(locale_root),
                 "--option", "language=fr", "--option", "min_alpha=0.9"]) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["fr"] + counts["excluded"] == counts["files"] and counts["fr"] >= 1
    assert main(["data", "build", "gettext-pairs", "--out", str(out), "--root", str(locale_root),
                 "--option", "language=xx"]) == 2
    assert "de, es, fr" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the machine's catalogs
def test_machine_catalogs(tmp_path):
    if not find_catalogs("de", LOCALE_ROOT):
        pytest.skip(f"no German .mo catalogs under {LOCALE_ROOT} on this machine")
    report = build_gettext_pairs(tmp_path, language="de")
    c = report.counts
    assert c["de"] == c["train"] + c["valid"] + c["test"] > 0
    assert c["files"] == c["de"] + c["excluded"]
    catalogs = report.source["catalogs"]
    assert catalogs and all(e["package"] and e["version"] for e in catalogs if e["path"].startswith("/usr/share/"))
    assert report.source["packages"]
    sources: dict[str, str] = {}
    for name, part in pairs_of(tmp_path).items():
        for d in part:
            assert d.metadata["language"] == "de" and d.sections[0].text == d.metadata["target"]
            assert sources.setdefault(d.metadata["source"], name) == name  # one English message, one split
