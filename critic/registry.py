"""One registry: critics, metrics, corpora and experiment runners, open to other packages.

- a critic registers itself with ``@register_critic("name")``;
- a metric with ``register_metric(name, fn, description)``;
- a corpus builder (``critic data build NAME``) with ``register_corpus(name, build, description)``;
- an experiment runner (``critic run CONFIG.toml``) with ``@register_runner(name, schema)``.

A name is taken once: registering another object under a taken name is a
``ValueError`` (re-registering the same object, as on a module reload, is
not).  Packages (this project's ``critics`` sub-packages included) announce
themselves through the entry-point group ``critic.plugins``: each entry names
a module that, when imported, registers what it provides, and may define
``add_commands(subparsers)`` to add sub-commands to the ``critic`` CLI.  A
plugin that fails to import is recorded with its error, and every lookup that
misses a name says which plugins failed and why.  A user's own module (a dotted
name, or a ``.py`` file) is a plugin too when listed in ``$CRITIC_PLUGINS``
(``os.pathsep``-separated; ``critic --plugin FILE_OR_MODULE`` adds to it, so the
processes a command starts, Dask workers included, load it as well).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

__all__ = [
    "register_critic",
    "register_metric",
    "register_corpus",
    "register_runner",
    "get_critic",
    "get_metric",
    "get_corpus",
    "get_runner",
    "list_critics",
    "list_metrics",
    "list_corpora",
    "load_plugins",
    "add_plugin",
    "plugin_errors",
    "MetricEntry",
    "CorpusEntry",
    "RunnerEntry",
]

PLUGIN_GROUP = "critic.plugins"
PLUGINS_ENV = "CRITIC_PLUGINS"
"""Environment variable: a user's plugin modules or ``.py`` files, ``os.pathsep``-separated."""
BUILTIN_MODULES = ("critic.corpora", "critic.report_runner")
"""Core modules that register built-in entries (the man-page corpus, the ``report`` runner)."""

_CRITICS: dict[str, type] = {}
_METRICS: dict[str, "MetricEntry"] = {}
_CORPORA: dict[str, "CorpusEntry"] = {}
_RUNNERS: dict[str, "RunnerEntry"] = {}
_PLUGINS: dict[str, ModuleType] = {}
_PLUGIN_ERRORS: dict[str, str] = {}


@dataclass(frozen=True)
class MetricEntry:
    name: str
    fn: Callable
    description: str


@dataclass(frozen=True)
class CorpusEntry:
    """A corpus builder: ``build(out, *, root=None, install=True)`` writes train/valid/test JSONL.

    It returns a report with ``counts`` (what was kept and left out).
    """

    name: str
    build: Callable
    description: str


@dataclass(frozen=True)
class RunnerEntry:
    """An experiment runner ``fn(config, *, out, seed, device)`` and the :class:`critic.config.Schema`
    its TOML config is checked against."""

    name: str
    fn: Callable
    schema: Any
    description: str


def _same(a: Any, b: Any) -> bool:
    """The same object, or the same definition imported again (module reload)."""
    if a is b:
        return True
    key = lambda o: (getattr(o, "__module__", None), getattr(o, "__qualname__", None))  # noqa: E731
    return key(a) == key(b) and key(a) != (None, None)


