"""critic: model criticism in latent space for long-form text generation.

Deng, Kuleshov and Rush (2022), *Model Criticism for Long-Form Text Generation*.
"""

from .critic import Critic, CriticLoadError, NotFittedError, Projection, Scores, resolve_device
from .criticism import criticize
from .results import CriticismResult, SetResult
from .document import Document, DocumentError, Section, read_jsonl, write_jsonl
from .latent import Prior, cross_entropy, monte_carlo_cross_entropy, register_cross_entropy
from .registry import (get_critic, get_metric, list_critics, list_metrics, register_corpus, register_critic,
                       register_metric, register_runner)

__version__ = "0.1.0"

__all__ = [
    "Critic", "CriticLoadError", "NotFittedError", "Projection", "Scores", "resolve_device",
    "CriticismResult", "SetResult", "criticize",
    "Document", "DocumentError", "Section", "read_jsonl", "write_jsonl",
    "Prior", "cross_entropy", "monte_carlo_cross_entropy", "register_cross_entropy",
    "get_critic", "get_metric", "list_critics", "list_metrics", "register_corpus", "register_critic",
    "register_metric", "register_runner",
]
