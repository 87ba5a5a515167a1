"""Named critics, metrics and CLI commands, open to other packages.

A critic registers itself with ``@register_critic("name")``; a metric with
``register_metric(name, fn, description)``.  Packages (this project's
``critics`` sub-packages included) announce themselves through the entry-point
group ``critic.plugins``: each entry names a module that, when imported,
registers what it provides.  A module may also define
``add_commands(subparsers)`` to add sub-commands to the ``critic`` CLI.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import ModuleType
from typing import Callable

__all__ = [
    "register_critic",
    "register_metric",
    "get_critic",
    "get_metric",
    "list_critics",
    "list_metrics",
    "load_plugins",
    "MetricEntry",
]

PLUGIN_GROUP = "critic.plugins"

_CRITICS: dict[str, type] = {}
_METRICS: dict[str, "MetricEntry"] = {}
_PLUGINS: dict[str, ModuleType] = {}
_PLUGIN_ERRORS: dict[str, str] = {}


@dataclass(frozen=True)
class MetricEntry:
    name: str
    fn: Callable
    description: str


def register_critic(name: str):
    """Class decorator: make a :class:`critic.Critic` subclass available as ``name``."""

    def decorator(cls):
        existing = _CRITICS.get(name)
        if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"critic name {name!r} is already taken by {existing.__qualname__}")
        cls.name = name
        _CRITICS[name] = cls
        return cls

    return decorator


def register_metric(name: str, fn: Callable, description: str = "") -> Callable:
    """Register a metric (a plain function) under ``name``; returns ``fn``."""
    _METRICS[name] = MetricEntry(name, fn, description or (fn.__doc__ or "").strip().split("\n")[0])
    return fn


def load_plugins() -> dict[str, ModuleType]:
    """Import every module named in the ``critic.plugins`` entry-point group (once).

    A plugin that fails to import is recorded in :func:`plugin_errors`, not
    hidden: ``critic list`` prints it.
    """
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name in _PLUGINS or ep.name in _PLUGIN_ERRORS:
            continue
        try:
            _PLUGINS[ep.name] = importlib.import_module(ep.value)
        except Exception as exc:  # a broken optional plugin must not break the core
            _PLUGIN_ERRORS[ep.name] = f"{type(exc).__name__}: {exc}"
    return dict(_PLUGINS)


def plugin_errors() -> dict[str, str]:
    """Plugins that could not be imported, with the error."""
    return dict(_PLUGIN_ERRORS)


def get_critic(name: str) -> type:
    if name not in _CRITICS:
        load_plugins()
    try:
        return _CRITICS[name]
    except KeyError:
        known = ", ".join(sorted(_CRITICS)) or "none"
        raise KeyError(f"unknown critic {name!r} (known: {known})") from None


def get_metric(name: str) -> MetricEntry:
    if name not in _METRICS:
        load_plugins()
    try:
        return _METRICS[name]
    except KeyError:
        known = ", ".join(sorted(_METRICS)) or "none"
        raise KeyError(f"unknown metric {name!r} (known: {known})") from None


def list_critics() -> dict[str, type]:
    load_plugins()
    return dict(sorted(_CRITICS.items()))


def list_metrics() -> dict[str, MetricEntry]:
    load_plugins()
    return dict(sorted(_METRICS.items()))
