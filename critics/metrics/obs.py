"""Ordered BERTScore, the gold-order alignment and coherence-lambda of Fujita et al. (seed 001,
sec. 3.2-3.3 and 4).

Everything here is pure over a given sentence-similarity matrix ``C`` with ``C[i, j]`` the
similarity of gold sentence i and predicted sentence j (seed 001 uses sentence-level BERTScore F1;
:mod:`critics.metrics.encoders` builds that matrix with the ``bert-score`` package).  Indices are
0-based here; the seed's tables are 1-based.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = [
    "obs_v1_table",
    "obs_v2_path",
    "obs_v2_select",
    "ordered_bertscore",
    "align_gold_order",
    "coherence_lambda",
]


def _matrix(sim) -> np.ndarray:
    c = np.asarray(sim, dtype=float)
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError(f"similarity matrix must be 2-d and non-empty, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("similarity matrix has non-finite entries")
    return c


def _resolve_n(n, rows: int, cols: int) -> int:
    """n = inf (or None) means max(|g|, |p|) (seed 001, sec. 4)."""
    if n is None or (isinstance(n, float) and math.isinf(n)) or n == "inf":
        return max(rows, cols)
    n = int(n)
    if n < 1:
        raise ValueError("n must be >= 1")
    return n


def obs_v1_table(sim, n: int = 1) -> np.ndarray:
    """DP table of Ordered BERTScore-v1 (seed 001, eqs. 1-2), rows = the vertical axis.

    S[i][j] = max(S[i][j-1], S[i-1][j], max_{k=1..n, k<=j} S[i-1][j-k] + sum_{t=0}^{k-1} C[i, j-t])
    with S[0][*] = S[*][0] = 0: each row sentence is aligned to at most n consecutive column sentences,
    in order.  Returns the (rows+1, cols+1) table; S[-1, -1] is the best total.
    """
    c = _matrix(sim)
    rows, cols = c.shape
    n = _resolve_n(n, rows, cols)
    s = np.zeros((rows + 1, cols + 1))
    for i in range(1, rows + 1):
        csum = np.concatenate([[0.0], np.cumsum(c[i - 1])])  # csum[j] = sum_{t<j} C[i-1, t]
        for j in range(1, cols + 1):
            best = max(s[i, j - 1], s[i - 1, j])
            for k in range(1, min(n, j) + 1):
                best = max(best, s[i - 1, j - k] + csum[j] - csum[j - k])
            s[i, j] = best
    return s


def obs_v2_path(sim, tie_rtol: float = 1e-9) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """DP of Ordered BERTScore-v2 (seed 001, eq. 3) and its chosen path.

    S[i][j] = max(S[i][j-1], S[i-1][j], S[i-1][j-1]) + C[i, j], a monotone path from (0, 0) to
    (|g|-1, |p|-1) through the matrix (at most |g| + |p| - 1 cells).  Returns (table, path as
    (row, col) pairs in order).

    Ties: back-tracking prefers the diagonal, then up, then left among the predecessors whose table
    value is within ``tie_rtol * max(1, |best|)`` of the best one, so matrices that agree up to float
    rounding (another summation order, a batched encoder) take the same path.  Matrices that differ by
    more (two BERTScore implementations agree to about 1e-5) may take different paths whose totals are
    both optimal within that difference.
    """
    c = _matrix(sim)
    rows, cols = c.shape
    s = np.full((rows, cols), -np.inf)
    for i in range(rows):
        for j in range(cols):
            if i == 0 and j == 0:
                prev = 0.0
            else:
                cands = []
                if i > 0 and j > 0:
                    cands.append(s[i - 1, j - 1])
                if i > 0:
                    cands.append(s[i - 1, j])
                if j > 0:
                    cands.append(s[i, j - 1])
                prev = max(cands)
            s[i, j] = prev + c[i, j]
    path = [(rows - 1, cols - 1)]
    i, j = rows - 1, cols - 1
    while (i, j) != (0, 0):
        moves = []
        if i > 0 and j > 0:
            moves.append((s[i - 1, j - 1], (i - 1, j - 1)))
        if i > 0:
            moves.append((s[i - 1, j], (i - 1, j)))
        if j > 0:
            moves.append((s[i, j - 1], (i, j - 1)))
        best = max(v for v, _ in moves)
        floor = best - tie_rtol * max(1.0, abs(best))
        i, j = next(cell for v, cell in moves if v >= floor)
        path.append((i, j))
    return s, path[::-1]


def obs_v2_select(sim, path: Sequence[tuple[int, int]], n=1) -> dict:
    """Ordered BERTScore-v2's selection on a given path (seed 001, eq. 3).

    The path's cells are taken in decreasing similarity (earlier cells first on equal values) so that no
    row and no column holds more than n chosen cells; score = sum of the chosen similarities /
    (|p| + |g| - 1).  Returns ``{"score", "sum_v2", "path", "chosen"}``.
    """
    c = _matrix(sim)
    g, p = c.shape
    n_eff = _resolve_n(n, g, p)
    path = [tuple(cell) for cell in path]
    order = sorted(range(len(path)), key=lambda k: (-c[path[k]], k))
    row_used, col_used, chosen = {}, {}, []
    for k in order:
        i, j = path[k]
        if row_used.get(i, 0) < n_eff and col_used.get(j, 0) < n_eff:
            chosen.append((i, j))
            row_used[i] = row_used.get(i, 0) + 1
            col_used[j] = col_used.get(j, 0) + 1
    total = float(sum(c[cell] for cell in chosen))
    return {"score": total / (p + g - 1), "sum_v2": total, "path": path, "chosen": chosen}


def _harmonic(a: float, b: float) -> float:
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def ordered_bertscore(sim, version: int = 1, n=1, return_details: bool = False):
    """Ordered BERTScore of a prediction against a gold summary (seed 001, sec. 3.3).

    ``sim[i][j]`` is the similarity (BERTScore F1) of gold sentence i and predicted sentence j.

    * ``version=1`` (eqs. 1-2): S_rec = S[|g|][|p|] of :func:`obs_v1_table` with gold rows,
      S_prec the same with prediction rows (the transposed matrix); the score is the harmonic mean of
      S_rec / |g| and S_prec / |p|.
    * ``version=2`` (eq. 3): take the cells on the :func:`obs_v2_path`, choose them in decreasing
      score so that no row and no column holds more than n chosen pairs; the score is
      sum_v2 / (|p| + |g| - 1).
    * ``n = math.inf`` (or ``None``, ``"inf"``) means n = max(|g|, |p|).

    With ``return_details`` a dict with the score and the intermediate values is returned.
    """
    c = _matrix(sim)
    g, p = c.shape
    if version == 1:
        s_rec = obs_v1_table(c, n)[-1, -1]
        s_prec = obs_v1_table(c.T, n)[-1, -1]
        score = _harmonic(s_rec / g, s_prec / p)
        details = {"score": score, "s_rec": float(s_rec), "s_prec": float(s_prec)}
    elif version == 2:
        _, path = obs_v2_path(c)
        details = obs_v2_select(c, path, n)
        score = details["score"]
    else:
        raise ValueError("version must be 1 or 2")
    return details if return_details else float(score)


def align_gold_order(sim, return_matching: bool = False):
    """Order predicted (extracted) sentences by the gold summary: Algorithm 1 of seed 001.

    ``sim[i][j]`` is the similarity of predicted sentence i (the set P) and gold sentence j (G)
    -- note the axes: rows are P here, as in the algorithm's loops.  All pairs are visited in
    decreasing similarity; a pair is skipped if its P sentence is already matched, or if its G
    sentence is already matched while some G sentence is still unmatched; otherwise it is added.
    P is then sorted by the position of its matched G sentence (P sentences matched to the same G
    sentence keep their original relative order; ties in similarity are broken by (i, j)).
    Returns the new order of P as a list of indices (and the matching {p: g} if asked).
    """
    c = _matrix(sim)
    np_, ng = c.shape
    pairs = sorted(((c[i, j], i, j) for i in range(np_) for j in range(ng)), key=lambda t: (-t[0], t[1], t[2]))
    match: dict[int, int] = {}
    g_used: set[int] = set()
    for _, i, j in pairs:
        if i in match:
            continue
        if j in g_used and len(g_used) < ng:
            continue
        match[i] = j
        g_used.add(j)
    order = sorted(range(np_), key=lambda i: (match[i], i))
    return (order, match) if return_matching else order


def coherence_lambda(embeddings, entities: Sequence[set], lam: float = 0.5) -> float:
    """coherence-lambda baseline of seed 001 (eqs. 4-7) for one document of N >= 2 sentences.

    coherence(s) = sum_{i=1}^{N-1} Sim(s_i, s_{i+1}) / (N - 1) with
    Sim = lam * NESim + (1 - lam) * CosSim,
    NESim(s_i, s_{i+1}) = |NE(s_i) & NE(s_{i+1})| / min(|NE(s_i)|, |NE(s_{i+1})|) (0 when either
    sentence has no entity: the seed leaves 0/0 undefined), CosSim the cosine of the sentence vectors.

    ``embeddings``: (N, d) sentence vectors; ``entities``: N sets of named entities (strings).
    """
    e = np.asarray(embeddings, dtype=float)
    if e.ndim != 2:
        raise ValueError("embeddings must be (N, d)")
    if len(entities) != len(e):
        raise ValueError(f"{len(e)} sentence vectors but {len(entities)} entity sets")
    if len(e) < 2:
        raise ValueError("coherence-lambda needs at least two sentences")
    if not 0.0 <= lam <= 1.0:
        raise ValueError("lam must be in [0, 1]")
    norms = np.linalg.norm(e, axis=1)
    if np.any(norms == 0):
        raise ValueError("zero sentence vector")
    total = 0.0
    for i in range(len(e) - 1):
        a, b = set(entities[i]), set(entities[i + 1])
        ne = len(a & b) / min(len(a), len(b)) if a and b else 0.0
        cos = float(e[i] @ e[i + 1] / (norms[i] * norms[i + 1]))
        total += lam * ne + (1 - lam) * cos
    return total / (len(e) - 1)
