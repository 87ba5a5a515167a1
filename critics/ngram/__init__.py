"""KenLM n-gram tooling shared by the fluency metrics and the coreference critic.

* :func:`setup_kenlm` builds ``lmplz`` / ``build_binary`` from the PyPI sdist into a cache
  (``critic setup kenlm``); :func:`find_kenlm_bin` finds them (``CRITIC_KENLM_BIN`` overrides).
* :func:`estimate_ngram` runs lmplz; :class:`NgramLM` queries a model in natural-log units.
"""

from .build import KenLMNotBuilt, default_cache_dir, find_kenlm_bin, setup_kenlm
from .lm import NgramLM, estimate_ngram, train_ngram

__all__ = [
    "KenLMNotBuilt",
    "NgramLM",
    "default_cache_dir",
    "estimate_ngram",
    "find_kenlm_bin",
    "setup_kenlm",
    "train_ngram",
]
