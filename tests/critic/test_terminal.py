"""Data that reaches a terminal or a Markdown file shows its control characters escaped, never acts."""

from __future__ import annotations

import json

from critic.cli import main
from critic.results import markdown_cell
from critic.terminal import printable


def test_printable_escapes_every_control_character_but_tab_and_newline():
    raw = "a\x1b]0;title\x07b\x1b[2Jc\x9bd\x7fe\tf\ng\x00"
    assert printable(raw) == "a\\x1b]0;title\\x07b\\x1b[2Jc\\x9bd\\x7fe\tf\ng\\x00"
    assert all(ord(ch) >= 0x20 or ch in "\t\n" for ch in printable("".join(map(chr, range(0x100)))))
    assert printable("é 日本 ok") == "é 日本 ok" and printable(3) == "3"
    assert markdown_cell("x\x1b[2J|y\nz") == "x\\x1b[2J\\|y z"


def test_outliers_prints_document_ids_escaped(tmp_path, capsys, fixture_manpage_root):
    """The issue's case: ids from a generations file with escape sequences (clear the screen, set the title,
    write the clipboard) are printed escaped by critic outliers."""
    data = tmp_path / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp_path / "c"),
                 "--params", '{"delta": 0.1}']) == 0
    ids = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b]52;c;aGk=\x07"]
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"id": i, "text": f"# NAME\nx - y\n# DESCRIPTION\nsome text {k}"}) + "\n"
                            for k, i in enumerate(ids)))
    capsys.readouterr()
    assert main(["outliers", str(tmp_path / "c"), "--reference", str(data / "test.jsonl"), "--input", str(gens),
                 "--top", "3"]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out and "\x07" not in captured.out and "\x1b" not in captured.err
    for i in ids:
        assert printable(i) in captured.out
