"""The HSMM posterior by width groups: groups within their cells, numbers independent of the batch, scoring
that builds one group's emission scores at a time, edge counts equal to the marginals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import critics.hsmm.critic as hsmm_critic
from critic.document import Document, Section
from critics.hsmm import HSMMCritic
from critics.hsmm.critic import width_groups
from critics.hsmm import semimarkov as sm
from hsmm_brute import brute_marginals

TEXTS = ["a b .", "c d e .", "a b . a b .", "c d e . a b . c d e .", "a b . c d e . a b . a b .", "a", "c d e"]
SHORT = [t for t in TEXTS if len(t.split()) <= 7]  # few enough segmentations to enumerate


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    words = [["a", "b", "."], ["c", "d", "e", "."]]

    def docs(n, prefix):
        return [Document(id=f"{prefix}{i}", sections=(Section(None, " ".join(
            w for _ in range(rng.integers(1, 4)) for w in words[rng.integers(0, 2)])),)) for i in range(n)]

    return HSMMCritic(num_states=2, max_len=4, top_k_ngrams=50, end_token=".", epochs=2, fit_batch_size=8,
                      seed=0).fit(docs(40, "t"), validation=docs(8, "v"))


def _docs(texts=TEXTS):
    return [Document(id=str(i), sections=(Section(None, t),)) for i, t in enumerate(texts)]


def _cells(critic, cells: int) -> int:
    """The ``GROUP_SCORES`` that gives ``critic`` groups of ``cells`` (row, position) cells."""
    return cells * critic.max_len * critic.num_states


def test_width_groups_by_hand():
    # sorted by length: rows 1 (1), 2 (3), 3 (3), 0 (5), 4 (9); 3 x 3 = 9 fits 9 cells, 4 x 5 does not
    groups = width_groups(np.array([5, 1, 3, 3, 9]), 9)
    assert [g.tolist() for g in groups] == [[1, 2, 3], [0], [4]]
    assert [g.tolist() for g in width_groups(np.array([2, 2, 2]), 100)] == [[0, 1, 2]]
    assert width_groups(np.zeros(0, dtype=np.int64), 8) == []


@pytest.mark.parametrize("cells", [1, 7, 40, 10_000])
def test_width_groups_cover_every_row_once_within_their_cells(cells):
    lengths = np.random.default_rng(cells).integers(1, 30, size=200)
    groups = width_groups(lengths, cells)
    assert sorted(np.concatenate(groups).tolist()) == list(range(200))
    for g, after in zip(groups, groups[1:] + [None]):
        longest = lengths[g].max()
        assert len(g) == 1 or len(g) * longest <= cells
        if after is not None:  # by length, and each group as large as the cells allow
            assert longest <= lengths[after].min()
            assert (len(g) + 1) * lengths[after[0]] > cells


@pytest.mark.parametrize("cells", [1, 12, 10_000])
def test_latent_nll_and_steps_do_not_depend_on_the_batch(fitted, monkeypatch, cells):
    """Each document alone, all in one batch, reversed, shuffled, and in batches of 3: the same T(x), M(x)."""
    monkeypatch.setattr(hsmm_critic, "GROUP_SCORES", _cells(fitted, cells))
    docs = _docs()
    alone = [fitted.score([d]) for d in docs]
    t_alone = np.array([s.latent_nll[0] for s in alone])
    m_alone = np.array([s.latent_steps[0] for s in alone])
    order = np.random.default_rng(1).permutation(len(docs))
    for arrangement, batch_size in ((np.arange(len(docs)), 256), (np.arange(len(docs))[::-1], 256), (order, 256),
                                    (order, 3)):
        monkeypatch.setattr(fitted, "batch_size", batch_size)
        scores = fitted.score([docs[i] for i in arrangement])
        assert scores.doc_ids == [str(i) for i in arrangement]
        np.testing.assert_allclose(scores.latent_nll, t_alone[arrangement], rtol=1e-12, atol=0)
        np.testing.assert_allclose(scores.latent_steps, m_alone[arrangement], rtol=1e-12, atol=0)


@pytest.mark.parametrize("cells", [1, 12, 10_000])
def test_counts_and_entropy_by_groups_match_enumeration(fitted, monkeypatch, cells):
    monkeypatch.setattr(hsmm_critic, "GROUP_SCORES", _cells(fitted, cells))
    docs = _docs(SHORT)
    _, q, _ = fitted.posterior(docs)
    counts, entropy = q.marginals, q.entropy()
    for b, length in enumerate(q.lengths.tolist()):
        emit = q.emission(np.array([b]))[0]
        log_z, mi, mt, md, _ = brute_marginals(q.init, q.trans, q.dur, emit, length)
        assert float(counts.log_z[b]) == pytest.approx(float(log_z), rel=1e-12)
        for got, want in ((counts.init[b], mi), (counts.trans[b], mt), (counts.dur[b], md)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        alone = fitted.entropy([docs[b]])[str(b)]
        assert float(entropy[b]) == pytest.approx(alone, rel=1e-12)


def test_scoring_builds_the_emission_scores_of_one_width_group_at_a_time(fitted, monkeypatch):
    """Never the batch padded to its longest document: each call holds at most the group's cells."""
    cells = 12
    monkeypatch.setattr(hsmm_critic, "GROUP_SCORES", _cells(fitted, cells))
    calls = []
    build = HSMMCritic._emission

    def recorded(self, sequences, rows):
        emit = build(self, sequences, rows)
        calls.append((list(rows), tuple(emit.shape)))
        return emit

    monkeypatch.setattr(HSMMCritic, "_emission", recorded)
    docs = _docs()
    scores = fitted.score(docs)
    assert scores.n == len(docs)
    assert sorted(r for rows, _ in calls for r in rows) == list(range(len(docs)))  # each document once
    lengths = [len(d.text.split()) for d in docs]
    for rows, (b, T, K, C) in calls:
        assert (b, K, C) == (len(rows), fitted.max_len, fitted.num_states)
        assert T == max(lengths[r] for r in rows) and (b == 1 or b * T <= cells)
    assert len(calls) > 1


