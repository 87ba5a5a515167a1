"""Streamed scoring: chunks of whole batches give one call's numbers (Monte Carlo seeds included), a stopped run
resumes to the same bytes, shards merge to the serial run's bytes, and other settings are refused."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributions import Cauchy, Uniform

from critic import Projection
from critic.cli import main
from critic.document import Document, DocumentError, Section, write_jsonl
from critic.inputs import ReadReport
from critic.streaming import merge_shards, progress_path, score_rows, score_stream
from critic.terminal import json_line

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "section_count_critic.py"


@pytest.fixture(scope="module")
def critic():
    """Section counts under a Poisson fit, projected as Uniform(n +- 0.5) under a Cauchy prior: Monte Carlo,
    so every batch's seed shows in its numbers; 3 documents a batch."""
    spec = importlib.util.spec_from_file_location("section_count_critic", EXAMPLE)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)

    class SoftCount(tutorial.SectionCountCritic):
        mc_samples = 64
        batch_size = 3

        def project(self, docs):
            n = torch.tensor([float(len(d.sections)) for d in docs], dtype=torch.float64)
            return Projection([d.id for d in docs], Uniform(n - 0.5, n + 0.5), torch.ones(len(docs)))

        def prior(self):
            return Cauchy(torch.tensor(self.rate_, dtype=torch.float64), 2.0)

    return SoftCount().fit([Document(f"t{i}", tuple(Section("s", "x") for _ in range(k)))
                            for i, k in enumerate([3, 4, 5])])


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """41 documents, every seventh without sections (skipped by the check)."""
    rng = np.random.default_rng(0)
    out = [Document(f"d{i}", () if i % 7 == 3 else tuple(Section("s", "x") for _ in range(int(rng.integers(1, 9)))))
           for i in range(41)]
    path = write_jsonl(out, tmp_path_factory.mktemp("in") / "docs.jsonl")
    return out, path


def serial_bytes(critic, docs, tmp_path) -> bytes:
    out = tmp_path / "serial.jsonl"
    score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
    return out.read_bytes()


def test_chunks_of_whole_batches_give_one_call_s_numbers(critic, docs, tmp_path):
    """Chunk c (6 records: 2 batches of 3) is scored as one call from batch 2c: with every document checked, the
    numbers of one call over all of them; with some skipped by the check, each chunk's own call's."""
    rows = [json.loads(line) for line in serial_bytes(critic, docs, tmp_path).decode().splitlines()]
    assert critic.score(docs[0], seed=7).estimator == "monte carlo (64 samples)"
    chunks = [docs[0][i:i + 6] for i in range(0, len(docs[0]), 6)]
    want = [row for c, chunk in enumerate(chunks) for row in score_rows(critic.score(chunk, seed=7, first_batch=2 * c))]
    assert rows == want and sum("skipped" in r for r in rows) == 6
    checked = [d for d in docs[0] if d.sections]
    path = write_jsonl(checked, tmp_path / "checked.jsonl")
    score_stream(critic, checked, tmp_path / "checked.out", source=path, seed=7, batches_per_chunk=2)
    assert (tmp_path / "checked.out").read_bytes() == "".join(
        json_line(row) for row in score_rows(critic.score(checked, seed=7))).encode()
    other_seed = score_rows(critic.score(docs[0], seed=8))
    assert [r["latent_nll"] for r in rows if "skipped" not in r] != [r["latent_nll"] for r in other_seed
                                                                      if "skipped" not in r]


