"""The prior over copy factorisations: a two-state explicit-duration (semi-Markov) process over NEW and COPY.

A factorisation ``z`` is a sequence of ``S`` segments ``(c_s, d_s, o_s)``: state ``c_s`` in {NEW, COPY}, duration
``d_s >= 1`` units and, for a COPY, its offset ``o_s >= 1``, how far back its source starts (:mod:`.factorize`).
Its log-probability is

    log P(z) = log pi(c_1) + sum_{s >= 2} log A(c_{s-1}, c_s) + log A(c_S, END)
               + sum_s log D_{c_s}(d_s) + sum_{s: c_s = COPY} log O(o_s | d_s).

``A`` is ``(2, 3)``: from NEW and from COPY to NEW, COPY and END (NEW -> NEW has probability 0: adjacent NEW units
are one segment).  ``pi`` puts all its mass on NEW, since the first unit has nothing before it to copy.  A COPY
lasts at least ``min_copy`` units, so its duration is read as ``d - min_copy + 1``.  ``D_c`` is a distribution over
``1 .. infinity`` on log2-width bins (:class:`LogBinned`).  The offset of a copy of ``d`` units is

    O(o | d) = lambda / d                     for o <= d   (a loop: the copy starts where its source ends, or
                                                            inside it, and repeats it with period o),
    O(o | d) = (1 - lambda) G(o - d)          for o > d    (a distant copy: o - d units between source and copy),

``G`` log2-binned like the durations: a loop's period is uniform on ``1 .. d``, and ``lambda`` is how often real
text repeats a span right after itself.

Latent values are tensors ``(..., S, 3)`` of ``(state, duration, offset)`` rows (offset 0 for NEW), padded with
:data:`critic.latent.PAD` rows after each sequence's ``S`` segments.
"""

from __future__ import annotations

import math

import torch
from torch.distributions import Distribution, constraints

from critic.latent import PAD

__all__ = ["NEW", "COPY", "END", "log2_bin", "LogBinned", "CopySemiMarkov"]

NEW, COPY, END = 0, 1, 2


def log2_bin(value: torch.Tensor, bins: int) -> torch.Tensor:
    """The bin of each value ``>= 1``: ``floor(log2 value)`` (exact, from the float's exponent), at most ``bins``
    (the tail)."""
    return (torch.frexp(value.to(torch.float64)).exponent.long() - 1).clamp_max(bins)


