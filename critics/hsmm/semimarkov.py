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

One forward recursion (:func:`_forward`), linear in ``T``, serves every
programme; only the semiring changes:

    beta_0(c)  = init(c)
    alpha_t(c) = (+)_{k < min(K, t)} beta_{t-k-1}(c) (x) dur(c, k) (x) emit(t-k-1, k, c)   (segments ending after token t-1)
    beta_t(c)  = (+)_{c'} alpha_t(c') (x) trans(c', c)
    score_b    = (+)_c alpha_{len_b}(c)

with ``(+) = logsumexp`` for the log-partition (:class:`LogSemiring`; its
gradients are the marginals) and ``(+) = max`` for Viterbi
(:class:`MaxSemiring`, which also returns the arg-max back-pointers).

Both ``(+)`` are positively homogeneous, so the recursion works on *scaled
probabilities*: every ``beta_s`` is kept as ``exp(lb_s) * P_s`` with ``P_s <= 1``
and the segment scores are exponentiated as they are, or, if that
leaves the dtype's range anywhere, shifted by per-row maxima; the
semirings run in the ``(+, x)`` / ``(max, x)`` semirings over those non-negative
values.  The ``C x C`` step is then a plain matrix product with ``exp(trans)``
(the cost floor), the ``K`` step a batched ``(1 x K)(K x C)`` product, and the
segment scores are read through one strided view of ``emit`` (no gather, no
``B x T x K x C x C`` edge tensor as torch-struct's
:class:`~torch_struct.SemiMarkovCRF` takes).  Terms smaller than the largest at
the same position by more than the dtype's range (``e^-708`` in float64, the
default; ``e^-87`` in float32) are dropped.  Mixed lengths are exact: each
sequence's score is read at its own end.