def test_a_stopped_run_resumes_to_the_same_bytes(critic, docs, tmp_path):
    want = serial_bytes(critic, docs, tmp_path)
    out = tmp_path / "stopped.jsonl"

    def stopping(limit):
        for k, doc in enumerate(docs[0]):
            if k == limit:
                raise KeyboardInterrupt
            yield doc

    with pytest.raises(KeyboardInterrupt):
        score_stream(critic, stopping(25), out, source=docs[1], seed=7, batches_per_chunk=2)
    state = json.loads(progress_path(out).read_text())
    assert 0 < len(state["chunks"]) and not state["complete"] and out.stat().st_size == state["bytes"]
    with open(out, "ab") as fh:  # what a kill between the append and the progress file leaves
        fh.write(b'{"id": "d99", "latent_nll": 1.0')
    score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
    assert out.read_bytes() == want
    again = score_stream(critic, iter(()), out, source=docs[1], seed=7, batches_per_chunk=2)  # finished: nothing to do
    assert again["complete"] and out.read_bytes() == want


def test_shards_merge_to_the_serial_run_s_bytes(critic, docs, tmp_path):
    want = serial_bytes(critic, docs, tmp_path)
    parts = [tmp_path / f"part{i}.jsonl" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        score_stream(critic, docs[0], part, source=docs[1], seed=7, batches_per_chunk=2, shard=(i, 3))
    sizes = [len(json.loads(progress_path(p).read_text())["chunks"]) for p in parts]
    assert sum(sizes) == json.loads(progress_path(parts[0]).read_text())["chunks_total"] and min(sizes) >= 1
    assert merge_shards([parts[2], parts[0], parts[1]], tmp_path / "merged.jsonl") == {"chunks": sum(sizes), "parts": 3}
    assert (tmp_path / "merged.jsonl").read_bytes() == want
    serial = json.loads(progress_path(tmp_path / "serial.jsonl").read_text())
    assert json.loads(progress_path(tmp_path / "merged.jsonl").read_text()) == serial  # a serial run's record too
    assert score_stream(critic, iter(()), tmp_path / "merged.jsonl", source=docs[1], seed=7,
                        batches_per_chunk=2)["complete"]  # so critic score knows it as finished
    merge_shards(parts, tmp_path / "merged.jsonl")  # its own output: replaced
    with pytest.raises(ValueError, match="give each of 1/3 .. 3/3 once"):
        merge_shards(parts[:2], tmp_path / "x.jsonl")


def test_merge_never_replaces_a_file_it_did_not_write(critic, docs, tmp_path):
    """The round's cases: merge --out a user's file, a link to one, or one of its own parts replaced it, exit 0."""
    parts = [tmp_path / f"part{i}.jsonl" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        score_stream(critic, docs[0], part, source=docs[1], seed=7, batches_per_chunk=2, shard=(i, 2))
    notes = tmp_path / "notes.txt"
    notes.write_text("precious\n")
    with pytest.raises(ValueError, match="notes.txt: exists and is not a finished critic score output"):
        merge_shards(parts, notes)
    link = tmp_path / "link.jsonl"
    link.symlink_to(notes)
    with pytest.raises(ValueError, match="link.jsonl: exists and is not a file this tool wrote"):
        merge_shards(parts, link)
    before = parts[1].read_bytes()
    with pytest.raises(ValueError, match="part2.jsonl: is one of the parts being merged"):
        merge_shards(parts, parts[1])
    assert notes.read_text() == "precious\n" and link.is_symlink() and parts[1].read_bytes() == before


def test_other_settings_are_refused_and_name_what_differs(critic, docs, tmp_path):
    out = tmp_path / "a.jsonl"
    score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
    with pytest.raises(ValueError, match=r"a.jsonl: was started with other settings \(chunk_batches, seed differ\)"):
        score_stream(critic, docs[0], out, source=docs[1], seed=8, batches_per_chunk=3)
    (tmp_path / "plain.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(ValueError, match="not a streamed output of critic score"):
        score_stream(critic, docs[0], tmp_path / "plain.jsonl", source=docs[1])


def test_the_command_streams_resumes_shards_and_merges(docs, tmp_path, capsys, fixture_manpage_root):
    data = tmp_path / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp_path / "m"),
                 "--params", '{"delta": 0.1}']) == 0
    args = ["score", str(tmp_path / "m"), "--input", str(data / "train.jsonl"), "--chunk-batches", "1"]
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "s.jsonl")]) == 0
    assert (tmp_path / "s.jsonl").read_text() == printed
    for i in (1, 2):
        assert main(args + ["--shard", f"{i}/2", "--out", str(tmp_path / f"p{i}.jsonl")]) == 0
    assert main(["merge", str(tmp_path / "p1.jsonl"), str(tmp_path / "p2.jsonl"), "--out", str(tmp_path / "all.jsonl")]) == 0
    assert (tmp_path / "all.jsonl").read_text() == printed
    capsys.readouterr()
    assert main(args + ["--shard", "3/2"]) == 2 and "--shard '3/2': expected i/n" in capsys.readouterr().err
    assert main(args + ["--shard", "1/2"]) == 2 and "--shard writes a part for critic merge" in capsys.readouterr().err


