"""Where two sets of coreference chains differ (paper tables 6, 15, 16, 17; figs. 10-13).

Every function works on the relabelled windows of a prior (``prior.windows``):
the window of chain position i is ``relabel(z_{i-n+1} .. z_i)``, its context the
first ``n-1`` tokens and its target the last.  Windows are tuples of token
strings; the prior's padding token stands for the positions before the start.

- :func:`contribution_table` (table 6): the latent NLL per chain token of a
  candidate set minus that of the reference splits over windows ``w`` as
  ``sum_w (P^_cand(w) - P^_ref(w)) * (-log P_c(w_n | w_<n))`` with ``P^`` the
  empirical frequency of ``w`` among a set's positions; the rows are the largest
  terms.
- :func:`implausible_table` (table 15): windows of a set with
  ``log P_c(w_n | w_<n) < threshold``, with the prior's argmax target and its log P.
- :func:`difference_tables` (tables 16, 17): two priors fitted on the candidate
  and on the reference; windows seen at least ``min_count`` times in both, ranked
  by ``log P_cand(w_n | w_<n) - log P_ref(w_n | w_<n)``, largest and smallest.
- :func:`render_markdown` / :func:`render_html`: one document's text with each
  chain mention marked ``[text]_id``, the implausible ones highlighted with their
  log P and the argmax alternative (figs. 10-13); :func:`implausible_mentions` lists them.
- :func:`logprob_histogram_figure`: the distribution of the chain tokens' log P in each set.
- :func:`lowest_windows`: one chain's least likely positions (the implausible ones first), the reasons a flagged
  document gives.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Callable, Mapping, Sequence

import numpy as np

__all__ = ["contribution_table", "implausible_table", "difference_tables", "render_markdown", "render_html",
           "format_window", "ngram_rows_markdown", "implausible_mentions", "logprob_histogram_figure", "lowest_windows"]


def _flat_windows(prior, chains: Sequence[Sequence[str]]):
    windows = [tuple(w) for per_chain in prior.windows(chains) for w in per_chain]
    logp = np.concatenate([np.asarray(lp, dtype=np.float64) for lp in prior.position_logprobs(chains)]) \
        if chains else np.zeros(0)
    return windows, logp


def _empirical(windows: Sequence[tuple]) -> dict[tuple, float]:
    n = len(windows)
    return {w: c / n for w, c in Counter(windows).items()} if n else {}


def contribution_table(prior, reference: Sequence[Sequence[str]], candidate: Sequence[Sequence[str]], *,
                       top: int = 10) -> list[dict]:
    """Table 6: windows ranked by their share of ``NLL_cand - NLL_ref`` per chain token.

    Each row: ``window``, ``p_ref``, ``p_cand`` (empirical frequencies), ``log_prob`` and
    ``contribution`` (nats per token); the contributions of all windows sum to the difference.
    """
    ref_w, ref_lp = _flat_windows(prior, reference)
    cand_w, cand_lp = _flat_windows(prior, candidate)
    logp = dict(zip(ref_w, ref_lp))
    logp.update(zip(cand_w, cand_lp))
    p_ref, p_cand = _empirical(ref_w), _empirical(cand_w)
    rows = [{"window": w, "p_ref": p_ref.get(w, 0.0), "p_cand": p_cand.get(w, 0.0), "log_prob": float(lp),
             "contribution": (p_cand.get(w, 0.0) - p_ref.get(w, 0.0)) * -float(lp)} for w, lp in logp.items()]
    rows.sort(key=lambda r: (-r["contribution"], r["window"]))
    return rows[:top]


def implausible_table(prior, chains: Sequence[Sequence[str]], *, threshold: float = -7.0,
                      top: int = 15) -> list[dict]:
    """Table 15: distinct windows with ``log P < threshold`` (lowest first), how often they occur,
    and the prior's most likely target for the same context with its log P."""
    windows, logp = _flat_windows(prior, chains)
    low = Counter(w for w, lp in zip(windows, logp) if lp < threshold)
    if not low:
        return []
    lp_of = dict(zip(windows, logp))
    picked = sorted(low, key=lambda w: (lp_of[w], w))[:top]
    best = prior.next_logprobs([w[:-1] for w in picked])
    vocab = prior.vocabulary
    rows = []
    for w, row in zip(picked, best):
        k = int(np.argmax(row))
        rows.append({"window": w, "log_prob": float(lp_of[w]), "count": low[w],
                     "argmax": vocab[k], "argmax_log_prob": float(row[k])})
    return rows


