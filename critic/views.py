"""What a report shows of a critic beyond its numbers, kept beside the critic and out of the model.

A :class:`CriticView` holds the report hooks of a kind of critic: its own figures, the statistics its latent
defines beside the Latent NLL, and its view of one document on the document's report page.  A critic package
registers its view for its critic class (:func:`register_view`), lazily as ``"package.module:Class"`` so that
importing a critic imports no plotting; the report finds a critic's view by its class and its bases
(:func:`view_for`: a subclass shows its base's view unless it registers its own), and every critic without
one gets the default, which shows nothing of its own.  The module-level :func:`report_figures`,
:func:`set_statistics`, :func:`document_view` and :func:`posterior_summary` are what the report, the panel, the
criticism and tests call.

A criticism projects each set once per critic (issue 40): what a view draws of the sets' posteriors beyond the
per-document extras (the CTM's aggregated-posterior covariance) it collects while the set is scored
(:meth:`CriticView.posterior_summary`), kept on the set's result for the run and never written, so that its
figures do not project the set again.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping, Sequence

from .document import Document

__all__ = ["CriticView", "PosteriorSummary", "register_view", "view_for", "report_figures", "set_statistics",
           "document_view", "posterior_summary"]


class PosteriorSummary:
    """What a view keeps of one set's posteriors while the set is scored: :meth:`add` is given each batch's
    :class:`~critic.critic.Projection` (every document that projected, in order), :meth:`result` is called once
    when the set is scored and becomes ``SetResult.posterior_summary``.  Keep only what the figures need, not the
    posteriors: a summary should not grow with the documents where it need not."""

    def add(self, projection: Any) -> None:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError


class CriticView:
    """The report hooks of a kind of critic; each takes the fitted critic first.  The default shows nothing."""

    def report_figures(self, critic: Any, result: Any, documents: Mapping[str, Sequence[Document]]) -> dict[str, Any]:
        """The critic's own figures: caption -> matplotlib ``Figure`` (drawn on :func:`critic.plots.new_figure`),
        given its :class:`~critic.results.CriticismResult` and the documents of each set (set name -> documents)."""
        return {}

    def set_statistics(self, critic: Any, result: Any, documents: Mapping[str, Sequence[Document]]
                       ) -> dict[str, tuple[dict[str, float | None], dict[str, str]]]:
        """Statistics of each set that the critic's latent defines beside the Latent NLL (the section critics'
        PDD of section types): name -> (set name -> value, set name -> why it has none)."""
        return {}

    def document_view(self, critic: Any, doc: Document, result: Any) -> str | None:
        """What the critic found in ``doc``, as an HTML fragment for the document's report page (its latent
        structure in place), given the document's :class:`~critic.results.DocumentResult`; every text escaped.
        ``None``: the page lists the projection's extras."""
        return None

    def posterior_summary(self, critic: Any) -> PosteriorSummary | None:
        """A fresh :class:`PosteriorSummary` of one set, filled while :func:`critic.criticism.criticize` scores the
        set (its only projection of it), for :meth:`report_figures` and :meth:`set_statistics` to read from the
        set's result (``result.set(name).posterior_summary``; ``None`` for results read back from a report, so
        they fall back to projecting the documents).  ``None`` (the default): the view needs nothing beyond the
        documents' extras."""
        return None


_VIEWS: dict[type, CriticView | str] = {}
_DEFAULT = CriticView()


def register_view(critic_class: type, view: CriticView | str) -> None:
    """Show ``critic_class`` (and its subclasses that register none) with ``view``: an instance, or
    ``"package.module:Class"`` imported and instantiated on first use."""
    _VIEWS[critic_class] = view


def view_for(critic: Any) -> CriticView:
    """The view registered for the critic's class or its nearest base; the default otherwise."""
    for cls in type(critic).__mro__:
        view = _VIEWS.get(cls)
        if isinstance(view, str):
            module, _, name = view.partition(":")
            view = _VIEWS[cls] = getattr(importlib.import_module(module), name)()
        if view is not None:
            return view
    return _DEFAULT


def report_figures(critic: Any, result: Any, documents: Mapping[str, Sequence[Document]]) -> dict[str, Any]:
    return view_for(critic).report_figures(critic, result, documents)


def set_statistics(critic: Any, result: Any, documents: Mapping[str, Sequence[Document]]
                   ) -> dict[str, tuple[dict[str, float | None], dict[str, str]]]:
    return view_for(critic).set_statistics(critic, result, documents)


def document_view(critic: Any, doc: Document, result: Any) -> str | None:
    return view_for(critic).document_view(critic, doc, result)


def posterior_summary(critic: Any) -> PosteriorSummary | None:
    return view_for(critic).posterior_summary(critic)