def test_merge_names_a_part_it_cannot_use_and_writes_nothing(critic, docs, tmp_path, capsys):
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"id": "x"}\n')
    out = tmp_path / "merged.jsonl"
    assert main(["merge", str(plain), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{plain}: no readable plain.jsonl.progress.json (not a streamed critic score output)" in err
    part = tmp_path / "half.jsonl"

    def stopping():
        for k, doc in enumerate(docs[0]):
            if k == 20:
                raise KeyboardInterrupt
            yield doc

    with pytest.raises(KeyboardInterrupt):
        score_stream(critic, stopping(), part, source=docs[1], seed=7, batches_per_chunk=2, shard=(1, 1))
    assert main(["merge", str(part), "--out", str(out)]) == 2
    unfinished = capsys.readouterr().err
    assert f"{part}: its shard is not finished" in unfinished
    assert not out.exists() and "Traceback" not in err + unfinished


def test_workers_need_an_output_file_and_one_kind_of_cluster(docs, tmp_path, capsys, fixture_manpage_root):
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl
    from critics.sections import SectionTransitionCritic

    build_manpages(tmp_path / "data", root=fixture_manpage_root, install=False)
    SectionTransitionCritic(delta=0.1).fit(read_jsonl(tmp_path / "data" / "train.jsonl")).save(tmp_path / "m")
    base = ["score", str(tmp_path / "m"), "--input", str(tmp_path / "data" / "test.jsonl")]
    capsys.readouterr()
    assert main(base + ["--workers", "2", "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "give --workers N (an embedded cluster) or --scheduler ADDRESS (an existing one), not both" in \
        capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()
    assert main(base + ["--workers", "0", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--workers: must be an integer >= 1" in capsys.readouterr().err


def test_a_slow_critic_asks_for_smaller_chunks(critic, docs, monkeypatch):
    """A chunk is whole batches making about the critic's chunk_documents (3 a batch: 10 -> 3 batches, 9 records)."""
    from critic.streaming import chunk_batches, plan_chunks
    from critics.coref import CorefChainCritic

    monkeypatch.setattr(type(critic), "chunk_documents", 10)
    assert chunk_batches(critic) == 3 and chunk_batches(critic, 5) == 5
    chunks = list(plan_chunks(critic, docs[0]))
    assert [len(c.docs) for c in chunks] == [9, 9, 9, 9, 5] and [c.first_batch for c in chunks] == [0, 3, 6, 9, 12]
    assert chunk_batches(CorefChainCritic()) == 1  # neuralcoref: one batch of 256, seconds of work


def test_two_runs_writing_the_same_output_the_second_stops(critic, docs, tmp_path):
    """The issue's case: a second critic score --out SAME while one runs stops before writing a byte, naming the
    output and the process; the lock goes with the process, so the next run resumes (and a finished one is left
    as it was)."""
    import os

    from critic.io import output_lock

    out = tmp_path / "scores.jsonl"
    with output_lock(out):  # the first run, still writing
        with pytest.raises(ValueError, match=rf"{out}: another run \(process {os.getpid()}\) is writing it"):
            score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
        assert not out.exists()
    score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
    assert out.stat().st_size > 0


def test_merge_names_a_truncated_or_damaged_part_and_its_chunk(critic, docs, tmp_path, capsys):
    """The issue's case: a part truncated, or a chunk's bytes changed, merged into a torn file with exit 0; now
    each part's length and each chunk's SHA-256 are checked against its progress file, naming part and chunk."""
    parts = [tmp_path / f"part{i}.jsonl" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        score_stream(critic, docs[0], part, source=docs[1], seed=7, batches_per_chunk=2, shard=(i, 2))
    out = tmp_path / "merged.jsonl"
    whole = parts[1].read_bytes()
    parts[1].write_bytes(whole[:-10])
    assert main(["merge", *map(str, parts), "--out", str(out)]) == 2
    assert f"{parts[1]}: {len(whole) - 10} bytes where its progress file records {len(whole)}: damaged or " \
           "truncated" in capsys.readouterr().err
    chunk = json.loads(progress_path(parts[1]).read_text())["chunks"][0]
    damaged = bytearray(whole)
    damaged[chunk["start"] + 8] ^= 1  # one bit of the first chunk: same length, other bytes
    parts[1].write_bytes(bytes(damaged))
    assert main(["merge", *map(str, parts), "--out", str(out)]) == 2
    assert f"{parts[1]}: chunk {chunk['index']} (bytes {chunk['start']}..{chunk['end']}) differs from what was " \
           "written (SHA-256)" in capsys.readouterr().err
    assert not out.exists()


def test_a_rerun_checks_what_was_written(critic, docs, tmp_path):
    """The round's case: a number edited inside a finished (or half-finished) output went unnoticed by a rerun,
    which said it was complete; each chunk's SHA-256 is now checked before anything is reused."""
    out = tmp_path / "s.jsonl"
    score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)
    data = bytearray(out.read_bytes())
    chunk = json.loads(progress_path(out).read_text())["chunks"][1]
    at = data.index(b"latent_nll", chunk["start"]) + 14
    data[at] = ord("7") if data[at] != ord("7") else ord("8")
    out.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"s.jsonl: chunk 1 \(bytes {chunk['start']}..{chunk['end']}\) differs from "
                                         "what was written"):
        score_stream(critic, docs[0], out, source=docs[1], seed=7, batches_per_chunk=2)


def test_resume_knows_the_input_by_its_content(critic, docs, tmp_path):
    """The same path, size and time but other bytes is another input: refused, not resumed."""
    import os

    source = tmp_path / "in.jsonl"
    source.write_bytes(docs[1].read_bytes())
    out = tmp_path / "s.jsonl"
    score_stream(critic, docs[0], out, source=source, seed=7, batches_per_chunk=2)
    stat = source.stat()
    data = bytearray(source.read_bytes())
    data[-3] = ord("x") if data[-3] != ord("x") else ord("y")
    source.write_bytes(bytes(data))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert source.stat().st_size == stat.st_size and source.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(ValueError, match=r"s.jsonl: was started with other settings \(input_sha256 differ\)"):
        score_stream(critic, docs[0], out, source=source, seed=7, batches_per_chunk=2)


def generations_with_empty_ones(path: Path) -> Path:
    """17 text-JSONL generations of 1-6 Markdown sections; four are blank (two with ids, two without)."""
    rows = []
    for i in range(17):
        text = "".join(f"# s{k}\nx\n" for k in range(1 + i % 6))
        if i in (0, 5, 6, 16):
            rows.append({"text": "  \n"} if i % 2 else {"id": f"g{i}", "text": ""})
        else:
            rows.append({"id": f"g{i}", "text": text})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("reader", ["documents", "lines"])
def test_every_generation_the_reader_skips_has_a_row_where_it_was_read(critic, tmp_path, reader):
    """The issue's case: an empty generation was counted on stderr but had no row in critic score's output, so a
    row-by-row join with the input lost it.  Each now has ``{"id", "skipped", "read": false}`` after its chunk's
    rows (its id, or the NAME:LINE it would have had), the same bytes serial, resumed and sharded, whether the
    documents are read here (``documents``) or each chunk's span of lines by whoever scores it (``lines``)."""
    from critic.inputs import InputOptions, ReadReport, iter_documents, line_input

    source = generations_with_empty_ones(tmp_path / "gens.jsonl")
    options = InputOptions(format="text-jsonl")

    def scored(out, **kw):
        lines = line_input(source, options) if reader == "lines" else None
        read = lines.report() if lines else ReadReport(skipped_documents=[])
        score_stream(critic, lines or iter_documents(source, options, report=read), out, source=source, seed=7,
                     batches_per_chunk=1, report=read, **kw)
        return read

    read = scored(tmp_path / "serial.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "serial.jsonl").read_text().splitlines()]
    assert read.skipped == {"empty text": 4} and read.n_read == 13
    skips = [(r["id"], r["skipped"]) for r in rows if r.get("read") is False]
    assert skips == [("g0", "empty text"), ("gens:6", "empty text"), ("g6", "empty text"), ("g16", "empty text")]
    order = [r["id"] for r in rows]  # 3 records a chunk (batch_size 3): g0 ends the first, g16 the last
    assert order[:3] == ["g1", "g2", "g0"] and order[3:6] == ["g3", "g4", "gens:6"] and order[6:9] == [
        "g7", "g8", "g6"] and order[-2:] == ["g15", "g16"]
    assert len(rows) == 17 and sorted(r["id"] for r in rows if "latent_nll" in r) == sorted(
        f"g{i}" for i in range(17) if i not in (0, 5, 6, 16))
    for i in (1, 2):
        scored(tmp_path / f"p{i}.jsonl", shard=(i, 2))
    merge_shards([tmp_path / "p1.jsonl", tmp_path / "p2.jsonl"], tmp_path / "merged.jsonl")
    assert (tmp_path / "merged.jsonl").read_bytes() == (tmp_path / "serial.jsonl").read_bytes()


def test_the_command_lists_skipped_generations_and_a_failed_read_leaves_no_file(tmp_path, capsys,
                                                                               fixture_manpage_root):
    data = tmp_path / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp_path / "m"),
                 "--params", '{"delta": 0.1}']) == 0
    source = generations_with_empty_ones(tmp_path / "gens.jsonl")
    args = ["score", str(tmp_path / "m"), "--input", str(source)]
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "skipped 4: empty text" in printed.err
    assert [json.loads(line)["id"] for line in printed.out.splitlines() if '"read": false' in line] == [
        "g0", "gens:6", "g6", "g16"]
    assert main(args + ["--out", str(tmp_path / "s.jsonl")]) == 0
    assert (tmp_path / "s.jsonl").read_text() == printed.out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "# x\\ny"\n')  # torn first record
    capsys.readouterr()
    assert main(["score", str(tmp_path / "m"), "--input", str(bad), "--out", str(tmp_path / "t.jsonl")]) == 2
    assert f"{bad}:1" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("t.", ".t."))) == []


def test_the_collector_is_tuned_while_a_stream_is_scored_and_put_back_after(critic, docs):
    """Issue 40: the cyclic collector leaves what existed before the stream out of its collections and waits for
    more allocations while chunks stream (the same bytes; 1.5-1.9x less CPU over 200,000 man pages), and its
    settings are back once the stream ends or is left early."""
    import gc

    from critic.collector import STREAM_THRESHOLD as GC_THRESHOLD
    from critic.streaming import scored_chunks

    before = gc.get_threshold()
    assert before[0] != GC_THRESHOLD and gc.get_freeze_count() == 0
    seen = []
    for _ in scored_chunks(critic, docs[0], seed=7, batches_per_chunk=2):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
    assert len(seen) > 2 and set(seen) == {(GC_THRESHOLD, True)}
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    stream = scored_chunks(critic, docs[0], seed=7, batches_per_chunk=2)
    next(stream)
    stream.close()  # a stream left early (an error downstream, Ctrl-C) puts the collector back too
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_gzipped_input_read_here_gives_the_bytes_of_its_spans_read_apart(critic, tmp_path):
    """The two ways a chunk is read (documents here, cut by records; a plain file's span of lines, read by whoever
    scores it) cut the same chunks: a gzipped copy gives the plain file's bytes, skipped generations and all."""
    import gzip

    from critic.inputs import iter_documents, line_input

    plain = generations_with_empty_ones(tmp_path / "gens.jsonl")
    packed = tmp_path / "gz" / "gens.jsonl.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    lines = line_input(plain)
    assert lines is not None and line_input(packed) is None
    score_stream(critic, lines, tmp_path / "plain.out", source=plain, seed=7, batches_per_chunk=1)
    read = ReadReport(skipped_documents=[])
    score_stream(critic, iter_documents(packed, report=read), tmp_path / "gz.out", source=packed, seed=7,
                 batches_per_chunk=1, report=read)
    assert (tmp_path / "plain.out").read_bytes() == (tmp_path / "gz.out").read_bytes()
    assert json.loads(progress_path(tmp_path / "plain.out").read_text())["settings"]["records"] == "lines"


def duplicated(path: Path) -> Path:
    """20 one-section documents, the 10th with the 2nd's id."""
    docs = [Document(f"d{i if i != 9 else 1}", (Section("s", "x"),)) for i in range(20)]
    return write_jsonl(docs, path)


def test_an_id_read_twice_in_spans_read_apart_is_named_with_both_places(critic, tmp_path, monkeypatch):
    """Spans are read apart (and shards read only their own), yet a duplicate id is still found: when its chunk
    comes back (the chunks before it written), against what a resumed run wrote before, and when shards merge."""
    from critic import streaming
    from critic.inputs import line_input

    path = duplicated(tmp_path / "dup.jsonl")
    lines = line_input(path)
    out = tmp_path / "serial.jsonl"
    with pytest.raises(DocumentError, match=rf"^{path}:10: duplicate document id 'd1' \(first at {path}:2\)$"):
        score_stream(critic, lines, out, source=path, seed=7, batches_per_chunk=2)
    assert json.loads(progress_path(out).read_text())["read"] == 6  # chunk 0 (6 lines) written

    resumed, score_chunk = tmp_path / "resumed.jsonl", streaming.score_chunk

    def stopping(critic, chunk, **kw):
        if chunk.index == 1:
            raise KeyboardInterrupt
        return score_chunk(critic, chunk, **kw)

    monkeypatch.setattr(streaming, "score_chunk", stopping)
    with pytest.raises(KeyboardInterrupt):
        score_stream(critic, lines, resumed, source=path, seed=7, batches_per_chunk=2)
    monkeypatch.setattr(streaming, "score_chunk", score_chunk)
    with pytest.raises(DocumentError, match=rf"^{path}:10: duplicate document id 'd1' \(first at {resumed}, chunk 0\)"):
        score_stream(critic, lines, resumed, source=path, seed=7, batches_per_chunk=2)

    parts = [tmp_path / f"p{i}.jsonl" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        score_stream(critic, lines, part, source=path, seed=7, batches_per_chunk=2, shard=(i, 2))
    with pytest.raises(DocumentError, match=rf"^{parts[1]}, chunk 1: duplicate document id 'd1' \(first at "
                                            rf"{parts[0]}, chunk 0\)"):
        merge_shards(parts, tmp_path / "merged.jsonl")
    assert not (tmp_path / "merged.jsonl").exists()
