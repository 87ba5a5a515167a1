"""Section classifiers: calibration, normalised rows, persistence without pickle, the encoder paths."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from critics.sections.classifier import (EncoderClassifier, SectionClassifier, TfidfClassifier, bf16_supported,
                                         fit_temperature, load_classifier, make_classifier)

TOPICS = {
    0: "file descriptor open read write close path directory",
    1: "signal handler mask interrupt process kill",
    2: "memory page map allocate heap stack",
    3: "socket network address port connect bind",
}
COMMON = "the a of and to in is it for with on".split()


def noisy_corpus(n: int, seed: int, noise: float = 0.35) -> tuple[list[str], np.ndarray]:
    """Texts of 4 topics, each word drawn from its topic's words with probability 1 - noise, else
    from another topic's or from common words: overlapping classes, so calibration matters."""
    rng = np.random.default_rng(seed)
    vocab = {k: v.split() for k, v in TOPICS.items()}
    texts, labels = [], rng.integers(0, 4, size=n)
    for y in labels:
        words = []
        for _ in range(rng.integers(3, 9)):
            u = rng.random()
            source = vocab[y] if u > noise else (vocab[rng.integers(0, 4)] if u > noise / 2 else COMMON)
            words.append(source[rng.integers(0, len(source))])
        texts.append(" ".join(words))
    return texts, labels


def mean_nll(logits: torch.Tensor, labels: np.ndarray, t: float) -> float:
    lp = torch.log_softmax(logits / t, -1)
    return float(-lp[torch.arange(len(labels)), torch.as_tensor(labels)].mean())


@pytest.fixture(scope="module")
def tfidf():
    texts, labels = noisy_corpus(400, seed=0)
    valid_texts, valid_labels = noisy_corpus(150, seed=1)
    clf = TfidfClassifier().fit(texts, labels, 4, valid_texts=valid_texts, valid_labels=valid_labels)
    return clf, valid_texts, valid_labels


def test_temperature_minimises_validation_nll_and_never_raises_it(tfidf):
    clf, valid_texts, valid_labels = tfidf
    logits = clf.logits(valid_texts)
    at_t, at_one = mean_nll(logits, valid_labels, clf.temperature_), mean_nll(logits, valid_labels, 1.0)
    assert clf.valid_nll_ == pytest.approx(at_t, abs=1e-12)
    assert clf.valid_nll_uncalibrated_ == pytest.approx(at_one, abs=1e-12)
    assert at_t <= at_one
    # a minimum: a 5% step either way is no better
    assert at_t <= mean_nll(logits, valid_labels, clf.temperature_ * 1.05) + 1e-12
    assert at_t <= mean_nll(logits, valid_labels, clf.temperature_ / 1.05) + 1e-12
    # log_proba is the calibrated softmax, rows normalised, argmax = prediction
    lp = clf.log_proba(valid_texts)
    assert lp.dtype == torch.float64 and lp.shape == (150, 4)
    np.testing.assert_allclose(lp.exp().sum(-1).numpy(), 1.0, atol=1e-12)
    torch.testing.assert_close(lp, torch.log_softmax(logits / clf.temperature_, -1), rtol=0, atol=1e-12)
    assert clf.valid_accuracy_ == pytest.approx(float((clf.predict(valid_texts) == valid_labels).mean()))
    assert 0.5 < clf.valid_accuracy_ < 1.0  # overlapping classes: neither chance nor perfect


def test_fit_temperature_recovers_a_known_temperature():
    gen = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(20000, 5, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(logits / 2.5, -1), 1, generator=gen).squeeze(1).numpy()
    t, nll_t, nll_one = fit_temperature(logits, labels)
    assert t == pytest.approx(2.5, rel=0.05)
    assert nll_t < nll_one
    # already calibrated logits keep T close to 1
    labels = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1).numpy()
    assert fit_temperature(logits, labels)[0] == pytest.approx(1.0, rel=0.05)


def test_tfidf_save_load_gives_identical_log_proba(tfidf, tmp_path):
    clf, valid_texts, _ = tfidf
    clf.save(tmp_path / "c")
    meta = json.loads((tmp_path / "c" / "classifier.json").read_text())
    assert meta["kind"] == "tfidf" and meta["fitted"]["temperature_"] == clf.temperature_
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.pickle"))
    again = load_classifier(tmp_path / "c")
    assert isinstance(again, TfidfClassifier)
    texts = valid_texts + ["never seen words at all", "", "socket socket memory"]
    assert torch.equal(again.log_proba(texts), clf.log_proba(texts))
    assert again.temperature_ == clf.temperature_ and again.valid_accuracy_ == clf.valid_accuracy_
    # the logits are the fitted vectoriser and logistic regression's own
    np.testing.assert_allclose(clf.logits(texts[:20]).numpy(),
                               clf.vectorizer_.transform(texts[:20]) @ clf.weight_.T + clf.bias_, atol=1e-12)
    with pytest.raises(ValueError, match="not a EncoderClassifier"):
        EncoderClassifier.load(tmp_path / "c")


