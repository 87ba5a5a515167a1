"""KenLM tooling: build (idempotent, cached), estimate with lmplz, query in natural logs."""

import math
import time

import pytest

from critics.ngram import KenLMNotBuilt, NgramLM, estimate_ngram, find_kenlm_bin, setup_kenlm

import kenlm  # noqa: F401,E402  (the query module; a missing install is a failure, not a skip)


@pytest.fixture(scope="module")
def kenlm_bin():
    return setup_kenlm()  # built by `critic setup kenlm` in .ci/install.sh; idempotent


def read_arpa(path):
    """{order: {ngram tuple: (log10 prob, log10 backoff)}} from an ARPA file."""
    table, order = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1:line.index("-")])
            table[order] = {}
        elif order and line and not line.startswith("\\"):
            parts = line.split("\t")
            table[order][tuple(parts[1].split())] = (float(parts[0]), float(parts[2]) if len(parts) > 2 else 0.0)
    return table


def backoff_log10(table, context, word):
    """Katz-style back-off query written from the ARPA definition."""
    ngram = tuple(context) + (word,)
    if ngram in table.get(len(ngram), {}):
        return table[len(ngram)][ngram][0]
    if not context:
        return table[1][("<unk>",)][0]
    bow = table.get(len(context), {}).get(tuple(context), (0.0, 0.0))[1]
    return bow + backoff_log10(table, context[1:], word)


CORPUS = [
    "the cat sat on the mat",
    "the dog sat on the rug",
    "a cat lay on a mat",
    "the cat ate the fish",
    "a dog ate a bone",
] * 3


def test_setup_is_idempotent_and_cached(kenlm_bin):
    start = time.perf_counter()
    again = setup_kenlm()
    assert again == kenlm_bin
    assert time.perf_counter() - start < 1.0
    assert find_kenlm_bin() == kenlm_bin
    assert (kenlm_bin / "lmplz").is_file() and (kenlm_bin / "build_binary").is_file()


def test_env_override_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("CRITIC_KENLM_BIN", str(tmp_path))
    with pytest.raises(KenLMNotBuilt):
        find_kenlm_bin()
    assert find_kenlm_bin(required=False) is None


def arpa_token_logprobs(table, words, order):
    """Natural-log P(w | history) of each word and of </s>, by back-off through the ARPA table."""
    history, want = ["<s>"], []
    for w in words + ["</s>"]:
        key = w if (w,) in table[1] else "<unk>"
        want.append(backoff_log10(table, history[len(history) - (order - 1):] if order > 1 else [], key)
                    * math.log(10))
        history.append(key)
    return want


def test_query_matches_the_arpa_file(kenlm_bin, tmp_path):
    arpa = estimate_ngram(CORPUS, 3, tmp_path / "m.arpa", discount_fallback="auto", memory="64M")
    lm = NgramLM(arpa)
    table = read_arpa(arpa)
    assert lm.order == 3
    for sentence in ["the cat sat on the rug", "a dog lay on the fish", "the unicorn sat"]:
        words = sentence.split()
        got = lm.token_logprobs(words)
        want = arpa_token_logprobs(table, words, 3)
        assert got == pytest.approx(want, abs=1e-4)
        assert lm.logprob(words) == pytest.approx(sum(want), abs=1e-4)
    assert lm.oov("the unicorn".split()) == [False, True]


def test_small_vocabulary_needs_discount_fallback(kenlm_bin, tmp_path):
    chains = ["A B A", "B A B", "A A B"] * 4  # three-word vocabulary: discounts cannot be estimated
    with pytest.raises(RuntimeError):
        estimate_ngram(chains, 3, tmp_path / "no.arpa", discount_fallback=False, memory="64M")
    path = estimate_ngram(chains, 3, tmp_path / "yes.arpa", discount_fallback="auto", memory="64M")
    lm = NgramLM(path)
    probs = [math.exp(x) for x in lm.token_logprobs("A B".split())]
    assert all(0 < p < 1 for p in probs)
    want = arpa_token_logprobs(read_arpa(path), ["A", "B"], 3)
    assert [math.log(p) for p in probs] == pytest.approx(want, abs=1e-4)
    # the fallback model is still normalised: P(. | <s>) over A, B, </s> and <unk> sums to one
    table = read_arpa(path)
    first = sum(10 ** backoff_log10(table, ["<s>"], w) for w in ("A", "B", "</s>", "<unk>"))
    assert first == pytest.approx(1.0, abs=1e-4)


def test_binary_output_and_token_checks(kenlm_bin, tmp_path):
    path = estimate_ngram(CORPUS, 2, tmp_path / "m.bin", binary=True, memory="64M")
    assert path.is_file() and not (tmp_path / "m.arpa").exists()
    arpa_path = estimate_ngram(CORPUS, 2, tmp_path / "m2.arpa", memory="64M")
    arpa_lm = NgramLM(arpa_path)
    assert NgramLM(path).logprob("the cat".split()) == pytest.approx(arpa_lm.logprob("the cat".split()), abs=1e-4)
    want = sum(arpa_token_logprobs(read_arpa(arpa_path), "the cat".split(), 2))
    assert NgramLM(path).logprob("the cat".split()) == pytest.approx(want, abs=1e-4)
    with pytest.raises(ValueError):
        estimate_ngram([["a b"]], 2, tmp_path / "x.arpa")
    with pytest.raises(ValueError):
        estimate_ngram([["<s>"]], 2, tmp_path / "x.arpa")
