"""The section critics in a report (:mod:`critic.views`): paper fig. 4 per candidate set, the PDD of section
types beside the Latent NLL, and a document's section-type chain in place; registered for the critic classes
by :mod:`critics.sections`, so the critics themselves import no rendering."""

from __future__ import annotations

from critic.document import Document
from critic.views import CriticView

from ..report_html import note, view
from .critic import UNKNOWN
from .analysis import section_paths
from .report import SetPaths, chain_view, pdd_statistic, transition_figures

__all__ = ["SectionView", "ClassifierSectionView"]


class SectionView(CriticView):
    """The given-title critic's view: its chain of (normalised) given titles."""

    def set_statistics(self, critic, result, documents):
        """PDD (seed 002) of each candidate's section types against the reference's, over positional bins
        (:data:`critics.sections.report.PDD_BINS`): where in a document each type occurs."""
        return pdd_statistic(critic, result, documents)

    def report_figures(self, critic, result, documents):
        """Paper fig. 4 for each candidate set against the reference (:mod:`critics.sections.report`)."""
        return transition_figures(critic, result, documents)

    def document_view(self, critic, doc: Document, result) -> str | None:
        """The document's chain of (normalised) given titles, each transition's log P under the prior, the
        unlikely ones (P < 0.01) highlighted, each section's title and first characters in place."""
        reason = critic.check(doc)
        if reason is not None:
            return view(note(f"The critic cannot read this document's sections: {reason}."), kind="sections")
        types = [t if t in critic.index_ else UNKNOWN for t in critic.titles(doc)]
        return chain_view(critic, doc, types, how="Section types: the given titles, normalised as the critic "
                          f"reads them ({UNKNOWN}: a title never seen in training).")


def scored_paths(critic, result) -> SetPaths:
    """Each set's MAP section types as its scoring kept them (the scored documents' extras ``labels``, matched by
    id within the set), so the sets are not classified again; the documents the set's result has no labels for
    (skipped ones) are classified here."""
    def paths(name, docs):
        kept = {d.id: d.extras.get("labels") for s in result.sets if s.name == name for d in s.documents}
        missing = [d for d in docs if kept.get(d.id) is None]
        classified = iter(section_paths(critic, missing))
        return [list(kept[d.id]) if kept.get(d.id) is not None else next(classified) for d in docs]
    return paths


class ClassifierSectionView(SectionView):
    """The classifier critic's view: the section types its classifier assigned, in the PDD and fig. 4 those its
    scoring found (:func:`scored_paths`)."""

    def set_statistics(self, critic, result, documents):
        return pdd_statistic(critic, result, documents, paths=scored_paths(critic, result))

    def report_figures(self, critic, result, documents):
        return transition_figures(critic, result, documents, paths=scored_paths(critic, result))

    def document_view(self, critic, doc: Document, result) -> str | None:
        """The MAP section types the classifier assigned (titled or not) with their probabilities, each
        transition's log P under the prior, the unlikely ones (P < 0.01) highlighted, each section's title
        and first characters in place.  Types from the result's extras, else the document classified again."""
        extras = getattr(result, "extras", None) or {}
        labels, probabilities = extras.get("labels"), extras.get("label_probabilities")
        if labels is None or probabilities is None:
            c = critic._classify([doc])
            if not c.ok[0]:
                return view(note(f"The critic cannot read this document's sections: {c.reasons[doc.id]}."),
                            kind="sections")
            best, index = c.log_probs.max(-1)
            labels, probabilities = [critic.vocab_[j] for j in index.tolist()], best.exp().tolist()
        how = ("Section types: the classifier's most probable title for each section's text (MAP), with its "
               "probability; the given titles are not used"
               + (" (the score is the expectation under the classifier's posterior; the chain shown is its MAP)."
                  if critic.mode == "expectation" else "."))
        return chain_view(critic, doc, labels, how=how, probabilities=probabilities)
