"""AR and NAR translators (paper app. C): the NAR's independence, training, sampling, folders, and code-mixing
in miniature: on a toy two-"language" task the NAR mixes languages within a sample and the AR does not."""

from __future__ import annotations

import math
import random

import pytest
import torch

from critic.lm.sampler import Warp, draw
from experiments.codemixing.models import encode, pad_batch, special_ids
from experiments.codemixing.translation import (KINDS, TranslationConfig, build_model, build_tokenizer,
                                                count_parameters, load_model, sample, sample_ids, samples_to_documents,
                                                save_model, train, train_and_sample)

EN = ["cat", "dog", "house", "tree", "sun", "moon", "water", "bread"]
DE = ["katze", "hund", "haus", "baum", "sonne", "mond", "wasser", "brot"]
FR = ["chat", "chien", "maison", "arbre", "soleil", "lune", "eau", "pain"]

TINY = dict(layers=2, heads=2, dim=64, ff=128, max_len=16, vocab_size=400)


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """English word sequences (3-5 words) translated word by word into German or French, 50/50, no tag."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 5))]
        target = DE if rng.random() < 0.5 else FR
        pairs.append((" ".join(EN[i] for i in words), " ".join(target[i] for i in words)))
    return pairs


def is_mixed(text: str) -> bool:
    words = set(text.split())
    return bool(words & set(DE)) and bool(words & set(FR))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine two threads of a tiny model mostly wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def toy_tokenizer():
    return build_tokenizer(toy_pairs(400, 0), TINY["vocab_size"])


def tiny_model(kind: str, tokenizer, **overrides):
    config = TranslationConfig(**{**TINY, "dropout": 0.0, **overrides})
    return build_model(kind, config, len(tokenizer), seed=3, **special_ids(tokenizer)).eval()


def toy_batch(tokenizer, pairs):
    src, src_pad = pad_batch(encode(tokenizer, [p[0] for p in pairs]), 0)
    tgt, tgt_pad = pad_batch(encode(tokenizer, [p[1] for p in pairs]), 0)
    return src, src_pad, tgt, tgt_pad


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """AR and NAR trained on the toy task (same config, same seed), with their samples of 120 test sources."""
    out = tmp_path_factory.mktemp("toy")
    config = TranslationConfig(**TINY, dropout=0.0, batch_size=32, learning_rate=3e-3, warmup_steps=20,
                               max_steps=400, eval_every=100, samples_per_source=1)
    sources = [s for s, _ in toy_pairs(120, 2)]
    runs = {}
    for kind in KINDS:
        result, docs = train_and_sample(toy_pairs(1000, 0), toy_pairs(50, 1), sources, out / kind, kind=kind,
                                        config=config, seed=0, log=lambda msg: None)
        runs[kind] = (result, docs, out / kind)
    return runs, sources, config


# --------------------------------------------------------------------------------------------- architecture
def test_default_config_parameter_counts_are_close():
    config = TranslationConfig()
    counts = {k: count_parameters(build_model(k, config, 4096, pad_id=0, bos_id=1, eos_id=2)) for k in KINDS}
    extra = config.dim * config.max_len + config.max_len       # the NAR's length head
    assert counts["nar"] - counts["ar"] == extra
    assert abs(counts["nar"] - counts["ar"]) / counts["ar"] < 0.05
    assert 5e6 < counts["ar"] < 8e6


def test_nar_logits_do_not_read_target_tokens_ar_logits_read_earlier_ones(toy_tokenizer):
    pairs = toy_pairs(4, 7)
    src, src_pad, tgt, tgt_pad = toy_batch(toy_tokenizer, pairs)
    k = 1
    other = tgt.clone()
    other[:, k] = torch.where(tgt[:, k] == 10, 11, 10)
    with torch.no_grad():
        for kind in KINDS:
            model = tiny_model(kind, toy_tokenizer)
            a, b = model.logits(src, src_pad, tgt, tgt_pad), model.logits(src, src_pad, other, tgt_pad)
            if kind == "nar":
                assert a.shape[1] == tgt.shape[1]
                assert torch.equal(a, b)                           # every position: independent of all targets
            else:
                assert a.shape[1] == tgt.shape[1] + 1              # + eos
                assert torch.allclose(a[:, :k + 1], b[:, :k + 1], atol=1e-6)   # reads only y_<t
                assert (a[:, k + 1:] - b[:, k + 1:]).abs().amax(-1).min() > 1e-4


def test_nar_decoder_is_non_causal_ar_decoder_is_causal(toy_tokenizer):
    src, src_pad, tgt, tgt_pad = toy_batch(toy_tokenizer, toy_pairs(3, 8))
    with torch.no_grad():
        for kind in KINDS:
            model = tiny_model(kind, toy_tokenizer)
            memory = model.encode(src, src_pad)
            if kind == "nar":
                inputs, pad = model.decoder_inputs(src, src_pad, tgt_pad), tgt_pad
            else:
                inputs = model.decoder_inputs(tgt)
                pad = torch.cat([torch.zeros_like(tgt_pad[:, :1]), tgt_pad], 1)
            bumped = inputs.clone()
            bumped[:, 2] += torch.randn(inputs.shape[-1], generator=torch.Generator().manual_seed(0))  # a real position
            a, b = model.decode(memory, src_pad, inputs, pad), model.decode(memory, src_pad, bumped, pad)
            first_two = (a[:, :2] - b[:, :2]).abs().amax()
            if kind == "nar":
                assert first_two > 1e-4                            # earlier positions see later ones
            else:
                assert first_two < 1e-6


def test_nar_copy_inputs_map_target_positions_uniformly_onto_the_source(toy_tokenizer):
    model = tiny_model("nar", toy_tokenizer)
    src = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    src_pad = src == 0
    tgt_pad = torch.tensor([[False] * 6, [False, False, True, True, True, True]])
    with torch.no_grad():
        got = model.decoder_inputs(src, src_pad, tgt_pad) - model.tgt_pos.weight[:6]
        want = model.embed(torch.tensor([[5, 5, 6, 6, 7, 7], [6, 8, 8, 8, 8, 8]]))
    assert torch.allclose(got[0], want[0]) and torch.allclose(got[1, :2], want[1, :2])
    positional = tiny_model("nar", toy_tokenizer, nar_input="position")
    with torch.no_grad():
        assert torch.equal(positional.decoder_inputs(src, src_pad, tgt_pad)[0], positional.tgt_pos.weight[:6])


def test_config_is_checked():
    with pytest.raises(ValueError, match="multiple of heads"):
        TranslationConfig(dim=30, heads=4).check()
    with pytest.raises(ValueError, match="nar_input"):
        TranslationConfig(nar_input="fertility").check()
    with pytest.raises(ValueError, match="unknown"):
        TranslationConfig.from_dict({"layer": 3})
    with pytest.raises(ValueError, match="kind"):
        build_model("rnn", TranslationConfig(), 400, pad_id=0, bos_id=1, eos_id=2)


# ------------------------------------------------------------------------------------------ folders, resume
def test_save_load_gives_identical_logits(tmp_path, toy_tokenizer):
    src, src_pad, tgt, tgt_pad = toy_batch(toy_tokenizer, toy_pairs(5, 9))
    for kind in KINDS:
        model = tiny_model(kind, toy_tokenizer)
        save_model(model, toy_tokenizer, tmp_path / kind)
        loaded, tokenizer = load_model(tmp_path / kind)
        assert type(loaded) is type(model) and loaded.config == model.config
        assert tokenizer.get_vocab() == toy_tokenizer.get_vocab()
        with torch.no_grad():
            assert torch.equal(model.logits(src, src_pad, tgt, tgt_pad), loaded.logits(src, src_pad, tgt, tgt_pad))
            if kind == "nar":
                memory = model.encode(src, src_pad)
                assert torch.equal(model.length_logits(memory, src_pad), loaded.length_logits(memory, src_pad))
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.bin"))


def test_killed_run_resumes_to_the_same_weights(tmp_path):
    config = TranslationConfig(**TINY, dropout=0.1, batch_size=16, warmup_steps=2, max_steps=6, eval_every=2)
    pairs, valid = toy_pairs(48, 0), toy_pairs(8, 1)

    class Kill(Exception):
        pass

    def kill_at_4(step):
        if step == 4:
            raise Kill

    for kind in KINDS:
        whole = train(kind, pairs, valid, tmp_path / f"{kind}-whole", config, seed=5, log=lambda m: None)
        with pytest.raises(Kill):
            train(kind, pairs, valid, tmp_path / f"{kind}-cut", config, seed=5, log=lambda m: None, callback=kill_at_4)
        logs = []
        resumed = train(kind, pairs, valid, tmp_path / f"{kind}-cut", config, seed=5, log=logs.append)
        assert any("resuming at step 4" in m for m in logs)
        assert resumed.steps == whole.steps == 6 and resumed.history == whole.history
        a, _ = load_model(tmp_path / f"{kind}-whole" / "checkpoint" / "model")
        b, _ = load_model(tmp_path / f"{kind}-cut" / "checkpoint" / "model")
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            assert torch.equal(x, y), name
    with pytest.raises(ValueError, match="other settings"):
        train("ar", pairs, valid, tmp_path / "ar-whole", config, seed=6, log=lambda m: None)


# ------------------------------------------------------------------------------------ training and sampling
def test_training_loss_decreases(trained):
    """Validation nats per prediction: from ~log V untrained to near the task's entropy, which is the language
    choice, log 2 per sentence: ~log 2 / (words + 1) for the AR, ~log 2 per word for the NAR."""
    runs, _, _ = trained
    for kind, (result, _, _) in runs.items():
        steps, valid = [h[0] for h in result.history], [h[2] for h in result.history]
        assert result.steps == 400 and steps == [0, 100, 200, 300, 400]
        assert valid[0] > 0.8 * math.log(400) and result.best_valid_loss < 0.2 * valid[0]
    assert 0.1 < runs["ar"][0].best_valid_loss < 0.3
    assert 0.4 < runs["nar"][0].best_valid_loss < 0.9
    assert runs["ar"][0].history[-1][2] < runs["nar"][0].history[-1][2]


def test_sampling_is_reproducible_and_seeded(trained):
    runs, sources, _ = trained
    for kind, (_, _, out) in runs.items():
        model, tokenizer = load_model(out / "best")
        a = sample(model, tokenizer, sources[:40], n=2, seed=1, batch_size=16)
        assert a == sample(model, tokenizer, sources[:40], n=2, seed=1, batch_size=16)
        assert a != sample(model, tokenizer, sources[:40], n=2, seed=2, batch_size=16)
        assert len(a) == 40 and all(len(s) == 2 for s in a)


def test_nar_samples_have_exactly_the_drawn_length(trained):
    runs, sources, _ = trained
    model, tokenizer = load_model(runs["nar"][2] / "best")
    ids = encode(tokenizer, sources[:32])
    drawn, finished = sample_ids(model, ids, torch.Generator().manual_seed(4))
    src, src_pad = pad_batch(ids, model.pad_id)
    with torch.no_grad():       # the length is the generator's first draw
        lengths = draw(model.length_logits(model.encode(src, src_pad), src_pad),
                       torch.Generator().manual_seed(4), Warp()) + 1
    assert [len(d) for d in drawn] == lengths.tolist() and all(finished)
    specials = set(special_ids(tokenizer).values())
    assert not any(set(d) & specials for d in drawn)
    # the NAR learned the length: one word per source word (each toy word is one token)
    assert sum(n == len(s.split()) for n, s in zip(lengths.tolist(), sources)) >= 28


def test_ar_samples_end_with_eos(trained):
    runs, sources, _ = trained
    model, tokenizer = load_model(runs["ar"][2] / "best")
    drawn, finished = sample_ids(model, encode(tokenizer, sources[:32]), torch.Generator().manual_seed(4))
    assert all(finished) and all(len(d) <= model.config.max_len for d in drawn)
    assert sum(len(d) > 0 for d in drawn) >= 28        # an early eos is possible (p ~ 0.03 at this training)


def test_nar_samples_mix_languages_ar_samples_do_not(trained):
    """App. C in miniature: each sentence is all German or all French; independent positions mix them."""
    runs, sources, _ = trained
    mixed = {kind: sum(is_mixed(d.text) for d in docs) / len(docs) for kind, (_, docs, _) in runs.items()}
    print(f"mixed fraction: {mixed}")
    assert mixed["ar"] <= 0.1
    assert mixed["nar"] >= 0.4
    assert mixed["nar"] - mixed["ar"] >= 0.3


def test_samples_are_documents_and_a_rerun_reuses_them(trained):
    runs, sources, config = trained
    result, docs, out = runs["nar"]
    assert len(docs) == len(sources) * config.samples_per_source
    first = docs[0]
    assert first.id == "nar-0-0" and len(first.sections) == 1 and first.text
    assert first.metadata == {"source": sources[0], "model": "nar", "source_index": 0, "sample": 0}
    logs = []
    again, docs_again = train_and_sample(toy_pairs(1000, 0), toy_pairs(50, 1), sources, out, kind="nar", config=config,
                                         seed=0, log=logs.append)
    assert docs_again == docs and again.history == result.history
    assert any("up to date" in m for m in logs)
    multi = samples_to_documents(["a", "b"], [["x", "y"], ["z", "w"]], kind="ar", prefix="run1")
    assert [d.id for d in multi] == ["run1-0-0", "run1-0-1", "run1-1-0", "run1-1-1"]
    with pytest.raises(ValueError):
        samples_to_documents(["a"], [], kind="ar")