def test_duplicate_texts_are_classified_once(tfidf, monkeypatch):
    clf, valid_texts, _ = tfidf
    seen = []
    original = type(clf)._logits
    monkeypatch.setattr(type(clf), "_logits", lambda self, texts: seen.append(len(texts)) or original(self, texts))
    texts = valid_texts[:5] * 3
    out = clf.log_proba(texts)
    assert seen == [len(set(texts))]
    assert torch.equal(out[:5], out[5:10]) and torch.equal(out[:5], out[10:])


def test_classes_without_training_examples_get_probability_zero():
    texts, labels = noisy_corpus(200, seed=2)
    keep = labels != 2
    clf = TfidfClassifier().fit([t for t, k in zip(texts, keep) if k], labels[keep], 5,
                                valid_texts=texts[:50], valid_labels=labels[:50])
    lp = clf.log_proba(texts[:20])
    assert lp.shape == (20, 5)
    assert torch.isneginf(lp[:, 2]).all() and torch.isneginf(lp[:, 4]).all()
    np.testing.assert_allclose(lp.exp().sum(-1).numpy(), 1.0, atol=1e-12)
    # class-2 validation sections are errors, and left out of the temperature fit (finite NLL)
    assert clf.valid_accuracy_ <= float((labels[:50] != 2).mean())
    assert math.isfinite(clf.valid_nll_)
    # one class only: certain
    one = TfidfClassifier().fit(texts[:30], np.zeros(30, int), 3, valid_texts=texts[:5], valid_labels=np.zeros(5, int))
    np.testing.assert_array_equal(one.log_proba(texts[:4]).exp().numpy(), [[1.0, 0.0, 0.0]] * 4)


def test_bad_classifier_input():
    with pytest.raises(ValueError, match="classifier must be one of"):
        make_classifier("bert")
    with pytest.raises(ValueError, match="labels must lie in"):
        TfidfClassifier().fit(["a b", "c d"], [0, 3], 2, valid_texts=["a"], valid_labels=[0])
    with pytest.raises(ValueError, match="validation data: no texts"):
        TfidfClassifier().fit(["a b", "c d"], [0, 1], 2, valid_texts=[], valid_labels=[])
    with pytest.raises(ValueError, match="precision"):
        EncoderClassifier(precision="fp8")._use_bf16()


def test_frozen_encoder_bf16_matches_fp32_and_round_trips(tmp_path):
    texts, labels = noisy_corpus(60, seed=3, noise=0.2)
    valid_texts, valid_labels = noisy_corpus(30, seed=4, noise=0.2)
    clf = EncoderClassifier(max_length=32, precision="fp32").fit(texts, labels, 4, valid_texts=valid_texts,
                                                                  valid_labels=valid_labels)
    assert clf.valid_accuracy_ > 0.5  # 4 classes: chance is 0.25
    fp32 = clf.log_proba(valid_texts)
    np.testing.assert_allclose(fp32.exp().sum(-1).numpy(), 1.0, atol=1e-12)
    assert clf.valid_nll_ <= clf.valid_nll_uncalibrated_
    clf.save(tmp_path / "e")
    assert not (tmp_path / "e" / "encoder").exists()  # frozen: the head only
    again = SectionClassifier.load(tmp_path / "e")
    assert torch.equal(again.log_proba(valid_texts), fp32)
    if not bf16_supported("cpu"):
        pytest.skip("bf16 autocast does not work on this CPU (fp32 checked above)")
    clf.precision = "bf16"
    bf16 = clf.log_proba(valid_texts)
    assert (bf16.argmax(-1) == fp32.argmax(-1)).float().mean() >= 0.9
    assert (bf16.exp() - fp32.exp()).abs().max() < 0.1
    # autocast did run in bf16: the features differ from fp32, by little
    low = clf.embed(valid_texts)
    clf.precision = "fp32"
    high = clf.embed(valid_texts)
    assert not torch.equal(low, high)
    assert torch.nn.functional.cosine_similarity(low, high).min() > 0.99


def test_finetuned_encoder_saves_its_weights(tmp_path):
    texts, labels = noisy_corpus(16, seed=5, noise=0.0)
    clf = EncoderClassifier(finetune=True, epochs=1, batch_size=8, max_length=16, precision="fp32")
    clf.fit(texts, labels, 4, valid_texts=texts[:8], valid_labels=labels[:8])
    frozen = EncoderClassifier(max_length=16, precision="fp32")
    _, base = frozen._network()
    moved = max(float((a - b).abs().max().detach()) for a, b in zip(clf.encoder_.parameters(), base.parameters()))
    assert moved > 0  # Adam changed the fine-tuned copy, not the shared frozen encoder
    clf.save(tmp_path / "f")
    assert (tmp_path / "f" / "encoder" / "config.json").is_file()
    again = load_classifier(tmp_path / "f")
    assert torch.equal(again.log_proba(texts), clf.log_proba(texts))
