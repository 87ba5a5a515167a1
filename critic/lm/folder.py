"""Model folders are checked before transformers reads them; what it raises is wrapped.

A damaged folder (a file missing, truncated or empty, JSON that does not parse, a weights file that
is not one) gives one :class:`ModelFolderError` (a ``ValueError``: the command line prints one
``critic: error:`` line, status 2) naming the folder, the file and what is wrong::

    runs/lm/best: model.safetensors is truncated (17272 of 34544 bytes) (a damaged folder: rerun ...)
    runs/lm/best: tokenizer.json is empty (a damaged folder: rerun the command that wrote it, ...)

:func:`check_model_folder` looks at every file without loading a tensor (a safetensors file's
header gives the size the file must have); :func:`loading` wraps whatever transformers or torch
raises while loading anyway (``KeyError: 'added_tokens'``, ``SafetensorError``, a bare ``EOFError``)
into the same error, naming the folder and the files it read.  :func:`read_folder_json` reads a
JSON file of a folder (``format.json``, ``training.json``, a checkpoint's ``state.json``) the same way.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["ModelFolderError", "check_model_folder", "check_weights_file", "check_torch_file", "check_gguf_file",
           "read_folder_json", "loading", "WEIGHT_FILES", "TOKENIZER_FILES"]

DAMAGED = "a damaged folder: rerun the command that wrote it, or use another copy"

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "vocab.txt", "spiece.model", "special_tokens_map.json", "added_tokens.json")
_SLOW_VOCABULARIES = ("vocab.json", "tokenizer.model", "vocab.txt", "spiece.model")
_SAFETENSORS_MAX_HEADER = 100_000_000  # safetensors' own limit


class ModelFolderError(ValueError):
    """A model folder (or one of its files) that cannot be used; the message names the folder and the file."""


def _fail(folder: Path, name: str, problem: str, fix: str = DAMAGED) -> ModelFolderError:
    return ModelFolderError(f"{folder}: {name} {problem}" + (f" ({fix})" if fix else ""))


def read_folder_json(folder: str | Path, name: str, *, required: bool = True) -> dict[str, Any] | None:
    """The JSON object in ``folder/name``; ``None`` when absent and not ``required``; else
    :class:`ModelFolderError` (missing, empty, not JSON, not an object)."""
    folder = Path(folder)
    path = folder / name
    if not path.is_file():
        if not required:
            return None
        raise _fail(folder, name, "is missing" if not path.exists() else "is not a file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _fail(folder, name, f"cannot be read ({exc.strerror or exc})", "") from None
    if not raw.strip():
        raise _fail(folder, name, "is empty")
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text)
    except UnicodeDecodeError as exc:
        raise _fail(folder, name, f"is not valid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:  # the text ends inside a string or before the JSON does: cut short
        cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())
        truncated = " (truncated?)" if cut else ""
        raise _fail(folder, name, f"is not valid JSON{truncated} ({exc.msg}: line {exc.lineno} column {exc.colno})") \
            from None
    if not isinstance(obj, dict):
        raise _fail(folder, name, f"is not a JSON object (a JSON {type(obj).__name__})")
    return obj


def _size(folder: Path, name: str) -> int:
    """The size of a file that must be there and not be empty."""
    path = folder / name
    if not path.is_file():
        raise _fail(folder, name, "is missing")
    size = path.stat().st_size
    if size == 0:
        raise _fail(folder, name, "is empty")
    return size


def check_weights_file(folder: Path, name: str) -> None:
    """A ``.safetensors`` file whole: its header parses and the file is exactly as long as its tensors say."""
    path, size = folder / name, _size(folder, name)
    if size < 8:
        raise _fail(folder, name, f"is truncated ({size} bytes: not even a safetensors header)")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > _SAFETENSORS_MAX_HEADER:
            raise _fail(folder, name, "is not a safetensors file (its first 8 bytes are not a header length)")
        if 8 + n > size:
            raise _fail(folder, name, f"is truncated ({size} bytes; its header alone needs {8 + n})")
        head = f.read(n)
    try:
        header = json.loads(head.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("not an object")
        end = max((int(entry["data_offsets"][1]) for key, entry in header.items() if key != "__metadata__"),
                  default=0)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError):
        raise _fail(folder, name, "is not a safetensors file (its header is not a table of tensors)") from None
    expected = 8 + n + end
    if size < expected:
        raise _fail(folder, name, f"is truncated ({size} of {expected} bytes)")
    if size > expected:
        raise _fail(folder, name, f"has {size - expected} bytes after its last tensor (not a whole safetensors file)")


def check_torch_file(folder: Path, name: str) -> None:
    """A ``torch.save`` file (a zip archive) whole: its central directory, at the end, is there."""
    path, size = folder / name, _size(folder, name)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        if not zipfile.is_zipfile(path):
            raise _fail(folder, name, f"is truncated ({size} bytes; the end of its zip archive is missing)")
    elif not magic.startswith(b"\x80"):  # neither a zip (torch >= 1.6) nor a pickle (older torch.save)
        raise _fail(folder, name, "is not a file written by torch.save")


def check_gguf_file(path: str | Path) -> None:
    path = Path(path)
    if path.stat().st_size < 24:
        raise _fail(path.parent, path.name, f"is truncated ({path.stat().st_size} bytes)")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise _fail(path.parent, path.name, "is not a GGUF file (it does not start with 'GGUF')", "")


def _check_weights(folder: Path) -> list[str]:
    """The weight files of ``folder``, each checked; :class:`ModelFolderError` when there are none."""
    for index_name, single in (("model.safetensors.index.json", "model.safetensors"),
                               ("pytorch_model.bin.index.json", "pytorch_model.bin")):
        index = read_folder_json(folder, index_name, required=False)
        if index is not None:
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise _fail(folder, index_name, "holds no 'weight_map' of tensors to files")
            shards = sorted(set(map(str, weight_map.values())))
            for shard in shards:
                (check_weights_file if shard.endswith(".safetensors") else check_torch_file)(folder, shard)
            return [index_name, *shards]
        if (folder / single).exists():
            (check_weights_file if single.endswith(".safetensors") else check_torch_file)(folder, single)
            return [single]
    raise _fail(folder, "model.safetensors", "is missing: the folder holds no weights (no model.safetensors, "
                "pytorch_model.bin or their index.json)")


def check_model_folder(folder: str | Path, *, fine_tuned: bool = False) -> dict[str, Any]:
    """Check a model folder before transformers reads it; returns its ``config.json``.

    Every ``*.json`` file must be a JSON object; ``config.json``, the weights (``model.safetensors``,
    ``pytorch_model.bin`` or sharded with an index) and a tokenizer must be there.  ``fine_tuned``:
    a folder written by :func:`~critic.lm.model.save_model_dir` (``format.json`` required, and
    ``tokenizer.json`` unless a slow tokenizer's vocabulary is there).  Raises
    :class:`ModelFolderError` (or ``FileNotFoundError`` for a folder that does not exist).
    """
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no such model folder")
    if not folder.is_dir():
        raise ModelFolderError(f"{folder}: not a folder (a model folder holds config.json, the weights and the "
                               "tokenizer)")
    if fine_tuned and not (folder / "format.json").exists():
        raise ModelFolderError(f"{folder}: no format.json; not a model folder written by fine-tuning "
                               "(use the best/ folder of `critic lm finetune`)")
    if not (folder / "config.json").exists():
        raise ModelFolderError(f"{folder}: not a model folder (config.json is missing)")
    config = None
    for path in sorted(folder.glob("*.json")):
        obj = read_folder_json(folder, path.name)
        if path.name == "config.json":
            config = obj
    assert config is not None
    if not isinstance(config.get("model_type"), str):
        raise _fail(folder, "config.json", "has no 'model_type': not a transformers model configuration")
    _check_weights(folder)
    present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not present:
        raise _fail(folder, "tokenizer.json", "is missing (no tokenizer file at all)")
    if fine_tuned and not (folder / "tokenizer.json").exists() and not any(
            (folder / name).exists() for name in _SLOW_VOCABULARIES):
        raise _fail(folder, "tokenizer.json", "is missing")
    for name in ("merges.txt", "tokenizer.model", "vocab.txt", "spiece.model"):
        if (folder / name).is_file() and (folder / name).stat().st_size == 0:
            raise _fail(folder, name, "is empty")
    return config


def _files(folder: Path, names: Iterable[str]) -> str:
    present = [name for name in names if (folder / name).is_file()]
    return ", ".join(present) if present else "no files"


def _describe(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if isinstance(exc, KeyError):
        return f"missing key {line!r}"
    return f"{type(exc).__name__}: {line[:300]}" if line else type(exc).__name__


@contextlib.contextmanager
def loading(source: str | Path, what: str, files: Iterable[str] = ()) -> Iterator[None]:
    """Whatever loading ``what`` from ``source`` raises (but running out of memory or Ctrl-C) becomes one
    :class:`ModelFolderError` naming ``source``, the ``files`` of it that were read and the original error."""
    try:
        yield
    except (ModelFolderError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read a model is "this folder cannot be loaded"
        source = Path(source)
        read = f" from {_files(source, files)}" if files and source.is_dir() else ""
        raise ModelFolderError(f"{source}: cannot load the {what}{read} ({_describe(exc)})") from exc