class LogBinned:
    """Distributions over ``d = 1, 2, ..`` from ``B + 1`` bin weights ``w`` (``log_weights (R, B + 1)``, one
    distribution per row, each row summing to 1):

        P(d) = w_b / (d H_b)                    for 2^b <= d < 2^(b+1), b = floor(log2 d) < B,
        P(d) = w_B q (1 - q)^(d - 2^B)          for d >= 2^B, with q = 2^-B,

    ``H_b = sum_{2^b <= d < 2^(b+1)} 1/d = psi(2^(b+1)) - psi(2^b)``: inside each log2-width bin the mass is
    uniform in ``log d`` (so ``-log P(d)`` grows with ``d`` inside a bin, and two durations tie only where they are
    equal), and beyond the last bin a geometric tail whose mean excess, ``2^B - 1``, continues the doubling.  Each
    bin's mass is ``w_b`` (the tail's too), so every row sums to 1 over ``d``.
    """

    def __init__(self, log_weights: torch.Tensor):
        self.log_weights = log_weights.to(torch.float64)
        self.bins = log_weights.shape[-1] - 1
        edges = 2.0 ** torch.arange(self.bins + 1, dtype=torch.float64, device=log_weights.device)
        self.log_harmonic = (torch.special.digamma(edges[1:]) - torch.special.digamma(edges[:-1])).log()  # (B,)

    def log_prob(self, row: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``log P_row(value)``, elementwise over tensors of one shape (``value >= 1``)."""
        d = value.to(torch.float64)
        b = log2_bin(d, self.bins)
        q = 2.0 ** -self.bins
        in_tail = math.log(q) + (d - 2.0 ** self.bins) * math.log1p(-q)
        in_bin = -d.log() - self.log_harmonic[b.clamp_max(self.bins - 1)]
        return self.log_weights[row, b] + torch.where(b == self.bins, in_tail, in_bin)


class CopySemiMarkov(Distribution):
    """``P(z)`` of the module docstring from ``log_transition (2, 3)`` (rows NEW, COPY; columns NEW, COPY, END),
    the bin log-weights ``log_duration (3, B + 1)`` (NEW durations, COPY durations, distant copies' gaps
    ``o - d``), ``log_loop`` (``log lambda``) and ``min_copy``.  ``log_prob`` of ``(..., S, 3)`` padded segment
    rows has shape ``(...)``; ``S(z) + 1`` factors of ``A`` (the transitions, END included) are scored."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, log_transition: torch.Tensor, log_duration: torch.Tensor, log_loop: float, min_copy: int):
        if log_transition.shape != (2, 3) or log_duration.dim() != 2 or log_duration.shape[0] != 3:
            raise ValueError("log_transition must be (2, 3) and log_duration (3, B + 1)")
        self.log_transition = log_transition.to(torch.float64)
        self.binned = LogBinned(log_duration)
        self.log_loop = float(log_loop)
        self.min_copy = int(min_copy)
        self.log_initial = torch.tensor([0.0, -math.inf], dtype=torch.float64, device=log_transition.device)
        super().__init__(batch_shape=torch.Size(), validate_args=False)

    def log_duration(self, state: torch.Tensor, duration: torch.Tensor) -> torch.Tensor:
        """``log D_state(d)``, a COPY's duration counted from ``min_copy`` (``-inf`` below it)."""
        shifted = torch.where(state == COPY, duration - (self.min_copy - 1), duration)
        value = self.binned.log_prob(state, shifted.clamp_min(1))
        return torch.where(shifted >= 1, value, torch.full_like(value, -math.inf))

    def log_offset(self, duration: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """``log O(o | d)`` of copies of ``duration`` units with ``offset`` (``-inf`` for an offset below 1)."""
        d = duration.to(torch.float64)
        loop = self.log_loop - d.log()
        gap = self.binned.log_prob(torch.full_like(offset, 2), (offset - duration).clamp_min(1))
        value = torch.where(offset <= duration, loop, math.log(-math.expm1(self.log_loop)) + gap)
        return torch.where(offset >= 1, value, torch.full_like(value, -math.inf))

    def segment_log_probs(self, value: torch.Tensor) -> torch.Tensor:
        """``(..., S + 1)``: per segment ``s`` its factors in ``log P(z)``, ``log A(c_{s-1}, c_s) + log D_{c_s}(d_s)
        (+ log O(o_s | d_s) for a COPY)`` (``log pi(c_1)`` in place of ``A`` for the first), then the END
        transition ``log A(c_S, END)`` at column ``S``; 0 at the padded columns.  Their sum is ``log P(z)``."""
        state, duration, offset = value[..., 0], value[..., 1].clamp_min(1), value[..., 2]
        mask = state != PAD
        count = mask.sum(-1)
        if (count == 0).any():
            raise ValueError("CopySemiMarkov.log_prob got a factorisation with no segment")
        c = state.clamp_min(0)
        zero = torch.zeros((), dtype=torch.float64, device=value.device)
        enter = torch.cat([self.log_initial[c[..., :1]], self.log_transition[c[..., :-1], c[..., 1:]]], -1)
        where = torch.where(c == COPY, self.log_offset(duration, offset), zero)
        # where, not multiply: a -inf at a padded step must not give -inf * 0 = NaN
        steps = torch.where(mask, enter + self.log_duration(c, duration) + where, zero)
        last = c.gather(-1, (count - 1).unsqueeze(-1)).squeeze(-1)
        end = torch.where(torch.arange(steps.shape[-1] + 1, device=value.device) == count.unsqueeze(-1),
                          self.log_transition[last, END].unsqueeze(-1), zero)
        return torch.cat([steps, zero.expand(*steps.shape[:-1], 1)], -1) + end

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.segment_log_probs(value).sum(-1)
