"""What the section critics show in the HTML report (drawn for their view, :mod:`critics.sections.view`).

- :func:`transition_figures`: paper fig. 4 for each candidate set against the reference, the
  transitions whose frequency differs drawn as a graph
  (:func:`~critics.sections.plots.transition_difference_graph_figure`).
- :func:`chain_view`: a flagged document's section-type chain as the critic sees it, one row per
  section in place (its title, type and first characters of text) with the transition into it and
  that transition's log-probability under the fitted prior, the transitions with ``P < 0.01`` (the
  threshold of the paper's table 12) highlighted, and the final transition to ``<eos>``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from critic.document import Document

from ..report_html import excerpt, note, number, paragraph, table, view
from .analysis import section_paths
from .critic import DROPPED, SectionTransitionCritic
from .plots import graph_caption, transition_difference_graph_figure

__all__ = ["transition_figures", "chain_view", "pdd_statistic", "SetPaths", "UNLIKELY", "PDD_BINS"]

UNLIKELY = 0.01
"""A transition is highlighted when the prior gives it ``P < UNLIKELY`` (the paper's table 12)."""


SetPaths = Callable[[str, Sequence[Document]], list]
"""A set's section types, ``(set name, its documents) -> one path (or None) per document``."""


def _given_paths(critic: SectionTransitionCritic) -> SetPaths:
    """Each set's section types as :func:`~critics.sections.analysis.section_paths` assigns them."""
    return lambda name, docs: section_paths(critic, docs)


def transition_figures(critic: SectionTransitionCritic, result: Any, documents: Mapping[str, Sequence[Document]], *,
                       paths: SetPaths | None = None, top: int = 20, threshold: float = 0.05,
                       min_difference: float = 0.02) -> dict[str, Any]:
    """Fig. 4 of each candidate set against the reference (caption -> figure); sets whose documents are
    not given are left out.  ``paths``: each set's section types (default: as the critic assigns them)."""
    paths = paths or _given_paths(critic)
    reference = result.reference.name
    if reference not in documents:
        return {}
    ref_paths = paths(reference, documents[reference])
    out = {}
    for name in result.candidates:
        if name not in documents:
            continue
        fig = transition_difference_graph_figure(critic, ref_paths, paths(name, documents[name]), name=name,
                                                 reference_name=reference, top=top, threshold=threshold,
                                                 min_difference=min_difference)
        out[graph_caption(name, reference, top=top, threshold=threshold, min_difference=min_difference)] = fig
    return out


PDD_BINS = 5
"""Positional bins of the report's PDD (the coherence study's default)."""


def pdd_statistic(critic: SectionTransitionCritic, result: Any, documents: Mapping[str, Sequence[Document]], *,
                  paths: SetPaths | None = None) -> dict[str, tuple[dict, dict]]:
    """``{"pdd": (values, reasons)}``: PDD of each candidate set's section types against the reference set's
    (``null`` for the reference, the distribution compared with, and for a set without documents or types).
    ``paths``: each set's section types (default: as the critic assigns them)."""
    from critics.metrics.pdd import pdd

    paths = paths or _given_paths(critic)
    reference = result.reference.name
    if reference not in documents:
        return {}

    def labels(name: str) -> list[list[int]]:
        return [[critic.index_[t] for t in path] for path in paths(name, documents.get(name, [])) if path]

    ref = labels(reference)
    values: dict[str, float | None] = {reference: None}
    reasons = {reference: "the reference is what PDD compares with"}
    for name in result.candidates:
        cand = labels(name)
        if cand and ref:
            values[name] = pdd(cand, ref, num_bins=PDD_BINS, num_classes=len(critic.vocab_))
        else:
            values[name], reasons[name] = None, "no document with section types to compare"
    return {"pdd": (values, reasons)}


def chain_view(critic: SectionTransitionCritic, doc: Document, types: Sequence[str], *, how: str,
               probabilities: Sequence[float] | None = None, threshold: float = UNLIKELY) -> str:
    """The view of ``doc``'s chain ``types`` (one type per section the critic keeps: boilerplate
    sections are shown, dropped, without a type).  ``probabilities``: the classifier's probability of
    each type; ``how``: one sentence on where the types come from."""
    sections = critic._memo().sections(doc.sections)
    if sum(v != DROPPED for v in sections) != len(types):
        return view(note(f"The critic's {len(types)} section types do not match the document's sections."),
                    kind="sections")
    header = ["§", "title", "type"] + (["P(type | text)"] if probabilities is not None else []) + [
        "transition", "log P", "P", "text"]
    align = "rll" + ("r" if probabilities is not None else "") + "lrrw"
    rows, classes, attrs = [], [], []
    previous, total, unlikely, k = "<bos>", 0.0, 0, 0

    def transition(current: str) -> tuple[list, str | None, dict]:
        nonlocal total, unlikely
        log_p = critic.transition_log_probability(previous, current)
        p = critic.transition_probability(previous, current)
        total += log_p
        bad = p < threshold
        unlikely += bad
        return ([f"{previous} → {current}", number(log_p), number(p, ".3g")], "unlikely" if bad else None,
                {"data-from": previous, "data-to": current, "data-logp": repr(log_p), "data-p": repr(p)})

    for m, (section, seen) in enumerate(zip(doc.sections, sections)):
        title = section.title if section.title is not None and section.title.strip() else "(untitled)"
        if seen == DROPPED:
            rows.append([m + 1, title, "(dropped)"] + ([""] if probabilities is not None else [])
                        + ["", "", "", excerpt(section.text)])
            classes.append("dropped")
            attrs.append({})
            continue
        current = types[k]
        cells, cls, attr = transition(current)
        rows.append([m + 1, title, current] + ([number(probabilities[k])] if probabilities is not None else [])
                    + cells + [excerpt(section.text)])
        classes.append(cls)
        attrs.append(attr)
        previous, k = current, k + 1
    cells, cls, attr = transition("<eos>")
    rows.append(["", "", "<eos>"] + ([""] if probabilities is not None else []) + cells + [""])
    classes.append(cls)
    attrs.append(attr)
    n = len(types) + 1
    summary = (f"{how} Each row gives the transition into the section's type and its log-probability under the "
               f"fitted prior, log P_c(z_m | z_m-1); highlighted: transitions with P < {threshold:g} "
               f"({unlikely} of {n}). Sum of the log-probabilities: {total:.3f}"
               + ("." if math.isfinite(total) else " (an impossible transition)."))
    return view(paragraph(summary),
                table(header, rows, align=align, row_classes=classes, row_attrs=attrs, css="sections-chain"),
                kind="sections")
