"""The coreference critic in a report (:mod:`critic.views`): the per-token log P of every set's chains, and a
document's text with its chain's mentions marked and the implausible ones highlighted; registered for the critic
class by :mod:`critics.coref`, so the critic itself imports no rendering."""

from __future__ import annotations

from critic.document import Document
from critic.views import CriticView

from ..report_html import note, paragraph, table, view
from .diagnostics import implausible_mentions, logprob_histogram_figure, render_html

__all__ = ["CorefView"]


class CorefView(CriticView):
    def report_figures(self, critic, result, documents) -> dict:
        """The per-token log P of every set's chains (from the result's extras: nothing is resolved again)."""
        sets = {s.name: [d.extras["chain"].split() for d in s.documents if "chain" in d.extras] for s in result.sets}
        if not any(sets.values()):
            return {}
        threshold = critic.implausible_threshold
        caption = (f"Per-token log P_c(z_i | window) of the coreference chains of each set (density, log scale); "
                   f"dashed: the implausibility threshold {threshold:g}, with each set's share of tokens below it.")
        return {caption: logprob_histogram_figure(critic.prior_, sets, threshold=threshold)}

    def document_view(self, critic, doc: Document, result) -> str | None:
        """The document's text with its chain's person mentions marked (entity numbers as subscripts) and the
        implausible ones (window log P below the critic's ``implausible_threshold``) highlighted, then a table of
        those with the prior's most likely token in their place."""
        critic._require_fitted()
        found = critic._view_chain(doc, result)
        if isinstance(found, str):
            return view(note(found), kind="coref")
        tokens, spans = found
        if len(tokens) != len(spans):
            return view(note(f"The chain has {len(tokens)} tokens but {len(spans)} mention spans."), kind="coref")
        threshold = critic.implausible_threshold
        bad = implausible_mentions(critic.prior_, doc.text, tokens, spans, threshold=threshold)
        mentions = sum(s is not None for s in spans)
        entities = len({t.rpartition(":")[2] for t in tokens if ":" in t})
        parts = [paragraph(f"Coreference chain: {len(tokens)} tokens, {len(tokens) - mentions} sentence starts and "
                           f"{mentions} person mentions of {entities} entities. Mentions are marked with their "
                           f"entity's number; highlighted: the {len(bad)} implausible chain token(s), log P_c(z_i | "
                           f"window) < {threshold:g} (hover for the value and the prior's most likely token).")]
        if bad:
            parts.append(table(["#", "mention", "chain token", "log P", "most likely instead", "its log P"],
                               [[b["position"], "(sentence start)" if b["mention"] is None else b["mention"],
                                 b["token"], f"{b['log_prob']:.2f}", b["argmax"], f"{b['argmax_log_prob']:.2f}"]
                                for b in bad], align="rllrlr", css="coref-implausible"))
        parts.append(render_html(critic.prior_, doc.text, tokens, spans, threshold=threshold))
        return view(*parts, kind="coref")