def test_the_posteriors_emit_is_the_whole_batch_padded(fitted):
    _, q, _ = fitted.posterior(_docs())
    emit = q.emit
    assert emit.shape == (len(TEXTS), max(len(t.split()) for t in TEXTS), fitted.max_len, fitted.num_states)
    assert emit.dtype == torch.float64
    for b, length in enumerate(q.lengths.tolist()):
        torch.testing.assert_close(emit[b, :length], q.emission(np.array([b]))[0], rtol=0, atol=0)


def test_edge_counts_are_the_marginals_without_the_segments():
    g = torch.Generator().manual_seed(3)
    B, T, K, C = 4, 8, 3, 2
    init, trans, dur = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((C,), (C, C), (C, K)))
    emit = torch.randn(B, T, K, C, generator=g, dtype=torch.float64)
    lengths = torch.tensor([8, 1, 4, 7])
    counts = sm.edge_counts(init, trans, dur, emit, lengths)
    full = sm.marginals(init, trans, dur, emit, lengths)
    assert not hasattr(counts, "emit") and isinstance(full, sm.EdgeCounts)
    for name in ("log_z", "init", "trans", "dur", "num_segments"):
        torch.testing.assert_close(getattr(counts, name), getattr(full, name), rtol=1e-13, atol=1e-13)
    for b in range(B):
        log_z, mi, mt, md, _ = brute_marginals(init, trans, dur, emit[b], int(lengths[b]))
        assert float(counts.log_z[b]) == pytest.approx(float(log_z), rel=1e-12)
        torch.testing.assert_close(counts.trans[b], mt, rtol=0, atol=1e-12)
        torch.testing.assert_close(counts.dur[b], md, rtol=0, atol=1e-12)
        torch.testing.assert_close(counts.init[b], mi, rtol=0, atol=1e-12)
