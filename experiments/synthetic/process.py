"""The known-process critic: ``P_c = P_data`` (paper sec. 3, app. D).

Posterior inference is deterministic: cut a sequence after every delimiter and
look each subsequence up (each is owned by exactly one state), so ``P_c(z|x)``
is a point mass and ``T_c(x) = -sum_m log P(z_m | z_{m-1})``.  Sequences that
cannot be projected are counted with a reason, never dropped silently:

* ``unknown_subsequence``: some segment is none of the process's subsequences;
* ``no_final_delimiter``: tokens after the last delimiter (or an empty sequence);
* ``wrong_segment_count``: projected, but with a number of segments other than ``M``
  (such sequences *are* scored, with ``M(x)`` their own count, and counted).

Everything is vectorised over the flat token array (no loop over tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from critics.hsmm.ngrams import segment_codes

from .generator import TrueProcess

__all__ = ["Projection", "project", "closed_form_latent_ppl", "log_likelihood", "state_marginals"]


@dataclass
class Projection:
    """Result of projecting sequences with the true process."""

    latent_nll: np.ndarray  # (N,) nan where not projected
    latent_steps: np.ndarray  # (N,) segments found
    emission_ll: np.ndarray  # (N,) log P(x | z), nan where not projected
    ok: np.ndarray  # (N,) bool: projected (scored)
    reasons: dict[str, int] = field(default_factory=dict)
    states: list[np.ndarray] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.ok.size)

    @property
    def n_scored(self) -> int:
        return int(self.ok.sum())

    def summary(self) -> dict:
        return {"n": self.n, "n_scored": self.n_scored, "reasons": dict(self.reasons)}


def _index(process: TrueProcess):
    if not process._index:
        codes, _ = segment_codes(
            process.subseq_tokens[process.subseq_tokens >= 0],
            np.repeat(np.arange(len(process.subseq_lengths)), process.subseq_lengths),
            len(process.subseq_lengths),
            process.config.vocab_size,
        )
        key = np.stack([process.subseq_lengths.astype(np.uint64), codes])
        order = np.lexsort(key[::-1])
        process._index.update(order=order, lens=process.subseq_lengths[order], codes=codes[order])
    return process._index


def project(process: TrueProcess, tokens: np.ndarray, lengths: np.ndarray, *, keep_states: bool = False) -> Projection:
    """Project padded token sequences ``(N, T)`` to their latent states and score them."""
    cfg = process.config
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths, dtype=np.int64)
    N, T = tokens.shape
    mask = np.arange(T)[None, :] < lengths[:, None]
    flat = tokens[mask]
    seq_of = np.repeat(np.arange(N), lengths)
    is_delim = flat == cfg.delimiter
    # segment id: a new segment starts after each delimiter and at each sequence start
    seq_start = np.zeros(flat.size, dtype=bool)
    seq_start[np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]] = True
    after_delim = np.concatenate([[False], is_delim[:-1]])
    seg_start = seq_start | (after_delim & ~seq_start)
    seg_id = np.cumsum(seg_start) - 1
    n_seg_total = int(seg_id[-1]) + 1 if flat.size else 0
    codes, seg_len = segment_codes(flat, seg_id, n_seg_total, cfg.vocab_size)
    seg_seq = seq_of[seg_start] if flat.size else np.zeros(0, dtype=np.int64)
    last_tok_delim = is_delim[np.cumsum(seg_len) - 1] if flat.size else np.zeros(0, dtype=bool)
    # lookup (length, code) in the process's table
    idx = _index(process)
    lo = np.searchsorted(idx["lens"], seg_len, side="left")
    hi = np.searchsorted(idx["lens"], seg_len, side="right")
    found = np.zeros(n_seg_total, dtype=bool)
    sub = np.full(n_seg_total, -1, dtype=np.int64)
    for ln in np.unique(seg_len):  # loop over the <= max_len distinct lengths
        sel = seg_len == ln
        a, b = int(lo[sel][0]), int(hi[sel][0])
        table = idx["codes"][a:b]
        if table.size == 0:
            continue
        pos = np.searchsorted(table, codes[sel]).clip(max=table.size - 1)
        hit = table[pos] == codes[sel]
        found[sel] = hit
        sub[np.flatnonzero(sel)[hit]] = idx["order"][a + pos[hit]]
    found &= last_tok_delim
    n_segs = np.bincount(seg_seq, minlength=N)
    bad_unknown = np.bincount(seg_seq[~found & last_tok_delim], minlength=N) > 0
    trailing = np.bincount(seg_seq, weights=(~last_tok_delim).astype(np.float64), minlength=N) > 0
    trailing |= lengths == 0
    ok = ~bad_unknown & ~trailing
    # latent NLL: -sum log P(z_m | z_{m-1}) over projected sequences
    Z = process.num_states
    state = np.where(sub >= 0, process.owner[np.maximum(sub, 0)], 0)
    first = np.zeros(n_seg_total, dtype=bool)
    first[np.concatenate([[0], np.cumsum(n_segs)[:-1]])[n_segs > 0]] = True
    prev = np.concatenate([[Z], state[:-1]])
    prev = np.where(first, Z, prev)
    step_ll = process.log_trans[prev, state]
    emit_ll = process.log_emit[np.maximum(sub, 0)]
    nll = -np.bincount(seg_seq, weights=step_ll, minlength=N)
    ell = np.bincount(seg_seq, weights=emit_ll, minlength=N)
    nll = np.where(ok, nll, np.nan)
    ell = np.where(ok, ell, np.nan)
    reasons = {
        "unknown_subsequence": int((bad_unknown & ~trailing).sum()),
        "no_final_delimiter": int(trailing.sum()),
        "wrong_segment_count": int((ok & (n_segs != cfg.num_segments)).sum()),
    }
    states = []
    if keep_states:
        bounds = np.concatenate([[0], np.cumsum(n_segs)])
        states = [state[bounds[i]: bounds[i + 1]] for i in range(N)]
    return Projection(nll, n_segs.astype(np.float64), ell, ok, reasons, states)


def state_marginals(process: TrueProcess, steps: int | None = None) -> np.ndarray:
    """``P(z_m = i)`` for ``m = 1 .. M``, shape ``(M, Z)``, from the start state."""
    M = steps or process.config.num_segments
    P = np.exp(process.log_trans.astype(np.float64))
    p = P[-1]
    out = [p]
    for _ in range(M - 1):
        p = p @ P[:-1]
        out.append(p)
    return np.stack(out)


def closed_form_latent_ppl(process: TrueProcess, steps: int | None = None) -> float:
    """``exp(H(z_1 .. z_M) / M)`` exactly: the chain's entropy from state marginals.

    ``H(z_1..z_M) = H(z_1 | start) + sum_{m >= 2} sum_i P(z_{m-1} = i) H(z_m | z_{m-1} = i)``.
    """
    M = steps or process.config.num_segments
    logP = process.log_trans.astype(np.float64)
    row_h = -(np.exp(logP) * logP).sum(1)  # (Z + 1,)
    marg = state_marginals(process, M)
    h = row_h[-1] + (marg[:-1] @ row_h[:-1]).sum()
    return float(np.exp(h / M))


def log_likelihood(process: TrueProcess, tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, Projection]:
    """Exact ``log P_data(x)`` per sequence (point-mass posterior): ``-T(x) + log P(x|z)``.

    ``-inf`` for sequences the process cannot produce (unknown subsequence,
    trailing tokens, or a segment count other than ``M``).
    """
    proj = project(process, tokens, lengths)
    ll = -proj.latent_nll + proj.emission_ll
    possible = proj.ok & (proj.latent_steps == process.config.num_segments)
    return np.where(possible, ll, -np.inf), proj
