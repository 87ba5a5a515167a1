"""critic: model criticism in latent space for long-form text generation.

Deng, Kuleshov and Rush (2022), *Model Criticism for Long-Form Text Generation*.

The public names (``__all__``) are imported from their modules on first use: ``from critic import Critic``
imports torch, ``import critic.cli`` and ``critic --help`` do not.  ``critic.compare`` criticises sets of
generations (files, lists of strings, DataFrames) with several critics in one call (:mod:`critic.api`).
"""

from __future__ import annotations

import importlib
import sys

__version__ = "0.1.0"

_WHERE = {  # module -> the public names it defines
    "api": ("compare", "Criticism"),
    "critic": ("Critic", "CriticLoadError", "NotFittedError", "Projection", "Scores", "resolve_device"),
    "criticism": ("criticize",),
    "panel": ("PanelResult", "load_results"),
    "results": ("CriticismResult", "SetResult"),
    "document": ("Document", "DocumentError", "Section", "read_jsonl", "write_jsonl"),
    "latent": ("Prior", "cross_entropy", "monte_carlo_cross_entropy", "register_cross_entropy"),
    "registry": ("get_critic", "get_metric", "list_critics", "list_metrics", "register_command", "register_converter",
                 "register_corpus", "register_critic", "register_metric", "register_runner", "register_setup"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [name for names in _WHERE.values() for name in names]


def __getattr__(name: str):
    """The public names, imported from their modules on first use."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'critic' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if "IPython" in sys.modules:  # inside a notebook: results show as the report's summary table (critic.notebook)
    from .notebook import register as _register_notebook

    _register_notebook()
