"""The KenLM chain prior: tagged training lines, renormalisation over V, the state-API path."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

import kenlm  # noqa: F401  (a missing install is a failure, not a skip)

from critic.latent import ValuePointMass, cross_entropy
from critics.coref.kenlm_prior import KenLMChainPrior, tag, training_lines
from critics.coref.windows import PAD, decode_codes, unpack
from critics.ngram import setup_kenlm

from .reference import py_windows, random_chains

TEXTS = (".", ".", ".", "M", "M", "F", "he", "He", "she", "his", "her", "They")


def tagged(window):
    return tuple(tag(j, t) for j, t in enumerate(window, start=1))


def read_arpa(path):
    """{n-gram tuple: (log10 p, log10 backoff)} with the values rounded to float32, as KenLM keeps them."""
    table, section = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("\\"):
            section = line
        elif section and section.endswith("-grams:") and line:
            parts = line.split("\t")
            table[tuple(parts[1].split(" "))] = (np.float32(parts[0]), np.float32(parts[2] if len(parts) > 2 else 0))
    return table


def arpa_log10(table, context, word):
    """Back-off query from the ARPA definition: log10 p(longest n-gram) + the back-offs of the longer
    contexts, added in float32 from the shortest context up (KenLM's order)."""
    for start in range(len(context) + 1):
        if context[start:] + (word,) in table:
            prob, matched = table[context[start:] + (word,)][0], len(context) - start
            break
    else:
        prob, matched = table[("<unk>",)][0], 0
    for length in range(matched + 1, len(context) + 1) if matched < len(context) else ():
        entry = table.get(context[len(context) - length:])
        if entry is not None:
            prob = np.float32(prob + entry[1])
    return float(prob)


def feed(model, words):
    state = kenlm.State()
    model.NullContextWrite(state)
    for w in words:
        out = kenlm.State()
        model.BaseScore(state, w, out)
        state = out
    return state


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    train, test = random_chains(rng, 120, max_len=24, texts=TEXTS), random_chains(rng, 40, max_len=24, texts=TEXTS)
    return train, test + [["zz:0", "M:3", ".", "M:1", "odd"], []]


@pytest.fixture(scope="module")
def arpa_prior(corpus):
    setup_kenlm()  # idempotent: built by `critic setup kenlm`
    return KenLMChainPrior.fit(corpus[0], memory="64M", binary=False)


@pytest.fixture(scope="module")
def binary_prior(corpus):
    return KenLMChainPrior.fit(corpus[0], memory="64M", binary=True)


def test_arpa_sees_exactly_the_relabelled_windows(corpus, arpa_prior):
    table = read_arpa(arpa_prior.model_path)
    windows = Counter(tagged(w) for c in corpus[0] for w in py_windows(c))
    for m in range(1, 6):  # the order-m n-grams ending in a target (5|) token: the distinct suffixes
        got = {g for g in table if len(g) == m and g[-1].startswith("5|")}
        assert got == {w[5 - m:] for w in windows}
    # a target token is followed by </s> only: no n-gram spans two windows
    assert all(g[i + 1:] == ("</s>",) for g in table for i, t in enumerate(g[:-1]) if t.startswith("5|"))
    assert arpa_prior.meta["positions"] == sum(windows.values()) == sum(map(len, corpus[0]))
    # the lines lmplz read: one per position, so each window's 5-gram count is its number of positions
    keys, _, table_ext = arpa_prior._windows(corpus[0])
    lines, counts = training_lines(keys, 5, table_ext)
    assert dict(zip((tuple(line.split(" ")) for line in lines), counts.tolist())) == windows
    assert arpa_prior.vocabulary[:-1] == sorted({w[-1][2:] for w in windows}, key=arpa_prior.vocabulary.index)
    assert set(arpa_prior.vocabulary) == {w[-1][2:] for w in windows} | {"<unk>"}


def test_state_api_equals_python_arpa_backoff(corpus, arpa_prior):
    table = read_arpa(arpa_prior.model_path)
    model = arpa_prior.model
    out = kenlm.State()
    windows = sorted({w for c in corpus[1] + corpus[0][:10] for w in py_windows(c)})
    keys, _, table_ext = arpa_prior._windows(corpus[1] + corpus[0][:10])
    keys = np.unique(keys)
    assert len(keys) == len(windows)
    raw = arpa_prior.kenlm_log10(keys)
    decoded = dict(zip(decode_codes(*unpack(keys, 5), table_ext), raw.tolist()))
    for w in windows:
        t = tagged(w)
        want = arpa_log10(table, t[:-1], t[-1])
        full = model.BaseScore(feed(model, t[:-1]), t[-1], out)  # the state of the whole context
        assert full == want, w
        assert decoded[w] == want, w  # the prior's suffix states give the same numbers


def test_raw_kenlm_distribution_sums_to_one(corpus, arpa_prior):
    table = read_arpa(arpa_prior.model_path)
    vocab = [g[0] for g in table if len(g) == 1 and g[0] != "<s>"]  # <s> holds a placeholder log10 P = 0
    model, out = arpa_prior.model, kenlm.State()
    rng = np.random.default_rng(3)
    windows = [w for c in corpus[1][:8] for w in py_windows(c)]
    for w in [windows[i] for i in rng.choice(len(windows), 25, replace=False)]:
        state = feed(model, tagged(w)[:-1])
        total = math.fsum(10.0 ** model.BaseScore(state, v, out) for v in vocab)
        assert total == pytest.approx(1.0, abs=2e-6)  # ARPA text and float32 rounding


def test_renormalised_rows_sum_to_one(corpus, arpa_prior, binary_prior):
    rng = np.random.default_rng(4)
    seen = [w[:-1] for c in corpus[0][:6] for w in py_windows(c)]
    unseen = [w[:-1] for c in random_chains(rng, 6, texts=[".", "M", "himself", "We", "F"], max_id=9)
              for w in py_windows(c)]
    for prior in (arpa_prior, binary_prior):
        for contexts in (seen, unseen, [(PAD, PAD, PAD, PAD)]):
            rows = prior.next_logprobs(contexts)
            assert rows.shape == (len(contexts), len(prior.vocabulary))
            np.testing.assert_allclose(np.exp(rows).sum(1), 1.0, rtol=0, atol=1e-9)
    # a row holds the scores of the windows context + v
    ctx = seen[5]
    row = arpa_prior.next_logprobs([ctx])[0]
    targets = [v for v in arpa_prior.vocabulary if v != "<unk>"]
    model = arpa_prior.model
    state, out = feed(model, tagged(ctx)), kenlm.State()
    raw = np.array([model.BaseScore(state, tag(5, v), out) for v in targets + ["<unk>"]]) * math.log(10)
    np.testing.assert_allclose(row, raw - np.log(np.exp(raw).sum()), rtol=0, atol=1e-12)


def test_normalisers_brute_force_and_closed_form(corpus, arpa_prior):
    prior = arpa_prior
    model, out = prior.model, kenlm.State()
    words = [tag(5, v) for v in prior.vocabulary[:-1]] + ["<unk>"]
    windows = [w for c in corpus[1] for w in py_windows(c)]  # contexts seen and unseen in training
    keys = prior._windows(corpus[1])[0]
    log_z = prior.context_log_z(keys // prior.base)
    for w, lz in zip(windows, log_z.tolist()):
        state = feed(model, tagged(w)[:-1])
        z = math.fsum(10.0 ** model.BaseScore(state, v, out) for v in words)
        assert lz == pytest.approx(math.log(z), abs=1e-12), w
    # the closed form Z = 1 - P(u0|ctx) L / P_1(u0) holds to KenLM's float32 precision only
    assert prior.meta["u0"] == "</s>" and 0 < prior.meta["L"] < 1
    for k in range(prior.order):
        closed = prior.closed_form_z(prior.suffixes[k], k)
        np.testing.assert_allclose(closed, np.exp(prior.log_z[k]), rtol=1e-6, atol=0)


def test_scores_unknowns_and_persistence(corpus, arpa_prior, binary_prior, tmp_path):
    train, test = corpus
    lp = binary_prior.position_logprobs(test)
    np.testing.assert_array_equal(np.concatenate(lp), np.concatenate(arpa_prior.position_logprobs(test)))
    total = binary_prior.log_prob(test)
    assert total.dtype == torch.float64 and total.shape == (len(test),) and total[-1] == 0.0
    np.testing.assert_allclose(total.numpy(), [p.sum() for p in lp], rtol=0, atol=1e-9)
    np.testing.assert_allclose(cross_entropy(ValuePointMass(test), binary_prior).numpy(), -total.numpy())
    # unknown targets: unseen kinds (zz, odd) and an unseen relabelled target are flagged, scored as <unk>
    unk = binary_prior.unknown(test)
    targets = set(binary_prior.vocabulary[:-1])
    for chain, flags in zip(test, unk):
        assert flags.tolist() == [w[-1] not in targets for w in py_windows(chain)]
    assert unk[-2].tolist() == [True, False, False, False, True]
    rows = binary_prior.next_logprobs([w[:-1] for w in py_windows(test[-2])])
    assert lp[-2][0] == pytest.approx(rows[0][-1], abs=1e-12) and lp[-2][-1] == pytest.approx(rows[-1][-1], abs=1e-12)
    assert np.all(np.isfinite(np.concatenate(lp)))
    assert binary_prior.windows(test[:2]) == [list(py_windows(c)) for c in test[:2]]
    # save / load
    for prior, name in ((binary_prior, "model.klm"), (arpa_prior, "model.arpa")):
        prior.save(tmp_path / name)
        again = KenLMChainPrior.load(tmp_path / name)
        assert (tmp_path / name / name).is_file() and (tmp_path / name / "kenlm_prior.json").is_file()
        assert again.vocabulary == prior.vocabulary and again.meta == prior.meta
        for a, b in zip(again.position_logprobs(test), prior.position_logprobs(test)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(again.next_logprobs([(PAD, PAD, ".", "M:0")]),
                                      prior.next_logprobs([(PAD, PAD, ".", "M:0")]))


def test_score_table_equals_direct_kenlm_queries_bit_for_bit(corpus, arpa_prior, binary_prior):
    train, test = corpus
    rng = np.random.default_rng(6)
    odd = random_chains(rng, 30, texts=[".", "M", "himself", "We", "F", "zz"], max_id=9)  # unseen kinds/targets
    for prior in (arpa_prior, binary_prior):
        for chains in (train[:20], test, odd):
            keys, inverse = np.unique(prior._windows(chains)[0], return_inverse=True)
            direct = prior.direct_log_probs(keys)  # one BaseScore per window, from the suffix states
            table, unknown = prior._score_unique(keys)
            assert table.tobytes() == direct.tobytes()
            assert np.array_equal(unknown, prior._unknown_unique(keys))
            per_position = np.concatenate(prior.position_logprobs(chains))  # the per-position table path
            assert per_position.tobytes() == direct[inverse].tobytes()
            assert np.array_equal(np.concatenate(prior.unknown(chains)), unknown[inverse])
        # seen and unseen windows both occur, as do targets outside V
        keys = np.unique(prior._windows(test + odd)[0])
        seen = np.isin(keys, np.unique(prior._windows(train)[0]))
        assert seen.any() and (~seen).any() and prior._unknown_unique(keys).any()
        # rows of next_logprobs: the same cells, and KenLM's own numbers
        contexts = [w[:-1] for c in odd[:5] + test[:5] for w in prior.windows([c])[0]]
        rows = prior.next_logprobs(contexts)
        model, out = prior.model, kenlm.State()
        words = [tag(5, v) for v in prior.vocabulary[:-1]] + ["<unk>"]
        ctx_keys = prior._context_keys(contexts)
        log_z = prior.context_log_z(ctx_keys)
        for ctx, row, lz in zip(contexts[:12], rows, log_z):
            state = feed(model, tagged(ctx))
            raw = np.array([model.BaseScore(state, w, out) for w in words]) * math.log(10)
            assert row.tobytes() == (raw - lz).tobytes()
    assert binary_prior.log10.dtype == np.float32
    assert binary_prior.log10.shape == (sum(map(len, binary_prior.suffixes.values())), len(binary_prior.vocabulary))


def test_saved_table_counts_and_legacy_files(corpus, binary_prior, tmp_path):
    _, test = corpus
    binary_prior.save(tmp_path / "p")
    with np.load(tmp_path / "p" / "normalisers.npz") as z:
        assert z["log10"].dtype == np.float32 and "counts_4" in z.files
        arrays = {k: z[k] for k in z.files}
    again = KenLMChainPrior.load(tmp_path / "p")
    assert np.array_equal(again.log10, binary_prior.log10)
    assert all(np.array_equal(again.counts[k], binary_prior.counts[k]) for k in range(5))
    assert sum(binary_prior.counts[4]) == binary_prior.meta["positions"]
    want = np.concatenate(binary_prior.position_logprobs(test))
    assert np.concatenate(again.position_logprobs(test)).tobytes() == want.tobytes()
    # a save without the table and the counts (written before them): the table is queried again
    np.savez(tmp_path / "p" / "normalisers.npz",
             **{k: v for k, v in arrays.items() if k != "log10" and not k.startswith("counts_")})
    legacy = KenLMChainPrior.load(tmp_path / "p")
    assert legacy.counts is None and np.array_equal(legacy.log10, binary_prior.log10)
    assert np.concatenate(legacy.position_logprobs(test)).tobytes() == want.tobytes()
    assert legacy.log_prob(test).numpy().tobytes() == binary_prior.log_prob(test).numpy().tobytes()


@pytest.mark.parametrize("order", [2, 3])
def test_low_orders(corpus, order):
    train, test = corpus
    prior = KenLMChainPrior.fit(train, order=order, memory="64M")
    keys = np.unique(prior._windows(test)[0])
    assert prior._score_unique(keys)[0].tobytes() == prior.direct_log_probs(keys).tobytes()
    rows = prior.next_logprobs([w[:-1] for w in prior.windows(test[:3])[0]] or [(PAD,) * (order - 1)])
    np.testing.assert_allclose(np.exp(rows).sum(1), 1.0, rtol=0, atol=1e-9)
