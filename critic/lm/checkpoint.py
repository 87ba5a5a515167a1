"""The latest state of a fine-tuning run, written so that a killed run resumes exactly.

``checkpoint/`` holds

* ``model/``: the model folder (:func:`~critic.lm.model.save_model_dir`: weights, tokenizer,
  ``format.json``);
* ``trainer.pt``: the optimizer's state and the torch RNG states (CPU, and CUDA when used): the
  dropout masks of the next steps;
* ``state.json``: the counters (epoch, position in the epoch, step, tokens seen), the running
  training loss since the last validation, the validation history and the best loss so far.

It is built in a temporary sibling and swapped in by renaming (:func:`critic.io.atomic_directory`):
a kill while writing leaves the previous checkpoint.  The epoch's shuffle is a function of the seed
and the epoch (not of the RNG state), so with these three the continued run takes the same steps
as an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..io import atomic_directory, atomic_write_text
from .format import DocumentFormat
from .folder import DAMAGED, ModelFolderError, check_model_folder, check_torch_file, loading, read_folder_json
from .model import load_lm, save_model_dir

__all__ = ["CHECKPOINT_DIR", "save_checkpoint", "load_checkpoint", "has_checkpoint", "restore_rng", "restore_optimizer"]

CHECKPOINT_DIR = "checkpoint"


def has_checkpoint(out_dir: str | Path) -> bool:
    return (Path(out_dir) / CHECKPOINT_DIR / "state.json").is_file()


def save_checkpoint(out_dir: str | Path, model, tokenizer, fmt: DocumentFormat, optimizer,
                    state: dict[str, Any], device: torch.device) -> Path:
    """Write ``out_dir/checkpoint`` atomically (see the module docstring)."""
    path = Path(out_dir) / CHECKPOINT_DIR
    trainer = {"optimizer": optimizer.state_dict(), "rng_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        trainer["rng_cuda"] = torch.cuda.get_rng_state_all()
    with atomic_directory(path) as tmp:
        save_model_dir(model, tokenizer, fmt, tmp / "model")
        torch.save(trainer, tmp / "trainer.pt")
        atomic_write_text(tmp / "state.json", json.dumps(state, indent=1, allow_nan=False) + "\n")
    return path


_STATE_KEYS = {"epoch": int, "position": int, "step": int, "tokens_seen": int, "train_nll": (int, float),
               "train_targets": int, "history": list, "best_valid_loss": (int, float, type(None)), "best_step": int,
               "context": int}


def _check_state(state: dict[str, Any], path: Path) -> None:
    for key, kind in _STATE_KEYS.items():
        if key not in state:
            raise ModelFolderError(f"{path}: state.json has no {key!r}: not a fine-tuning checkpoint state ({DAMAGED})")
        if not isinstance(state[key], kind) or isinstance(state[key], bool):
            raise ModelFolderError(f"{path}: state.json has {key!r} = {json.dumps(state[key])[:40]}, of the wrong "
                                   f"type ({DAMAGED})")


def load_checkpoint(out_dir: str | Path, device: torch.device):
    """``(model, tokenizer, trainer, state)`` of ``out_dir/checkpoint``; ``trainer`` holds the
    optimizer state and RNG states to restore (:func:`restore_rng`).  Every file is checked first: a
    damaged one is a :class:`~critic.lm.folder.ModelFolderError` naming the folder and the file."""
    path = Path(out_dir) / CHECKPOINT_DIR
    state = read_folder_json(path, "state.json")
    _check_state(state, path)
    check_torch_file(path, "trainer.pt")
    check_model_folder(path / "model", fine_tuned=True)
    with loading(path, "optimizer state", ["trainer.pt"]):
        trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
    if not isinstance(trainer, dict) or not {"optimizer", "rng_cpu"} <= set(trainer):
        raise ModelFolderError(f"{path}: trainer.pt holds no optimizer and RNG state ({DAMAGED})")
    model, tokenizer = load_lm(str(path / "model"), device=str(device))
    return model, tokenizer, trainer, state


def restore_rng(trainer: dict[str, Any], device: torch.device, where: Path | None = None) -> None:
    """Put back the torch RNG states saved with a checkpoint (``where``: its folder, for errors)."""
    with loading(where or CHECKPOINT_DIR, "RNG state", ["trainer.pt"]):
        torch.set_rng_state(trainer["rng_cpu"])
        if device.type == "cuda" and "rng_cuda" in trainer:
            torch.cuda.set_rng_state_all(trainer["rng_cuda"])


def restore_optimizer(optimizer, trainer: dict[str, Any], where: Path) -> None:
    """Load a checkpoint's optimizer state; one that does not fit the model is an error naming ``where``."""
    with loading(where, "optimizer state", ["trainer.pt"]):
        optimizer.load_state_dict(trainer["optimizer"])
