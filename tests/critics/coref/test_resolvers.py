"""Resolving documents with the real neuralcoref, resumably (``critic coref resolve``)."""

import json

import pytest

from critic.cli import main
from critic.document import Document, Section, read_jsonl, write_jsonl
from critics.coref.chains import build_chain
from critics.coref.resolution import Resolution
from critics.coref.resolvers import annotate, resolve

TEXTS = {
    "ann": "Ann Lee is a painter. She was born in Ohio. Her work hangs in Paris.",
    "bob": "Bob Stone was a sailor. He crossed the Atlantic twice, and his boat sank once.",
    "both": "Ann met Bob in Rome. She liked him. They married in 1950.",
    "empty": "   ",
}


@pytest.fixture(scope="module")
def worker():
    from critics.coref.neuralcoref import NeuralcorefNotInstalled, NeuralcorefResolver

    try:
        w = NeuralcorefResolver(batch_size=2)
    except NeuralcorefNotInstalled as exc:
        pytest.skip(str(exc))
    yield w
    w.close()


def docs():
    return [Document(i, (Section("abstract", t),)) for i, t in TEXTS.items()]


def test_annotate_resumes_and_counts(worker, tmp_path):
    out, counts = annotate(docs(), tmp_path, batch_size=2, neuralcoref=worker)
    assert counts == {"resolved": 3, "failed: empty text": 1}
    assert [d.id for d in out] == ["ann", "bob", "both"]
    chains = {d.id: build_chain(Resolution.from_dict(d.metadata["coref"], d.text)).tokens for d in out}
    assert chains["ann"][:2] == (".", "F:0") and "She:0" in chains["ann"] and "Her:0" in chains["ann"]
    assert chains["bob"][:2] == (".", "M:0") and "He:0" in chains["bob"] and "his:0" in chains["bob"]
    log = tmp_path / "resolutions.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) == 4
    # a torn last line (a kill mid-write) is cut off and only that document is resolved again
    log.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    again, counts2 = annotate(docs(), tmp_path, batch_size=2, neuralcoref=worker)
    assert counts2 == counts and [d.metadata for d in again] == [d.metadata for d in out]
    assert log.read_text().splitlines()[:3] == lines[:3] and len(log.read_text().splitlines()) == 4
    # nothing left to do: the log is not touched
    before = log.read_bytes()
    annotate(docs(), tmp_path, batch_size=2, neuralcoref=worker)
    assert log.read_bytes() == before


def test_auto_prefers_metadata_and_neuralcoref_fills_in(worker):
    resolved, _ = resolve(docs()[:1], resolver="neuralcoref", neuralcoref=worker)
    fake = resolved["ann"].to_dict()
    fake["persons"] = [99]
    with_meta = Document("ann", (Section("abstract", TEXTS["ann"]),), metadata={"coref": fake})
    out, failures = resolve([with_meta, docs()[1]], resolver="auto", neuralcoref=worker)
    assert out["ann"].persons == frozenset({99}) and "bob" in out and failures == {}


def test_cli_resolve(worker, tmp_path, capsys):
    write_jsonl(docs(), tmp_path / "in.jsonl")
    assert main(["coref", "resolve", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "r")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["counts"] == {"resolved": 3, "failed: empty text": 1}
    assert [d.id for d in read_jsonl(tmp_path / "r" / "documents.jsonl")] == ["ann", "bob", "both"]


def test_cli_resolve_bad_input_names_file_and_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "sections": [{"title": null, "text": "Ann smiled."}]}\n{"id": 1\n')
    assert main(["coref", "resolve", str(bad), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: invalid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_critic_reuses_one_worker_across_batches(worker, monkeypatch):
    """project() batches share the critic's worker: neuralcoref starts once per critic, not per batch."""
    import critics.coref.neuralcoref as nc
    from critics.coref.critic import CorefChainCritic

    started = []

    def counting(*args, **kwargs):
        started.append(1)
        return worker

    monkeypatch.setattr(nc, "NeuralcorefResolver", counting)
    critic = CorefChainCritic(smoothing="authors", resolver="neuralcoref")
    critic.batch_size = 2
    critic.fit(docs()[:3])
    scores = critic.score(docs())
    assert len(started) == 1 and scores.n == 3 and scores.skipped == {"empty": "empty text"}
