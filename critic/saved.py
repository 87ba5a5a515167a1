"""A saved critic's folder read without loading the critic: what a stream plans with, no torch imported.

A process that only plans a stream and hands every chunk to Dask workers (``critic score --workers N``) needs
four things of the critic: its name, the hash of its fitted state (the key of a resumed run, checked by each
worker that loads it), its ``batch_size`` (a chunk's Monte Carlo seeds follow from its batches) and its
``chunk_documents``.  The first two are in ``critic.json``; the sizes are class attributes, which the kept
catalogue describes (:class:`critic.catalogue.CriticCard`) without importing the critic's stack.  So such a
process starts in the time of Python, not of ``import torch`` (1.3 s here), and that time goes to the workers.

The names here are those of :mod:`critic.critic`, which reads the same file when it loads a critic
(:meth:`critic.critic.Critic.load`, which also checks the tensors and files against the state hash; a worker
does, and refuses a critic whose hash is not the one planned with).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SavedCritic", "CriticLoadError", "FORMAT_VERSION", "check_device_name", "critic_class", "read_meta"]

FORMAT_VERSION = 2
"""Version of the on-disk format written by :meth:`critic.critic.Critic.save` (2: state hash, own files, no
device)."""

_META_TYPES = {"format_version": int, "critic": str, "params": dict, "state": dict, "tensors": list,
               "files": dict, "state_sha256": str}
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class CriticLoadError(ValueError):
    """A saved critic that cannot be loaded: the message names the path and what is wrong."""


def check_device_name(device: Any) -> str:
    """``device`` when it names a device this tool computes on (``cpu`` or ``cuda[:i]``), else ``ValueError``;
    whether it is present is :func:`critic.critic.resolve_device`'s to say."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {device!r}")
    return device


def read_meta(path: Path) -> dict[str, Any]:
    """The checked contents of ``path/critic.json``: :class:`CriticLoadError` naming the file and what is wrong
    (no folder, no file, not UTF-8, bad JSON, another format version, a key missing or of the wrong type)."""
    meta_file = path / "critic.json"
    if not path.is_dir():
        raise CriticLoadError(f"{path}: not a saved critic ({'a file, not a folder' if path.exists() else 'no such directory'})")
    if not meta_file.is_file():
        raise CriticLoadError(f"{path}: not a saved critic (no critic.json)")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CriticLoadError(f"{meta_file}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CriticLoadError(f"{meta_file}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(meta, dict):
        raise CriticLoadError(f"{meta_file}: expected a JSON object, got {type(meta).__name__}")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CriticLoadError(f"{meta_file}: critic format version {version!r}, this code reads {FORMAT_VERSION} "
                              "(refit and save the critic)")
    for key, kind in _META_TYPES.items():
        if key not in meta:
            raise CriticLoadError(f"{meta_file}: missing key {key!r}")
        if not isinstance(meta[key], kind) or isinstance(meta[key], bool):
            raise CriticLoadError(f"{meta_file}: {key!r} must be a {kind.__name__}, got {type(meta[key]).__name__}")
    if not all(isinstance(t, str) for t in meta["tensors"]):
        raise CriticLoadError(f"{meta_file}: 'tensors' must be a list of names")
    return meta


@dataclass(frozen=True)
class SavedCritic:
    """A critic saved at ``path`` as a stream plans with it (:func:`critic.streaming.score_stream`): its ``name``,
    the hash of its fitted state as saved (``critic.json``'s ``state_sha256``), its ``batch_size`` and
    ``chunk_documents`` (those of its class)."""

    path: Path
    name: str
    saved_sha256: str
    batch_size: int
    chunk_documents: int

    def state_sha256(self) -> str:
        """The saved state's hash (a critic loaded from ``path`` hashes to it, or its load fails)."""
        return self.saved_sha256

    @classmethod
    def read(cls, path: str | Path) -> "SavedCritic":
        """The critic saved at ``path``, from its ``critic.json`` and its class's card in the plugins' catalogue
        (:func:`critic.catalogue.catalogue`: kept, or built once in a child interpreter; a critic it does not
        describe has its class imported here).  :class:`CriticLoadError` for a folder that is no saved critic, or
        of a critic no plugin provides."""
        from .catalogue import catalogue

        path = Path(path)
        meta = read_meta(path)
        card = catalogue().critics.get(meta["critic"]) or critic_class(meta["critic"], path)
        return cls(path, meta["critic"], meta["state_sha256"], card.batch_size, card.chunk_documents)


def critic_class(name: str, path: Path) -> type:
    """The class of critic ``name``, saved at ``path``: its plugin alone imported when the kept catalogue names
    it, else every plugin (:func:`critic.catalogue.import_critic`); :class:`CriticLoadError` naming ``path`` when
    no plugin provides it."""
    from .catalogue import import_critic
    from .registry import get_critic

    try:
        import_critic(name)
        return get_critic(name)
    except KeyError as exc:
        raise CriticLoadError(f"{path}: {exc.args[0]}") from None
