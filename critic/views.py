"""What a report shows of a critic beyond its numbers, kept beside the critic and out of the model.

A :class:`CriticView` holds the report hooks of a kind of critic: its own figures, the statistics its latent
defines beside the Latent NLL, and its view of one document on the document's report page.  A critic package
registers its view for its critic class (:func:`register_view`), lazily as ``"package.module:Class"`` so that
importing a critic imports no plotting; the report finds a critic's view by its class and its bases
(:func:`view_for`: a subclass shows its base's view unless it registers its own), and every critic without
one gets the default, which shows nothing of its own.  The module-level :func:`report_figures`,
:func:`set_statistics` and :func:`document_view` are what the report, the panel and tests call.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping, Sequence

from .document import Document

__all__ = ["CriticView", "register_view", "view_for", "report_figures", "set_statistics", "document_view"]


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
