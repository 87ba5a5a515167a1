"""Where the section transitions go wrong: paper table 12 and the data behind fig. 4.

A transition (z_{m-1}, z_m), ``<bos>`` and ``<eos>`` included, is an *error* when the
fitted prior finds it unlikely: ``P_c(z_m | z_{m-1}) < threshold`` (the paper: 0.01).
Frequencies are shares of all transitions in the set.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from critic.document import Document

from .critic import UNKNOWN, SectionTransitionCritic

__all__ = ["transition_counts", "TransitionError", "transition_errors", "transition_errors_table"]


def transition_counts(critic: SectionTransitionCritic, docs: Sequence[Document]) -> Counter:
    """Counts of (previous, current) title pairs, with ``<bos>``/``<eos>``, unknowns as ``<unk>``."""
    counts: Counter = Counter()
    for doc in docs:
        if critic.check(doc) is not None:
            continue
        path = ["<bos>", *[t if t in critic.index_ else UNKNOWN for t in critic.titles(doc)], "<eos>"]
        counts.update(zip(path, path[1:]))
    return counts


@dataclass(frozen=True)
class TransitionError:
    previous: str
    current: str
    probability: float   # P_c(current | previous) under the fitted prior
    frequency: float     # share of all transitions in the set


def transition_errors(critic: SectionTransitionCritic, docs: Sequence[Document], *,
                      threshold: float = 0.01) -> tuple[list[TransitionError], float]:
    """All error transitions, most frequent first, and the total share of transitions in error."""
    counts = transition_counts(critic, docs)
    total = sum(counts.values())
    errors = []
    for (prev, cur), n in counts.items():
        p = critic.transition_probability(prev, cur)
        if p < threshold:
            errors.append(TransitionError(prev, cur, p, n / total))
    errors.sort(key=lambda e: (-e.frequency, e.previous, e.current))
    return errors, sum(e.frequency for e in errors)


def transition_errors_table(critic: SectionTransitionCritic, docs: Sequence[Document], *,
                            threshold: float = 0.01, top: int = 5) -> str:
    """Markdown version of the paper's table 12 for one set."""
    errors, failures = transition_errors(critic, docs, threshold=threshold)
    lines = ["| z_{m-1} | z_m | P_c(z_m given z_{m-1}) | frequency (%) |", "|---|---|---:|---:|"]
    lines += [f"| {e.previous} | {e.current} | {e.probability:.4f} | {100 * e.frequency:.2f} |" for e in errors[:top]]
    lines.append(f"| total failures | — | < {threshold} | {100 * failures:.2f} |")
    return "\n".join(lines)
