"""What the plugins provide, known without importing them: the catalogue behind ``critic list`` and the
``critic fit`` parser.

Importing the plugins imports every critic's stack (torch, Pyro, gensim): seconds.  What ``critic list`` and
``critic fit [NAME] --help`` show of them -- names, descriptions, a critic's needs, default calibration folds and
settings -- changes only when their code does.  So the catalogue is read from the plugins once, in a fresh
interpreter (so that nothing this process registered itself leaks into it), and kept in ``catalogue.json`` of
the cache folder (:func:`cache_folder`), keyed by a fingerprint of the plugin list and of every file of the
plugins and of this package (path, size, modification time) and the Python version: any change rebuilds it.
What this process registered itself (a script's own critic, a test's) is described live, beside it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import registry
from .helptext import plain_help
from .io import atomic_write_text, claim_folder, user_cache
from .terminal import get_logger

__all__ = ["CriticCard", "Catalogue", "catalogue", "critic_card", "import_critic", "cache_folder", "CACHE_ENV"]

_log = get_logger(__name__)

CACHE_ENV = "CRITIC_CATALOGUE"
"""Environment variable: the folder the catalogue is kept in (default ``catalogue`` of :func:`critic.io.user_cache`);
a folder the tool made or an empty one (:func:`critic.io.claim_folder`)."""


@dataclass(frozen=True)
class CriticCard:
    """What the command line shows of a critic: its docstring as plain text, what it needs, its default
    calibration folds and one line per setting (:func:`critic.config.describe_settings`); the ``batch_size`` and
    ``chunk_documents`` a stream plans its chunks with (:class:`critic.saved.SavedCritic`); the plugin whose
    module defines it (:func:`critic.registry.plugin_of`; ``""`` for none), which :func:`import_critic` imports
    alone to load a saved critic; and the package extra that installs what it needs (the class's ``extra``
    attribute: ``pip install 'critic[EXTRA]'``; ``""``: the core's dependencies suffice)."""

    name: str
    doc: str
    needs: str
    calibration_folds: int | None
    settings: tuple[str, ...]
    batch_size: int
    chunk_documents: int
    plugin: str = ""
    extra: str = ""

    @classmethod
    def of(cls, name: str, critic_class: type) -> "CriticCard":
        from .config import describe_settings

        return cls(name, plain_help(inspect.cleandoc(critic_class.__doc__ or "")), str(critic_class.needs),
                   critic_class.calibration_folds, tuple(describe_settings(critic_class)), critic_class.batch_size,
                   critic_class.chunk_documents, registry.plugin_of(critic_class.__module__) or "", str(getattr(critic_class, "extra", "") or ""))

    @property
    def summary(self) -> str:
        """The docstring's first line."""
        return self.doc.splitlines()[0] if self.doc else ""


@dataclass
class Catalogue:
    """Every critic (as a :class:`CriticCard`) and the descriptions of every metric, corpus, converter, tool and
    command, by name; the plugins that failed to import, with their errors."""

    critics: dict[str, CriticCard] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    corpora: dict[str, str] = field(default_factory=dict)
    converters: dict[str, str] = field(default_factory=dict)
    setups: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    plugin_errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> "Catalogue":
        critics = {name: CriticCard(**{**card, "settings": tuple(card["settings"])})
                   for name, card in payload["critics"].items()}
        return cls(critics, *(dict(payload[k]) for k in ("metrics", "corpora", "converters", "setups", "commands",
                                                          "plugin_errors")))

    def add_registered(self, *, plugins: bool) -> "Catalogue":
        """Add what the registry holds (after loading the plugins when ``plugins``): described from the objects."""
        self.critics.update({name: CriticCard.of(name, cls)
                             for name, cls in registry.list_critics(plugins=plugins).items()})
        for table, listed in (("metrics", registry.list_metrics), ("corpora", registry.list_corpora),
                              ("converters", registry.list_converters), ("setups", registry.list_setups)):
            getattr(self, table).update({name: entry.description for name, entry in listed(plugins=plugins).items()})
        live = {name: entry.help for name, entry in registry.list_commands(plugins=plugins).items()}
        self.commands = {**live, **{k: v for k, v in self.commands.items() if k not in live}}  # core commands first
        self.plugin_errors.update(registry.plugin_errors())
        return self


def cache_folder() -> Path:
    """``$CRITIC_CATALOGUE``, else ``catalogue`` in the user's cache folder of the tool (:func:`critic.io.user_cache`)."""
    return Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else user_cache("catalogue")


def _files(spec: str) -> list[Path]:
    """The source files of a plugin, found without importing it (its parent packages are imported)."""
    if spec.endswith(".py"):
        return [Path(spec)]
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        return []
    if found is None:
        return []
    if found.submodule_search_locations:
        return sorted(p for folder in found.submodule_search_locations for p in Path(folder).rglob("*.py"))
    return [Path(found.origin)] if found.origin else []


def fingerprint() -> str:
    """SHA-256 of the Python version, the plugin list and the path, size and modification time of every file of
    the plugins and of this package."""
    digest = hashlib.sha256(sys.version.encode())
    specs = [*registry.BUILTIN_MODULES, *(spec for _, spec in registry.plugin_specs())]
    digest.update("\0".join(specs).encode("utf-8", "surrogateescape"))
    files = sorted(Path(__file__).parent.rglob("*.py"))
    files += [path for spec in specs for path in _files(spec)]
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            digest.update(f"{path}\0missing".encode("utf-8", "surrogateescape"))
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


_READ: Catalogue | None = None


def catalogue() -> Catalogue:
    """The plugins' catalogue (from the cache when its fingerprint holds, else built in a fresh interpreter and
    kept) with what this process registered itself beside it."""
    global _READ
    key = fingerprint()
    path = cache_folder() / "catalogue.json"
    cached = _cached(path, key)
    if cached is None:
        cached = _build(path, key)
    _READ = cached.add_registered(plugins=False)
    return _READ


def import_critic(name: str) -> bool:
    """Register critic ``name`` by importing only the plugin that defines it, as the kept catalogue names it
    (``critic score`` of a section critic imports no other critic's stack: no Pyro, gensim, KenLM or corpus
    builder).  False, having imported nothing, when no catalogue is kept or its fingerprint no longer holds (no
    catalogue is built here: that takes a child interpreter) or it names no plugin; False too when that plugin
    fails to import (recorded, :func:`critic.registry.plugin_errors`) or registers no such critic.  The caller
    then loads every plugin (:func:`critic.registry.get_critic`)."""
    if name in registry.list_critics(plugins=False):
        return True
    card = critic_card(name)
    if card is None or not card.plugin or not registry.load_plugin(card.plugin):
        return False
    return name in registry.list_critics(plugins=False)


def critic_card(name: str) -> CriticCard | None:
    """Critic ``name``'s card as this process read the catalogue, else in the kept catalogue when its fingerprint
    holds; ``None`` when neither has it (nothing is built or imported here)."""
    card = _READ.critics.get(name) if _READ is not None else None
    if card is None:
        kept = _cached(cache_folder() / "catalogue.json", fingerprint())
        card = kept.critics.get(name) if kept is not None else None
    return card


def errors_known() -> dict[str, str]:
    """The plugins that failed to import, as far as this process knows without importing them."""
    return {**(_READ.plugin_errors if _READ is not None else {}), **registry.plugin_errors()}


def _cached(path: Path, key: str) -> Catalogue | None:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        return Catalogue.from_json(payload["catalogue"]) if payload.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _build(path: Path, key: str) -> Catalogue:
    """The plugins' catalogue, read in a fresh interpreter and kept at ``path``, in a folder the tool made or an
    empty one (:func:`critic.io.claim_folder`; another is said on stderr and left untouched); read in this
    process (loading the plugins here) when the folder cannot be had or the child fails."""
    try:
        claim_folder(path.parent, "catalogue")
    except ValueError as exc:
        _log.warning("$%s: %s; the catalogue is not kept", CACHE_ENV, exc)
        return Catalogue().add_registered(plugins=True)
    except OSError:
        return Catalogue().add_registered(plugins=True)
    payload = _read_in_child(path.parent)
    if payload is None:
        return Catalogue().add_registered(plugins=True)
    try:
        atomic_write_text(path, json.dumps({"key": key, "catalogue": payload}, ensure_ascii=False) + "\n")
    except OSError:
        pass  # a cache that cannot be kept: built again next time
    return Catalogue.from_json(payload)


def _read_in_child(folder: Path) -> dict | None:
    """The catalogue as a fresh interpreter reads it (this critic package first on its path, whatever the working
    folder holds), through a file of its own in ``folder``; ``None`` when the child fails."""
    handle, name = tempfile.mkstemp(prefix=".catalogue-", suffix=".json", dir=folder)
    os.close(handle)
    out = Path(name)
    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    code = "import sys; from critic.catalogue import _dump; _dump(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-P", "-c", code, str(out)], capture_output=True, env=env, timeout=600)
        return json.loads(out.read_text(encoding="utf-8")) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    finally:
        out.unlink(missing_ok=True)


def _dump(out: str) -> None:
    """Load the plugins and write their catalogue to ``out`` (run in a fresh interpreter by :func:`_build`)."""
    Path(out).write_text(json.dumps(Catalogue().add_registered(plugins=True).to_json(), ensure_ascii=False),
                         encoding="utf-8")
