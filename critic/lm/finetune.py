"""Fine-tune a causal LM on formatted documents (app. E: Adam, batch 8, lr 5e-5, 20 epochs, truncated
BPTT at the model's window, the checkpoint with the best validation loss kept).

Training examples are the windows of :mod:`critic.lm.windows` (at most ``W`` tokens each, one token
shared with the next window, so each token is a target once): document-aligned by default (every window
starts with the end token and a document's first token, as sampling starts, or continues a document
longer than the window; :func:`~critic.lm.windows.aligned_windows`), cut from one stream with
``aligned=False`` (:func:`~critic.lm.windows.cut_windows`); validation windows are cut the same way.
One step: a batch of ``B`` windows drawn without replacement from the epoch's shuffle (a permutation
seeded by ``(seed, epoch)``), loss

    L = sum_{targets t} -log p(s_t | window prefix) / number of targets in the batch,

gradient clipped to norm ``max_grad_norm``, AdamW update (weight decay 0, as transformers' legacy
``run_language_modeling`` script the authors used, which also decays the learning rate linearly to
0 over the planned steps: ``schedule="linear"``; ``"constant"`` keeps it).  Validation loss = total
NLL of the validation windows / their number of targets (nats per token), every ``eval_every``
steps or once per epoch, and at the end.

Outputs (``out_dir``): ``settings.json`` (what the run is; a rerun with other settings is refused),
``checkpoint/`` (latest state, :mod:`critic.lm.checkpoint`, written at each validation: a killed run
continues from the last one and ends with the same weights as an uninterrupted run on the same
device), ``best/`` (the model folder of the best validation loss: weights, tokenizer,
``format.json``, ``training.json``) and ``result.json`` when finished (a finished run rerun returns
it and does nothing).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..document import Document, documents_sha256
from ..io import atomic_write_text
from .budget import require_memory, window_memory
from .checkpoint import CHECKPOINT_DIR, has_checkpoint, load_checkpoint, restore_optimizer, restore_rng, save_checkpoint
from .finite import NonFiniteError, check_finite
from .folder import TOKENIZER_FILES, ModelFolderError, loading
from .format import DocumentFormat
from .model import load_lm, model_window, prepare_for_format, quiet_transformers, save_model_dir
from .runs import claim_out_dir, derived_seed, read_json_object
from .windows import IGNORE, aligned_windows, autocast_for, batch_nll, cut_windows, token_stream, window_nll

__all__ = ["FinetuneConfig", "FinetuneResult", "finetune"]

RESULT_FILE = "result.json"
BEST_DIR = "best"


@dataclass
class FinetuneConfig:
    """Settings of :func:`finetune` (defaults: the paper's, app. E)."""

    batch_size: int = 8
    learning_rate: float = 5e-5
    epochs: int = 20
    max_tokens: int | None = None    # token budget: stop once this many targets were trained on
    context: int | None = None       # window W; None = the model's n_positions / max_position_embeddings
    eval_every: int | None = None    # steps between validations; None = once per epoch
    seed: int = 0
    device: str = "cpu"
    bf16: bool = False               # bf16 autocast for the forward passes
    schedule: str = "linear"         # "linear" decay to 0 over the planned steps, or "constant"
    max_grad_norm: float | None = 1.0
    aligned: bool = True             # document-aligned windows; False: windows cut from one token stream

    def check(self) -> None:
        for name in ("batch_size", "epochs"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.aligned, bool):
            raise ValueError(f"aligned must be true or false, got {self.aligned!r}")
        for name in ("max_tokens", "eval_every"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if self.context is not None and (not isinstance(self.context, int) or self.context < 2):
            raise ValueError(f"context must be an integer >= 2 or None, got {self.context!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}")
        if self.schedule not in ("linear", "constant"):
            raise ValueError(f"schedule must be 'linear' or 'constant', got {self.schedule!r}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm!r}")


@dataclass
class FinetuneResult:
    """What a fine-tuning run gave: the best model folder and its validation loss (nats per token),
    the steps and training targets seen, and ``history`` = ``(step, train loss since the previous
    validation, validation loss)`` per validation."""

    best_dir: Path
    best_valid_loss: float
    steps: int
    tokens_seen: int
    history: list[tuple[int, float, float]] = field(default_factory=list)
    best_step: int = 0
    context: int = 0
    aligned: bool = True

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best_dir"] = BEST_DIR
        d["history"] = [list(h) for h in self.history]
        return d

    @classmethod
    def from_dict(cls, obj: dict[str, Any], out_dir: Path) -> "FinetuneResult":
        return cls(best_dir=out_dir / BEST_DIR, best_valid_loss=float(obj["best_valid_loss"]),
                   steps=int(obj["steps"]), tokens_seen=int(obj["tokens_seen"]),
                   history=[(int(s), float(t), float(v)) for s, t, v in obj["history"]],
                   best_step=int(obj["best_step"]), context=int(obj["context"]),
                   aligned=bool(obj["aligned"]))


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _source_fingerprint(model_source, tokenizer_source) -> dict[str, Any]:
    """What the run starts from: a name/path, or a given (model, tokenizer) by config, embeddings, vocabulary."""
    if isinstance(model_source, (str, Path)):
        return {"model": str(model_source), "tokenizer": None if tokenizer_source is None else str(tokenizer_source)}
    model, tokenizer = model_source
    weight = model.get_input_embeddings().weight.detach().to("cpu", torch.float32).contiguous()
    return {"model": type(model).__name__, "config_sha256": _sha256_text(model.config.to_json_string()),
            "embeddings_sha256": hashlib.sha256(weight.numpy().tobytes()).hexdigest(),
            "vocabulary_sha256": _sha256_text(json.dumps(tokenizer.get_vocab(), sort_keys=True))}


def _start(model_source, tokenizer_source, fmt: DocumentFormat, device: torch.device):
    """A fresh (model, tokenizer) ready for ``fmt``, in training mode on ``device``."""
    if isinstance(model_source, (str, Path)):
        model, tokenizer = load_lm(str(model_source), device=str(device))
        if tokenizer_source is not None:
            from transformers import AutoTokenizer

            local = Path(str(tokenizer_source)).expanduser()
            if local.exists():  # a folder: whatever fails is one error naming it
                with loading(local, "tokenizer", TOKENIZER_FILES):
                    tokenizer = AutoTokenizer.from_pretrained(str(local))
            else:
                tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_source))
    else:
        if tokenizer_source is not None:
            raise ValueError("a (model, tokenizer) pair was given: tokenizer_source must be None")
        model, tokenizer = (copy.deepcopy(x) for x in model_source)  # the caller's pair stays as it was
    prepare_for_format(model, tokenizer, fmt)
    return model.to(device), tokenizer


