"""Fine-tuning: windows, learning, exact resume after a kill, the best/ folder, reruns and budgets."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from critic.lm.finetune import FinetuneConfig, finetune
from critic.lm.format import DocumentFormat
from critic.lm.model import load_lm, prepare_for_format
from critic.lm.windows import IGNORE, aligned_windows, cut_windows, token_stream, window_nll

FMT = DocumentFormat(True)
CONFIG = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=2, context=32, eval_every=5)


class Interrupt(Exception):
    pass


def test_windows_predict_every_token_once():
    stream = torch.arange(10, 21)                                      # N = 11
    inputs, labels = cut_windows(stream, 4, pad_id=-1)
    assert inputs.tolist() == [[10, 11, 12, 13], [13, 14, 15, 16], [16, 17, 18, 19], [19, 20, -1, -1]]
    targets = labels[:, 1:][labels[:, 1:] != IGNORE]
    assert targets.tolist() == list(range(11, 21))                      # s_1 .. s_{N-1}, each once
    assert labels[3].tolist() == [19, 20, IGNORE, IGNORE]
    inputs, _ = cut_windows(torch.arange(7), 4, pad_id=0)               # (N - 1) divisible by W - 1
    assert inputs.tolist() == [[0, 1, 2, 3], [3, 4, 5, 6]]


def test_stream_starts_with_the_end_token_and_joins_rendered_documents(tiny_pair, manpage_docs):
    _, tok = tiny_pair()
    end = tok.convert_tokens_to_ids(FMT.end_of_document)
    stream = token_stream(manpage_docs[:2], tok, FMT, end)
    assert stream[0] == end and (stream == end).sum() == 3
    text = tok.decode(stream.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert text == FMT.end_of_document + FMT.render(manpage_docs[0]) + FMT.render(manpage_docs[1])


def test_finetune_learns_and_best_reloads(tiny_pair, manpage_docs, tmp_path):
    model, tok = tiny_pair()
    train, valid = manpage_docs[:4], manpage_docs[20:22]
    prepare_for_format(model, tok, FMT)
    end = tok.convert_tokens_to_ids(FMT.end_of_document)
    x, y = aligned_windows(token_stream(valid, tok, FMT, end), 32, tok.pad_token_id, end)
    nll, count = window_nll(model, x, y, batch_size=8, device=torch.device("cpu"))
    before = nll / count
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    result = finetune((model, tok), None, train, valid, FMT, tmp_path / "run", CONFIG, progress=False)
    assert result.aligned and CONFIG.aligned                            # document-aligned windows by default
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())   # a copy was trained
    assert finetune((model, tok), None, train, valid, FMT, tmp_path / "run", CONFIG, progress=False) == result
    assert result.best_valid_loss < before - 0.5                        # ln(400) = 6.0 nats at start
    assert result.best_valid_loss == min(v for _, _, v in result.history)
    assert result.history[-1][0] == result.steps and result.tokens_seen > 0 and result.context == 32
    best = result.best_dir
    assert json.loads((best / "format.json").read_text())["with_titles"] is True
    training = json.loads((best / "training.json").read_text())
    assert training["context"] == 32 and training["best_valid_loss"] == result.best_valid_loss
    assert training["best_step"] == result.best_step and training["aligned"] is True
    model2, tok2 = load_lm(str(best))
    nll2, count2 = window_nll(model2, x, y, batch_size=8, device=torch.device("cpu"))
    assert count2 == count and nll2 / count2 == pytest.approx(result.best_valid_loss, rel=1e-6)
    assert len(tok2) == len(tok)


def test_stream_windows_train_on_the_same_targets_in_fewer_windows(tiny_pair, manpage_docs, tmp_path):
    model, tok = tiny_pair()
    train, valid = manpage_docs[:4], manpage_docs[20:22]
    prepare_for_format(model, tok, FMT)
    end = tok.convert_tokens_to_ids(FMT.end_of_document)
    config = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32, aligned=False)
    result = finetune((model, tok), None, train, valid, FMT, tmp_path / "stream", config, progress=False)
    aligned = finetune((model, tok), None, train, valid, FMT, tmp_path / "aligned",
                       FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32), progress=False)
    assert not result.aligned and aligned.aligned
    assert result.tokens_seen == aligned.tokens_seen                   # one epoch: every target once, both ways
    stream_training = json.loads((result.best_dir / "training.json").read_text())
    aligned_training = json.loads((aligned.best_dir / "training.json").read_text())
    assert stream_training["aligned"] is False
    assert stream_training["train_windows"] < aligned_training["train_windows"]          # no padding
    x, y = cut_windows(token_stream(valid, tok, FMT, end), 32, tok.pad_token_id)        # validated on the stream
    nll, count = window_nll(load_lm(str(result.best_dir))[0], x, y, batch_size=8, device=torch.device("cpu"))
    assert nll / count == pytest.approx(result.best_valid_loss, rel=1e-6)
    with pytest.raises(ValueError, match=r"stream: holds a fine-tuning run with other settings \(config"):
        finetune((model, tok), None, train, valid, FMT, tmp_path / "stream",
                 FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32), progress=False)
    with pytest.raises(ValueError, match="aligned must be true or false"):
        FinetuneConfig(aligned="no").check()


def test_a_start_token_is_given_to_every_document_and_never_trained_on(tiny_pair, manpage_docs, tmp_path):
    train, valid = manpage_docs[:4], manpage_docs[20:22]
    config = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32)
    fmt = DocumentFormat(True, start_of_document="<|startofdoc|>")
    plain = finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "plain", config, progress=False)
    started = finetune(tiny_pair(), None, train, valid, fmt, tmp_path / "start", config, progress=False)
    assert started.tokens_seen == plain.tokens_seen                    # the same targets: the start token is none
    training = json.loads((started.best_dir / "training.json").read_text())
    assert training["settings"]["format"]["start_of_document"] == "<|startofdoc|>"
    model, tok = load_lm(str(started.best_dir))
    end, start = (tok.convert_tokens_to_ids(t) for t in fmt.prompt_tokens)
    x, y = aligned_windows(token_stream(valid, tok, fmt, end), 32, tok.pad_token_id, end, start_id=start)
    nll, count = window_nll(model, x, y, batch_size=8, device=torch.device("cpu"))
    assert nll / count == pytest.approx(started.best_valid_loss, rel=1e-6)   # validated after e, b


def test_killed_run_resumes_to_the_uninterrupted_weights(tiny_pair, manpage_docs, tmp_path):
    train, valid = manpage_docs[:4], manpage_docs[20:21]
    clean = finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "clean", CONFIG, progress=False)
    steps_seen = []

    def kill_at_7(step):                    # checkpoints at 5, 10, ...: steps 6-7 are redone on resume
        steps_seen.append(step)
        if step == 7:
            raise Interrupt

    with pytest.raises(Interrupt):
        finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "killed", CONFIG, progress=False,
                 callback=kill_at_7)
    assert json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["step"] == 5
    resumed = finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "killed", CONFIG, progress=False,
                       callback=steps_seen.append)
    assert steps_seen[:7] == list(range(1, 8)) and steps_seen[7] == 6      # resumed after step 5
    assert resumed.history == clean.history and resumed.steps == clean.steps
    assert resumed.tokens_seen == clean.tokens_seen and resumed.best_valid_loss == clean.best_valid_loss
    for folder in ("checkpoint/model", "best"):
        a = load_file(tmp_path / "clean" / folder / "model.safetensors")
        b = load_file(tmp_path / "killed" / folder / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), folder
    # a finished run rerun does nothing and returns the same result
    mtime = (tmp_path / "killed" / "best" / "model.safetensors").stat().st_mtime_ns
    again = finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "killed", CONFIG, progress=False,
                     callback=lambda step: pytest.fail("a finished run took a step"))
    assert again == resumed
    assert (tmp_path / "killed" / "best" / "model.safetensors").stat().st_mtime_ns == mtime


def test_other_settings_or_foreign_folders_are_refused(tiny_pair, manpage_docs, tmp_path):
    train, valid = manpage_docs[:2], manpage_docs[20:21]
    config = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32, max_tokens=200)
    result = finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "run", config, progress=False)
    assert 200 <= result.tokens_seen < 200 + 4 * 31                    # the budget stops it mid-epoch
    assert result.history[-1][0] == result.steps                       # and validates at the end
    with pytest.raises(ValueError, match=r"run: holds a fine-tuning run with other settings \(config"):
        finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "run",
                 FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=2, context=32, max_tokens=200),
                 progress=False)
    with pytest.raises(ValueError, match="format"):
        finetune(tiny_pair(), None, train, valid, DocumentFormat(False), tmp_path / "run", config, progress=False)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="foreign: exists and is not an LM run folder; refusing to write into it: "
                                         "it holds notes.txt"):
        finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "foreign", config, progress=False)
    with pytest.raises(ValueError, match="exceeds the model's window"):
        finetune(tiny_pair(n_positions=16), None, train, valid, FMT, tmp_path / "wide", config, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        finetune(tiny_pair(), None, train, valid, FMT, tmp_path / "bad", FinetuneConfig(batch_size=0))


def test_bf16_autocast_trains(tiny_pair, manpage_docs, tmp_path):
    config = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=1, context=32, max_tokens=150, bf16=True)
    result = finetune(tiny_pair(), None, manpage_docs[:2], manpage_docs[20:21], FMT, tmp_path / "run", config,
                      progress=False)
    assert 0 < result.best_valid_loss < 10 and result.tokens_seen >= 150


def test_cli_stream_windows_flag(manpage_docs, tmp_path, capsys):
    from critic.cli import main
    from critic.document import write_jsonl

    write_jsonl(manpage_docs[:2], tmp_path / "train.jsonl")
    write_jsonl(manpage_docs[20:21], tmp_path / "valid.jsonl")
    common = ["lm", "finetune", "--model", "tiny", "--tiny-vocab", "300", "--tiny-layers", "1", "--tiny-heads", "2",
              "--tiny-dim", "16", "--tiny-positions", "32", "--train", str(tmp_path / "train.jsonl"), "--valid",
              str(tmp_path / "valid.jsonl"), "--format", "without-titles", "--epochs", "1", "--quiet"]
    for flags, aligned in (([], True), (["--stream-windows"], False)):
        out = tmp_path / f"run-{aligned}"
        assert main([*common, "--out", str(out), *flags]) == 0
        assert json.loads((out / "result.json").read_text())["aligned"] is aligned
        assert json.loads((out / "settings.json").read_text())["config"]["aligned"] is aligned
    capsys.readouterr()
