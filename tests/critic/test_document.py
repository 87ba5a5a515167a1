import json

import pytest

from critic.document import Document, DocumentError, Section, read_jsonl, write_jsonl


def test_round_trip(tmp_path):
    docs = [Document("a", (Section("Intro", "x y"), Section(None, "z")), title="A", metadata={"k": 1}),
            Document("b", (Section("Só", "ünïcode"),))]
    path = write_jsonl(docs, tmp_path / "d.jsonl")
    back = read_jsonl(path)
    assert back == docs
    assert back[0].metadata == {"k": 1}
    assert back[0].section_titles == ["Intro", None]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "holds no documents"),
        (b'{"id": "a", "sections": []}\n{"id": "b", "sections": [\n', ":2: invalid JSON"),
        (b'{"id": "a", "sections": [{"title": "t", "text": "\xff\xfe"}]}\n', ":1: line is not valid UTF-8"),
        (b'{"sections": []}\n', "has no 'id'"),
        (b'{"id": "doc7"}\n', "document 'doc7' has no 'sections' list"),
        (b'{"id": "doc8", "sections": [{"title": 3, "text": "x"}]}\n', "document 'doc8' section 0 has a non-string title"),
        (b'{"id": "a", "sections": []}\n{"id": "a", "sections": []}\n', "duplicate document id 'a'"),
        (b'[1, 2]\n', "expected a JSON object"),
    ],
)
def test_bad_input_names_file_line_and_document(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DocumentError) as err:
        read_jsonl(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(DocumentError, match="no such file"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_blank_lines_are_not_documents(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n" + json.dumps({"id": "a", "sections": [{"title": "t", "text": "x"}]}) + "\n\n")
    assert [d.id for d in read_jsonl(path)] == ["a"]


def test_a_whole_file_read_pauses_the_collector_and_restores_it_even_on_bad_input(tmp_path):
    import gc

    from critic import collector

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "sections": [{"text": "x"}]}\n{"id": "b", "sections": [{"txt": "y"}]}\n')
    with pytest.raises(DocumentError, match=r"bad.jsonl:2: document 'b' section 0 has an unknown key 'txt' "
                                            r"\(did you mean 'text'\?\)"):
        read_jsonl(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()  # a collector the caller paused stays paused
    finally:
        gc.enable()


def _doc_line(doc_id: str) -> bytes:
    return json.dumps({"id": doc_id, "sections": [{"title": "t", "text": "x"}]}).encode() + b"\n"


def test_a_byte_order_mark_at_the_start_is_not_part_of_the_first_line(tmp_path):
    """It was 'invalid JSON (Unexpected UTF-8 BOM ...)'."""
    from critic.document import iter_json_lines

    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _doc_line("a") + _doc_line("b"))
    assert [d.id for d in read_jsonl(path)] == ["a", "b"]
    assert [where for where, _ in iter_json_lines(path)] == [f"{path}:1", f"{path}:2"]
    path.write_bytes(_doc_line("a") + b"\xef\xbb\xbf" + _doc_line("b"))  # only at the start of the file
    with pytest.raises(DocumentError) as err:
        read_jsonl(path)
    assert str(err.value).startswith(f"{path}:2: invalid JSON (Unexpected UTF-8 BOM")


def test_gzip_documents_are_read_decompressed(tmp_path):
    """A .jsonl.gz was 'line is not valid UTF-8' at line 1."""
    import gzip

    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + _doc_line("a") + b"\n" + _doc_line("b")))
    assert [d.id for d in read_jsonl(path)] == ["a", "b"]
    whole = gzip.compress(b"".join(_doc_line(f"d{i}") for i in range(20000)), mtime=0)
    path.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(DocumentError) as err:
        read_jsonl(path)
    where, _, message = str(err.value).partition(": ")
    assert message == "gzip-compressed data damaged or cut short (Compressed file ended before the end-of-stream " \
                      "marker was reached)"
    assert where.startswith(f"{path}:") and int(where.rpartition(":")[2]) > 1000


def test_json_nested_too_deep_is_a_document_error(tmp_path):
    """It was RecursionError, 'maximum recursion depth exceeded', naming neither file nor line."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(_doc_line("a") + b'{"id": "b", "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    with pytest.raises(DocumentError) as err:
        read_jsonl(path)
    assert str(err.value) == f"{path}:2: JSON nested deeper than Python's JSON parser allows"


def test_a_named_pipe_is_read_not_called_missing(tmp_path):
    """A FIFO was 'no such file'."""
    import os
    import threading

    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    path = tmp_path / "d.jsonl"
    os.mkfifo(path)

    def write():
        with open(path, "wb") as fh:
            fh.write(_doc_line("a") + _doc_line("b"))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert [d.id for d in read_jsonl(path)] == ["a", "b"]
    writer.join(10)
    assert not writer.is_alive()
