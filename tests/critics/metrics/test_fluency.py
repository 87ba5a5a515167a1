"""Fluency scores of seed 003 as pure functions, and the unigram model."""

import math
from collections import Counter

import pytest

from critics.metrics import (
    UnigramModel,
    a2_thresholds,
    fluency_a1,
    fluency_a2,
    nce,
    perplexity,
    slor,
    word_tokenize,
    wpslor,
)


def test_a1_is_mean_log_conditional_probability():
    assert fluency_a1([math.log(0.5), math.log(0.25)]) == pytest.approx((math.log(0.5) + math.log(0.25)) / 2)
    with pytest.raises(ValueError):
        fluency_a1([])


def test_a2_by_hand():
    lp = [math.log(0.5), math.log(0.1), math.log(0.01)]
    # M = 1/3; 0.5 >= good (0.4): M / 0.5; 0.1 neither; 0.01 <= bad (0.05): M * 0.01
    assert fluency_a2(lp, 0.4, 0.05) == pytest.approx(1 / 3 / 0.5 * 0.01)
    # a CP equal to ValForGood counts as good
    assert fluency_a2([math.log(0.4)], 0.4, 0.05) == pytest.approx(1 / 0.4)
    assert fluency_a2([math.log(0.2)], 0.4, 0.05) == pytest.approx(1.0)


def test_a2_thresholds_40_and_20_percent():
    cps = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    # descending: 0.9 0.8 0.7 0.6 | ... | 0.1 0.05 -> good = lowest of the first four, bad = highest of last two
    assert a2_thresholds(cps) == (0.6, 0.1)
    # 7 values: ceil(2.8) = 3 good, ceil(1.4) = 2 bad
    assert a2_thresholds([7, 6, 5, 4, 3, 2, 1]) == (5, 2)


def test_nce_ppl_slor_by_hand():
    assert nce(-10.0, 4) == pytest.approx(-2.5)
    assert nce([-1.0, -2.0, -3.0]) == pytest.approx(-2.0)
    assert perplexity(-10.0, 4) == pytest.approx(math.exp(2.5))
    assert perplexity([-1.0, -2.0, -3.0]) == pytest.approx(math.exp(2.0))
    # (ln p_M - ln p_u) / |S| with |S| the number of unigram tokens
    assert slor(-10.0, [-3.0, -4.0, -5.0]) == pytest.approx((-10 + 12) / 3)
    assert slor([-4.0, -6.0], -12.0, length=3) == pytest.approx(2 / 3)
    assert wpslor([-1.0, -1.0, -1.0, -1.0], [-2.0, -2.0, -3.0, -1.0]) == pytest.approx((-4 + 8) / 4)
    with pytest.raises(ValueError):
        nce(-3.0)  # a total needs its length


def test_slor_does_not_penalise_rare_words():
    # seed 003's example: "France" vs "Tuvalu" with the same LM conditional structure
    uni = UnigramModel(Counter({"he": 50, "is": 50, "a": 50, "citizen": 5, "of": 50, "france": 10, "tuvalu": 1}), eos=False)
    s1 = "he is a citizen of france".split()
    s2 = "he is a citizen of tuvalu".split()
    lm_common = sum(uni.token_logprobs(s1)) + 3.0  # an LM that tracks word frequency
    lm_rare = sum(uni.token_logprobs(s2)) + 3.0
    assert nce(lm_rare, 6) < nce(lm_common, 6)
    # add-one counts over N = 216 tokens and V = 7 types (+1 unknown slot): p(w) = (c + 1) / 224
    common = 4 * math.log(51 / 224) + math.log(6 / 224) + math.log(11 / 224)
    assert nce(lm_common, 6) == pytest.approx((common + 3.0) / 6, rel=1e-12)
    assert nce(lm_rare, 6) - nce(lm_common, 6) == pytest.approx(math.log(2 / 11) / 6, rel=1e-12)
    assert slor(lm_rare, uni.token_logprobs(s2)) == pytest.approx(slor(lm_common, uni.token_logprobs(s1)))
    assert slor(lm_rare, uni.token_logprobs(s2)) == pytest.approx(3.0 / 6, rel=1e-12)


def test_unigram_model_add_k():
    uni = UnigramModel.from_corpus([["a", "b"], ["a"]], k=1.0, eos=True)
    # counts a:2 b:1 </s>:2, N = 5, V = 3 (+1 unknown slot) -> (c + 1) / 9
    assert uni.logprob("a") == pytest.approx(math.log(3 / 9))
    assert uni.logprob("zzz") == pytest.approx(math.log(1 / 9))
    assert uni.token_logprobs(["b"]) == pytest.approx([math.log(2 / 9), math.log(3 / 9)])
    assert uni.token_logprobs(["b"], eos=False) == pytest.approx([math.log(2 / 9)])


def test_word_tokenize():
    assert word_tokenize("The ls(1) command doesn't fail.") == ["The", "ls", "(", "1", ")", "command", "doesn't", "fail", "."]
