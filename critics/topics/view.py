"""The topic critics in a report (:mod:`critic.views`): paper figs. 6 and 7 and a document's topic mix, drawn
by :mod:`critics.topics.report`; registered for the critic classes by :mod:`critics.topics`, so the critics
themselves import no rendering."""

from __future__ import annotations

from critic.document import Document
from critic.views import CriticView

from .report import ctm_figures, ctm_view, lda_figures, lda_view

__all__ = ["CtmView", "LdaView"]


class CtmView(CriticView):
    def report_figures(self, critic, result, documents) -> dict:
        """Paper fig. 6 for each candidate set: its aggregated-posterior topic covariance beside the
        reference's, topics in the clustered order of the reference (:mod:`critics.topics.report`); each set's
        covariance kept while it was scored (:meth:`posterior_summary`), else its documents projected again."""
        return ctm_figures(critic, result, documents)

    def posterior_summary(self, critic):
        """The set's aggregated-posterior covariance (:class:`~critics.topics.ctm_plots.AggregatedCovariance`):
        ``K x K`` numbers kept of the set's posteriors, however many documents it has."""
        from .ctm_plots import AggregatedCovariance

        return AggregatedCovariance()

    def document_view(self, critic, doc: Document, result) -> str | None:
        """The document's heaviest topics with their weights, z-scores under the prior and top words; topics
        far from the prior (``|z| > far_z``) marked.  From the result's extras, else the document projected
        again."""
        return ctm_view(critic, doc, result)


class LdaView(CriticView):
    def report_figures(self, critic, result, documents) -> dict:
        """Paper fig. 7 (3 topics: one posterior sample per document of each set on the simplex), else each
        set's mean topic weights as bars; from the result's extras (:mod:`critics.topics.report`)."""
        return lda_figures(critic, result, documents)

    def document_view(self, critic, doc: Document, result) -> str | None:
        """The document's topic weights as bars beside the prior's mean, with each topic's top words."""
        return lda_view(critic, doc, result)
