"""Section-transition coherence critic (paper sec. 4, app. E)."""

from .classifier import EncoderClassifier, SectionClassifier, TfidfClassifier
from .classifier_critic import ClassifierSectionCritic
from .critic import DEFAULT_DELTA_GRID, UNKNOWN, SectionTransitionCritic
from .normalize import DEFAULT_DROP_TITLES, CorpusFilter, FilterReport, TitleNormalizer

__all__ = ["SectionTransitionCritic", "ClassifierSectionCritic", "SectionClassifier", "TfidfClassifier",
           "EncoderClassifier", "TitleNormalizer", "CorpusFilter", "FilterReport",
           "DEFAULT_DROP_TITLES", "DEFAULT_DELTA_GRID", "UNKNOWN"]
