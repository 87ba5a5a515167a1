"""Output folders that resume: a run claims its folder with its settings, and a rerun must match them.

The folder is claimed as an LM run folder by the tool's one rule (:func:`critic.io.claim_folder`: absent, empty,
marked as one, or holding the ``settings.json`` of a run from before folders were marked; anything else is
refused, naming what is in it, before anything is written).  ``settings.json`` is written (atomically) when a
run starts.  A rerun into the same folder with the same settings continues the run; with other settings it is
refused, naming what differs, so that the outputs of two different runs never mix.  :func:`derived_seed` gives
the independent seeds a run draws from its one seed (per batch, per epoch).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..io import OUTPUT_MARKER, atomic_write_text, claim_folder, is_temporary

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
    """Claim ``out_dir`` (:func:`critic.io.claim_folder`, kind ``lm-run``) for a ``what`` run with ``settings``,
    or check that it already holds one with the same settings.  Raises ``ValueError`` naming the folder (and
    what is in it, or the differing keys)."""
    out_dir = claim_folder(out_dir, "lm-run", legacy=lambda folder: (folder / SETTINGS_FILE).is_file())
    settings = _canonical(settings)
    path = out_dir / SETTINGS_FILE
    saved = read_json_object(path) if path.is_file() else None
    if saved == settings:
        return out_dir
    outputs = [p for p in out_dir.iterdir() if p.name not in (SETTINGS_FILE, OUTPUT_MARKER) and not is_temporary(p.name)]
    if saved is not None and outputs:
        diffs = [f"{key}: {json.dumps(saved.get(key))[:80]} there, {json.dumps(settings.get(key))[:80]} now"
                 for key in sorted(set(saved) | set(settings)) if saved.get(key) != settings.get(key)]
        raise ValueError(f"{out_dir}: holds a {what} run with other settings ({'; '.join(diffs)}); "
                         "use another output folder, or remove this one to start again")
    atomic_write_text(path, json.dumps(settings, indent=1, sort_keys=True) + "\n")  # new, or nothing written yet
    return out_dir


def derived_seed(seed: int, *keys: Any) -> int:
    """A 63-bit seed from ``seed`` and ``keys`` (SHA-256 of their repr): independent streams per key."""
    text = repr((int(seed), *keys)).encode("utf-8")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1