def _claim(table: dict, kind: str, name: str, obj: Any, ident: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")
    existing = table.get(name)
    if existing is not None and not _same(_ident(existing), ident):
        what = getattr(_ident(existing), "__qualname__", repr(_ident(existing)))
        raise ValueError(f"{kind} name {name!r} is already taken by {what}")
    table[name] = obj


def _ident(entry: Any) -> Any:
    """The object that defines an entry (the class, function or builder)."""
    for attr in ("fn", "build"):
        if hasattr(entry, attr) and not isinstance(entry, type):
            return getattr(entry, attr)
    return entry


def register_critic(name: str):
    """Class decorator: make a :class:`critic.Critic` subclass available as ``name``."""

    def decorator(cls):
        _claim(_CRITICS, "critic", name, cls, cls)
        cls.name = name
        return cls

    return decorator


def register_metric(name: str, fn: Callable, description: str = "") -> Callable:
    """Register a metric (a plain function) under ``name``; returns ``fn``."""
    entry = MetricEntry(name, fn, description or (fn.__doc__ or "").strip().split("\n")[0])
    _claim(_METRICS, "metric", name, entry, fn)
    return fn


def register_corpus(name: str, build: Callable, description: str = "") -> Callable:
    """Register a corpus builder for ``critic data build NAME``; returns ``build``."""
    entry = CorpusEntry(name, build, description or (build.__doc__ or "").strip().split("\n")[0])
    _claim(_CORPORA, "corpus", name, entry, build)
    return build


def register_runner(name: str, schema: Any, description: str = ""):
    """Function decorator: an experiment runner for ``critic run`` with its config :class:`Schema`."""

    def decorator(fn):
        entry = RunnerEntry(name, fn, schema, description or (fn.__doc__ or "").strip().split("\n")[0])
        _claim(_RUNNERS, "runner", name, entry, fn)
        return fn

    return decorator


def load_plugins() -> dict[str, ModuleType]:
    """Import the built-in modules and every module of the ``critic.plugins`` entry-point group (once).

    A plugin that fails to import is recorded in :func:`plugin_errors`, not
    hidden: lookups that miss a name and ``critic list`` report it.
    """
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    named = [(ep.name, ep.value) for ep in entry_points(group=PLUGIN_GROUP)]
    named += [(spec, spec) for spec in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if spec]
    for name, spec in named:
        if name in _PLUGINS or name in _PLUGIN_ERRORS:
            continue
        try:
            _PLUGINS[name] = _import_plugin(spec)
        except Exception as exc:  # a broken optional plugin must not break the core
            _PLUGIN_ERRORS[name] = f"{spec}: {type(exc).__name__}: {exc}"
    return dict(_PLUGINS)


def _import_plugin(spec: str) -> ModuleType:
    """A module by dotted name, or a ``.py`` file imported as ``critic_plugin_<stem>``."""
    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"no such file {spec}")
    name = f"critic_plugin_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def add_plugin(spec: str) -> None:
    """Load a user's plugin (a dotted module name or a ``.py`` file) now and in every process started from here
    (it joins ``$CRITIC_PLUGINS``); ValueError naming it when it cannot be imported."""
    if spec.endswith(".py"):
        if not Path(spec).is_file():
            raise ValueError(f"--plugin {spec}: no such file")
        spec = str(Path(spec).resolve())
    listed = [s for s in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if s]
    if spec not in listed:
        os.environ[PLUGINS_ENV] = os.pathsep.join(listed + [spec])
    load_plugins()
    if spec in _PLUGIN_ERRORS:
        raise ValueError(f"--plugin: cannot import {_PLUGIN_ERRORS[spec]}")


def plugin_errors() -> dict[str, str]:
    """Plugins that could not be imported: name -> ``module: error``."""
    return dict(_PLUGIN_ERRORS)


def _unknown(kind: str, name: str, table: dict) -> KeyError:
    from .config import suggest

    known = ", ".join(sorted(table)) or "none"
    msg = f"unknown {kind} {name!r}{suggest(name, list(table))} (known: {known})"
    for plugin, err in sorted(_PLUGIN_ERRORS.items()):
        msg += f"; plugin {plugin!r} failed to import ({err})"
    return KeyError(msg)


def _get(table: dict, kind: str, name: str):
    if name not in table:
        load_plugins()
    try:
        return table[name]
    except KeyError:
        raise _unknown(kind, name, table) from None


def get_critic(name: str) -> type:
    return _get(_CRITICS, "critic", name)


def get_metric(name: str) -> MetricEntry:
    return _get(_METRICS, "metric", name)


def get_corpus(name: str) -> CorpusEntry:
    return _get(_CORPORA, "corpus", name)


def get_runner(spec: str) -> RunnerEntry:
    """A runner by registered name, or by ``package.module:function`` (importing the module registers it)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"runner must be a name or 'package.module:function', got {spec!r}")
    module, sep, func = spec.partition(":")
    if not sep:
        return _get(_RUNNERS, "runner", spec)
    try:
        fn = getattr(importlib.import_module(module), func)
    except ModuleNotFoundError as exc:
        raise ValueError(f"runner {spec!r}: cannot import {module!r} ({exc})") from None
    except AttributeError:
        raise ValueError(f"runner {spec!r}: module {module!r} has no {func!r}") from None
    for entry in _RUNNERS.values():
        if entry.fn is fn:
            return entry
    raise ValueError(f"runner {spec!r} is not registered: decorate it with "
                     "@critic.registry.register_runner(name, schema)")


def list_critics() -> dict[str, type]:
    load_plugins()
    return dict(sorted(_CRITICS.items()))


def list_metrics() -> dict[str, MetricEntry]:
    load_plugins()
    return dict(sorted(_METRICS.items()))


def list_corpora() -> dict[str, CorpusEntry]:
    load_plugins()
    return dict(sorted(_CORPORA.items()))
