"""Output folders that resume: a run claims its folder with its settings, and a rerun must match them.

``settings.json`` is written (atomically) when a run starts.  A rerun into the same folder with the
same settings continues the run; with other settings it is refused, naming what differs, so that
the outputs of two different runs never mix.  A non-empty folder without ``settings.json`` is not
ours and is never written into.  :func:`derived_seed` gives the independent seeds a run draws from
its one seed (per batch, per epoch).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..io import atomic_write_text

__all__ = ["SETTINGS_FILE", "claim_out_dir", "derived_seed", "read_json_object"]

SETTINGS_FILE = "settings.json"


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, allow_nan=False))


def read_json_object(path: str | Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``ValueError`` naming the file when it is not one."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return obj


def claim_out_dir(out_dir: str | Path, settings: dict[str, Any], *, what: str) -> Path:
    """Create ``out_dir`` for a ``what`` run with ``settings``, or check that it already holds one
    with the same settings.  Raises ``ValueError`` naming the folder (and the differing keys)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir}: exists and is not a folder")
    settings = _canonical(settings)
    path = out_dir / SETTINGS_FILE
    if path.is_file():
        saved = read_json_object(path)
        outputs = [p for p in out_dir.iterdir()
                   if p.name != SETTINGS_FILE and not (p.name.startswith(".") and p.name.endswith((".tmp", ".old")))]
        if saved != settings and not outputs:  # a run that stopped before writing anything: start afresh
            atomic_write_text(path, json.dumps(settings, indent=1, sort_keys=True) + "\n")
        elif saved != settings:
            diffs = [f"{key}: {json.dumps(saved.get(key))[:80]} there, {json.dumps(settings.get(key))[:80]} now"
                     for key in sorted(set(saved) | set(settings)) if saved.get(key) != settings.get(key)]
            raise ValueError(f"{out_dir}: holds a {what} run with other settings ({'; '.join(diffs)}); "
                             "use another output folder, or remove this one to start again")
        return out_dir
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir}: exists, is not empty and holds no {what} run (no {SETTINGS_FILE}); "
                         "refusing to write into it")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(settings, indent=1, sort_keys=True) + "\n")
    return out_dir


def derived_seed(seed: int, *keys: Any) -> int:
    """A 63-bit seed from ``seed`` and ``keys`` (SHA-256 of their repr): independent streams per key."""
    text = repr((int(seed), *keys)).encode("utf-8")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1