def difference_tables(fit_prior: Callable[[Sequence[Sequence[str]]], object], reference: Sequence[Sequence[str]],
                      candidate: Sequence[Sequence[str]], *, min_count: int = 5, top: int = 5
                      ) -> tuple[list[dict], list[dict]]:
    """Tables 16 and 17: ``(largest, smallest)`` rows of ``log P_cand - log P_ref`` over windows seen at
    least ``min_count`` times in both sets; ``fit_prior(chains)`` fits one prior per set."""
    p_ref, p_cand = fit_prior(reference), fit_prior(candidate)
    ref_w, ref_lp = _flat_windows(p_ref, reference)
    cand_w, cand_lp = _flat_windows(p_cand, candidate)
    n_ref, n_cand = Counter(ref_w), Counter(cand_w)
    lp_ref, lp_cand = dict(zip(ref_w, ref_lp)), dict(zip(cand_w, cand_lp))
    rows = [{"window": w, "p_ref": float(np.exp(lp_ref[w])), "p_cand": float(np.exp(lp_cand[w])),
             "difference": float(lp_cand[w] - lp_ref[w]), "count_ref": n_ref[w], "count_cand": n_cand[w]}
            for w in n_cand if n_cand[w] >= min_count and n_ref.get(w, 0) >= min_count]
    rows.sort(key=lambda r: (-r["difference"], r["window"]))
    largest = rows[:top]
    smallest = sorted(rows, key=lambda r: (r["difference"], r["window"]))[:top]
    return largest, smallest


# --------------------------------------------------------------------------- formatting
def _show(token: str, pad: str) -> str:
    if token == pad:
        return ""
    text, sep, entity = token.rpartition(":")
    return f"[{text}]<sub>{entity}</sub>" if sep else token


def format_window(window: Sequence[str], pad: str) -> list[str]:
    """A window's tokens as table cells: ``[he]<sub>0</sub>``, ``.``, blank for padding."""
    return [_show(t, pad) for t in window]


