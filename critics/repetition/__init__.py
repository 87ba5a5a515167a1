"""Repetition loops as a semi-Markov copy process (Holtzman et al. 2020; Welleck et al. 2020):
docs/critics/repetition.md."""

from critic.views import register_view

from .critic import DEFAULT_MIN_COPY, RepetitionCritic
from .factorize import Factorisation, encode, factorize
from .prior import CopySemiMarkov, LogBinned

register_view(RepetitionCritic, "critics.repetition.view:RepetitionView")  # imported when a report shows one

__all__ = ["RepetitionCritic", "DEFAULT_MIN_COPY", "Factorisation", "factorize", "encode", "CopySemiMarkov",
           "LogBinned"]
