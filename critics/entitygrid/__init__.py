"""Entity coherence as an entity grid (Barzilay & Lapata 2005, 2008): each entity's grammatical role sentence by
sentence under a Markov-chain prior.  spaCy is imported when a sentence is first parsed."""

from critic.views import register_view

from .critic import DEFAULT_SPACY, EntityGridCritic, OrderRank
from .grid import EntityGrid, SentenceParser, build_grid, document_sentences, sentence_parser, sentence_roles
from .prior import EntityGridPrior

register_view(EntityGridCritic, "critics.entitygrid.view:EntityGridView")  # imported when a report shows one

__all__ = ["EntityGridCritic", "EntityGridPrior", "EntityGrid", "OrderRank", "SentenceParser", "DEFAULT_SPACY",
           "build_grid", "document_sentences", "sentence_parser", "sentence_roles"]