def _planned_steps(config: FinetuneConfig, steps_per_epoch: int, targets_per_epoch: int) -> int:
    planned = config.epochs * steps_per_epoch
    if config.max_tokens is not None:
        per_step = targets_per_epoch / steps_per_epoch
        planned = min(planned, math.ceil(config.max_tokens / per_step))
    return max(planned, 1)


def finetune(model_source, tokenizer_source, train_docs: Sequence[Document], valid_docs: Sequence[Document],
             fmt: DocumentFormat, out_dir: str | Path, config: FinetuneConfig | None = None, *,
             progress: bool = True, callback: Callable[[int], None] | None = None) -> FinetuneResult:
    """Fine-tune and keep the best-validation model in ``out_dir/best`` (module docstring).

    ``model_source``: a ``(model, tokenizer)`` pair (e.g. :func:`~critic.lm.model.build_tiny_lm`; a
    copy is prepared for ``fmt`` and trained, the pair itself is left as it was, so that passing it
    again resumes or returns the finished run) or a name/path for :func:`~critic.lm.model.load_lm`, with
    ``tokenizer_source`` another tokenizer's name/path or ``None`` (the model's).  ``callback(step)``
    runs after every optimizer step (after the checkpoint when one is written there).
    """
    from ..critic import resolve_device

    config = config or FinetuneConfig()
    config.check()
    train_docs, valid_docs = list(train_docs), list(valid_docs)
    if not train_docs or not valid_docs:
        raise ValueError("fine-tuning needs training and validation documents")
    device = resolve_device(config.device)
    out_dir = Path(out_dir)
    settings = {"what": "critic lm finetune", "source": _source_fingerprint(model_source, tokenizer_source),
                "format": fmt.to_dict(), "train_sha256": documents_sha256(train_docs),
                "valid_sha256": documents_sha256(valid_docs),
                "config": {k: v for k, v in asdict(config).items() if k != "device"}}
    claim_out_dir(out_dir, settings, what="fine-tuning")
    if (out_dir / RESULT_FILE).is_file():
        try:
            return FinetuneResult.from_dict(read_json_object(out_dir / RESULT_FILE), out_dir)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFolderError(f"{out_dir}: {RESULT_FILE} is not a fine-tuning result ({exc!r}); remove it "
                                   "and rerun to write it again from the checkpoint") from None

    if has_checkpoint(out_dir):
        model, tokenizer, trainer, state = load_checkpoint(out_dir, device)
    else:
        model, tokenizer = _start(model_source, tokenizer_source, fmt, device)
        trainer = None
        state = {"epoch": 0, "position": 0, "step": 0, "tokens_seen": 0, "train_nll": 0.0, "train_targets": 0,
                 "history": [], "best_valid_loss": None, "best_step": 0,
                 "context": config.context or model_window(model)}
    context = int(state["context"])
    if context > model_window(model):
        raise ValueError(f"context {context} exceeds the model's window of {model_window(model)} tokens")

    end_id = tokenizer.convert_tokens_to_ids(fmt.end_of_document)
    start_id = None if fmt.start_of_document is None else tokenizer.convert_tokens_to_ids(fmt.start_of_document)
    pad_id = tokenizer.pad_token_id

    def windows(docs: list[Document]) -> tuple[torch.Tensor, torch.Tensor]:
        stream = token_stream(docs, tokenizer, fmt, end_id)
        if config.aligned:
            return aligned_windows(stream, context, pad_id, end_id, start_id=start_id)
        return cut_windows(stream, context, pad_id, start_id=start_id)

    train_x, train_y = windows(train_docs)
    valid_x, valid_y = windows(valid_docs)
    n_windows = train_x.shape[0]
    steps_per_epoch = math.ceil(n_windows / config.batch_size)
    targets_per_epoch = int((train_y[:, 1:] != IGNORE).sum())
    planned = _planned_steps(config, steps_per_epoch, targets_per_epoch)
    autocast = autocast_for(device, config.bf16)
    rows = min(config.batch_size, n_windows)
    require_memory("finetune", window_memory(model, rows=rows, window=context, training=True), {}, device=device,
                   scale=f"for batches of {rows} windows of {context} tokens",
                   fix="lower --batch-size or --context (nothing was trained)")

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    if trainer is not None:
        restore_optimizer(optimizer, trainer, out_dir / CHECKPOINT_DIR)

    def summary() -> dict[str, Any]:
        return {"context": context, "aligned": config.aligned, "best_valid_loss": state["best_valid_loss"],
                "best_step": state["best_step"], "steps": state["step"], "tokens_seen": state["tokens_seen"],
                "epochs_done": state["epoch"], "planned_steps": planned, "train_windows": n_windows,
                "valid_windows": int(valid_x.shape[0]), "train_targets_per_epoch": targets_per_epoch,
                "settings": settings}

    def diverged(at_start: bool) -> str:
        """What to do about a non-finite number (the fix part of the error)."""
        if at_start:
            return ("the model gives non-finite values before any update: are its weights damaged? "
                    f"(nothing was written{'; drop --bf16' if config.bf16 else ''})")
        kept = (f"checkpoint/ keeps step {state['history'][-1][0]}, best/ step {state['best_step']}"
                if state["history"] else "no checkpoint was written")
        return (f"lower --lr (it is {config.learning_rate:g}){' or drop --bf16' if config.bf16 else ''} and run "
                f"again into a new --out ({kept})")

    def validate() -> None:
        nll, count = window_nll(model, valid_x, valid_y, batch_size=config.batch_size, device=device,
                                autocast=autocast)
        valid_loss = check_finite(nll / count, "finetune: the validation loss", fix=diverged(False),
                                  step=state["step"], lr=optimizer.param_groups[0]["lr"])
        train_loss = state["train_nll"] / max(state["train_targets"], 1)
        state["history"].append([state["step"], train_loss, valid_loss])
        state["train_nll"], state["train_targets"] = 0.0, 0
        if state["best_valid_loss"] is None or valid_loss < state["best_valid_loss"]:
            state["best_valid_loss"], state["best_step"] = valid_loss, state["step"]
            save_model_dir(model, tokenizer, fmt, out_dir / BEST_DIR, training=summary())
        save_checkpoint(out_dir, model, tokenizer, fmt, optimizer, state, device)

    def step(rows: torch.Tensor) -> float:
        """One optimizer step on the windows ``rows``; returns the batch's mean loss."""
        scale = max(0.0, 1.0 - state["step"] / planned) if config.schedule == "linear" else 1.0
        for group in optimizer.param_groups:
            group["lr"] = config.learning_rate * scale
        with autocast():
            nll, count = batch_nll(model, train_x[rows].to(device), train_y[rows].to(device))
        loss = nll / max(count, 1)
        lr = optimizer.param_groups[0]["lr"]
        at_start = state["step"] == 0
        check_finite(loss.detach(), "finetune: the training loss", fix=diverged(at_start), step=state["step"] + 1,
                     lr=lr)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # the norm of the gradient (clipped when asked): checked before the update reaches the weights
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
        check_finite(norm.detach(), "finetune: the gradient norm", fix=diverged(at_start), step=state["step"] + 1,
                     lr=lr)
        try:
            optimizer.step()
        except RuntimeError as exc:  # e.g. lr / (1 - beta1) beyond float32: "cannot be converted ... without overflow"
            if "overflow" not in str(exc):
                raise
            raise NonFiniteError(f"finetune: the update overflows at step {state['step'] + 1}, lr {lr:.3g}: "
                                 f"{diverged(False)}") from exc
        state["step"] += 1
        state["tokens_seen"] += count
        state["train_nll"] += float(nll.detach())
        state["train_targets"] += count
        return float(loss.detach())

    def out_of_budget() -> bool:
        return config.max_tokens is not None and state["tokens_seen"] >= config.max_tokens

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=planned, initial=min(state["step"], planned), desc="finetune", unit="step")
    rng_devices = [device] if device.type == "cuda" else []
    try:
        # the dropout RNG: seeded for a new run, restored for a resumed one; the caller's RNG is left alone
        with torch.random.fork_rng(devices=rng_devices), quiet_transformers():
            if trainer is not None:
                restore_rng(trainer, device, out_dir / CHECKPOINT_DIR)
            else:
                torch.manual_seed(derived_seed(config.seed, "dropout"))
            model.train()
            while not out_of_budget() and state["epoch"] < config.epochs:
                epoch = state["epoch"]
                shuffle = torch.Generator().manual_seed(derived_seed(config.seed, "epoch", epoch))
                order = torch.randperm(n_windows, generator=shuffle)
                for position in range(state["position"], steps_per_epoch):
                    loss = step(order[position * config.batch_size:(position + 1) * config.batch_size])
                    state["position"] = position + 1
                    last_in_epoch = position == steps_per_epoch - 1
                    if last_in_epoch:
                        state["epoch"], state["position"] = epoch + 1, 0
                    finished = out_of_budget() or state["epoch"] == config.epochs
                    due = state["step"] % config.eval_every == 0 if config.eval_every else last_in_epoch
                    if due or finished:
                        validate()
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(loss=f"{loss:.3f}", valid=f"{state['history'][-1][2]:.3f}"
                                        if state["history"] else "-")
                    if callback is not None:
                        callback(state["step"])
                    if out_of_budget():
                        break
    finally:
        if bar is not None:
            bar.close()

    result = FinetuneResult(best_dir=out_dir / BEST_DIR, best_valid_loss=float(state["best_valid_loss"]),
                            steps=state["step"], tokens_seen=state["tokens_seen"],
                            history=[(int(s), float(t), float(v)) for s, t, v in state["history"]],
                            best_step=state["best_step"], context=context, aligned=config.aligned)
    atomic_write_text(out_dir / RESULT_FILE, json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n")
    return result