def ngram_rows_markdown(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]], *, pad: str,
                        order: int) -> str:
    """Markdown table: the window's ``z_1 .. z_n`` cells, then ``(header, key, format)`` columns."""
    head = [f"z{i + 1}" for i in range(order)] + [h for h, _, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = format_window(r["window"], pad) + [format(r[k], f) if isinstance(r[k], float) else _show(str(r[k]), pad)
                                                   for _, k, f in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _marks(text: str, tokens: Sequence[str], spans, logprobs, argmax: dict[int, tuple[str, float]],
           threshold: float):
    """``(start, end, label, log P, implausible, note)`` per chain mention, in text order."""
    out = []
    for i, (tok, span) in enumerate(zip(tokens, spans)):
        if span is None:
            continue
        entity = tok.rpartition(":")[2]
        lp = float(logprobs[i])
        note = ""
        if i in argmax:
            alt, alt_lp = argmax[i]
            note = f"log P = {lp:.2f}; argmax {alt} (log P {alt_lp:.2f})"
        out.append((span[0], span[1], entity, lp, lp < threshold, note))
    return out


def _argmax_alternatives(prior, tokens: Sequence[str], logprobs, threshold: float) -> dict[int, tuple[str, float]]:
    flagged = [i for i, lp in enumerate(logprobs) if lp < threshold]
    if not flagged:
        return {}
    windows = prior.windows([tokens])[0]
    rows = prior.next_logprobs([tuple(windows[i][:-1]) for i in flagged])
    vocab = prior.vocabulary
    return {i: (vocab[int(np.argmax(r))], float(np.max(r))) for i, r in zip(flagged, rows)}


def render_markdown(prior, text: str, tokens: Sequence[str], spans, *, threshold: float = -7.0) -> str:
    """The text with mentions as ``[root]<sub>id</sub>``; implausible ones in bold with a footnote-style note,
    followed by the chain."""
    logprobs = prior.position_logprobs([tokens])[0]
    argmax = _argmax_alternatives(prior, tokens, logprobs, threshold)
    parts, at = [], 0
    for start, end, entity, lp, bad, note in _marks(text, tokens, spans, logprobs, argmax, threshold):
        parts.append(text[at:start])
        mark = f"[{text[start:end]}]<sub>{entity}</sub>"
        parts.append(f"**{mark}** _({note})_" if bad else mark)
        at = end
    parts.append(text[at:])
    chain = " ".join(_show(t, "") for t in tokens)
    return "".join(parts) + "\n\nChain: " + chain + "\n"


def render_html(prior, text: str, tokens: Sequence[str], spans, *, threshold: float = -7.0) -> str:
    """An HTML fragment: mentions as ``<span class="mention">``, implausible ones ``class="mention implausible"``
    with their log P and argmax in the tooltip."""
    logprobs = prior.position_logprobs([tokens])[0]
    argmax = _argmax_alternatives(prior, tokens, logprobs, threshold)
    parts, at = [], 0
    for start, end, entity, lp, bad, note in _marks(text, tokens, spans, logprobs, argmax, threshold):
        parts.append(html.escape(text[at:start]))
        cls = "mention implausible" if bad else "mention"
        title = html.escape(note or f"log P = {lp:.2f}", quote=True)
        parts.append(f'<span class="{cls}" title="{title}">{html.escape(text[start:end])}'
                     f'<sub>{html.escape(entity)}</sub></span>')
        at = end
    parts.append(html.escape(text[at:]))
    style = ("<style>.mention{background:#e8f0fe}.implausible{background:#fdd;border:2px solid #c00;"
             "border-radius:4px}</style>")
    return f'{style}<p class="coref-document">' + "".join(parts) + "</p>\n"


def implausible_mentions(prior, text: str, tokens: Sequence[str], spans, *, threshold: float = -7.0) -> list[dict]:
    """The chain positions with ``log P < threshold``, in chain order: ``position``, ``token``, ``mention``
    (its text, ``None`` for a sentence start), ``log_prob``, ``argmax`` and ``argmax_log_prob`` (the prior's
    most likely token in the same context)."""
    logprobs = prior.position_logprobs([tokens])[0]
    argmax = _argmax_alternatives(prior, tokens, logprobs, threshold)
    return [{"position": i, "token": tokens[i],
             "mention": None if spans[i] is None else text[spans[i][0]:spans[i][1]],
             "log_prob": float(logprobs[i]), "argmax": alt, "argmax_log_prob": alt_lp}
            for i, (alt, alt_lp) in sorted(argmax.items())]


def logprob_histogram_figure(prior, sets: Mapping[str, Sequence[Sequence[str]]], *, threshold: float = -7.0,
                             bins: int = 40):
    """Histogram of the per-token ``log P_c(z_i | window)`` of every chain of each set (``name -> chains``;
    the first filled, the others outlined), the ``threshold`` dashed, each set's share below it in the legend."""
    from critic.plots import new_figure

    values = {name: (np.concatenate([np.asarray(lp, dtype=np.float64) for lp in prior.position_logprobs(chains)])
                     if chains else np.zeros(0)) for name, chains in sets.items()}
    finite = np.concatenate([v[np.isfinite(v)] for v in values.values()] + [np.array([threshold])])
    edges = np.histogram_bin_edges(finite, bins=bins)
    fig = new_figure()
    ax = fig.subplots()
    for k, (name, v) in enumerate(values.items()):
        shown = v[np.isfinite(v)]
        label = f"{name} ({v.size} tokens, {np.mean(v < threshold) if v.size else 0:.1%} below)"
        if not shown.size:
            ax.plot([], [], label=label)
            continue
        style = dict(alpha=0.5) if k == 0 else dict(histtype="step", linewidth=1.6)
        ax.hist(shown, bins=edges, density=True, label=label, **style)
    ax.axvline(threshold, color="#c00", linestyle="--", linewidth=1)
    ax.set_xlabel("log P_c(z_i | previous tokens of its window)")
    ax.set_ylabel("density")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def lowest_windows(prior, tokens: Sequence[str], *, threshold: float = -7.0, top: int = 3) -> tuple[list[dict], int]:
    """The least likely positions of one chain and how many are implausible.

    Position ``i`` scores ``log P_c(z_i | relabel(z_{i-n+1} .. z_{i-1}))`` (``prior.position_logprobs``, the
    terms of ``T(x) = -sum_i``).  Returns ``(rows, below)``: ``below`` counts the positions with log P <
    ``threshold``; ``rows`` are those positions, lowest first (ties: the earlier), at most ``top`` -- or, when
    none is below, the ``top`` lowest positions -- each with ``position``, ``context`` (the chain's tokens
    ``z_{i-n+1} .. z_{i-1}`` as they are in the document, fewer at its start), ``token`` (``z_i``) and
    ``log_prob``."""
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top!r}")
    tokens = list(tokens)
    logprobs = np.asarray(prior.position_logprobs([tokens])[0], dtype=np.float64)
    order = sorted(range(len(tokens)), key=lambda i: (logprobs[i], i))
    below = int(np.sum(logprobs < threshold))
    picked = order[:min(top, below)] if below else order[:top]
    width = prior.order - 1
    return [{"position": i, "context": tokens[max(0, i - width):i], "token": tokens[i],
             "log_prob": float(logprobs[i])} for i in picked], below
