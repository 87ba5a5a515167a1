"""The authors' smoothing (interpolated absolute discounting) against plain-Python counting."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from critic.latent import ValuePointMass, cross_entropy
from critics.coref.smoothing import AuthorsChainPrior
from critics.coref.windows import PAD

from .reference import py_windows, random_chains


class BruteForce:
    """The formula of critics.coref.smoothing, counted and evaluated with dicts."""

    def __init__(self, chains, n, unk_prob=1e-20):
        self.n, self.unk_prob = n, unk_prob
        self.c = {m: defaultdict(int) for m in range(1, n + 1)}  # (h, v) -> count
        for chain in chains:
            for w in py_windows(chain, n):
                for m in range(1, n + 1):
                    suffix = w[n - m:]
                    self.c[m][(suffix[:-1], suffix[-1])] += 1
        self.ch = {m: defaultdict(int) for m in self.c}
        self.types = {m: defaultdict(int) for m in self.c}
        for m, table in self.c.items():
            for (h, _), cnt in table.items():
                self.ch[m][h] += cnt
                self.types[m][h] += 1
        self.D = {}
        for m, table in self.c.items():
            n1 = sum(1 for v in table.values() if v == 1)
            n2 = sum(1 for v in table.values() if v == 2)
            self.D[m] = 0.0 if m == 1 or n1 + 2 * n2 == 0 else n1 / (n1 + 2 * n2)

    def p(self, h, v, m):
        count = self.c[m].get((h, v), 0)
        if m == 1:
            return count / self.ch[1][()] if count else self.unk_prob
        first = max(count - self.D[m], 0) / self.ch[m][h]
        return first + self.D[m] * self.types[m][h] / self.ch[m][h] * self.p(h[1:], v, m - 1)

    def logprob(self, window):
        h, v, m = window[:-1], window[-1], self.n
        while h not in self.ch[m]:
            h, m = h[1:], m - 1
        return math.log(self.p(h, v, m))


@pytest.mark.parametrize("seed,order", [(0, 5), (1, 5), (2, 3), (3, 1), (4, 2)])
def test_equals_brute_force_position_by_position(seed, order):
    rng = np.random.default_rng(seed)
    train = random_chains(rng, 60)
    test = random_chains(rng, 30) + [["zz:0", ".", "M:9", "weird"], []]
    prior = AuthorsChainPrior.fit(train, order=order)
    brute = BruteForce(train, order)
    assert prior.discounts == pytest.approx(brute.D, abs=1e-15)
    got = prior.position_logprobs(test)
    for chain, lp in zip(test, got):
        want = [brute.logprob(w) for w in py_windows(chain, order)]
        np.testing.assert_allclose(lp, want, rtol=0, atol=1e-12)
        assert lp.dtype == np.float64 and len(lp) == len(chain)
    unknown = prior.unknown(test)
    for chain, unk in zip(test, unknown):
        assert unk.tolist() == [brute.c[1].get(((), w[-1]), 0) == 0 for w in py_windows(chain, order)]
    assert unknown[-2].tolist() == [True, False, False, True]
    assert prior.windows(test[:3]) == [list(py_windows(c, order)) for c in test[:3]]


def test_rows_sum_to_one_for_seen_and_unseen_contexts():
    rng = np.random.default_rng(5)
    train = random_chains(rng, 80)
    prior = AuthorsChainPrior.fit(train)
    assert all(0 < d < 1 for m, d in prior.discounts.items() if m > 1)
    seen = [w[:-1] for c in train[:10] for w in py_windows(c, 5)]
    unseen = [w[:-1] for c in random_chains(rng, 10, texts=[".", "M", "F", "himself", "We"], max_id=9)
              for w in py_windows(c, 5)]
    for contexts in (seen, unseen):
        rows = prior.next_logprobs(contexts)
        assert rows.shape == (len(contexts), len(prior.vocabulary))
        np.testing.assert_allclose(np.exp(rows).sum(1), 1.0, rtol=0, atol=1e-12)
    # a row is the prior's score of each vocabulary token after the context
    ctx = seen[7]
    row = prior.next_logprobs([ctx])[0]
    brute = BruteForce(train, 5)
    for v, lp in zip(prior.vocabulary, row):
        assert lp == pytest.approx(brute.logprob(ctx + (v,)), abs=1e-12)
    with pytest.raises(ValueError, match="relabelled"):
        prior.next_logprobs([(PAD, PAD, "M:1", "he:1")])
    with pytest.raises(ValueError, match="4 tokens"):
        prior.next_logprobs([(PAD, "M:0")])


def test_discounts_by_hand():
    # order 2, chains "M:0 M:0" and "M:0 .":
    # windows: (<pad>, M:0) (M:0, M:0) (<pad>, M:0) (M:0, .)
    # bigrams: (<pad> M:0) x2, (M:0 M:0) x1, (M:0 .) x1 -> n1 = 2, n2 = 1, D_2 = 2 / (2 + 2) = 0.5
    prior = AuthorsChainPrior.fit([["M:0", "M:0"], ["M:0", "."]], order=2)
    assert prior.discounts == {1: 0.0, 2: 0.5}
    assert prior.orders[2].n1 == 2 and prior.orders[2].n2 == 1
    # P(. | M:0) = (1 - .5) / 2 + .5 * 2 / 2 * P_1(.) = .25 + .5 * 1/4
    lp = prior.position_logprobs([["M:0", "."]])[0]
    # P(M:0 | <pad>) = (2 - .5) / 2 + .5 * 1 / 2 * P_1(M:0) = .75 + .25 * 3/4
    assert lp == pytest.approx([math.log(0.75 + 0.25 * 0.75), math.log(0.25 + 0.125)], abs=1e-15)
    # order 5 on one chain: every n-gram seen once -> D = 1 at orders 2..5
    one = AuthorsChainPrior.fit([["M:0", "he:0", "."]])
    assert one.discounts == {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}


def test_log_prob_is_a_prior_for_value_point_masses(tmp_path):
    rng = np.random.default_rng(7)
    train, test = random_chains(rng, 50), random_chains(rng, 12) + [[]]
    prior = AuthorsChainPrior.fit(train, unk_prob=1e-10)
    lp = prior.log_prob(test)
    assert lp.dtype == torch.float64 and lp.shape == (len(test),)
    want = [float(np.sum(p)) for p in prior.position_logprobs(test)]
    np.testing.assert_allclose(lp.numpy(), want, rtol=0, atol=1e-9)
    assert lp[-1] == 0.0
    h = cross_entropy(ValuePointMass(test), prior)
    np.testing.assert_allclose(h.numpy(), -lp.numpy())
    assert prior.num_positions(test).tolist() == [len(c) for c in test]
    prior.save(tmp_path / "p")
    again = AuthorsChainPrior.load(tmp_path / "p")
    assert again.vocabulary == prior.vocabulary and again.discounts == prior.discounts
    assert again.unk_prob == 1e-10
    np.testing.assert_array_equal(again.log_prob(test).numpy(), lp.numpy())
    with pytest.raises(ValueError, match="no chain positions"):
        AuthorsChainPrior.fit([[], []])


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_score_table_equals_the_recursion_bit_for_bit(order):
    rng = np.random.default_rng(8)
    train = random_chains(rng, 70)
    odd = random_chains(rng, 30, texts=[".", "M", "himself", "We", "F", "zz"], max_id=9)  # unseen kinds/targets
    for prior in (AuthorsChainPrior.fit(train, order=order),
                  AuthorsChainPrior.fit([["M:0", "he:0", "."]], order=order)):  # D = 1 at orders 2..n
        for chains in (train[:20], odd):
            keys, inverse = np.unique(prior._windows(chains)[0], return_inverse=True)
            direct = prior.direct_log_probs(keys)  # the recursion, window by window
            assert prior._score_unique(keys)[0].tobytes() == direct.tobytes()
            assert np.concatenate(prior.position_logprobs(chains)).tobytes() == direct[inverse].tobytes()
        rows = prior.next_logprobs([w[:-1] for c in odd[:4] for w in py_windows(c, order)])
        targets = prior.orders[1].keys
        contexts = prior._context_keys([w[:-1] for c in odd[:4] for w in py_windows(c, order)])
        want = prior.direct_log_probs((contexts[:, None] * prior.base + targets[None, :]).reshape(-1))
        assert rows.tobytes() == want.reshape(rows.shape).tobytes()


def test_score_table_with_a_zero_discount():
    # order 2 on "M:0 M:0" twice: every bigram seen twice or more -> n1 = 0, D_2 = 0; an unseen
    # target after a seen context gets probability 0 (-inf), in the table as in the recursion
    prior = AuthorsChainPrior.fit([["M:0", "M:0"], ["M:0", "M:0"]], order=2)
    assert prior.discounts[2] == 0.0
    chains = [["M:0", "M:0", "he:0", "."], ["."]]
    keys = np.unique(prior._windows(chains)[0])
    assert prior._score_unique(keys)[0].tobytes() == prior.direct_log_probs(keys).tobytes()
    lp = prior.position_logprobs(chains)
    assert lp[0][0] == 0.0 and np.isneginf(lp[0][2]) and np.isneginf(lp[1][0])
