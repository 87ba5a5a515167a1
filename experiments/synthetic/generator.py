"""The synthetic generative process of paper sec. 3 / app. D.

``Z`` latent states; every sequence is ``M`` states drawn from a Markov chain
that starts in a special start state; each state emits one *subsequence* of
tokens.  ``S`` distinct subsequences of length ``min_len .. max_len`` (letters,
then the delimiter as last token) are each owned by one state drawn uniformly,
so the posterior over states given a subsequence is a point mass.

* transitions: ``softmax(N(0, 1) / trans_temperature)`` per row, rows ``0 .. Z - 1``
  for the states and row ``Z`` for the start state;
* emissions: ``softmax(N(0, 1) / emit_temperature)`` over each state's own subsequences.

Token ids: letters ``0 .. num_letters - 1``, delimiter ``num_letters``.
Everything is drawn from one ``numpy.random.Generator`` seeded by ``seed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

__all__ = ["SyntheticConfig", "TrueProcess", "Dataset", "make_process", "sample_sequences", "make_dataset", "PRESETS"]


@dataclass(frozen=True)
class SyntheticConfig:
    num_states: int = 256
    num_segments: int = 50
    num_letters: int = 52
    num_subsequences: int = 10_000
    min_len: int = 4
    max_len: int = 11
    trans_temperature: float = 0.5
    emit_temperature: float = 0.3
    n_train: int = 51_200
    n_valid: int = 6_400
    n_test: int = 6_400
    seed: int = 0

    @property
    def vocab_size(self) -> int:
        """Letters plus the delimiter."""
        return self.num_letters + 1

    @property
    def delimiter(self) -> int:
        return self.num_letters

    @classmethod
    def from_dict(cls, d: dict) -> "SyntheticConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown synthetic-data settings: {sorted(unknown)}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, SyntheticConfig] = {
    "paper": SyntheticConfig(),
    # same structure (M = 50 segments of 4-11 tokens, 53 tokens), fewer states and subsequences
    "cpu": SyntheticConfig(num_states=32, num_subsequences=320, n_train=2_000, n_valid=200, n_test=500),
    "tiny": SyntheticConfig(
        num_states=4, num_segments=6, num_letters=6, num_subsequences=12, min_len=2, max_len=4,
        n_train=300, n_valid=50, n_test=100,
    ),
}


@dataclass
class TrueProcess:
    """The known generative process.

    ``log_trans`` ``(Z + 1, Z)`` (row ``Z`` = start state), ``subseq_tokens``
    ``(S, max_len)`` (``-1`` padded), ``subseq_lengths`` ``(S,)``, ``owner`` ``(S,)``,
    ``log_emit`` ``(S,)``: log P(subsequence | its owner).
    """

    config: SyntheticConfig
    log_trans: np.ndarray
    subseq_tokens: np.ndarray
    subseq_lengths: np.ndarray
    owner: np.ndarray
    log_emit: np.ndarray
    _index: dict = field(default_factory=dict, repr=False)

    @property
    def num_states(self) -> int:
        return self.log_trans.shape[1]


@dataclass
class Dataset:
    """Padded token sequences with their true latent states and subsequences."""

    tokens: np.ndarray  # (N, T) int64, -1 padded
    lengths: np.ndarray  # (N,)
    states: np.ndarray  # (N, M)
    subsequences: np.ndarray  # (N, M)

    def __len__(self) -> int:
        return len(self.lengths)


def _log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def make_process(config: SyntheticConfig) -> TrueProcess:
    """Draw the process (transition matrix, subsequences, owners, emissions)."""
    cfg = config
    rng = np.random.default_rng([cfg.seed, 0])
    Z, S = cfg.num_states, cfg.num_subsequences
    n_letters_max = cfg.max_len - 1
    capacity = sum(cfg.num_letters ** (n - 1) for n in range(cfg.min_len, cfg.max_len + 1))
    if S > capacity:
        raise ValueError(f"only {capacity} distinct subsequences exist for these settings, asked for {S}")
    seen: dict[tuple, None] = {}
    while len(seen) < S:  # rejection sampling of distinct subsequences, in batches
        n = 2 * (S - len(seen))
        lens = rng.integers(cfg.min_len, cfg.max_len + 1, size=n)
        letters = rng.integers(0, cfg.num_letters, size=(n, n_letters_max))
        for ln, row in zip(lens.tolist(), letters.tolist()):
            seen.setdefault(tuple(row[: ln - 1]) + (cfg.delimiter,), None)
            if len(seen) == S:
                break
    subs = list(seen)
    tokens = np.full((S, cfg.max_len), -1, dtype=np.int64)
    lengths = np.array([len(s) for s in subs], dtype=np.int64)
    for i, s in enumerate(subs):
        tokens[i, : len(s)] = s
    if S < Z:
        raise ValueError("need at least one subsequence per state")
    for _ in range(1000):  # owners uniform over states, redrawn until every state owns one
        owner = rng.integers(0, Z, size=S)
        if np.bincount(owner, minlength=Z).min() > 0:
            break
    else:
        raise RuntimeError("could not give every state a subsequence; raise num_subsequences")
    log_trans = _log_softmax(rng.standard_normal((Z + 1, Z)) / cfg.trans_temperature)
    emit_logits = rng.standard_normal(S) / cfg.emit_temperature
    log_emit = np.empty(S)
    for z in range(Z):  # softmax of each state's logits over its own subsequences
        sel = owner == z
        log_emit[sel] = _log_softmax(emit_logits[sel])
    return TrueProcess(cfg, log_trans, tokens, lengths, owner, log_emit)


def sample_sequences(process: TrueProcess, n: int, rng: np.random.Generator) -> Dataset:
    """``n`` sequences of ``M`` segments, vectorised over sequences (loop over the M steps)."""
    cfg = process.config
    Z, M = process.num_states, cfg.num_segments
    trans = np.exp(process.log_trans)
    # per-state emission tables, padded: (Z, max_owned)
    order = np.argsort(process.owner, kind="stable")
    counts = np.bincount(process.owner, minlength=Z)
    width = int(counts.max())
    table = np.zeros((Z, width), dtype=np.int64)
    probs = np.zeros((Z, width))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    col = np.arange(len(order)) - starts[process.owner[order]]
    table[process.owner[order], col] = order
    probs[process.owner[order], col] = np.exp(process.log_emit[order])
    cum_t = np.cumsum(trans, axis=1)
    cum_e = np.cumsum(probs, axis=1)
    states = np.empty((n, M), dtype=np.int64)
    subs = np.empty((n, M), dtype=np.int64)
    prev = np.full(n, Z)
    for m in range(M):
        u = rng.random(n)
        z = (u[:, None] > cum_t[prev] * (1 - 1e-12)).sum(1).clip(max=Z - 1)
        u2 = rng.random(n)
        j = (u2[:, None] > cum_e[z] * (1 - 1e-12)).sum(1)
        j = np.minimum(j, counts[z] - 1)
        states[:, m] = z
        subs[:, m] = table[z, j]
        prev = z
    seg_len = process.subseq_lengths[subs]  # (n, M)
    lengths = seg_len.sum(1)
    T = int(lengths.max())
    tokens = np.full((n, T), -1, dtype=np.int64)
    # flat gather: token i of segment m of sequence b
    offs = np.cumsum(seg_len, axis=1) - seg_len
    rows = np.repeat(np.arange(n), seg_len.sum(1))
    flat_sub = np.repeat(subs.ravel(), seg_len.ravel())
    within = np.arange(flat_sub.size) - np.repeat((np.cumsum(seg_len.ravel()) - seg_len.ravel()), seg_len.ravel())
    pos = np.repeat(offs.ravel(), seg_len.ravel()) + within
    tokens[rows, pos] = process.subseq_tokens[flat_sub, within]
    return Dataset(tokens, lengths, states, subs)


def make_dataset(config: SyntheticConfig) -> tuple[TrueProcess, dict[str, Dataset]]:
    """The process and its train / valid / test splits (seeded, independent streams)."""
    process = make_process(config)
    splits = {}
    for i, (name, n) in enumerate((("train", config.n_train), ("valid", config.n_valid), ("test", config.n_test))):
        splits[name] = sample_sequences(process, n, np.random.default_rng([config.seed, 1 + i]))
    return process, splits
