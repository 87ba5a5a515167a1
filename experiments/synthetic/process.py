"""The known-process critic: ``P_c = P_data`` (paper sec. 3, app. D).

Posterior inference is deterministic: cut a sequence after every delimiter and
look each subsequence up (each is owned by exactly one state), so ``P_c(z|x)``
is a point mass on the states ``z_1 .. z_M(x)`` and

    T_c(x) = -log P(z) = -sum_{m=1}^{M(x)} log P(z_m | z_{m-1}),   z_0 = the start state,

with no end term: the process draws exactly ``M`` states (:class:`StartedChain`).
Sequences that cannot be projected are counted with a reason, never dropped
silently:

* ``unknown_subsequence``: some segment is none of the process's subsequences;
* ``no_final_delimiter``: tokens after the last delimiter (or an empty sequence);
* ``wrong_segment_count``: projected, but with a number of segments other than ``M``
  (such sequences *are* scored, with ``M(x)`` their own count, and counted by
  :func:`projection_summary`).

Token sequences travel as documents (:func:`documents`) and are scored by
:class:`KnownProcessCritic` through :func:`critic.criticize`.
Everything is vectorised over the flat token array (no loop over tokens).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from critic import Critic, Projection
from critic.document import Document, Section
from critic.latent import PAD, SequencePointMass
from critic.results import SetResult
from critics.hsmm.ngrams import segment_codes

from .generator import SyntheticConfig, TrueProcess, make_process

__all__ = ["FAILURES", "Segmentation", "segment", "StartedChain", "KnownProcessCritic", "documents",
           "projection_summary", "closed_form_latent_ppl", "log_likelihood", "state_marginals"]

FAILURES = ("unknown_subsequence", "no_final_delimiter")
"""Why a sequence cannot be projected (the reasons :class:`KnownProcessCritic` gives)."""

_PROCESS_ARRAYS = ("log_trans", "subseq_tokens", "subseq_lengths", "owner", "log_emit")


@dataclass
class Segmentation:
    """``N`` sequences cut after each delimiter, ``S`` segments in all (in sequence order).

    Per segment: ``seq (S,)`` its sequence, ``state (S,)`` the state owning it
    (0 where unknown) and ``log_emit (S,)`` ``log P(segment | state)``.  Per
    sequence: ``n_segs (N,)`` and ``failure (N,)``, ``""`` where projected else
    a :data:`FAILURES` code.
    """

    seq: np.ndarray
    state: np.ndarray
    log_emit: np.ndarray
    n_segs: np.ndarray
    failure: np.ndarray

    @property
    def ok(self) -> np.ndarray:
        """``(N,)`` bool: projected."""
        return self.failure == ""

    def padded_states(self, rows: np.ndarray) -> np.ndarray:
        """States of the sequences selected by the bool mask ``rows (N,)``: ``(n, L)``, :data:`PAD` after each end."""
        first = np.concatenate([[0], np.cumsum(self.n_segs)[:-1]])
        keep = rows[self.seq]
        out = np.full((int(rows.sum()), int(self.n_segs[rows].max(initial=0))), PAD, dtype=np.int64)
        pos = np.arange(self.seq.size) - first[self.seq]
        out[(np.cumsum(rows) - 1)[self.seq[keep]], pos[keep]] = self.state[keep]
        return out


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


def _lookup(process: TrueProcess, codes: np.ndarray, seg_len: np.ndarray) -> np.ndarray:
    """Subsequence id of each segment (by length and code), ``-1`` where none matches."""
    idx = _index(process)
    lo = np.searchsorted(idx["lens"], seg_len, side="left")
    hi = np.searchsorted(idx["lens"], seg_len, side="right")
    sub = np.full(codes.size, -1, dtype=np.int64)
    for ln in np.unique(seg_len):  # loop over the <= max_len distinct lengths
        sel = seg_len == ln
        a, b = int(lo[sel][0]), int(hi[sel][0])
        table = idx["codes"][a:b]
        if table.size == 0:
            continue
        pos = np.searchsorted(table, codes[sel]).clip(max=table.size - 1)
        hit = table[pos] == codes[sel]
        sub[np.flatnonzero(sel)[hit]] = idx["order"][a + pos[hit]]
    return sub


def segment(process: TrueProcess, flat: np.ndarray, lengths: np.ndarray) -> Segmentation:
    """Cut ``N`` sequences, concatenated in ``flat (sum lengths,)``, after each delimiter and look segments up."""
    cfg = process.config
    flat = np.asarray(flat, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    N = lengths.size
    seq_of = np.repeat(np.arange(N), lengths)
    is_delim = flat == cfg.delimiter
    # segment id: a new segment starts after each delimiter and at each sequence start
    seq_start = np.zeros(flat.size, dtype=bool)
    seq_start[np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]] = True
    after_delim = np.concatenate([[False], is_delim[:-1]])
    seg_start = seq_start | after_delim
    seg_id = np.cumsum(seg_start) - 1
    n_seg_total = int(seg_id[-1]) + 1 if flat.size else 0
    codes, seg_len = segment_codes(flat, seg_id, n_seg_total, cfg.vocab_size)
    seg_seq = seq_of[seg_start]
    last_tok_delim = is_delim[np.cumsum(seg_len) - 1]
    sub = _lookup(process, codes, seg_len)
    found = (sub >= 0) & last_tok_delim
    unknown = np.bincount(seg_seq[~found & last_tok_delim], minlength=N) > 0
    trailing = (np.bincount(seg_seq[~last_tok_delim], minlength=N) > 0) | (lengths == 0)
    failure = np.where(trailing, FAILURES[1], np.where(unknown, FAILURES[0], ""))
    state = np.where(found, process.owner[np.maximum(sub, 0)], 0)
    log_emit = np.where(found, process.log_emit[np.maximum(sub, 0)], 0.0)
    return Segmentation(seg_seq, state, log_emit, np.bincount(seg_seq, minlength=N), failure)


class StartedChain:
    """The process's prior over latent state sequences: a Markov chain from a start state, no end state.

    ``log P(z_1 .. z_L) = sum_{m=1}^{L} log A[z_{m-1}, z_m]`` with ``z_0`` the start
    state, ``A = exp(log_trans)`` ``(Z + 1, Z)`` (row ``Z`` = start).  For
    ``L = M`` this is the probability of a whole latent sequence, for other ``L``
    that of its first ``L`` states.  Values are padded ``(..., L)`` (:data:`PAD`).
    """

    def __init__(self, log_trans: torch.Tensor):
        self.log_trans = log_trans.to(torch.float64)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``log P(z)`` for ``value (..., L)``; shape ``value.shape[:-1]``."""
        z = value.clamp_min(0)
        start = torch.full_like(z[..., :1], self.log_trans.shape[1])
        prev = torch.cat([start, z[..., :-1]], dim=-1)
        steps = torch.where(value != PAD, self.log_trans[prev, z], torch.zeros((), dtype=torch.float64))
        # summed left to right (the chain rule's order), so T(x) does not depend on how torch splits a sum
        return steps.cumsum(-1)[..., -1]


