"""Where the section transitions go wrong: paper table 12 and the data behind fig. 4.

Everything here works on *paths*: per document, the sequence of section types the critic
assigns (the given titles for the given-title critic, the MAP labels of a classifier
posterior), unknown titles as ``<unk>``.  A transition (z_{m-1}, z_m), ``<bos>`` and ``<eos>``
included, is an *error* when the fitted prior finds it unlikely: ``P_c(z_m | z_{m-1}) <
threshold`` (the paper: 0.01).  Frequencies are shares of all transitions in the set; a
*repetition* error is one with z_{m-1} = z_m (app. E: 25.93% of the errors of LM_1 W/O Title
on WIKI).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from critic.document import Document

from .critic import UNKNOWN, SectionTransitionCritic

__all__ = ["section_paths", "transition_counts", "TransitionError", "transition_errors", "repetition_share",
           "transition_errors_table"]

Path = Sequence[str]


def section_paths(critic: SectionTransitionCritic, docs: Sequence[Document]) -> list[list[str] | None]:
    """Each document's section types as the critic assigns them (``None`` where it cannot).

    A critic with a ``labels(docs)`` method (a classifier posterior) gives its MAP labels;
    otherwise the given titles, normalised, with titles unseen in training as ``<unk>``.
    """
    labels = getattr(critic, "labels", None)
    if callable(labels):
        return labels(docs)
    return [None if critic.check(d) is not None
            else [t if t in critic.index_ else UNKNOWN for t in critic.titles(d)] for d in docs]


def transition_counts(paths: Iterable[Path | None]) -> Counter:
    """Counts of (previous, current) pairs over ``<bos> z_1 .. z_M <eos>`` of every path (``None``s skipped)."""
    counts: Counter = Counter()
    for path in paths:
        if path is not None:
            full = ["<bos>", *path, "<eos>"]
            counts.update(zip(full, full[1:]))
    return counts


@dataclass(frozen=True)
class TransitionError:
    previous: str
    current: str
    probability: float   # P_c(current | previous) under the fitted prior
    frequency: float     # share of all transitions in the set


def transition_errors(critic: SectionTransitionCritic, paths: Iterable[Path | None], *,
                      threshold: float = 0.01) -> tuple[list[TransitionError], float]:
    """All error transitions, most frequent first, and the total share of transitions in error
    (NaN for a set with no transition: no path)."""
    counts = transition_counts(paths)
    total = sum(counts.values())
    if total == 0:
        return [], float("nan")
    errors = []
    for (prev, cur), n in counts.items():
        p = critic.transition_probability(prev, cur)
        if p < threshold:
            errors.append(TransitionError(prev, cur, p, n / total))
    errors.sort(key=lambda e: (-e.frequency, e.previous, e.current))
    return errors, sum(e.frequency for e in errors)


def repetition_share(errors: Sequence[TransitionError]) -> float:
    """Share of the error transitions (by frequency) that repeat a section type; NaN without errors."""
    total = sum(e.frequency for e in errors)
    return sum(e.frequency for e in errors if e.previous == e.current) / total if total > 0 else float("nan")


def transition_errors_table(critic: SectionTransitionCritic, paths: Iterable[Path | None], *,
                            threshold: float = 0.01, top: int = 5) -> str:
    """Markdown version of the paper's table 12 for one set, with the share of repetitions."""
    errors, failures = transition_errors(critic, paths, threshold=threshold)
    lines = ["| z_{m-1} | z_m | P_c(z_m given z_{m-1}) | frequency (%) |", "|---|---|---:|---:|"]
    lines += [f"| {e.previous} | {e.current} | {e.probability:.4f} | {100 * e.frequency:.2f} |" for e in errors[:top]]
    lines.append(f"| total failures | — | < {threshold} | "
                 f"{'— (no transitions)' if failures != failures else f'{100 * failures:.2f}'} |")
    share = repetition_share(errors)
    lines.append(f"| repetitions (z_m = z_m-1) | — | — | "
                 f"{'—' if share != share else f'{100 * share:.2f} of failures'} |")
    return "\n".join(lines)
