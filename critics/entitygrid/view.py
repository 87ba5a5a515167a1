"""The entity-grid critic in a report (:mod:`critic.views`): a flagged document's grid as a table, entities by
sentences, least likely entities first, and its sentences numbered below it; registered for the critic class by
:mod:`critics.entitygrid`, so the critic itself imports no rendering."""

from __future__ import annotations

from critic.document import Document
from critic.views import CriticView

from ..report_html import excerpt, note, number, paragraph, table, view
from .critic import EntityGridCritic
from .grid import document_sentences

__all__ = ["EntityGridView"]


class EntityGridView(CriticView):
    """A document's entity grid in place (:meth:`document_view`)."""

    shown_entities: int = 40
    """The most entity rows a grid table shows (the least likely ones)."""

    def document_view(self, critic: EntityGridCritic, doc: Document, result) -> str | None:
        """The grid parsed again from ``doc`` (as the critic parsed it when scoring): one row per entity, least
        likely first (ties: the first mentioned), its role in each sentence, ``-log P`` of its chain and the excess
        over random sentence orders; rows whose chain the given order makes less likely than a random order are
        highlighted.  Then each sentence, numbered as the columns, its first characters."""
        why = critic.check(doc)
        grid = critic.grids([doc])[0] if why is None else None
        why = why or critic.grid_problem(grid)
        if why is not None:
            return view(note(f"The critic cannot read this document's entity grid: {why}."), kind="entity-grid")
        rank = critic.order_rank(grid)
        nll, order = critic.least_likely_first(grid)
        shown = order[:self.shown_entities]
        header = ["entity", *(str(t + 1) for t in range(grid.sentences)), "-log P", "excess"]
        rows = [[grid.entities[e], *grid.chain(e), number(nll[e]), number(rank.entity_excess[e])] for e in shown]
        classes = ["unlikely" if rank.entity_excess[e] > 0 else None for e in shown]
        attrs = [{"data-entity": grid.entities[e], "data-nll": repr(float(nll[e]))} for e in shown]
        left_out = len(order) - len(shown)
        summary = (f"Entity grid: {len(grid.entities)} entities (noun-phrase heads) in {grid.sentences} sentences; "
                   "roles S subject, O object, X other, - absent. Rows: the least likely entities under the prior "
                   "first, with -log P of each chain (nats; they sum to T(x) = "
                   f"{float(nll.sum()):.3f}) and its excess over the mean of random sentence orders (highlighted when "
                   f"positive). {critic.order_reason(rank.rank, rank.orders)}."
                   + (f" {left_out} more entities are not shown." if left_out else ""))
        sentences = table(["#", "sentence"], [[n + 1, excerpt(s)] for n, s in enumerate(document_sentences(doc))],
                          align="rw", css="entity-grid-sentences")
        return view(paragraph(summary),
                    table(header, rows, align="l" + "l" * grid.sentences + "rr", row_classes=classes,
                          row_attrs=attrs, css="entity-grid"),
                    sentences, kind="entity-grid")
