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


def test_json_lines_escape_what_json_leaves_raw_and_read_back_the_same():
    from critic.terminal import json_line

    row = {"id": "a\x9b31mX\x7f\u2028", "x": "\x1b"}
    line = json_line(row)
    assert line == '{"id": "a\\u009b31mX\\u007f\\u2028", "x": "\\u001b"}\n' and json.loads(line) == row
    lone = {"id": "a\ud800b"}  # what JSON's "\ud800" reads as: raw, it could not be written as UTF-8
    assert json_line(lone) == '{"id": "a\\ud800b"}\n' and json.loads(json_line(lone)) == lone
    json_line(lone).encode("utf-8")


def test_markdown_cells_show_html_as_text():
    assert markdown_cell("<img src=x onerror=alert(1)>|") == "\\<img src=x onerror=alert(1)\\>\\|"


def test_every_line_a_command_prints_is_printable(tmp_path, capsys, fixture_manpage_root):
    """The round's cases: a C1 CSI in an id went raw to stdout in critic score's JSON; a candidate name or a critic
    label with escape sequences went raw to stdout (a set warning, the flag power lines) and, through
    matplotlib's warnings, to stderr.  Every command's stdout and stderr now pass one sanitiser."""
    data = tmp_path / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    critic_dir = tmp_path / "crit\x1b]0;pwn\x07"
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(critic_dir),
                 "--params", '{"delta": 0.1}']) == 0
    page = json.loads((data / "test.jsonl").read_text().splitlines()[0])
    c1 = tmp_path / "c1.jsonl"
    c1.write_text(json.dumps({**page, "id": "a\x9b31mX"}) + "\n")
    capsys.readouterr()
    assert main(["score", str(critic_dir), "--input", str(c1)]) == 0
    out = capsys.readouterr().out
    assert "\x9b" not in out and json.loads(out)["id"] == "a\x9b31mX"
    assert main(["report", "--critic", str(critic_dir), "--reference", str(data / "valid.jsonl"), "--candidate",
                 f"N\x1b[41m={data / 'test.jsonl'}", "--out", str(tmp_path / "r"), "--n-bootstrap", "20",
                 "--n-permutations", "20"]) == 0
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        assert not any(ch in stream for ch in "\x1b\x07\x9b")
    assert "crit\\x1b]0;pwn\\x07" in captured.out


def test_names_of_bytes_that_are_not_utf8_are_shown_as_their_bytes():
    from critic.terminal import path_text

    assert path_text("g\udcff.jsonl") == "g\\xff.jsonl" and path_text("x\ud800y") == "x\\ud800y"
    assert printable("a\x1b\udcffb") == "a\\x1b\\xffb" and path_text("plain é") == "plain é"


# ------------------------------------------------------------------ logging (issue 41)


def test_critic_s_loggers_write_one_printable_line_each_to_the_stderr_of_the_moment(capsys):
    """The handler writes to whatever sys.stderr is when a record is emitted (pytest's capture here), labelled by
    level, data escaped even outside a command."""
    import logging

    from critic.terminal import LOGGER, get_logger, verbosity

    log = get_logger("critic.test_terminal")
    assert log.name == "critic.test_terminal" and get_logger("my_plugin").name == "critic.my_plugin"
    with verbosity(0):
        log.debug("hidden")
        log.info("read %s", "a\x1b[2Jb")
        log.warning("careful")
        log.error("broken")
        log.error("interrupted", extra={"label": ""})
    assert capsys.readouterr().err == ("critic: read a\\x1b[2Jb\ncritic: warning: careful\ncritic: error: broken\n"
                                       "critic: interrupted\n")
    with verbosity(1):
        log.debug("shown")
    assert capsys.readouterr().err == "critic: debug: [critic.test_terminal] shown\n"
    with verbosity(-1):
        log.info("said")
        log.warning("kept")
    assert capsys.readouterr().err == "critic: warning: kept\n"
    with verbosity(-2):
        log.warning("dropped")
        log.error("kept")
    assert capsys.readouterr().err == "critic: error: kept\n"
    assert logging.getLogger(LOGGER).level == logging.INFO  # each block's level restored


def test_an_application_takes_critic_s_records_into_its_own_logging(capsys):
    import logging

    from critic import terminal

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    root, keep = logging.getLogger(), Keep()
    root.addHandler(keep)
    before = root.level
    root.setLevel(logging.INFO)
    try:
        terminal.get_logger("critic.app").info("not yet the application's")
        assert records == [] and capsys.readouterr().err == "critic: not yet the application's\n"
        terminal.use_application_logging()
        terminal.get_logger("critic.app").info("the application's")
        assert records == ["the application's"] and capsys.readouterr().err == ""
    finally:
        root.removeHandler(keep)
        root.setLevel(before)
        terminal._HANDED_OVER = False
        terminal._install()
    terminal.get_logger("critic.app").info("critic's again")
    assert capsys.readouterr().err == "critic: critic's again\n"
