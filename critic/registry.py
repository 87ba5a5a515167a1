"""One registry: critics, metrics, corpora, runners and the ``critic`` command line, open to other packages.

Each kind is a :class:`Registry` (one generic table: claim a name once, look it up, list them).

- a critic registers itself with ``@register_critic("name")``;
- a metric with ``register_metric(name, fn, description, command=...)`` (``critic metric NAME``);
- a corpus builder (``critic data build NAME``) with ``register_corpus(name, build, description)``;
- a format users bring (``critic data convert NAME``) with ``register_converter(name, convert, description)``;
- an input format every command reads (``--format NAME``) with ``register_format(InputFormat())``;
- a tool to build (``critic setup NAME``) with ``register_setup(name, fn, description)``;
- an experiment runner (``critic run CONFIG.toml``) with ``@register_runner(name, schema)``;
- a command of its own (``critic NAME ...``) with ``register_command(name, add, help)``.

``critic metric``, ``critic setup`` and ``critic data convert`` give each entry its own sub-command whose
options are the keyword parameters of a function (:func:`critic.cli_args.signature_options`): the same
mechanism for every kind, whoever registered it.

A name is taken once (:meth:`Registry.claim`).  Packages (this project's ``critics`` sub-packages included) announce
themselves through the entry-point group ``critic.plugins``: each entry names
a module that, when imported, registers what it provides.  A
plugin that fails to import is recorded with its error, and every lookup that
misses a name says which plugins failed and why.  A user's own module (a dotted
name, or a ``.py`` file) is a plugin too when listed in ``$CRITIC_PLUGINS``
(``os.pathsep``-separated; ``critic --plugin FILE_OR_MODULE`` adds to it, so the
processes a command starts, Dask workers included, load it as well).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Generic, TypeVar

from .terminal import get_logger

__all__ = [
    "Registry",
    "register_critic",
    "register_metric",
    "register_corpus",
    "register_runner",
    "register_converter",
    "register_setup",
    "register_command",
    "register_format",
    "get_critic",
    "get_metric",
    "get_corpus",
    "get_runner",
    "get_format",
    "list_critics",
    "list_metrics",
    "list_corpora",
    "list_converters",
    "list_setups",
    "list_commands",
    "list_formats",
    "load_plugins",
    "load_plugin",
    "plugin_of",
    "plugin_specs",
    "add_plugin",
    "plugin_errors",
    "MetricEntry",
    "CorpusEntry",
    "RunnerEntry",
    "ConverterEntry",
    "SetupEntry",
    "CommandEntry",
]

_log = get_logger(__name__)

PLUGIN_GROUP = "critic.plugins"
PLUGINS_ENV = "CRITIC_PLUGINS"
"""Environment variable: a user's plugin modules or ``.py`` files, ``os.pathsep``-separated."""
BUILTIN_MODULES = ("critic.corpora", "critic.report_runner")
"""Modules that register built-in entries: the toolkit's corpora (``critic data build`` builders and ``critic
data convert`` formats) and the core's ``report`` runner.  The core's commands are registered by
:mod:`critic.cli` itself."""

T = TypeVar("T")


