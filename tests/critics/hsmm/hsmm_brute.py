"""Brute-force enumeration of semi-Markov segmentations (test helper)."""

from __future__ import annotations

import itertools

import torch


def compositions(n: int, max_part: int):
    if n == 0:
        yield ()
        return
    for first in range(1, min(n, max_part) + 1):
        for rest in compositions(n - first, max_part):
            yield (first,) + rest


def enumerate_paths(init, trans, dur, emit_b, length):
    """All (score, segments) for one sequence; segments are (start, len, state)."""
    K = emit_b.shape[1]
    C = emit_b.shape[2]
    out = []
    for comp in compositions(length, K):
        starts = [sum(comp[:i]) for i in range(len(comp))]
        for states in itertools.product(range(C), repeat=len(comp)):
            s = init[states[0]]
            for m, (a, ln, c) in enumerate(zip(starts, comp, states)):
                if m:
                    s = s + trans[states[m - 1], c]
                s = s + dur[c, ln - 1] + emit_b[a, ln - 1, c]
            out.append((s, list(zip(starts, comp, states))))
    return out


def brute_marginals(init, trans, dur, emit_b, length):
    """Expected counts (init, trans, dur, emit) and log Z by enumeration."""
    T, K, C = emit_b.shape
    paths = enumerate_paths(init, trans, dur, emit_b, length)
    scores = torch.stack([s for s, _ in paths])
    log_z = torch.logsumexp(scores, 0)
    w = (scores - log_z).exp()
    m_init = torch.zeros(C, dtype=torch.float64)
    m_trans = torch.zeros(C, C, dtype=torch.float64)
    m_dur = torch.zeros(C, K, dtype=torch.float64)
    m_emit = torch.zeros(T, K, C, dtype=torch.float64)
    for wi, (_, segs) in zip(w, paths):
        m_init[segs[0][2]] += wi
        for m, (a, ln, c) in enumerate(segs):
            m_dur[c, ln - 1] += wi
            m_emit[a, ln - 1, c] += wi
            if m:
                m_trans[segs[m - 1][2], c] += wi
    return log_z, m_init, m_trans, m_dur, m_emit


def brute_posterior(init, trans, dur, emit_b, length):
    """``{segmentation (tuple of (start, len, state)): (score, posterior probability)}`` by enumeration."""
    paths = enumerate_paths(init, trans, dur, emit_b, length)
    scores = torch.stack([s for s, _ in paths])
    probs = (scores - torch.logsumexp(scores, 0)).exp()
    return {tuple(segs): (float(s), float(p)) for (s, segs), p in zip(paths, probs)}
