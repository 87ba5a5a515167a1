"""The repetition critic in a report (:mod:`critic.views`): each set's copied and looped shares beside the Latent
NLL, and a document's text with its copies highlighted; registered for the critic class by
:mod:`critics.repetition`, so the critic itself imports no rendering."""

from __future__ import annotations

import numpy as np

from critic.document import Document
from critic.views import CriticView

from ..report_html import Markup, escape, excerpt, note, paragraph, table, view
from .units import UNIT_NAMES, Units, span_text

__all__ = ["RepetitionView"]

STYLE = ("<style>.cv mark.copy{background:#fff1c2}.cv mark.loop{background:#fde2e1}"
         ".cv .repetition-text{white-space:pre-wrap}</style>")


class RepetitionView(CriticView):
    def set_statistics(self, critic, result, documents):
        """``copied_share`` and ``looped_share`` of each set: the share of its units that repeat earlier text of
        their document, and that repeat it right after itself (loops), pooled over the set's scored documents (from
        their extras: nothing is projected again)."""
        out = {}
        for name in ("copied_share", "looped_share"):
            values, reasons = {}, {}
            for s in result.sets:
                units = sum(d.extras["units"] for d in s.documents)
                if units:
                    values[s.name] = sum(d.extras[name] * d.extras["units"] for d in s.documents) / units
                else:
                    values[s.name], reasons[s.name] = None, "no scored document"
            out[name] = (values, reasons)
        return out

    def document_view(self, critic, doc: Document, result) -> str | None:
        """A table of the document's copies (where, what they repeat, how often, their factor ``-log P`` in
        ``T(x)``), then its text section after section with each copy marked where it lies (``<mark
        class="copy">``, or ``"loop"`` for a copy of the text right before it).  The document is factorised again:
        the view needs no extras."""
        reason = critic.check(doc)
        if reason is not None:
            return view(note(f"The critic cannot read this document: {reason}."), kind="repetition")
        one, many = UNIT_NAMES[critic.unit]
        units = critic.units(doc)
        copies = critic.factorize(units).copies
        copied, shortest = sum(length for _, length, _ in copies), critic.shortest_copy
        parts = [Markup(STYLE), paragraph(
            f"{len(units)} {many}; {copied} ({copied / len(units):.0%}) repeat earlier text in {len(copies)} "
            f"copies of at least {shortest} {one if shortest == 1 else many}, highlighted (red: a loop, the text "
            "repeated right after itself).")]
        if copies:
            parts.append(_copies_table(critic, doc, units, copies))
        runs = _runs(units, copies)
        for k, section in enumerate(doc.sections):
            parts.append(Markup(f'<p class="section-title">{escape(section.title or f"(section {k + 1})")}</p>'))
            parts.append(_marked(section.text, units, runs.get(k, [])))
        return view(*parts, kind="repetition")


def _copies_table(critic, doc: Document, units: Units, copies: list[tuple[int, int, int]]) -> Markup:
    """One row per copy: its units, the units it repeats, how many times in a row (loops), ``-log P`` of its factor
    and the repeated text; ``data-start``, ``data-length`` and ``data-source`` as in the extras ``copies``."""
    many = UNIT_NAMES[critic.unit][1]
    rows = []
    for k, ((start, length, source), cost) in enumerate(zip(copies, critic.copy_costs(copies, len(units)))):
        period = min(length, start - source)
        rows.append([k + 1, _numbers(start, length), _numbers(source, period),
                     f"{length / period:g}" if start - source <= length else "", f"{cost:.2f}",
                     excerpt(span_text(doc, units, source, period), 120)])
    return table(["copy", many, f"repeat {many}", "times in a row", "-log P", "text"], rows, align="rllrrw",
                 css="repetition-copies",
                 row_attrs=[{"data-start": s, "data-length": n, "data-source": j} for s, n, j in copies])


def _runs(units: Units, copies: list[tuple[int, int, int]]) -> dict[int, list[tuple[int, int, int, str]]]:
    """Section -> the runs of copied units in it, in order: ``(first unit, last unit, copy, kind)``, one per copy
    and section it touches, ``kind`` ``"loop"`` or ``"copy"``."""
    runs: dict[int, list[tuple[int, int, int, str]]] = {}
    for k, (start, length, source) in enumerate(copies):
        kind = "loop" if start - source <= length else "copy"
        sections = units.sections[start:start + length]
        for section in np.unique(sections):
            inside = np.flatnonzero(sections == section) + start
            runs.setdefault(int(section), []).append((int(inside[0]), int(inside[-1]), k, kind))
    return runs


def _numbers(first: int, count: int) -> str:
    """Units ``first .. first + count - 1`` numbered from 1: ``"4-9"``, or ``"4"``."""
    return f"{first + 1}-{first + count}" if count > 1 else f"{first + 1}"


def _marked(text: str, units: Units, runs: list[tuple[int, int, int, str]]) -> Markup:
    """A section's ``text`` escaped, each run ``(first, last, copy, kind)`` of a copy's units in it (in order)
    wrapped in one ``<mark class="KIND">`` (``loop`` or ``copy``) from the first unit's start to the last one's end,
    with the copy's number in ``data-copy`` and its units in ``data-units``, counted from 1."""
    out, at = [], 0
    for first, last, k, kind in runs:
        begin, end = units.spans[first, 0], units.spans[last, 1]
        out += [escape(text[at:begin]),
                Markup(f'<mark class="{kind}" data-copy="{k + 1}" data-units="{_numbers(first, last - first + 1)}">'),
                escape(text[begin:end]), Markup("</mark>")]
        at = end
    out.append(escape(text[at:]))
    return Markup('<p class="repetition-text">' + "".join(out) + "</p>")