class Registry(Generic[T]):
    """The entries of one ``kind`` (critic, metric, ...) by name: each name taken once (another object under a
    taken name is a ``ValueError``; the same definition again, as on a module reload, is not), a lookup that
    misses loads the plugins first and then names the closest known names and every plugin that failed."""

    def __init__(self, kind: str, entries: dict[str, T] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = dict(entries or {})

    def claim(self, name: str, entry: T, ident: Any) -> None:
        """Register ``entry`` under ``name``; ``ident`` is the object that defines it (class, function)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        existing = self._entries.get(name)
        if existing is not None and not _same(_ident(existing), ident):
            what = getattr(_ident(existing), "__qualname__", repr(_ident(existing)))
            raise ValueError(f"{self.kind} name {name!r} is already taken by {what}")
        self._entries[name] = entry

    def get(self, name: str) -> T:
        if name not in self._entries:
            load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise _unknown(self.kind, name, self._entries) from None

    def all(self, *, plugins: bool = True, by_name: bool = True) -> dict[str, T]:
        """Every entry (after loading the plugins unless ``plugins=False``), by name or in registration order."""
        if plugins:
            load_plugins()
        return dict(sorted(self._entries.items())) if by_name else dict(self._entries)

    def values(self):
        """The entries registered so far (no plugin loaded)."""
        return self._entries.values()

    def copy(self) -> "Registry[T]":
        """A registry of the same entries (a test registers into a copy and puts the original back)."""
        return Registry(self.kind, self._entries)


_CRITICS: Registry[type] = Registry("critic")
_METRICS: Registry["MetricEntry"] = Registry("metric")
_CORPORA: Registry["CorpusEntry"] = Registry("corpus")
_RUNNERS: Registry["RunnerEntry"] = Registry("runner")
_CONVERTERS: Registry["ConverterEntry"] = Registry("format")
_SETUPS: Registry["SetupEntry"] = Registry("tool")
_COMMANDS: Registry["CommandEntry"] = Registry("command")
_FORMATS: Registry[Any] = Registry("input format")
_PLUGINS: dict[str, ModuleType] = {}
_PLUGIN_ERRORS: dict[str, str] = {}


@dataclass(frozen=True)
class MetricEntry:
    """A metric: ``fn`` is the function itself; ``command`` its command-line form (``critic metric NAME``), a
    function whose keyword parameters are the options and whose return value is printed as JSON.  Without one,
    ``fn``'s own parameters are the options (a metric of numbers, strings, paths or lists of them)."""

    name: str
    fn: Callable
    description: str
    command: Callable | None = None


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


@dataclass(frozen=True)
class ConverterEntry:
    """A format users bring, for ``critic data convert NAME INPUT --out FILE``: ``convert(path, report, **options)``
    yields the documents of the file at ``path`` and counts in ``report`` (a ``Counter``) those it kept
    (``kept``) and those it left out, by reason; its keyword parameters after those two are options."""

    name: str
    convert: Callable
    description: str


@dataclass(frozen=True)
class SetupEntry:
    """A tool that ``critic setup NAME`` builds: ``fn(**options)`` builds it (idempotently) and returns where it
    is; its keyword parameters are the command's options."""

    name: str
    fn: Callable
    description: str


@dataclass(frozen=True)
class CommandEntry:
    """A command of ``critic``: ``add(parser)`` fills the command's parser (options, sub-commands, and
    ``func(args) -> int`` as a default).  ``add`` may be ``"package.module:function"``, imported only when the
    command is used, so that ``critic --help`` imports nothing behind it."""

    name: str
    add: Callable | str
    help: str

    def fill(self, parser) -> None:
        """Fill ``parser`` (the command's sub-parser) by ``add``."""
        add = self.add
        if isinstance(add, str):
            module, _, function = add.partition(":")
            try:
                add = getattr(importlib.import_module(module), function)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"command {self.name!r}: cannot load {self.add!r} ({type(exc).__name__}: {exc})"
                                 ) from None
        add(parser)


def _same(a: Any, b: Any) -> bool:
    """The same object, or the same definition imported again (module reload)."""
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):  # a "module:function" reference
        return a == b
    key = lambda o: (getattr(o, "__module__", None), getattr(o, "__qualname__", None))  # noqa: E731
    return key(a) == key(b) and key(a) != (None, None)


def _ident(entry: Any) -> Any:
    """The object that defines an entry (the class, function or builder)."""
    for attr in ("fn", "build", "convert", "add"):
        if hasattr(entry, attr) and not isinstance(entry, type):
            return getattr(entry, attr)
    return entry


def register_critic(name: str):
    """Class decorator: make a :class:`critic.Critic` subclass available as ``name``."""

    def decorator(cls):
        _CRITICS.claim(name, cls, cls)
        cls.name = name
        return cls

    return decorator


def _first_line(description: str, obj: Any) -> str:
    return description or (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]


def register_metric(name: str, fn: Callable, description: str = "", *, command: Callable | None = None) -> Callable:
    """Register a metric (a plain function) under ``name``, with its command-line form ``command`` (see
    :class:`MetricEntry`); returns ``fn``."""
    _METRICS.claim(name, MetricEntry(name, fn, _first_line(description, fn), command), fn)
    return fn


def register_corpus(name: str, build: Callable, description: str = "") -> Callable:
    """Register a corpus builder for ``critic data build NAME``; returns ``build``."""
    _CORPORA.claim(name, CorpusEntry(name, build, _first_line(description, build)), build)
    return build