class KnownProcessCritic(Critic):
    """The true process as a critic: point-mass posterior by lookup, :class:`StartedChain` prior.

    ``config`` is a :class:`SyntheticConfig` as a dict; :meth:`fit` draws the
    process from it (its seed fixes it), so nothing is learned from documents.
    Documents carry their token ids in ``metadata["tokens"]`` (:func:`documents`).
    """

    name = "known-process"
    batch_size = 1024

    def __init__(self, config: dict):
        self.config = config

    def fit(self, docs=(), *, validation=None) -> "KnownProcessCritic":
        """Draw the known process from ``config``; ``docs`` are not needed (``P_c = P_data``)."""
        self.process_ = make_process(SyntheticConfig.from_dict(self.config))
        return self

    def check(self, doc: Document) -> str | None:
        return None if "tokens" in doc.metadata else "no token ids in metadata['tokens']"

    def prior(self) -> StartedChain:
        return StartedChain(torch.as_tensor(self.process_.log_trans, device=self.device))

    def project(self, docs) -> Projection:
        """Point masses on the looked-up states; ``M(x)`` = number of segments; failures by :data:`FAILURES`."""
        tokens = [np.asarray(d.metadata["tokens"], dtype=np.int64) for d in docs]
        seg = segment(self.process_, np.concatenate(tokens), np.array([t.size for t in tokens]))
        ok = seg.ok
        states = torch.as_tensor(seg.padded_states(ok), device=self.device)
        return Projection(
            doc_ids=[d.id for d, good in zip(docs, ok) if good],
            posterior=SequencePointMass(states),
            latent_steps=torch.as_tensor(seg.n_segs[ok], dtype=torch.float64),
            failures={d.id: str(why) for d, why in zip(docs, seg.failure) if why},
        )

    def _get_state(self):
        return {}, {name: torch.from_numpy(getattr(self.process_, name)) for name in _PROCESS_ARRAYS}

    def _set_state(self, state, tensors) -> None:
        arrays = {name: tensors[name].numpy() for name in _PROCESS_ARRAYS}
        self.process_ = TrueProcess(SyntheticConfig.from_dict(self.config), **arrays)


def documents(tokens: np.ndarray, lengths: np.ndarray, prefix: str) -> list[Document]:
    """Padded sequences ``tokens (N, T)`` with ``lengths (N,)`` as documents ``{prefix}-{i}``.

    Each holds its token ids in ``metadata["tokens"]`` and one untitled section
    with the ids joined by spaces.
    """
    rows = [row[:n].tolist() for row, n in zip(np.asarray(tokens), np.asarray(lengths))]
    return [Document(f"{prefix}-{i}", (Section(None, " ".join(map(str, row))),), metadata={"tokens": row})
            for i, row in enumerate(rows)]


def projection_summary(result: SetResult, num_segments: int) -> dict:
    """``{n, n_scored, reasons}`` of one criticised set: failures by reason, and the scored
    sequences whose ``M(x)`` differs from ``num_segments`` as ``wrong_segment_count``."""
    counts = Counter(result.skipped.values())
    reasons = {code: counts.pop(code, 0) for code in FAILURES}
    reasons["wrong_segment_count"] = sum(d.latent_steps != num_segments for d in result.documents)
    return {"n": result.n + result.n_skipped, "n_scored": result.n, "reasons": {**reasons, **counts}}


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


def log_likelihood(process: TrueProcess, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Exact ``log P_data(x) = log P(z) + log P(x|z)`` per padded sequence ``tokens (N, T)`` (point-mass posterior).

    ``-inf`` for sequences the process cannot produce (unknown subsequence,
    trailing tokens, or a segment count other than ``M``).
    """
    tokens, lengths = np.asarray(tokens), np.asarray(lengths, dtype=np.int64)
    seg = segment(process, tokens[np.arange(tokens.shape[1]) < lengths[:, None]], lengths)
    possible = seg.ok & (seg.n_segs == process.config.num_segments)
    states = torch.from_numpy(seg.padded_states(possible))
    log_pz = StartedChain(torch.from_numpy(process.log_trans)).log_prob(states).numpy()
    log_px_z = np.bincount(seg.seq, weights=seg.log_emit, minlength=lengths.size)
    out = np.full(lengths.size, -np.inf)
    out[possible] = log_pz + log_px_z[possible]
    return out
