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
from .model import load_lm, save_model_dir
from .runs import read_json_object

__all__ = ["CHECKPOINT_DIR", "save_checkpoint", "load_checkpoint", "has_checkpoint"]

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


def load_checkpoint(out_dir: str | Path, device: torch.device):
    """``(model, tokenizer, trainer, state)`` of ``out_dir/checkpoint``; ``trainer`` holds the
    optimizer state and RNG states to restore (:func:`restore_rng`)."""
    path = Path(out_dir) / CHECKPOINT_DIR
    state = read_json_object(path / "state.json")
    try:
        trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"{path / 'trainer.pt'}: cannot read the optimizer state ({exc})") from None
    model, tokenizer = load_lm(str(path / "model"), device=str(device))
    return model, tokenizer, trainer, state


def restore_rng(trainer: dict[str, Any], device: torch.device) -> None:
    """Put back the torch RNG states saved with a checkpoint."""
    torch.set_rng_state(trainer["rng_cpu"])
    if device.type == "cuda" and "rng_cuda" in trainer:
        torch.cuda.set_rng_state_all(trainer["rng_cuda"])