The same recursion runs in log space over torch-struct's semiring classes
(:func:`semiring_sum`; values carry the semiring's leading dimension): the
posterior entropy (:func:`entropy`, ``EntropySemiring``), the ``k`` best
segmentations (:func:`kbest`, ``KMaxSemiring(k)``) and posterior samples
(:func:`sample`, ``MultiSampledSemiring``; ``SampledSemiring`` through
:func:`semiring_marginals`), the last two read off gradients with respect to
``emit`` as torch-struct does.

:func:`edge_potentials` builds torch-struct's edge tensor from the factors
(``edge[b, n, k, c2, c1]``, shape ``(B, T, K + 1, C, C)``, lengths ``T + 1``)
so tests and benchmarks can compare with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch_struct import EntropySemiring, KMaxSemiring, MultiSampledSemiring

__all__ = [
    "NEG",
    "LogSemiring",
    "MaxSemiring",
    "log_partition",
    "EdgeCounts",
    "Marginals",
    "edge_counts",
    "marginals",
    "viterbi",
    "edge_potentials",
    "segments_from_path",
    "semiring_sum",
    "semiring_marginals",
    "entropy",
    "kbest",
    "sample",
    "segments_from_indicator",
]

NEG = -1e9
"""Large negative score used for impossible events (``-inf`` gives NaN gradients)."""


class LogSemiring:
    """``(+, x)`` over scaled probabilities: the log-partition after the final log."""

    @staticmethod
    def dot(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``out[b, c] = sum_j w[b, j] x[b, j, c]``: ``(B, K), (B, K, C) -> (B, C)``."""
        return torch.bmm(w.unsqueeze(1), x).squeeze(1), None

    @staticmethod
    def matmul(a: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``out[b, c] = sum_c' a[b, c'] m[(b,) c', c]``: ``(B, C), (C, C) | (B, C, C) -> (B, C)``."""
        if m.dim() == 3:
            return torch.bmm(a.unsqueeze(1), m).squeeze(1), None
        return a @ m, None

    @staticmethod
    def total(a: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``sum_c a[b, c]``: ``(B, C) -> (B,)``."""
        return a.sum(-1), None


class MaxSemiring:
    """``(max, x)`` over scaled probabilities: Viterbi; each step also returns its arg-max."""

    @staticmethod
    def dot(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``max_j w[b, j] x[b, j, c]`` and the best ``j``: ``(B, C)`` each."""
        return (w.unsqueeze(-1) * x).max(1)

    @staticmethod
    def matmul(a: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``max_c' a[b, c'] m[(b,) c', c]`` and the best ``c'``: ``(B, C)`` each."""
        return (a.unsqueeze(-1) * m).max(-2)

    @staticmethod
    def total(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``max_c a[b, c]`` and the best ``c``: ``(B,)`` each."""
        return a.max(-1)


def _batched(x: torch.Tensor, batch: int, ndim: int) -> torch.Tensor:
    return x if x.dim() == ndim + 1 else x.unsqueeze(0).expand(batch, *x.shape)


def _lengths(lengths: torch.Tensor | None, B: int, T: int, device: torch.device) -> torch.Tensor:
    """``lengths`` checked to lie in ``1..T``; ``None`` means ``T`` for every sequence."""
    if lengths is None:
        return torch.full((B,), T, dtype=torch.long, device=device)
    if int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must lie in 1..{T}")
    return lengths


def _end_windows(emit: torch.Tensor) -> Iterator[torch.Tensor]:
    """Emission scores of the segments ending after each token: ``T`` views ``(B, min(t, K), C)``.

    Window ``t - 1`` (``t = 1 .. T``) holds in row ``j`` the segment of length
    ``n - j`` ending after token ``t - 1``, ``n = min(t, K)`` (longest first:
    the segments that start at ``t - n .. t - 1``), i.e.
    ``emit[:, t - n + j, n - 1 - j]``.  In a contiguous ``emit`` that row sits at
    element offset ``(t - n) K C + (n - 1) C + j (K - 1) C``, so the full windows
    (``t >= K``) are one strided view (strides ``(T K C, K C, (K - 1) C, 1)``) and
    the first ``K - 1`` the leading rows of another (strides
    ``(T K C, C, (K - 1) C, 1)``); no copy.  With autograd each view is unbound
    at once (one autograd node apiece, where a node per window would give each
    a gradient the size of ``emit``); without, the windows are selected as the
    recursion reaches them (cheaper than making ``T`` views up front).
    """
    B, T, K, C = emit.shape
    e = emit.contiguous()
    off, h = e.storage_offset(), min(T, K - 1)
    head = e.as_strided((B, h, h, C), (T * K * C, C, (K - 1) * C, 1), off)
    full = e.as_strided((B, T - h, K, C), (T * K * C, K * C, (K - 1) * C, 1), off + (K - 1) * C)
    if e.requires_grad:
        head, full = head.unbind(1), full.unbind(1)
        yield from (x[:, :t] for t, x in enumerate(head, start=1))
        yield from full
    else:
        yield from (head[:, t - 1, :t] for t in range(1, h + 1))
        yield from (full[:, i] for i in range(T - h))


class _Betas:
    """Scaled betas ``beta_s = exp(lb[:, s]) * P[:, s]`` for ``s = 0 .. T - 1``.

    Each position is written once and read in the windows ``max(0, t - K) .. t - 1``.
    Without autograd they live in ``(B, T, C)`` / ``(B, T)`` buffers read as
    slices; with autograd (where writing into a buffer would invalidate the
    slices saved for the backward pass) in lists stacked per window.
    """

    def __init__(self, B: int, T: int, K: int, C: int, like: torch.Tensor, inplace: bool):
        self.K, self.inplace = K, inplace
        if inplace:
            self.P, self.lb = like.new_empty(B, T, C), like.new_empty(B, T)
        else:
            self.P, self.lb = [], []

    def put(self, s: int, U: torch.Tensor, n: torch.Tensor, M: torch.Tensor) -> None:
        """Store ``P_s = U / n`` and ``lb_s = M + log n`` (``U (B, C)``, ``n, M (B, 1)``)."""
        if self.inplace:
            torch.div(U, n, out=self.P[:, s])
            torch.add(M, n.log(), out=self.lb[:, s : s + 1])
        else:
            self.P.append(U / n)
            self.lb.append(M + n.log())

    def window(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P (B, n, C), lb (B, n))`` of positions ``t - n .. t - 1``, ``n = min(t, K)``."""
        s = max(0, t - self.K)
        if self.inplace:
            return self.P[:, s:t], self.lb[:, s:t]
        return torch.stack(self.P[s:t], 1), torch.cat(self.lb[s:t], 1)


def _alpha(semiring, scores, dur_w, P_w, lb_w, buf, shift):
    """One ``K`` step: ``alpha_t = exp(M) * A`` with ``A[b, c] = (+)_j w[b, j] P_w[b, j, c] exp(x[b, j, c] - sh[b, j])``.

    ``x = scores + dur_w`` are the segment scores ``(B, n, C)`` and ``w = exp(lb_w
    + sh - M)`` the rows' scales, ``M = max_j (lb_w + sh)``.  With ``shift``,
    ``sh = max_c x`` (every exponent ``<= 0``); without, ``sh = 0``, which saves
    two passes and is exact whenever ``exp(x)`` is representable -- the caller
    checks the totals and retries with ``shift``.  With ``buf`` (no autograd) the
    ``(B, n, C)`` passes run in place in that buffer.
    Returns ``(M (B, 1), A (B, C), tot (B,), row arg-max | None, state arg-max | None)``.
    """
    x = torch.add(scores, dur_w, out=buf)
    if shift:
        sh = x.detach().amax(-1, keepdim=True)
        x = x.sub_(sh) if buf is not None else x - sh
        lb_w = lb_w + sh.squeeze(-1)  # (B, n): log-scale of row j
    X = x.exp_().mul_(P_w) if buf is not None else x.exp() * P_w
    M = lb_w.amax(1, keepdim=True)
    A, kp = semiring.dot(lb_w.sub(M).exp_(), X)
    tot, lp = semiring.total(A)
    return M, A, tot, kp, lp


def _forward(semiring, init, trans, dur, emit, lengths, dtype, shift=False):
    """The semi-Markov forward recursion (module docstring) in ``semiring``.

    Returns ``(score (B,), pointers)``; ``pointers`` is ``None`` for a semiring
    without arg-max, else ``(k_ptr (B, T, C), c_ptr (B, T, C), last (B,))``:
    ``k_ptr[:, t - 1, c]`` is the best row ``j`` (length ``K - j``) of
    ``alpha_t(c)``, ``c_ptr[:, s, c]`` the best previous state of ``beta_s(c)``
    (a segment starting at ``s``; ``0`` for ``s = 0``) and ``last`` the best
    final state at each sequence's end.  The first pass exponentiates the
    segment scores unshifted (:func:`_alpha`); if any step's total (inside its
    sequence) is below ``sqrt(tiny)``, or any is not finite, the pass is redone
    with per-row shifts.
    """
    B, T, K, C = emit.shape
    dtype = dtype or emit.dtype
    init, trans, dur, emit = (x.to(dtype) for x in (init, trans, dur, emit))
    lengths = _lengths(lengths, B, T, emit.device)
    inplace = not (torch.is_grad_enabled() and any(x.requires_grad for x in (init, trans, dur, emit)))
    tiny = torch.finfo(dtype).tiny
    # exp(trans - g), g the largest transition score (per batch).  Every segmentation has one segment more
    # than it has transitions, so adding g to every segment score gives each exactly g back: taken off the end
    g = trans.detach().amax((-1, -2), keepdim=True)  # (1, 1) or (B, 1, 1)
    exp_trans = (trans - g).exp()  # row-major: the floor's layout (column-major was 2.4x slower at C = 800 here)
    dur_w = dur.transpose(-1, -2).flip(-2) + g  # dur_w[(b,) j, c] = dur[(b,) c, K - 1 - j] + g
    i0 = _batched(init, B, 1)
    i_max = i0.detach().amax(-1, keepdim=True)
    betas = _Betas(B, T, K, C, emit, inplace)
    betas.put(0, (i0 - i_max).exp(), torch.ones_like(i_max), i_max)
    buf = emit.new_empty(B, K, C) if inplace else None
    log_scale, totals, k_ptr, c_ptr, last = [], [], [], [], []
    for t, scores in enumerate(_end_windows(emit), start=1):
        n = scores.shape[1]  # min(t, K) rows: lengths n .. 1
        P_w, lb_w = betas.window(t)
        if n < K:
            dw, bw = dur_w[..., K - n :, :], None if buf is None else buf[:, :n]
        else:
            dw, bw = dur_w, buf
        M, A, tot, kp, lp = _alpha(semiring, scores, dw, P_w, lb_w, bw, shift)
        log_scale.append(M)
        totals.append(tot)
        k_ptr.append(kp if kp is None or n == K else kp + (K - n))  # row j of a full window: length K - j
        last.append(lp)
        if t < T:
            U, cp = semiring.matmul(A, exp_trans)  # beta_t = exp(M) * U, and U <= tot
            betas.put(t, U, tot.detach().clamp_min(tiny).unsqueeze(1), M)
            c_ptr.append(cp)
    totals = torch.stack(totals, 1)
    inside = torch.arange(T, device=emit.device) < lengths[:, None]
    if not shift and not (float(totals.detach()[inside].min()) > tiny**0.5 and bool(totals.detach().isfinite().all())):
        # some unshifted exp(x) left the dtype's range: the dropped terms (each < tiny) are not negligible
        # against a total below sqrt(tiny) (only read inside a sequence), or something overflowed (anywhere:
        # it would turn the zero gradients past a sequence's end into NaN) -- redo with shifts
        return _forward(semiring, init, trans, dur, emit, lengths, dtype, shift=True)
    at = (torch.arange(B, device=emit.device), lengths - 1)
    score = torch.cat(log_scale, 1)[at] + totals[at].clamp_min(tiny).log() - g.reshape(-1)
    if k_ptr[0] is None:
        return score, None
    start_ptr = torch.stack([torch.zeros_like(k_ptr[0]), *c_ptr], 1)
    return score, (torch.stack(k_ptr, 1), start_ptr, torch.stack(last, 1)[at])


def log_partition(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """Log-partition ``log sum_segmentations exp(score)`` per sequence, shape ``(B,)``.

    Computed (and returned) in ``dtype``: float64 by default; ``None`` keeps
    ``emit``'s dtype (float32 is about twice as fast, with ``e^-87`` of range).
    Differentiable: its gradients are the :func:`marginals`.
    """
    return _forward(LogSemiring, init, trans, dur, emit, lengths, dtype)[0]


@dataclass
class EdgeCounts:
    """Posterior expected counts of the prior's edges (gradients of the log-partition with respect to them)."""

    log_z: torch.Tensor  # (B,)
    init: torch.Tensor  # (B, C): state of the first segment
    trans: torch.Tensor  # (B, C, C): expected transition counts
    dur: torch.Tensor  # (B, C, K): expected segment counts per state and length

    @property
    def num_segments(self) -> torch.Tensor:
        return self.dur.sum((-1, -2))


@dataclass
class Marginals(EdgeCounts):
    """Posterior expected counts of every factor: the edges' and the segments'."""

    emit: torch.Tensor  # (B, T, K, C): P(segment (t, k) in state c)


def _gradients(init, trans, dur, emit, lengths, dtype, segments: bool) -> list[torch.Tensor]:
    """``[log Z (B,), d log Z / d init, ... / d trans, ... / d dur]`` (the factors expanded to the batch first, so
    each sequence gets its own gradient) and, with ``segments``, ``d log Z / d emit``; gradients in the inputs'
    dtypes."""
    B = emit.shape[0]
    with torch.enable_grad():
        leaves = [_batched(x, B, n).detach().clone().requires_grad_(True) for x, n in ((init, 1), (trans, 2), (dur, 2))]
        e = emit.detach().clone().requires_grad_(True) if segments else emit.detach()
        log_z = log_partition(*leaves, e, lengths, dtype=dtype)
        if segments:
            leaves.append(e)
        grads = torch.autograd.grad(log_z.sum(), leaves, allow_unused=True)
    return [log_z.detach(), *(torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves))]


def edge_counts(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> EdgeCounts:
    """Per-sequence posterior counts of the initial state, transitions and durations: the :func:`marginals`
    without the segments'.

    Autograd of :func:`log_partition` with respect to ``init, trans, dur`` only: ``emit`` is neither
    copied nor given a gradient, so the memory is the forward pass's graph (about three ``(B, K, C)``
    tensors per position) and no ``(B, T, K, C)`` beside ``emit``.
    """
    return EdgeCounts(*_gradients(init, trans, dur, emit, lengths, dtype, segments=False))


def marginals(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> Marginals:
    """Per-sequence posterior marginals by autograd of :func:`log_partition`.

    The factors are expanded to the batch first so each sequence gets its own
    gradient; gradients come back in the inputs' dtypes.
    """
    return Marginals(*_gradients(init, trans, dur, emit, lengths, dtype, segments=True))


def viterbi(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Best segmentation per sequence: :func:`_forward` in :class:`MaxSemiring`, then back-tracking.

    Returns ``(score (B,), states (B, T), starts (B, T) bool)``: ``states[b, t]``
    is the state of the segment covering token ``t`` (``-1`` past the end) and
    ``starts[b, t]`` marks segment starts.
    """
    B, T, K, C = emit.shape
    dev = emit.device
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long, device=dev)
    with torch.no_grad():
        score, (k_ptr, c_ptr, state) = _forward(MaxSemiring, init, trans, dur, emit, lengths, dtype)
        k_len = K - 1 - k_ptr  # row j holds length K - j
        ar = torch.arange(B, device=dev)
        states = torch.full((B, T), -1, dtype=torch.long, device=dev)
        starts = torch.zeros((B, T), dtype=torch.bool, device=dev)
        end = lengths.clone()  # exclusive end of the current segment
        pos = torch.arange(T, device=dev)
        for _ in range(T):  # at most T segments; vectorised over the batch
            active = end > 0
            if not bool(active.any()):
                break
            start = end - 1 - k_len[ar, (end - 1).clamp_min(0), state]
            cover = active[:, None] & (pos[None] >= start[:, None]) & (pos[None] < end[:, None])
            states = torch.where(cover, state[:, None], states)
            starts[ar[active], start[active]] = True
            state = torch.where(active & (start > 0), c_ptr[ar, start.clamp_min(0), state], state)
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
    return edge


# ---------------------------------------------------------------------------- torch-struct semirings


def semiring_sum(
    semiring,
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """The forward recursion in log space over a torch-struct semiring: raw totals ``(S, B)``.

    ``semiring`` is a class of :mod:`torch_struct.semirings`; its values carry a
    leading dimension ``S = semiring.size()`` (read the result with
    ``semiring.unconvert``).  A segment's potential ``dur(c, k) + emit(s, k, c)``
    and the transitions are converted once, then

        beta_0    = convert(init)                                        (S, B, C)
        alpha_t   = sum_j  beta_{t-n+j} (x) convert(dur_w[j] + window_t[j])
        beta_t    = matmul(alpha_t, convert(trans))
        total_b   = sum_c  alpha_{len_b}(c)

    with ``(+), (x)`` the semiring's ``sum`` and ``mul`` and ``window_t`` the
    segments ending after token ``t - 1`` (:func:`_end_windows`, no copy).  Each
    step holds ``(S, B, K, C)`` and, in torch-struct's generic ``matmul``, an
    ``(S, B, C, C)`` broadcast -- never the ``(B, T, K, C, C)`` edge tensor; with
    autograd (samples, k-best) the graph keeps the latter per position, so memory
    grows as ``T S B C^2``.  Differentiable; gradients with respect to ``emit``
    are torch-struct's "marginals" (:func:`semiring_marginals`).
    """
    B, T, K, C = emit.shape
    dtype = dtype or emit.dtype
    lengths = _lengths(lengths, B, T, emit.device)
    init, trans, dur, emit = (x.to(dtype) for x in (init, trans, dur, emit))
    trans_s = semiring.convert(_batched(trans, B, 2))  # (S, B, C, C)
    dur_w = dur.transpose(-1, -2).flip(-2)  # dur_w[(b,) j, c] = dur[(b,) c, K - 1 - j]
    betas, alphas = [semiring.convert(_batched(init, B, 1))], []
    for t, scores in enumerate(_end_windows(emit), start=1):
        n = scores.shape[1]  # rows j = 0 .. n - 1: segments of length n - j, starting at t - n + j
        seg = semiring.convert(scores + dur_w[..., K - n :, :])  # (S, B, n, C)
        alpha = semiring.sum(semiring.mul(torch.stack(betas[-n:], -2), seg).transpose(-1, -2))  # (S, B, C)
        alphas.append(alpha)
        if t < T:
            betas.append(semiring.matmul(alpha.unsqueeze(-2), trans_s).squeeze(-2))
    ends = torch.stack(alphas, -2)[:, torch.arange(B, device=emit.device), lengths - 1]  # (S, B, C)
    return semiring.sum(ends)


def _kmax_semiring(k: int):
    """torch-struct's ``KMaxSemiring(k)`` with the unused slots of a converted potential at ``-inf``.

    torch-struct pads with ``-1e5``, which outranks real segmentations scoring below
    ``-1e5`` (long documents) and fills the list when fewer than ``k`` exist; ``-inf``
    keeps them out.
    """
    base = KMaxSemiring(k)

    class InfPaddedKMaxSemiring(base):
        @classmethod
        def convert(cls, potentials: torch.Tensor) -> torch.Tensor:
            values = base.convert(potentials)
            values[1:] = -math.inf
            return values

    return InfPaddedKMaxSemiring


def _emit_leaf(emit: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A fresh leaf copy of ``emit`` in ``dtype`` whose gradient the programme reads."""
    return emit.detach().to(dtype or emit.dtype).requires_grad_(True)


def semiring_marginals(
    semiring,
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """``d unconvert(semiring_sum) / d emit``, shape ``(B, T, K, C)``: torch-struct's marginals per segment.

    ``LogSemiring``: posterior segment marginals; ``MaxSemiring``: the Viterbi
    segmentation as 0/1; ``SampledSemiring``: one posterior sample as 0/1
    (forward filtering, backward sampling by autograd); ``MultiSampledSemiring``:
    16 samples, sample ``j`` bit-coded (read it with ``to_discrete(m, j)``).  The
    sampling semirings draw from torch's global generator.
    """
    with torch.enable_grad():
        e = _emit_leaf(emit, dtype)
        v = semiring.unconvert(semiring_sum(semiring, init.detach(), trans.detach(), dur.detach(), e, lengths, dtype=dtype))
        return torch.autograd.grad(v.sum(), e)[0]


def entropy(
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """Entropy of the segmentation posterior, ``H(z | x) = -sum_z p(z | x) log p(z | x)``, ``(B,)`` nats.

    Exact, in one forward pass of ``EntropySemiring`` (pairs ``(log Z, H)``:
    ``(+)`` merges entropies weighted by the posterior of each branch).
    """
    return EntropySemiring.unconvert(semiring_sum(EntropySemiring, init, trans, dur, emit, lengths, dtype=dtype))


def segments_from_indicator(indicator: torch.Tensor) -> list[tuple[int, int, int]]:
    """``(start, length, state)`` triples, in order, of a 0/1 segment indicator ``(T, K, C)``."""
    return [(s, k + 1, c) for s, k, c in indicator.nonzero().tolist()]


def kbest(
    k: int,
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> tuple[torch.Tensor, list[list[list[tuple[int, int, int]]]]]:
    """The ``k`` highest-scoring segmentations of each sequence (``KMaxSemiring(k)``).

    Returns ``scores (k, B)``, best first, ``-inf`` past the number of
    segmentations a sequence has, and ``segmentations[b]``: the ``(start, length,
    state)`` lists of the finite scores, best first.  Segmentation ``i`` is the
    gradient of score ``i`` with respect to ``emit`` (a 0/1 indicator of its
    segments), as in torch-struct's ``topk``: ``k`` backward passes through one
    graph.
    """
    with torch.enable_grad():
        e = _emit_leaf(emit, dtype)
        scores = semiring_sum(_kmax_semiring(k), init.detach(), trans.detach(), dur.detach(), e, lengths, dtype=dtype)
        parts = [torch.autograd.grad(scores[i].sum(), e, retain_graph=i < k - 1)[0] for i in range(k)]
    scores = scores.detach()
    segmentations = [
        [segments_from_indicator(part[b]) for part, score in zip(parts, scores[:, b]) if score > -math.inf]
        for b in range(emit.shape[0])
    ]
    return scores, segmentations


def sample(
    n: int,
    init: torch.Tensor,
    trans: torch.Tensor,
    dur: torch.Tensor,
    emit: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = torch.float64,
) -> torch.Tensor:
    """``n`` exact posterior samples ``z ~ p(z | x)`` per sequence: 0/1 segment indicators ``(n, B, T, K, C)``.

    ``MultiSampledSemiring``: each backward pass of the log-partition draws 16
    independent segmentations (forward filtering, backward sampling), bit-coded
    in one gradient.  Draws come from torch's global generator (seed it with
    ``torch.manual_seed``).  :func:`segments_from_indicator` lists a sample's segments.
    """
    sr = MultiSampledSemiring
    draws = []
    while len(draws) < n:
        coded = semiring_marginals(sr, init, trans, dur, emit, lengths, dtype=dtype)
        draws += [sr.to_discrete(coded, j) for j in range(16)]
    return torch.stack(draws[:n])
