"""Nothing silent, nothing half-left: non-finite numbers, damaged model folders and absurd budgets are one
``critic: error:`` line (status 2) naming what, where and why, before anything is written."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from critic.cli import main
from critic.document import write_jsonl
from critic.lm.budget import ResourceError, require_memory, sampling_memory
from critic.lm.finetune import FinetuneConfig, finetune
from critic.lm.finite import NonFiniteError, check_finite
from critic.lm.format import DocumentFormat
from critic.lm.model import prepare_for_format, save_model_dir
from critic.lm.sampler import Warp, draw

FMT = DocumentFormat(True)
TINY = ["--model", "tiny", "--tiny-vocab", "300", "--tiny-layers", "1", "--tiny-heads", "2", "--tiny-dim", "16",
        "--tiny-positions", "32"]


def _run(argv, capsys) -> tuple[int, str]:
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


@pytest.fixture
def docs(manpage_docs, tmp_path):
    write_jsonl(manpage_docs[:2], tmp_path / "docs.jsonl")
    return tmp_path / "docs.jsonl"


@pytest.fixture
def make_model_dir(tiny_pair, tmp_path):
    """A factory of fine-tuned-style model folders (a random tiny GPT-2, window 16), ``damage(model)`` applied
    to the weights before saving."""
    def make(name="model", damage=None):
        model, tok = tiny_pair(n_positions=16)
        prepare_for_format(model, tok, FMT)
        if damage is not None:
            with torch.no_grad():
                damage(model)
        return save_model_dir(model.eval(), tok, FMT, tmp_path / name, training={"context": 16})
    return make


def _nan_weight(model):
    model.transformer.h[0].mlp.c_fc.weight[3, 5] = float("nan")


def _overflow(model):
    """Finite weights whose outputs are not: the final layer norm scales to the top of float32."""
    model.transformer.ln_f.weight.fill_(3e38)


# ------------------------------------------------------------------ non-finite numbers
def test_check_finite_names_what_where_and_the_fix():
    assert check_finite(1.5, "x") == 1.5
    t = torch.tensor([1.0, 2.0])
    assert check_finite(t, "x") is t
    with pytest.raises(NonFiniteError, match=r"^finetune: the loss is nan at step 37, lr 0\.5: lower --lr$"):
        check_finite(float("nan"), "finetune: the loss", fix="lower --lr", step=37, lr=0.5)
    with pytest.raises(NonFiniteError, match=r"^w holds 1 nan and 2 infinite of 4 values at batch 3$"):
        check_finite(torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0]), "w", batch=3)
    with pytest.raises(ValueError, match="is inf"):  # a ValueError: the command line's exit status 2
        check_finite(torch.tensor(float("inf")), "y")


def test_nan_weights_are_an_error_naming_the_folder_for_ppl_and_sample(make_model_dir, docs, tmp_path, capsys):
    model_dir = make_model_dir(damage=_nan_weight)
    status, err = _run(["lm", "ppl", "--model", model_dir, "--docs", docs, "--quiet"], capsys)
    assert status == 2 and "word PPL" not in err
    assert f"{model_dir}: weight transformer.h.0.mlp.c_fc.weight holds 1 nan of" in err
    status, err = _run(["lm", "sample", "--model", model_dir, "--n", "2", "--max-new-tokens", "8", "--out",
                        tmp_path / "s", "--quiet"], capsys)
    assert status == 2 and "transformer.h.0.mlp.c_fc.weight holds 1 nan" in err
    assert not (tmp_path / "s" / "documents.jsonl").exists()
    assert not (tmp_path / "s" / "generations.jsonl").exists() or not (tmp_path / "s" / "generations.jsonl").read_text()


def test_non_finite_outputs_of_finite_weights_are_caught_in_ppl_and_sample(make_model_dir, docs, tmp_path, capsys):
    model_dir = make_model_dir(damage=_overflow)
    status, err = _run(["lm", "ppl", "--model", model_dir, "--docs", docs, "--json", "--quiet"], capsys)
    assert status == 2 and capsys.readouterr().out == ""
    assert f"{model_dir}: the total NLL of the documents is nan" in err
    assert "the model gives non-finite log-probabilities: are its weights damaged?" in err
    status, err = _run(["lm", "sample", "--model", model_dir, "--n", "3", "--batch-size", "2", "--max-new-tokens",
                        "8", "--out", tmp_path / "s", "--quiet"], capsys)
    assert status == 2
    assert f"{model_dir}: the largest next-token logit of each row holds" in err and "at batch 0, step 1" in err
    assert not (tmp_path / "s" / "documents.jsonl").exists()
    log = tmp_path / "s" / "generations.jsonl"
    assert not log.exists() or log.read_text() == ""                        # no sample was written


def test_draw_refuses_non_finite_logits_and_warped_probabilities():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 10)
    logits[1, 4] = float("nan")
    with pytest.raises(NonFiniteError, match=r"m: the largest next-token logit of each row holds 1 nan of 2 values "
                                             r"at step 9: the model gives non-finite logits"):
        draw(logits, gen, Warp(), what="m", where={"step": 9})
    ok = torch.randn(2, 10)
    ok[:, 3] = -float("inf")                          # a token masked by the model is fine
    assert draw(ok, gen, Warp()).tolist() != [3, 3]
    with pytest.raises(NonFiniteError, match="total of the next-token probabilities holds 2 nan.*raise the temperature"):
        draw(ok * 1e4, gen, Warp(temperature=1e-40))


def test_finetune_stops_at_the_step_whose_loss_is_not_finite(splits, capsys):
    t = splits
    args = ["lm", "finetune", *TINY, "--train", t / "train.jsonl", "--valid", t / "valid.jsonl", "--format",
            "without-titles", "--out", t / "run", "--epochs", "2", "--lr", "1e10", "--schedule", "constant", "--quiet"]
    status, err = _run(args, capsys)
    assert status == 2
    assert "finetune: the training loss is nan at step 2, lr 1e+10: lower --lr (it is 1e+10)" in err
    assert not (t / "run" / "best").exists() and not (t / "run" / "result.json").exists()


def test_finetune_of_a_model_with_a_nan_weight_stops_at_step_1(tiny_pair, manpage_docs, tmp_path):
    model, tok = tiny_pair(n_positions=16)
    with torch.no_grad():
        _nan_weight(model)
    with pytest.raises(NonFiniteError, match=r"training loss is nan at step 1, lr 5e-05: the model gives non-finite "
                                             r"values before any update: are its weights damaged\?"):
        finetune((model, tok), None, manpage_docs[:2], manpage_docs[2:3], FMT, tmp_path / "run",
                 FinetuneConfig(epochs=1), progress=False)
    assert not (tmp_path / "run" / "best").exists()


# ------------------------------------------------------------------ damaged model folders
def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


DAMAGE = {
    "config.json missing": ("config.json", lambda p: p.unlink(), "not a model folder (config.json is missing)"),
    "config.json not JSON": ("config.json", lambda p: p.write_text("{oops"), "config.json is not valid JSON"),
    "model.safetensors truncated": ("model.safetensors", _truncate, "model.safetensors is truncated ("),
    "model.safetensors header only": ("model.safetensors", lambda p: _truncate(p, 0.0001),
                                      "model.safetensors is truncated"),
    "model.safetensors not one": ("model.safetensors", lambda p: p.write_bytes(b"not a tensor file at all"),
                                  "model.safetensors is not a safetensors file"),
    "model.safetensors missing": ("model.safetensors", lambda p: p.unlink(), "model.safetensors is missing"),
    "tokenizer.json empty": ("tokenizer.json", lambda p: p.write_text(""), "tokenizer.json is empty"),
    "tokenizer.json truncated": ("tokenizer.json", _truncate, "tokenizer.json is not valid JSON (truncated?)"),
    "tokenizer.json wrong": ("tokenizer.json", lambda p: p.write_text('{"a": 1}'),
                             "cannot load the tokenizer from tokenizer.json"),
    "format.json not JSON": ("format.json", lambda p: p.write_text("{oops"), "format.json is not valid JSON"),
    "format.json missing": ("format.json", lambda p: p.unlink(), "no format.json"),
    "training.json a list": ("training.json", lambda p: p.write_text("[1]"), "training.json is not a JSON object"),
    "training.json bad context": ("training.json", lambda p: p.write_text('{"context": "x"}'),
                                  "training.json has 'context' 'x'"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["ppl", "sample"])
def test_a_damaged_model_folder_is_one_error_naming_folder_and_file(make_model_dir, docs, tmp_path, capsys,
                                                                    case, command):
    name, damage, message = DAMAGE[case]
    model_dir = make_model_dir()
    damage(model_dir / name)
    argv = (["lm", "ppl", "--model", model_dir, "--docs", docs, "--quiet"] if command == "ppl" else
            ["lm", "sample", "--model", model_dir, "--n", "2", "--max-new-tokens", "4", "--out", tmp_path / "s",
             "--quiet"])
    status, err = _run(argv, capsys)
    assert status == 2
    assert err.startswith(f"critic: error: {model_dir}") and message in err and err.count("\n") == 1, err
    if case != "tokenizer.json wrong":     # found by the checks before anything is written
        assert not (tmp_path / "s").exists()
    else:                                   # found by transformers, after the output folder is claimed
        assert not (tmp_path / "s" / "generations.jsonl").exists()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, manpage_docs):
    """A tiny fine-tuning run finished by the command line, and its arguments (``{out}`` to fill in)."""
    t = tmp_path_factory.mktemp("ft")
    write_jsonl(manpage_docs[:2], t / "train.jsonl")
    write_jsonl(manpage_docs[20:21], t / "valid.jsonl")
    args = ["lm", "finetune", *TINY, "--train", t / "train.jsonl", "--valid", t / "valid.jsonl", "--format",
            "without-titles", "--out", "{out}", "--epochs", "1", "--quiet"]
    assert main([str(t / "run") if a == "{out}" else str(a) for a in args]) == 0
    return t / "run", args


CHECKPOINT_DAMAGE = {
    "undamaged": (None, None, None),
    "trainer.pt truncated": ("checkpoint/trainer.pt", _truncate, "trainer.pt is truncated"),
    "trainer.pt empty": ("checkpoint/trainer.pt", lambda p: p.write_bytes(b""), "trainer.pt is empty"),
    "trainer.pt not torch": ("checkpoint/trainer.pt", lambda p: p.write_text("hello"),
                             "trainer.pt is not a file written by torch.save"),
    "state.json truncated": ("checkpoint/state.json", _truncate, "state.json is not valid JSON"),
    "state.json no step": ("checkpoint/state.json",
                           lambda p: p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items()
                                                              if k != "step"})), "state.json has no 'step'"),
    "model weights truncated": ("checkpoint/model/model.safetensors", _truncate, "model.safetensors is truncated"),
    "model tokenizer empty": ("checkpoint/model/tokenizer.json", lambda p: p.write_text(""),
                              "tokenizer.json is empty"),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_DAMAGE))
def test_a_damaged_checkpoint_is_one_error_naming_folder_and_file(finished_run, tmp_path, capsys, case):
    """A run killed after its last checkpoint (no result.json) resumes from it; damaged, it is refused."""
    run, args = finished_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "result.json").unlink()
    name, damage, message = CHECKPOINT_DAMAGE[case]
    if damage is not None:
        damage(out / name)
    status, err = _run([str(out) if a == "{out}" else a for a in args], capsys)
    if damage is None:
        assert status == 0 and (out / "result.json").is_file()
        return
    folder = (out / name).parent
    assert status == 2 and err.startswith(f"critic: error: {folder}: ") and message in err, err
    assert "EOFError" not in err and not (out / "result.json").exists()


@pytest.fixture
def splits(manpage_docs, tmp_path):
    write_jsonl(manpage_docs[:3], tmp_path / "train.jsonl")
    write_jsonl(manpage_docs[20:21], tmp_path / "valid.jsonl")
    return tmp_path


# ------------------------------------------------------------------ resources bounded up front
def test_sampling_an_absurd_budget_is_refused_at_once_with_the_estimate(make_model_dir, tmp_path, capsys):
    model_dir = make_model_dir()
    start = time.perf_counter()
    status, err = _run(["lm", "sample", "--model", model_dir, "--n", "100", "--batch-size", "32",
                        "--max-new-tokens", str(10 ** 12), "--out", tmp_path / "s", "--quiet"], capsys)
    assert time.perf_counter() - start < 5
    assert status == 2 and not (tmp_path / "s").exists()
    assert f"{model_dir}: sampling needs about " in err and "for batch 32 x 1,000,000,000,000 new tokens" in err
    assert "token buffer 233 TiB" in err and "this machine has" in err and "lower --max-new-tokens" in err


def test_the_sampling_estimate_follows_the_config(tmp_path):
    llama = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
             "intermediate_size": 1536, "vocab_size": 49152, "dtype": "bfloat16"}
    on_device, on_host = sampling_memory(tmp_path, llama, rows=32, max_new_tokens=4096, window=8192)
    assert on_device["token buffer"] == 32 * 4097 * 8
    assert on_device["KV cache"] == 2 * 30 * 32 * 3 * 64 * 4096 * 2          # K and V, layers, rows, kv heads, ...
    assert on_device["forward pass"] == 2 * 32 * 1 * 1536 * 2 + 4 * 32 * 49152 * 4  # one token a step: in the window
    longer, _ = sampling_memory(tmp_path, llama, rows=32, max_new_tokens=20000, window=8192)
    assert longer["KV cache"] == 2 * 30 * 32 * 3 * 64 * 8191 * 2             # the cache stops at the window
    assert on_host["token ids"] == 32 * 4096 * 36
    need = sum(on_device.values()) + sum(on_host.values())
    assert require_memory("x", on_device, on_host, device=torch.device("cpu"), fix="f", have_host=need) == need
    with pytest.raises(ResourceError, match=r"^x needs about 2\.8 GiB \(KV cache 2\.8 GiB, forward pass 24 MiB, .*\); this machine has "
                                            r"1\.0 GiB of memory: f$"):
        require_memory("x", on_device, on_host, device=torch.device("cpu"), fix="f", have_host=2 ** 30)


def test_perplexity_and_finetune_check_their_batches_against_the_memory(make_model_dir, docs, splits, capsys,
                                                                      monkeypatch):
    model_dir = make_model_dir()
    import critic.lm.budget as budget

    monkeypatch.setattr(budget, "machine_memory", lambda: 100_000)   # a machine of 100 kB
    status, err = _run(["lm", "ppl", "--model", model_dir, "--docs", docs, "--batch-size", "4", "--quiet"], capsys)
    assert status == 2 and f"{model_dir}: perplexity needs about " in err
    assert "for batches of 4 windows of 16 tokens (logits " in err and "lower --batch-size" in err
    status, err = _run(["lm", "finetune", *TINY, "--train", splits / "train.jsonl", "--valid", splits / "valid.jsonl",
                        "--format", "without-titles", "--out", splits / "run", "--quiet"], capsys)
    assert status == 2 and "finetune needs about " in err and "gradients and optimizer state" in err
    assert not (splits / "run" / "best").exists()
