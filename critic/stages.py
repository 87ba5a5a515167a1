"""Resumable stages of an experiment run, keyed by the config that produced them.

A run is a chain of stages (build the corpus, filter it, fit a critic, write
the report).  Each stage's outputs live under the run directory and its
*key* is a SHA-256 of the part of the config that produced them plus the keys
of the stages upstream of it, so a change anywhere above a stage changes its
key.  A small marker, ``RUN/stages/NAME.json``, records the key:

- :meth:`Stage.begin` before computing: outputs recorded under another key
  (or under none) are removed, and a *pending* marker records the new key --
  work in progress under the same key (a training checkpoint) is kept;
- :meth:`Stage.commit` after every output is written: the marker becomes
  *complete*, atomically, and lists the outputs written and every file in
  them with its size in bytes;
- :meth:`Stage.done`: the marker is complete, its key is this key and every
  file it lists is still there with the size it had at the commit (files added
  since are ignored; a file deleted or truncated, or a whole output deleted,
  means recompute -- :meth:`Stage.missing` says why).  A stage interrupted
  before its commit is not done and is recomputed on the next run; a stage
  whose config changed is recomputed, and with it everything downstream.

The listing costs a ``stat`` per file written and checks what goes wrong in
practice (a file deleted or cut short by hand, a folder half-copied) without
reading the content; a same-size edit goes unnoticed.  A marker written
before the listing existed (no ``files``) is checked for its outputs only.
Temporaries of :mod:`critic.io` are never listed.

::

    data = Stage(out, "data", {"root": root})
    if not data.done():
        data.begin(); build(data.path); data.commit()
    critic = Stage(out, "critic", critic_config, upstream=[data])
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from .io import atomic_write_text, is_temporary, remove_stale_temporaries

__all__ = ["Stage", "MARKER_DIR", "config_key", "is_run_folder"]

MARKER_DIR = "stages"
"""Folder of the run directory that holds the stage markers."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def config_key(value: Any) -> str:
    """Hex SHA-256 of a JSON-able value in canonical form (sorted keys, no spaces)."""
    return hashlib.sha256(_canonical(value).encode("utf-8")).hexdigest()


class Stage:
    """One stage of a run: its outputs under ``root`` and the marker that keys them.

    ``config`` is the JSON-able part of the config that determines the
    outputs; ``upstream`` the stages whose outputs this one reads.  By default
    the stage owns the directory ``root/name``; ``outputs`` lists the paths
    (relative to ``root``) it owns instead, for runners that write files
    straight into the run directory.
    """

    def __init__(self, root: str | Path, name: str, config: Mapping[str, Any], *,
                 upstream: Sequence["Stage"] = (), outputs: Sequence[str] | None = None):
        if not name or name == MARKER_DIR or "/" in name:
            raise ValueError(f"stage name must be a plain name other than {MARKER_DIR!r}, got {name!r}")
        self.root = Path(root)
        self.name = name
        self.config = json.loads(_canonical(dict(config)))
        self.upstream = {u.name: u.key for u in upstream}
        self.key = config_key({"stage": name, "config": self.config, "upstream": self.upstream})
        self.outputs = [name] if outputs is None else list(outputs)

    @property
    def path(self) -> Path:
        """The stage's own directory, ``root/name``."""
        return self.root / self.name

    @property
    def marker(self) -> Path:
        return self.root / MARKER_DIR / f"{self.name}.json"

    def recorded(self) -> dict | None:
        """The marker's content, or ``None`` when there is none or it cannot be read."""
        try:
            data = json.loads(self.marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def done(self) -> bool:
        """True when this stage completed under this key and the files it then wrote are there, same sizes."""
        return self.missing() is None

    def missing(self) -> str | None:
        """Why the stage is not :meth:`done` (``"no marker"``, ``"report/results.json deleted"``, ...), or None."""
        rec = self.recorded()
        if rec is None:
            return "no marker"
        if rec.get("key") != self.key:
            return "config changed"
        if rec.get("complete") is not True:
            return "interrupted before it finished"
        written = rec.get("outputs")
        if not isinstance(written, list) or not all(isinstance(p, str) for p in written):
            return "damaged marker"
        for rel in written:
            if not (self.root / rel).exists():
                return f"{rel} deleted"
        files = rec.get("files", {})
        if not isinstance(files, dict):
            return "damaged marker"
        for rel, size in files.items():
            try:
                now = os.lstat(self.root / rel)
            except OSError:
                return f"{rel} deleted"
            if now.st_size != size:
                return f"{rel} changed size ({size} -> {now.st_size} bytes)"
        return None

    def begin(self) -> "Stage":
        """Start (or resume) computing: drop outputs made under another key; record this key as pending.

        Temporaries that killed writers left beside the outputs are removed too (:mod:`critic.io`).
        """
        rec = self.recorded()
        if rec is None or rec.get("key") != self.key or rec.get("complete") is True:
            self.marker.unlink(missing_ok=True)
            for rel in self.outputs:
                target = self.root / rel
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
        for rel in self.outputs:
            remove_stale_temporaries(self.root / rel)
        self._write(complete=False)
        return self

    def commit(self) -> "Stage":
        """Record, under this key, that the stage finished and which of its outputs it wrote."""
        self._write(complete=True)
        return self

    def _write(self, *, complete: bool) -> None:
        record = {"stage": self.name, "key": self.key, "complete": complete, "config": self.config,
                  "upstream": self.upstream}
        if complete:
            record["outputs"] = [p for p in self.outputs if (self.root / p).exists()]
            record["files"] = self._files(record["outputs"])
        atomic_write_text(self.marker, json.dumps(record, indent=1, ensure_ascii=False) + "\n")

    def _files(self, outputs: list[str]) -> dict[str, int]:
        """``{path relative to root: size}`` of every file (or link) in ``outputs``, temporaries left out."""
        files = {}
        for rel in outputs:
            target = self.root / rel
            if not target.is_dir() or target.is_symlink():
                files[rel] = os.lstat(target).st_size
                continue
            for folder, dirs, names in os.walk(target):  # links to folders are listed, not followed
                dirs[:] = sorted(d for d in dirs if not is_temporary(d))
                base = Path(folder).relative_to(self.root)
                for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                    if not is_temporary(name):
                        files[(base / name).as_posix()] = os.lstat(os.path.join(folder, name)).st_size
        return files

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, key={self.key[:12]})"


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is a run folder this tool wrote before run folders were marked: its ``stages/`` holds stage
    markers (JSON objects with a stage name and a key)."""
    folder = Path(path) / MARKER_DIR
    for marker in folder.glob("*.json") if folder.is_dir() else []:
        try:
            record = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and {"stage", "key"} <= set(record):
            return True
    return False
