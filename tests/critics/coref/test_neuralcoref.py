"""The neuralcoref worker, for real: needs the venv that `critic setup neuralcoref` builds (CI does)."""

import json
import subprocess
import time

import pytest

from critic.cli import main
from critics.coref import neuralcoref as nc
from critics.coref.neuralcoref import NeuralcorefNotInstalled, NeuralcorefResolver, find_python37, setup_neuralcoref

LISA = "Lisa runs off to find Josh and they kiss. Afterwards, Josh tells her the reason why he is going."
DOCS = [
    ("lisa", LISA),
    ("dog", "My sister has a dog.\n\nShe loves him."),
    ("firm", "The company said its profit rose. It expects more growth next year!"),
    ("empty", ""),
    ("mr", "Mr. Smith went to Washington. He met Dr. Jones there."),
]


@pytest.fixture(scope="module")
def resolver():
    try:
        r = NeuralcorefResolver(batch_size=2, workers=1)
    except NeuralcorefNotInstalled as exc:
        pytest.skip(f"neuralcoref venv not built ({exc})")
    yield r
    r.close()


@pytest.fixture(scope="module")
def resolved(resolver):
    return {res["id"]: res for res in resolver.resolve(DOCS)}


def clusters(text, res):
    out = {}
    for m in res["mentions"]:
        out.setdefault(m["cluster"], []).append(text[m["start"]:m["end"]])
    return sorted(out.values())


def test_offsets_are_consistent(resolved):
    for doc_id, text in DOCS:
        res = resolved[doc_id]
        sents = res["sentences"]
        assert all(0 <= s < e <= len(text) for s, e in sents)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(sents, sents[1:]))
        keys = [(m["start"], m["end"], m["cluster"]) for m in res["mentions"]]
        assert keys == sorted(keys)
        for m in res["mentions"]:
            rs, re_ = m["root"]
            assert m["start"] <= rs < re_ <= m["end"] and text[rs:re_] == m["root_text"]
            assert sum(s <= m["start"] and m["end"] <= e for s, e in sents) == 1  # inside exactly one sentence
    assert resolved["empty"] == {"id": "empty", "sentences": [], "mentions": []}


def test_what_neuralcoref_finds(resolved):
    lisa = resolved["lisa"]
    assert lisa["sentences"] == [[0, 41], [42, 96]]
    # "they" (Lisa and Josh) is no mention; Lisa is tagged ORG by the bundled NER
    assert clusters(LISA, lisa) == [["Josh", "Josh", "he"], ["Lisa", "her"]]
    he = next(m for m in lisa["mentions"] if m["root_text"] == "he")
    assert (he["pos"], he["tag"], he["ent_type"]) == ("PRON", "PRP", "")
    josh = lisa["mentions"][1]
    assert (josh["start"], josh["end"], josh["pos"], josh["tag"], josh["ent_type"]) == (22, 26, "PROPN", "NNP",
                                                                                          "PERSON")
    dog = resolved["dog"]
    assert dog["sentences"] == [[0, 20], [20, 36]]  # the blank line opens the second sentence
    assert clusters(DOCS[1][1], dog) == [["My sister", "She"], ["a dog", "him"]]
    assert dog["mentions"][0]["root"] == [3, 9]  # "sister" heads "My sister"
    firm = resolved["firm"]
    assert clusters(DOCS[2][1], firm) == [["The company", "its", "It"]]
    its = firm["mentions"][1]
    assert (its["root_text"], its["pos"], its["tag"]) == ("its", "DET", "PRP$")  # possessives are DET/PRP$
    # the sentencizer splits after "." tokens only: "Mr." and "Dr." are single tokens
    assert resolved["mr"]["sentences"] == [[0, 29], [30, 53]]


def test_batches_stream_in_order(resolver, resolved):
    consumed = []

    def items():
        for item in DOCS:
            consumed.append(item[0])
            yield item

    stream = resolver.resolve(items())
    first = next(stream)
    assert first["id"] == "lisa" and consumed == ["lisa", "dog"]  # one batch of 2 read, not all five
    rest = list(stream)
    assert [r["id"] for r in [first] + rest] == [d for d, _ in DOCS]
    with NeuralcorefResolver(batch_size=16) as one_batch:  # nlp.pipe over 5 docs: the same output
        assert list(one_batch.resolve(DOCS)) == [resolved[d] for d, _ in DOCS]


def test_a_failing_document(resolver):
    docs = [("ok", LISA), ("bad", "A lone surrogate \ud800 here."), ("after", "Ann said she was late.")]
    out = list(resolver.resolve(docs, on_error="report"))
    assert [r["id"] for r in out] == ["ok", "bad", "after"]
    assert out[1] == {"id": "bad", "error": out[1]["error"]} and "UnicodeEncodeError" in out[1]["error"]
    assert out[0]["mentions"] and out[2]["mentions"]
    with pytest.raises(RuntimeError, match="document 'bad': UnicodeEncodeError"):
        list(resolver.resolve(docs))
    sent = resolver.documents_sent
    again = next(resolver.resolve([("again", "Ann said she was late, and she was.")]))
    assert again["mentions"] and resolver.documents_sent == sent + 1  # the worker is still alive


def test_a_crashed_worker_names_the_batch(resolver):
    list(resolver.resolve([("warm", "x")]))
    resolver._workers[0]._proc.kill()
    texts = {"a": "Ann met Bob.", "b": "Bob met Ann.", "c": "Cy met Di."}  # not cached: they reach the worker
    with pytest.raises(RuntimeError, match=r"(?s)documents \['a', 'b'\]: worker exited.*worker stderr"):
        list(resolver.resolve(texts.items()))
    sent = resolver.documents_sent
    assert [r["id"] for r in resolver.resolve([("c", texts["c"])])] == ["c"]  # a fresh worker
    assert resolver.documents_sent == sent + 1


def test_missing_venv_and_interpreter(tmp_path):
    with pytest.raises(NeuralcorefNotInstalled, match="critic setup neuralcoref"):
        NeuralcorefResolver(venv=tmp_path / "nothing")
    with pytest.raises(RuntimeError, match="not a working Python 3.7"):
        find_python37(tmp_path / "python3.7")
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="is not a venv"):
        setup_neuralcoref(tmp_path)


def test_setup_is_idempotent(resolver, monkeypatch):
    def no_subprocess(*a, **k):
        raise AssertionError("setup ran a command")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    t = time.perf_counter()
    assert setup_neuralcoref() == resolver.venv
    assert time.perf_counter() - t < 1


def test_cli_setup_prints_the_venv(resolver, capsys):
    assert main(["setup", "neuralcoref"]) == 0
    assert capsys.readouterr().out.strip() == str(resolver.venv)
    marker = json.loads((resolver.venv / nc._MARKER).read_text())
    assert marker["pins"] == nc.PINS
