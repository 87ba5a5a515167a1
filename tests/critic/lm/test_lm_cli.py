"""``critic lm finetune | sample | ppl`` end to end on a tiny model, and bad input as exit status 2."""

from __future__ import annotations

import json

import pytest

from critic.cli import main
from critic.document import write_jsonl

TINY = ["--model", "tiny", "--tiny-vocab", "300", "--tiny-layers", "1", "--tiny-heads", "2", "--tiny-dim", "16",
        "--tiny-positions", "32"]


@pytest.fixture
def splits(manpage_docs, tmp_path):
    write_jsonl(manpage_docs[:3], tmp_path / "train.jsonl")
    write_jsonl(manpage_docs[20:21], tmp_path / "valid.jsonl")
    return tmp_path


def test_finetune_sample_ppl_end_to_end(splits, capsys):
    t = splits
    args = ["lm", "finetune", *TINY, "--train", str(t / "train.jsonl"), "--valid", str(t / "valid.jsonl"),
            "--format", "without-titles", "--end-of-document", "<|doc|>", "--section-marker", "<|part|>",
            "--start-of-document", "<|start|>", "--out", str(t / "run"), "--epochs", "1",
            "--lr", "1e-2", "--quiet"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "best validation loss" in first
    fmt = json.loads((t / "run" / "best" / "format.json").read_text())
    assert fmt["end_of_document"] == "<|doc|>" and fmt["section_marker"] == "<|part|>"
    assert fmt["start_of_document"] == "<|start|>"
    assert main(args) == 0                                     # finished: the rerun does nothing
    assert capsys.readouterr().out == first

    assert main(["lm", "sample", "--model", str(t / "run" / "best"), "--n", "3", "--batch-size", "2",
                 "--max-new-tokens", "12", "--out", str(t / "samples"), "--quiet"]) == 0
    counts = json.loads(capsys.readouterr().out.splitlines()[0])
    assert counts["requested"] == counts["written"] == 3
    assert counts["parsed"] + sum(counts["failures"].values()) == 3
    assert (t / "samples" / "documents.jsonl").is_file()
    written = (t / "samples" / "documents.jsonl").read_bytes()
    sample = ["lm", "sample", "--model", str(t / "run" / "best"), "--n", "3", "--batch-size", "2",
              "--max-new-tokens", "12", "--out", str(t / "samples"), "--quiet"]
    assert main(sample) == 0  # finished: says so, writes nothing
    assert "finished before: nothing to do for" in capsys.readouterr().out.splitlines()[1]
    (t / "samples" / "documents.jsonl").unlink()  # removed: made again from the log, and said so
    assert main(sample) == 0 and capsys.readouterr().out.splitlines()[1].startswith("wrote ")
    assert (t / "samples" / "documents.jsonl").read_bytes() == written

    assert main(["lm", "ppl", "--model", str(t / "run" / "best"), "--docs", str(t / "valid.jsonl"), "--json",
                 "--quiet"]) == 0
    ppl = json.loads(capsys.readouterr().out)
    assert ppl["n_documents"] == 1 and ppl["context"] == 32 and 1 < ppl["token_ppl"] < 300
    assert ppl["word_ppl"] > ppl["token_ppl"]                  # fewer words than tokens
    # the same document brought as free text (one untitled section, as the W/O Title format renders it)
    doc = json.loads((t / "valid.jsonl").read_text())
    (t / "valid-text.jsonl").write_text(json.dumps({"text": "\n\n".join(s["text"] for s in doc["sections"])}) + "\n")
    assert main(["lm", "ppl", "--model", str(t / "run" / "best"), "--docs", str(t / "valid-text.jsonl"),
                 "--sections", "separator:\n\n", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out) == ppl


@pytest.mark.parametrize("argv, message", [
    (["lm", "finetune", "--model", "tiny", "--tiny-heads", "3", "--tiny-dim", "16", "--train", "{t}/train.jsonl",
      "--valid", "{t}/valid.jsonl", "--format", "with-titles", "--out", "{t}/run"],
     "--tiny-heads 3 does not divide --tiny-dim 16"),
    (["lm", "finetune", *TINY, "--train", "{t}/missing.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--out", "{t}/run"], "missing.jsonl: no such file"),
    (["lm", "finetune", "--model", "smollm2", "--tiny-dim", "8", "--train", "{t}/train.jsonl", "--valid",
      "{t}/valid.jsonl", "--format", "with-titles", "--out", "{t}/run"], "--tiny-* options size the 'tiny' model"),
    (["lm", "finetune", "--model", "{t}/no/such/model", "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl",
      "--format", "with-titles", "--out", "{t}/run"], "no/such/model: no such model folder"),
    (["lm", "finetune", *TINY, "--train", "{t}/bad.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--out", "{t}/run"], "bad.jsonl:2: invalid JSON"),
    (["lm", "finetune", *TINY, "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--end-of-document", "<|section|>", "--out", "{t}/run"], "must not contain one another"),
    (["lm", "finetune", *TINY, "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--section-marker", "<|endofdoc|>", "--out", "{t}/run"], "must not contain one another"),
    (["lm", "finetune", *TINY, "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--start-of-document", "<|endofdoc|>", "--out", "{t}/run"],
     "end_of_document '<|endofdoc|>' and start_of_document '<|endofdoc|>' must not contain one another"),
    (["lm", "finetune", *TINY, "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--section-marker", " <x>", "--out", "{t}/run"],
     "section_marker must be a non-empty string without surrounding spaces"),
    (["lm", "finetune", *TINY, "--train", "{t}/train.jsonl", "--valid", "{t}/valid.jsonl", "--format",
      "with-titles", "--end-of-document", "", "--out", "{t}/run"],
     "--end-of-document: end_of_document must be a non-empty string"),  # was silently the default
    (["lm", "sample", "--model", "{t}", "--n", "2", "--out", "{t}/s"], "no format.json"),
    (["lm", "sample", "--model", "{t}/nowhere", "--n", "2", "--out", "{t}/s"], "nowhere: no such model folder"),
    (["lm", "sample", "--model", "{t}", "--n", "2", "--out", "{t}/s", "--top-p", "2"], "top_p must be in (0, 1]"),
    (["lm", "ppl", "--model", "{t}", "--docs", "{t}/valid.jsonl", "--device", "cuda:7"], "device 'cuda:7'"),
    (["lm", "sample", "--model", "{t}", "--n", "0", "--out", "{t}/s"], "must be an integer >= 1"),
])
def test_bad_input_is_one_line_and_status_2(splits, capsys, argv, message):
    (splits / "bad.jsonl").write_text((splits / "train.jsonl").read_text().splitlines()[0] + "\n{oops\n")
    assert main([a.replace("{t}", str(splits)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("finetuning", [False, True])
def test_a_second_run_into_the_same_folder_stops_before_any_work(finetuning, splits, tmp_path, capsys):
    import os

    from critic.io import output_lock

    command = (["finetune", *TINY, "--train", str(splits / "train.jsonl"), "--valid", str(splits / "valid.jsonl"),
                "--format", "with-titles"] if finetuning else ["sample", "--model", "nowhere", "--n", "2"])
    out = tmp_path / "out"
    with output_lock(out):  # the first run, still going
        capsys.readouterr()
        assert main(["lm", *command, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out}: another run (process {os.getpid()}) is writing it" in err and "Traceback" not in err
    assert not out.exists()
