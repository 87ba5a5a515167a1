"""Semi-Markov dynamic programmes on *factorised* potentials.

A segmentation of a sequence of length ``T`` into segments ``(start, length,
state)`` scores

    init[c_1] + sum_m trans[c_{m-1}, c_m] + sum_m dur[c_m, k_m] + sum_m emit[start_m, k_m, c_m]

with ``k`` the length index (``k = 0`` is a segment of one token).  Shapes:

* ``init``  ``(C,)`` or ``(B, C)``
* ``trans`` ``(C, C)`` or ``(B, C, C)``, ``trans[from, to]``
* ``dur``   ``(C, K)`` or ``(B, C, K)``
* ``emit``  ``(B, T, K, C)``: segment starting at ``t`` of length ``k + 1`` in state ``c``
* ``lengths`` ``(B,)`` long; each sequence uses positions ``0 .. lengths[b] - 1``

The forward pass is linear in ``T`` and never builds the ``B x T x K x C x C``
edge tensor that torch-struct's :class:`~torch_struct.SemiMarkovCRF` takes:
the ``C x C`` step is a log-space matrix product (``exp``-``matmul``-``log``,
in float64 by default so that nothing short of ``e^-700`` underflows), and the
``K`` step is a ``logsumexp`` over the last ``K`` betas.  Mixed lengths are
exact: each sequence's partition is read at its own end.  Marginals are
gradients of the log-partition; Viterbi keeps back-pointers.

:func:`edge_potentials` builds torch-struct's edge tensor from the factors
(``edge[b, n, k, c2, c1]``, shape ``(B, T, K + 1, C, C)``, lengths ``T + 1``)
so tests and benchmarks can compare with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "NEG",
    "log_partition",
    "marginals",
    "viterbi",
    "edge_potentials",
    "segments_from_path",
]

NEG = -1e9
"""Large negative score used for impossible events (``-inf`` gives NaN gradients)."""


def _batched(x: torch.Tensor, batch: int, ndim: int) -> torch.Tensor:
    return x if x.dim() == ndim + 1 else x.unsqueeze(0).expand(batch, *x.shape)


def _segment_end_scores(emit: torch.Tensor, dur: torch.Tensor) -> torch.Tensor:
    """``S[b, t, k, c]``: score of the segment of length ``k + 1`` *ending* at ``t + 1``.

    Segments that would start before position 0 get :data:`NEG`.
    """
    B, T, K, C = emit.shape
    pad = emit.new_full((B, K, K, C), NEG)
    emit_p = torch.cat([pad, emit], dim=1)  # (B, T + K, K, C)
    ks = torch.arange(K, device=emit.device)
    t_end = torch.arange(1, T + 1, device=emit.device)
    start = t_end[:, None] - (ks[None, :] + 1) + K  # (T, K) index into emit_p
    S = emit_p[:, start, ks[None, :], :]  # (B, T, K, C)
    dur_b = _batched(dur, B, 2)  # (B, C, K)
    return S + dur_b.transpose(1, 2).unsqueeze(1)


def _exp_trans(trans: torch.Tensor, stable: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp(trans - colmax), colmax)``, computed once per forward pass (not per step)."""
    t = trans.double() if stable else trans
    mt = t.amax(-2, keepdim=True).detach()  # per destination column
    return (t - mt).exp(), mt.squeeze(-2)


def _logmatmulexp(alpha: torch.Tensor, exp_trans: torch.Tensor, col_max: torch.Tensor) -> torch.Tensor:
    """``out[b, j] = logsumexp_i alpha[b, i] + trans[(b,) i, j]`` without a ``B x C x C`` tensor."""
    a = alpha.to(exp_trans.dtype)
    m = a.amax(-1, keepdim=True).detach()
    prod = torch.matmul((a - m).exp().unsqueeze(-2), exp_trans).squeeze(-2)
    tiny = torch.finfo(prod.dtype).tiny
    out = prod.clamp_min(tiny).log() + m + col_max
    return out.to(alpha.dtype)


def log_partition(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    stable: bool = True,
) -> torch.Tensor:
    """Log-partition ``log sum_segmentations exp(score)`` per sequence, shape ``(B,)``."""
    B, T, K, C = emit.shape
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long, device=emit.device)
    if int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must lie in 1..{T}")
    S = _segment_end_scores(emit, dur)
    exp_trans, col_max = _exp_trans(trans, stable)
    beta0 = _batched(init, B, 1)
    neg = emit.new_full((B, C), NEG)
    window = [neg] * (K - 1) + [beta0]  # window[-1 - k] = beta_{t - 1 - k}
    alphas = []
    S_t = S.unbind(1)  # one backward node for all steps (S[:, t] would cost O(T) each)
    for t in range(T):
        stacked = torch.stack(window[::-1], dim=1)  # (B, K, C): k = 0 -> beta_{t}
        alpha = torch.logsumexp(stacked + S_t[t], dim=1)  # alpha_{t+1}: segments ending at t + 1
        alphas.append(alpha)
        if t + 1 < T:
            window = window[1:] + [_logmatmulexp(alpha, exp_trans, col_max)]
    alpha_all = torch.stack(alphas, dim=1)  # (B, T, C)
    final = alpha_all[torch.arange(B, device=emit.device), lengths - 1]
    return torch.logsumexp(final, dim=-1)


