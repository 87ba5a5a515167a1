"""The linear semi-Markov routines against brute-force enumeration and torch-struct."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

from critics.hsmm import semimarkov as sm
from hsmm_brute import brute_marginals, enumerate_paths

import torch_struct  # noqa: E402  (the hsmm extra; a missing install is a failure, not a skip)


def _factors(seed, B, T, K, C, scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g, dtype=torch.float64) * scale).to(dtype)  # noqa: E731
    return r(C), r(C, C), r(C, K), r(B, T, K, C)


sizes = st.tuples(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3))


TOL = {torch.float64: 1e-9, torch.float32: 2e-4}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@settings(max_examples=25, deadline=None)
@given(size=sizes, data=st.data())
def test_partition_and_marginals_match_enumeration_mixed_lengths(dtype, size, data):
    seed, B, T, K, C = size
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    init, trans, dur, emit = _factors(seed, B, T, K, C)
    m = sm.marginals(*(x.to(dtype) for x in (init, trans, dur, emit)), lengths, dtype=dtype)
    assert m.log_z.dtype == dtype and m.emit.dtype == dtype
    tol = TOL[dtype]
    for b in range(B):
        log_z, mi, mt, md, me = brute_marginals(init, trans, dur, emit[b], int(lengths[b]))
        assert torch.allclose(m.log_z[b].double(), log_z, atol=tol)
        assert torch.allclose(m.init[b].double(), mi, atol=tol)
        assert torch.allclose(m.trans[b].double(), mt, atol=tol)
        assert torch.allclose(m.dur[b].double(), md, atol=tol)
        assert torch.allclose(m.emit[b].double(), me, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@settings(max_examples=25, deadline=None)
@given(size=sizes, data=st.data())
def test_viterbi_matches_enumeration_mixed_lengths(dtype, size, data):
    seed, B, T, K, C = size
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    init, trans, dur, emit = _factors(seed, B, T, K, C)
    score, states, starts = sm.viterbi(*(x.to(dtype) for x in (init, trans, dur, emit)), lengths, dtype=dtype)
    segs = sm.segments_from_path(states, starts)
    for b in range(B):
        paths = enumerate_paths(init, trans, dur, emit[b], int(lengths[b]))
        best, best_segs = max(paths, key=lambda p: float(p[0]))
        assert float(score[b]) == pytest.approx(float(best), abs=TOL[dtype])
        assert int((states[b] >= 0).sum()) == int(lengths[b])
        if dtype == torch.float64:
            assert segs[b] == best_segs  # continuous random scores: the argmax is unique
        else:  # float32 may swap near-ties: the path found must score the best
            found = {tuple(map(tuple, p)): s for s, p in paths}[tuple(segs[b])]
            assert float(found) == pytest.approx(float(best), abs=TOL[dtype])


def test_float32_agrees_with_float64():
    """Log-probability potentials at a realistic size: float32 within 1e-5 relative of float64."""
    g = torch.Generator().manual_seed(5)
    B, T, K, C = 3, 60, 6, 24
    init = torch.randn(C, generator=g, dtype=torch.float64).log_softmax(-1)
    trans = torch.randn(C, C, generator=g, dtype=torch.float64).log_softmax(-1)
    dur = torch.randn(C, K, generator=g, dtype=torch.float64).log_softmax(-1)
    emit = torch.randn(B, T, K, C, generator=g, dtype=torch.float64) * 3 - 4 * torch.arange(1, K + 1).view(1, 1, K, 1)
    lengths = torch.tensor([60, 33, 7])
    m64 = sm.marginals(init, trans, dur, emit, lengths)
    m32 = sm.marginals(init.float(), trans.float(), dur.float(), emit.float(), lengths, dtype=torch.float32)
    assert torch.allclose(m32.log_z.double(), m64.log_z, rtol=1e-5, atol=0)
    for a, b in ((m32.emit, m64.emit), (m32.trans, m64.trans), (m32.dur, m64.dur), (m32.init, m64.init)):
        assert torch.allclose(a.double(), b, atol=1e-4)
    with torch.no_grad():  # the in-place (no autograd) path gives the same numbers
        z32 = sm.log_partition(init.float(), trans.float(), dur.float(), emit.float(), lengths, dtype=None)
    assert z32.dtype == torch.float32 and torch.equal(z32, m32.log_z)


@pytest.mark.parametrize("scale", [900.0, 60.0])
def test_extreme_scores_match_enumeration(scale):
    """Scores whose exponentials overflow (or underflow) the dtype still give the exact result."""
    init, trans, dur, emit = _factors(11, 2, 5, 3, 2)
    emit = emit * scale
    lengths = torch.tensor([5, 3])
    dtype = torch.float64 if scale > 100 else torch.float32
    with torch.no_grad():
        z = sm.log_partition(init, trans, dur, emit.to(dtype), lengths, dtype=dtype)
    m = sm.marginals(init, trans, dur, emit.to(dtype), lengths, dtype=dtype)
    score, _, _ = sm.viterbi(init, trans, dur, emit.to(dtype), lengths, dtype=dtype)
    for b in range(2):
        paths = enumerate_paths(init, trans, dur, emit[b], int(lengths[b]))
        scores = torch.stack([s for s, _ in paths])
        rel = 1e-12 if dtype == torch.float64 else 1e-6
        assert float(z[b]) == pytest.approx(float(torch.logsumexp(scores, 0)), rel=rel)
        assert float(m.log_z[b]) == pytest.approx(float(torch.logsumexp(scores, 0)), rel=rel)
        assert float(score[b]) == pytest.approx(float(scores.max()), rel=rel)
        assert torch.isfinite(m.emit[b]).all() and float(m.num_segments[b]) >= 1


def test_batched_per_sequence_factors_equal_shared():
    init, trans, dur, emit = _factors(1, 3, 6, 3, 4)
    lengths = torch.tensor([6, 2, 4])
    shared = sm.log_partition(init, trans, dur, emit, lengths)
    per = sm.log_partition(init.expand(3, -1), trans.expand(3, -1, -1), dur.expand(3, -1, -1), emit, lengths)
    assert torch.allclose(shared, per, atol=1e-12)


@pytest.mark.parametrize("B,T,K,C", [(2, 7, 3, 3), (3, 12, 4, 5), (1, 9, 5, 2)])
def test_equal_lengths_match_torch_struct(B, T, K, C):
    init, trans, dur, emit = _factors(B * 100 + T, B, T, K, C)
    edge = sm.edge_potentials(init, trans, dur, emit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist = torch_struct.SemiMarkovCRF(edge.clone(), lengths=torch.full((B,), T + 1))
        ts_z, ts_marg = dist.partition, dist.marginals
    m = sm.marginals(init, trans, dur, emit)
    assert torch.allclose(m.log_z, ts_z.detach(), atol=1e-8)
    # edge marginals (B, T, K + 1, c2, c1): segment marginals sum out c1, transitions sum out n and k
    assert torch.allclose(m.emit, ts_marg[:, :, 1:].sum(-1), atol=1e-8)
    assert torch.allclose(m.trans, ts_marg[:, 1:, 1:].sum((1, 2)).transpose(1, 2), atol=1e-8)
    # Viterbi equals torch-struct's argmax score
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts_max = torch_struct.SemiMarkovCRF(edge.clone(), lengths=torch.full((B,), T + 1)).max
    assert torch.allclose(sm.viterbi(init, trans, dur, emit)[0], ts_max.detach(), atol=1e-8)


def test_float32_survives_extreme_transitions():
    """Transitions of e^-200 must not underflow to -inf (they are forced here by the emissions)."""
    B, T, K, C = 1, 4, 2, 2
    init = torch.tensor([0.0, -300.0])
    trans = torch.tensor([[-200.0, -300.0], [-300.0, -300.0]])  # 0 -> 0 is the only likely move, and it's e^-200
    dur = torch.zeros(C, K)
    emit = torch.zeros(B, T, K, C)
    got = sm.log_partition(init, trans, dur, emit)
    ref = sm.log_partition(init.double(), trans.double(), dur.double(), emit.double())
    brute = torch.logsumexp(torch.stack([s for s, _ in enumerate_paths(
        init.double(), trans.double(), dur.double(), emit[0].double(), T)]), 0)
    assert torch.isfinite(got).all()
    assert float(got) == pytest.approx(float(brute), rel=1e-6)
    assert float(ref) == pytest.approx(float(brute), rel=1e-12)
    init.requires_grad_(True)
    sm.log_partition(init, trans, dur, emit).sum().backward()
    assert torch.isfinite(init.grad).all()


def test_neg_potentials_give_finite_gradients():
    init, trans, dur, emit = _factors(3, 2, 6, 3, 3, dtype=torch.float32)
    emit = emit.clone()
    emit[:, :, 1:] = sm.NEG  # only unit segments allowed
    emit.requires_grad_(True)
    lz = sm.log_partition(init, trans, dur, emit, torch.tensor([6, 3]))
    lz.sum().backward()
    assert torch.isfinite(emit.grad).all()
    # only unit segments: an HMM; each position is in exactly one segment
    m = sm.marginals(init, trans, dur, emit.detach(), torch.tensor([6, 3]))
    assert torch.allclose(m.num_segments, torch.tensor([6.0, 3.0]), atol=1e-4)


def test_lengths_out_of_range_raise():
    init, trans, dur, emit = _factors(0, 1, 3, 2, 2)
    with pytest.raises(ValueError):
        sm.log_partition(init, trans, dur, emit, torch.tensor([4]))
