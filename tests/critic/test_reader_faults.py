"""The reader's faults through the CLI: inputs that gave exit 0 with nothing (an empty Parquet file, only blank
lines), a traceback (JSON nested too deep) or a misleading message (gzip, a BOM, a named pipe) now read or end
with exit 2 and one message naming the file."""

from __future__ import annotations

import gzip
import json
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from critic.cli import main
from critic.document import Document, Section, write_jsonl


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    docs = [Document(f"d{i}", (Section("name", f"tool{i} does x"), Section("synopsis", "tool [options]"),
                               Section("description", "it does things well"))) for i in range(6)]
    train = write_jsonl(docs, root / "train.jsonl")
    assert main(["fit", "sections", "--train", str(train), "--out", str(root / "model"),
                 "--params", '{"delta": 0.1}']) == 0
    return root / "model"


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_score_refuses_an_input_without_documents(model, tmp_path, capsys):
    """Both were exit 0 with no rows and no word."""
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    code, out, err = run(capsys, "score", model, "--input", empty)
    assert (code, out, err) == (2, "", f"critic: error: {empty}: holds no documents\n")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    code, out, err = run(capsys, "score", model, "--input", blank, "--format", "lines")
    assert (code, out) == (2, "")
    assert err == f"critic: error: {blank}: holds no documents; skipped 2: empty text (first at {blank}:1)\n"


def test_score_reads_gzip_and_a_byte_order_mark(model, tmp_path, capsys):
    path = tmp_path / "gens.jsonl.gz"
    path.write_bytes(gzip.compress(b'\xef\xbb\xbf{"id": "g1", "text": "tool does x"}\n{"id": "g2", "text": "y"}\n'))
    for fmt in ("auto", "text-jsonl"):
        code, out, err = run(capsys, "score", model, "--input", path, "--format", fmt)
        assert code == 0, err
        assert [json.loads(line)["id"] for line in out.splitlines()] == ["g1", "g2"]


def test_score_on_json_nested_too_deep(model, tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert run(capsys, "score", model, "--input", path, "--format", "text-jsonl") == (
        2, "", f"critic: error: {path}:1: JSON nested deeper than Python's JSON parser allows\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_score_reads_a_named_pipe_with_a_format_and_refuses_it_under_auto(model, tmp_path, capsys):
    path = tmp_path / "gens.jsonl"
    os.mkfifo(path)
    code, out, err = run(capsys, "score", model, "--input", path)  # auto: never opens the pipe
    assert (code, out) == (2, "")
    assert err == (f"critic: error: {path}: a pipe can be read only with --format FORMAT given (auto would read its "
                   "first line to tell the format, and a pipe can be read only once)\n")

    def write():
        with open(path, "wb") as fh:
            fh.write(b'{"id": "g1", "text": "tool does x"}\n')

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, out, err = run(capsys, "score", model, "--input", path, "--format", "text-jsonl")
    writer.join(10)
    assert code == 0, err
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["g1"]
