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

    from critic.document import collector_paused

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "sections": [{"text": "x"}]}\n{"id": "b", "sections": [{"txt": "y"}]}\n')
    with pytest.raises(DocumentError, match=r"bad.jsonl:2: document 'b' section 0 has an unknown key 'txt' "
                                            r"\(did you mean 'text'\?\)"):
        read_jsonl(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector the caller paused stays paused
    finally:
        gc.enable()
