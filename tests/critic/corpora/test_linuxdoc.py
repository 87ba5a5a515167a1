"""The kernel-documentation corpus: reStructuredText sections, the builder and ``critic data build linux-doc``."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from critic.cli import main
from critic.corpora import linuxdoc
from critic.corpora.linuxdoc import build_linuxdoc, find_linuxdoc_files, load_linuxdoc, parse_rst
from critic.corpora.manpages import BuildReport, split_of
from critic.document import DocumentError, read_jsonl

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "linuxdoc"


def sections(doc):
    return [(s.title, s.text) for s in doc.sections]


def test_overlined_title_levels_deeper_headings_and_abstract():
    doc = parse_rst(""".. SPDX-License-Identifier: GPL-2.0

=========
The Title
=========

Intro *text* here.

First
=====

Alpha text.

Deeper
------

Beta text.

Second
======
Gamma.
""", doc_id="a/b")
    assert doc.id == "a/b" and doc.title == "The Title"
    assert sections(doc) == [("abstract", "Intro text here."), ("First", "Alpha text. Deeper Beta text."),
                             ("Second", "Gamma.")]


def test_levels_follow_the_order_styles_first_appear_in():
    doc = parse_rst("""Title
~~~~~

Sec A
-----

text a

Sub
===

text sub

Sec B
-----

text b
""", doc_id="x")
    assert doc.title == "Title"
    assert sections(doc) == [("Sec A", "text a Sub text sub"), ("Sec B", "text b")]


def test_an_overline_makes_another_style_and_a_repeated_first_level_is_no_title():
    doc = parse_rst("=====\nTitle\n=====\n\nSec\n===\ntext\n", doc_id="x")
    assert doc.title == "Title" and sections(doc) == [("Sec", "text")]
    doc = parse_rst("lead\n\nOne\n===\n\na\n\nTwo\n===\n\nb\n", doc_id="x")
    assert doc.title is None
    assert sections(doc) == [("abstract", "lead"), ("One", "a"), ("Two", "b")]


def test_what_looks_like_a_heading_but_is_not():
    doc = parse_rst("""Title
=====

A long line of text
---

----------

Example::

    Fake
    ====

+-----+-----+
| a   | b   |
+=====+=====+

====  ====
e     f
====  ====

Real
----

end
""", doc_id="x")
    assert doc.title == "Title"
    assert sections(doc) == [("abstract", "A long line of text Example: a b e f"), ("Real", "end")]


def test_directives_comments_code_and_inline_markup_are_reduced_to_words():
    doc = parse_rst(""".. comment line
   continued comment

.. _label:

Title
=====

Body
----

Para one::

    code line

After code.

.. code-block:: c

   int x;

.. note::
   Noted *text*.

.. warning:: Careful now.

.. toctree::
   :maxdepth: 1

   other

.. |sub| replace:: replaced

