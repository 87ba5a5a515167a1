"""Hidden semi-Markov models: linear semi-Markov inference, the HSMM LM, the HSMM critic.

See ``docs/critics/hsmm.md``.  Importing this package registers the ``hsmm`` critic.
"""

from .critic import HSMMCritic, SemiMarkovChain, SemiMarkovPosterior, doc_tokens
from .model import HSMMLM, TrainConfig, train_hsmm
from .ngrams import NgramVocab, build_vocab

__all__ = [
    "HSMMCritic", "SemiMarkovChain", "SemiMarkovPosterior", "doc_tokens",
    "HSMMLM", "TrainConfig", "train_hsmm", "NgramVocab", "build_vocab",
]
