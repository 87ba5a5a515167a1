"""Section-transition coherence critic (paper sec. 4, app. E)."""

from critic.views import register_view

from .classifier import EncoderClassifier, SectionClassifier, TfidfClassifier
from .classifier_critic import ClassifierSectionCritic
from .critic import DEFAULT_DELTA_GRID, UNKNOWN, SectionTransitionCritic
from .normalize import DEFAULT_DROP_TITLES, CorpusFilter, FilterReport, TitleNormalizer

register_view(SectionTransitionCritic, "critics.sections.view:SectionView")  # imported when a report shows one
register_view(ClassifierSectionCritic, "critics.sections.view:ClassifierSectionView")

__all__ = ["SectionTransitionCritic", "ClassifierSectionCritic", "SectionClassifier", "TfidfClassifier",
           "EncoderClassifier", "TitleNormalizer", "CorpusFilter", "FilterReport",
           "DEFAULT_DROP_TITLES", "DEFAULT_DELTA_GRID", "UNKNOWN"]