.. [#] a footnote

.. image:: foo.png
   :alt: picture

:Author: Someone
:Returns: zero on success

Expression ::

    literal

Done. :ref:`Label text <label>` and :c:func:`~foo_bar` and ``lit *x*`` and **bold** and
`link <http://x>`_ and `ref`_ and footnote [#]_ here, |sub| and `default` and \\*star.

- item one
* item two
""", doc_id="x")
    assert doc.title == "Title"
    assert sections(doc) == [("Body", "Para one: After code. Noted text. Careful now. Returns: zero on success "
                                      "Expression Done. Label text and foo_bar and lit *x* and bold and link and ref "
                                      "and footnote here, sub and default and *star. item one item two")]


def test_files_without_sections_or_text_are_not_documents():
    assert parse_rst("Just a paragraph.\n\nAnother.\n", doc_id="x") is None
    assert parse_rst("Index\n=====\n\n.. toctree::\n   :maxdepth: 1\n\n   a\n   b\n", doc_id="x") is None
    assert parse_rst("====\nSwap\n====\n", doc_id="x") is None


def test_fixture_files_parse_to_their_sections():
    report = BuildReport()
    docs = {d.id: d for d in load_linuxdoc(find_linuxdoc_files(FIXTURE), report, root=FIXTURE)}
    assert {i: (d.title, d.section_titles) for i, d in docs.items()} == {
        "bpf/map_hash": ("BPF_MAP_TYPE_HASH, with PERCPU and LRU Variants", ["abstract", "Usage", "Examples"]),
        "firmware-guide/acpi/aml-debugger": ("The AML Debugger", [
            "abstract", "1. Build the debugger", "2. Start the userspace debugger interface",
            "3. Stop the userspace debugger interface", "4. Run the debugger in a script"]),
        "loongarch/booting": ("Booting Linux/LoongArch", [
            "Information passed from BootLoader to kernel", "Header of Linux/LoongArch kernel images"]),
        "networking/x25-iface": (None, [  # its "====-" over/underline is no adornment
            "abstract", "Packet Layer to Device Driver", "Device Driver to Packet Layer",
            "Requirements for the device driver"]),
    }
    assert report.excluded == {
        "admin-guide/features": "no section headings",
        "mm/swap": "headings but no text",
        "translations/it_IT/maintainer/configure-git": "translation (not English)",
        "x86/i386/index": "toctree index only (no text)",
    }
    hashmap = docs["bpf/map_hash"]
    assert hashmap.metadata == {"source": "linux-doc", "path": "bpf/map_hash.rst.gz"}
    assert hashmap.sections[0].text.startswith("BPF_MAP_TYPE_HASH was introduced in kernel version 3.19 ")
    usage = hashmap.sections[1].text
    assert "Per CPU Hashes For BPF_MAP_TYPE_PERCPU_HASH" in usage  # a subsection's title and text
    assert "long bpf_map_update_elem(" not in usage and "#include" not in hashmap.sections[2].text
    assert docs["firmware-guide/acpi/aml-debugger"].sections[0].text == (
        "This document describes the usage of the AML debugger embedded in the Linux kernel.")
    assert docs["loongarch/booting"].sections[1].text == (
        "Linux/LoongArch kernel images are EFI images. Being PE files, they have a 64-byte header structured like:")


def test_build_writes_splits_and_counts_everything(tmp_path):
    report = build_linuxdoc(tmp_path, root=FIXTURE, install=False)
    counts = report.counts
    assert counts["files"] == 8 and counts["excluded"] == 4 and counts["renamed"] == 0
    assert counts["train"] + counts["valid"] + counts["test"] + counts["excluded"] == counts["files"]
    kept = []
    for name in ("train", "valid", "test"):
        docs = read_jsonl(tmp_path / f"{name}.jsonl") if counts[name] else []
        assert len(docs) == counts[name] and all(split_of(d.id) == name for d in docs)
        kept += [d.id for d in docs]
    assert sorted(kept) == ["bpf/map_hash", "firmware-guide/acpi/aml-debugger", "loongarch/booting",
                            "networking/x25-iface"]
    written = json.loads((tmp_path / "build.json").read_text())
    assert written == report.to_dict() and written["excluded"]["x86/i386/index"] == "toctree index only (no text)"
    build_linuxdoc(tmp_path / "again", root=FIXTURE, install=False)
    for name in ("train", "valid", "test", "build"):
        suffix = ".json" if name == "build" else ".jsonl"
        assert (tmp_path / f"{name}{suffix}").read_bytes() == (tmp_path / "again" / f"{name}{suffix}").read_bytes()


def test_damaged_undecodable_and_repeated_files_are_reported(tmp_path):
    root = tmp_path / "Documentation"
    shutil.copytree(FIXTURE, root)
    damaged = root / "bpf" / "map_hash.rst.gz"
    damaged.write_bytes(damaged.read_bytes()[:200])  # truncated
    (root / "latin1.rst").write_bytes("Titre\n=====\n\nSection\n-------\n\ncaf\xe9\n".encode("latin-1"))
    (root / "loongarch" / "booting.rst").write_bytes(gzip.decompress((root / "loongarch" / "booting.rst.gz")
                                                                     .read_bytes()))
    report = build_linuxdoc(tmp_path / "out", root=root, install=False)
    assert report.excluded["bpf/map_hash"].startswith(f"{damaged}: damaged gzip file")
    assert report.excluded["latin1"].startswith(f"{root / 'latin1.rst'}: not UTF-8")
    assert report.renamed == {"loongarch/booting#2": "loongarch/booting"}
    assert report.counts["files"] == 10 and report.counts["excluded"] == 6
    assert sum(report.counts[s] for s in ("train", "valid", "test")) == 4


def test_missing_or_empty_root_is_an_error_naming_it(tmp_path):
    with pytest.raises(DocumentError, match=f"{tmp_path / 'nowhere'}: no such directory"):
        build_linuxdoc(tmp_path / "out", root=tmp_path / "nowhere", install=False)
    with pytest.raises(DocumentError, match=f"{tmp_path}: no .rst or .rst.gz files"):
        build_linuxdoc(tmp_path / "out", root=tmp_path, install=False)


def test_install_hint_when_not_root(tmp_path, monkeypatch):
    monkeypatch.setattr("critic.corpora.manpages.os.geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="sudo apt-get install linux-doc-6.1"):
        linuxdoc.ensure_linuxdoc_installed(tmp_path / "absent")


def test_cli_builds_the_corpus_and_names_a_bad_root(tmp_path, capsys):
    assert main(["data", "build", "linux-doc", "--root", str(FIXTURE), "--out", str(tmp_path / "out"),
                 "--no-install"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["files"] == 8 and counts["excluded"] == 4
    assert main(["data", "build", "linux-doc", "--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"),
                 "--no-install"]) == 2
    assert f"{tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err
    assert main(["list"]) == 0
    assert "linux-doc" in capsys.readouterr().out.split("Corpora")[1]