def register_converter(name: str, convert: Callable, description: str = "") -> Callable:
    """Register a format for ``critic data convert NAME`` (see :class:`ConverterEntry`); returns ``convert``."""
    _CONVERTERS.claim(name, ConverterEntry(name, convert, _first_line(description, convert)), convert)
    return convert


def register_setup(name: str, fn: Callable, description: str = "") -> Callable:
    """Register a tool for ``critic setup NAME`` (see :class:`SetupEntry`); returns ``fn``."""
    _SETUPS.claim(name, SetupEntry(name, fn, _first_line(description, fn)), fn)
    return fn


def register_format(fmt: Any) -> Any:
    """Register an input format (a :class:`critic.inputs.InputFormat` instance) under its ``name``: every command
    that reads documents can read it (``--format NAME``), and ``auto`` knows it as the format says; returns it."""
    _FORMATS.claim(fmt.name, fmt, type(fmt))
    return fmt


def register_command(name: str, add: Callable | str, help: str) -> None:
    """Register ``critic NAME``: ``add(parser)`` (or ``"package.module:function"``) fills its parser, ``help`` is
    its line in ``critic --help`` (see :class:`CommandEntry`)."""
    _COMMANDS.claim(name, CommandEntry(name, add, help), add)


def register_runner(name: str, schema: Any, description: str = ""):
    """Function decorator: an experiment runner for ``critic run`` with its config :class:`Schema`."""

    def decorator(fn):
        entry = RunnerEntry(name, fn, schema, _first_line(description, fn))
        _RUNNERS.claim(name, entry, fn)
        return fn

    return decorator


def load_plugins() -> dict[str, ModuleType]:
    """Import the built-in modules and every module of the ``critic.plugins`` entry-point group (once).

    A plugin that fails to import is recorded in :func:`plugin_errors`, not
    hidden: lookups that miss a name and ``critic list`` report it.
    """
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    for name, spec in plugin_specs():
        _load_plugin(name, spec)
    return dict(_PLUGINS)


def load_plugin(name: str) -> bool:
    """Import the one plugin ``name`` (an entry point's name, or a ``$CRITIC_PLUGINS`` spec), as
    :func:`load_plugins` would, without the others; False when there is no such plugin or it failed to import
    (recorded in :func:`plugin_errors`)."""
    for known, spec in plugin_specs():
        if known == name:
            return _load_plugin(name, spec)
    return False


def _load_plugin(name: str, spec: str) -> bool:
    if name in _PLUGINS or name in _PLUGIN_ERRORS:
        return name in _PLUGINS
    started = time.perf_counter()
    try:
        _PLUGINS[name] = _import_plugin(spec)
    except SystemExit as exc:  # sys.exit() on import would end the command, status 0, having done nothing
        _PLUGIN_ERRORS[name] = f"{spec}: called sys.exit({exc.code!r}) while being imported"
    except Exception as exc:  # a broken optional plugin must not break the core
        _PLUGIN_ERRORS[name] = f"{spec}: {type(exc).__name__}: {exc}"
    if name in _PLUGINS:
        _log.debug("plugin %r imported (%s) in %.2f s", name, spec, time.perf_counter() - started)
    else:
        _log.debug("plugin %r failed to import: %s", name, _PLUGIN_ERRORS[name])
    return name in _PLUGINS


def plugin_of(module: str) -> str | None:
    """The name of the plugin whose module is ``module`` or a package holding it (the innermost), ``None`` when
    no plugin's is: importing that plugin alone defines what ``module`` does (``critics.sections.critic`` ->
    ``sections``)."""
    found, depth = None, -1
    for name, spec in plugin_specs():
        target = _file_module(Path(spec)) if spec.endswith(".py") else spec
        if (module == target or module.startswith(target + ".")) and target.count(".") > depth:
            found, depth = name, target.count(".")
    return found


def plugin_specs() -> list[tuple[str, str]]:
    """``(name, module or .py file)`` of every plugin :func:`load_plugins` imports, in its order: the
    ``critic.plugins`` entry points, then ``$CRITIC_PLUGINS`` (each named by itself)."""
    named = list(_entry_point_plugins(tuple(sys.path)))
    return named + [(spec, spec) for spec in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if spec]