@dataclass
class Marginals:
    """Posterior expected counts (gradients of the log-partition)."""

    log_z: torch.Tensor  # (B,)
    init: torch.Tensor  # (B, C): state of the first segment
    trans: torch.Tensor  # (B, C, C): expected transition counts
    dur: torch.Tensor  # (B, C, K): expected segment counts per state and length
    emit: torch.Tensor  # (B, T, K, C): P(segment (t, k) in state c)

    @property
    def num_segments(self) -> torch.Tensor:
        return self.dur.sum((-1, -2))


def marginals(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    stable: bool = True,
) -> Marginals:
    """Per-sequence posterior marginals by autograd of :func:`log_partition`."""
    B = emit.shape[0]
    with torch.enable_grad():
        i = _batched(init, B, 1).detach().clone().requires_grad_(True)
        tr = _batched(trans, B, 2).detach().clone().requires_grad_(True)
        d = _batched(dur, B, 2).detach().clone().requires_grad_(True)
        e = emit.detach().clone().requires_grad_(True)
        log_z = log_partition(i, tr, d, e, lengths, stable=stable)
        grads = torch.autograd.grad(log_z.sum(), (i, tr, d, e), allow_unused=True)
    gi, gt, gd, ge = (torch.zeros_like(x) if g is None else g for g, x in zip(grads, (i, tr, d, e)))
    return Marginals(log_z.detach(), gi, gt, gd, ge)


def viterbi(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Best segmentation per sequence.

    Returns ``(score (B,), states (B, T), starts (B, T) bool)``: ``states[b, t]``
    is the state of the segment covering token ``t`` (``-1`` past the end) and
    ``starts[b, t]`` marks segment starts.
    """
    B, T, K, C = emit.shape
    dev = emit.device
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long, device=dev)
    with torch.no_grad():
        S = _segment_end_scores(emit, dur)
        tr = _batched(trans, B, 2)
        neg = emit.new_full((B, C), NEG)
        window = [neg] * (K - 1) + [_batched(init, B, 1)]
        alphas, best_k, best_prev = [], [], [torch.zeros(B, C, dtype=torch.long, device=dev)]
        for t in range(T):
            stacked = torch.stack(window[::-1], dim=1) + S[:, t]
            alpha, k = stacked.max(dim=1)
            alphas.append(alpha)
            best_k.append(k)
            if t + 1 < T:
                beta, prev = (alpha.unsqueeze(-1) + tr).max(dim=1)  # over source state
                best_prev.append(prev)
                window = window[1:] + [beta]
        alpha_all = torch.stack(alphas, 1)  # (B, T, C) ending at t + 1
        bk = torch.stack(best_k, 1)  # (B, T, C)
        bp = torch.stack(best_prev, 1)  # (B, T, C): bp[:, s] = best previous state for a segment starting at s
        ar = torch.arange(B, device=dev)
        score, state = alpha_all[ar, lengths - 1].max(-1)
        states = torch.full((B, T), -1, dtype=torch.long, device=dev)
        starts = torch.zeros((B, T), dtype=torch.bool, device=dev)
        end = lengths.clone()  # exclusive end of the current segment
        pos = torch.arange(T, device=dev)
        for _ in range(T):  # at most T segments; vectorised over the batch
            active = end > 0
            if not bool(active.any()):
                break
            e_idx = (end - 1).clamp_min(0)
            k = bk[ar, e_idx, state]
            start = end - k - 1
            cover = active[:, None] & (pos[None] >= start[:, None]) & (pos[None] < end[:, None])
            states = torch.where(cover, state[:, None], states)
            starts[ar[active], start[active]] = True
            new_state = bp[ar, start.clamp_min(0), state]
            state = torch.where(active & (start > 0), new_state, state)
            end = torch.where(active, start, end)
    return score, states, starts


def segments_from_path(states: torch.Tensor, starts: torch.Tensor) -> list[list[tuple[int, int, int]]]:
    """``(start, length, state)`` triples per sequence from a Viterbi path."""
    out = []
    for st, sb in zip(states.tolist(), starts.tolist()):
        n = sum(1 for s in st if s >= 0)
        begins = [i for i in range(n) if sb[i]] + [n]
        out.append([(a, b - a, st[a]) for a, b in zip(begins[:-1], begins[1:])])
    return out


def edge_potentials(
    init: torch.Tensor, trans: torch.Tensor, dur: torch.Tensor, emit: torch.Tensor
) -> torch.Tensor:
    """torch-struct's ``SemiMarkovCRF`` edge tensor ``(B, T, K + 1, C, C)`` for these factors.

    ``edge[b, n, k, c2, c1]`` scores a segment from ``n`` to ``n + k`` in state
    ``c2`` after ``c1``; torch-struct sums the first segment over ``c1``, so the
    initial score goes on ``c1 = 0`` and the other ``c1`` get :data:`NEG`.
    Use with ``lengths = T + 1``.
    """
    B, T, K, C = emit.shape
    i = _batched(init, B, 1)
    tr = _batched(trans, B, 2)
    d = _batched(dur, B, 2)
    seg = emit + d.transpose(1, 2).unsqueeze(1)  # (B, T, K, C)
    edge = seg.new_full((B, T, K + 1, C, C), NEG)
    body = seg.unsqueeze(-1) + tr.transpose(1, 2).unsqueeze(1).unsqueeze(1)  # (B, T, K, c2, c1)
    edge[:, 1:, 1:] = body[:, 1:]
    first = torch.full_like(body[:, 0], NEG)
    first[..., 0] = seg[:, 0] + i.unsqueeze(1)
    edge[:, 0, 1:] = first
    # segments running past the end have NEG emissions already if the caller masked them
    return edge