@functools.lru_cache(maxsize=8)
def _entry_point_plugins(path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The ``critic.plugins`` entry points as ``(name, module)``, read once per ``sys.path`` (each reading scans
    every installed distribution's metadata)."""
    return tuple((ep.name, ep.value) for ep in entry_points(group=PLUGIN_GROUP))


def _import_plugin(spec: str) -> ModuleType:
    """A module by dotted name, or a ``.py`` file imported as ``critic_plugin_<stem>_<hash of its full path>``:
    two files of the same name in different folders are two plugins, each imported once."""
    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"no such file {spec}")
    name = _file_module(path)
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


def _file_module(path: Path) -> str:
    """The module name a ``.py`` file plugin is imported as."""
    digest = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"critic_plugin_{path.stem}_{digest}"


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


def get_critic(name: str) -> type:
    return _CRITICS.get(name)


def get_metric(name: str) -> MetricEntry:
    return _METRICS.get(name)


def get_corpus(name: str) -> CorpusEntry:
    return _CORPORA.get(name)


def get_format(name: str) -> Any:
    return _FORMATS.get(name)


def get_runner(spec: str, *, source_roots: Sequence[Path] = ()) -> RunnerEntry:
    """A runner by registered name, or by ``package.module:function`` (importing the module registers it).

    A module that is not installed is looked for as a source folder: in each of ``source_roots`` and the folders
    above it, the first that holds ``package/__init__.py`` is put on ``sys.path`` (the studies of a checkout,
    ``experiments/``, are a source folder, never installed into site-packages)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"runner must be a name or 'package.module:function', got {spec!r}")
    module, sep, func = spec.partition(":")
    if not sep:
        return _RUNNERS.get(spec)
    _find_source_package(module.partition(".")[0], source_roots)
    try:
        fn = getattr(importlib.import_module(module), func)
    except ModuleNotFoundError as exc:
        top = module.partition(".")[0]
        where = (f"; no {top}/ folder above {', '.join(map(str, source_roots))} either"
                 if source_roots and exc.name == top else "")
        raise ValueError(f"runner {spec!r}: cannot import {module!r} ({exc}){where}") from None
    except AttributeError:
        raise ValueError(f"runner {spec!r}: module {module!r} has no {func!r}") from None
    for entry in _RUNNERS.values():
        if entry.fn is fn:
            return entry
    raise ValueError(f"runner {spec!r} is not registered: decorate it with "
                     "@critic.registry.register_runner(name, schema)")


def _find_source_package(package: str, roots: Sequence[Path]) -> None:
    """Put the first folder at or above one of ``roots`` that holds ``package/__init__.py`` on ``sys.path``,
    unless ``package`` is importable already."""
    if not package.isidentifier() or importlib.util.find_spec(package) is not None:
        return
    for root in roots:
        for folder in (root.resolve(), *root.resolve().parents):
            if (folder / package / "__init__.py").is_file():
                sys.path.append(str(folder))
                return


def list_critics(*, plugins: bool = True) -> dict[str, type]:
    """By name (``plugins=False``: those registered so far, without importing a plugin)."""
    return _CRITICS.all(plugins=plugins)


def list_metrics(*, plugins: bool = True) -> dict[str, MetricEntry]:
    """By name (``plugins=False``: those registered so far, without importing a plugin)."""
    return _METRICS.all(plugins=plugins)


def list_corpora(*, plugins: bool = True) -> dict[str, CorpusEntry]:
    """By name (``plugins=False``: those registered so far, without importing a plugin)."""
    return _CORPORA.all(plugins=plugins)


def list_converters(*, plugins: bool = True) -> dict[str, ConverterEntry]:
    """By name (``plugins=False``: those registered so far, without importing a plugin)."""
    return _CONVERTERS.all(plugins=plugins)


def list_setups(*, plugins: bool = True) -> dict[str, SetupEntry]:
    """By name (``plugins=False``: those registered so far, without importing a plugin)."""
    return _SETUPS.all(plugins=plugins)


def list_formats(*, plugins: bool = True) -> dict[str, Any]:
    """The input formats in the order registered (``auto`` tries them in it); ``plugins=False``: without
    importing a plugin."""
    return _FORMATS.all(plugins=plugins, by_name=False)


def list_commands(*, plugins: bool = True) -> dict[str, CommandEntry]:
    """Every command, in the order registered.  ``plugins=False``: only those registered so far, without importing
    a plugin (``critic --help`` stays fast: the plugins' own commands are in ``critic list``)."""
    return _COMMANDS.all(plugins=plugins, by_name=False)
