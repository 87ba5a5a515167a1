"""Memory bounded up front: a run whose buffers cannot fit in the machine is refused before any work.

:func:`require_memory` compares an estimate (named parts, in bytes, each on the compute device or
in host memory) with the machine's memory (``SC_PHYS_PAGES * SC_PAGE_SIZE``; a CUDA device's total
memory for the parts on it) and raises :class:`ResourceError` (a ``ValueError``: one
``critic: error:`` line, status 2) with the estimate and its parts::

    sampling needs about 1.4 TiB for batch 32 x 1000000000 new tokens (token buffer 238 GiB, ...);
    this machine has 24 GiB of memory: lower --max-new-tokens or --batch-size

:func:`sampling_memory` is sampling's estimate from a model folder's ``config.json`` (layers, key/value
heads, head size, dtype) and its weight files, without loading anything; :func:`window_memory` is what a
batch of training windows needs (perplexity, validation, fine-tuning), checked before the first forward pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from ..resources import ResourceError, gib, machine_memory

__all__ = ["ResourceError", "machine_memory", "device_memory", "require_memory", "sampling_memory", "window_memory",
           "gib", "config_window"]

_DTYPE_BYTES = {"float32": 4, "float": 4, "float64": 8, "double": 8, "float16": 2, "half": 2, "bfloat16": 2}
_PY_INT_BYTES = 36    # a token id in a Python list: an 8-byte pointer and a 28-byte int object
_TEXT_BYTES = 64      # per token of one finished row: decoded text, JSON line, the tokenizer's buffers


def device_memory(device: torch.device) -> int:
    """The memory of ``device`` in bytes (a CUDA device's total memory; the machine's for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    return machine_memory()


def require_memory(what: str, on_device: Mapping[str, int], on_host: Mapping[str, int], *, device: torch.device,
                   fix: str, scale: str = "", have_host: int | None = None, have_device: int | None = None) -> int:
    """Raise :class:`ResourceError` when the parts do not fit; returns the estimate (bytes).

    On the CPU every part is in the machine's memory; on a CUDA device the ``on_device`` parts must
    fit in its memory and the ``on_host`` parts in the machine's.  ``have_*`` override the memory
    found (tests); ``scale`` says what the estimate is for (``"for batch 32 x 1,000 new tokens"``).
    """
    host = machine_memory() if have_host is None else have_host
    if device.type == "cuda":
        checks = [(dict(on_device), have_device if have_device is not None else device_memory(device),
                   f"the GPU {device}"), (dict(on_host), host, "this machine")]
    else:
        checks = [({**on_device, **on_host}, host if have_device is None else have_device, "this machine")]
    total = 0
    for parts, have, where in checks:
        need = sum(parts.values())
        total += need
        if need > have:
            detail = ", ".join(f"{name} {gib(size)}" for name, size in sorted(parts.items(), key=lambda kv: -kv[1])
                               if size > 0)
            raise ResourceError(f"{what} needs about {gib(need)}{' ' + scale if scale else ''} ({detail}); {where} "
                                f"has {gib(have)} of memory: {fix}")
    return total


def _first(config: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def config_window(config: Mapping[str, Any]) -> int | None:
    """The context window in a ``config.json`` (``n_positions`` / ``max_position_embeddings``), or ``None``."""
    return _first(config, "n_positions", "max_position_embeddings", "n_ctx")


def _weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())


def sampling_memory(model_dir: str | Path, config: Mapping[str, Any], *, rows: int, max_new_tokens: int,
                    window: int | None) -> tuple[dict[str, int], dict[str, int]]:
    """``(on_device, on_host)``: what sampling ``rows`` sequences of up to ``max_new_tokens`` tokens needs at
    most (:mod:`critic.lm.sampler`), in bytes, from the model's config:

    * token buffer: ``rows x (1 + max_new_tokens)`` int64 ids on the device;
    * KV cache: ``2 x layers x rows x kv heads x head size x min(max_new_tokens, W - 1)`` in the model's dtype;
    * forward pass: the widest activation (the MLP's) of a ``rows x (W - 1)``-token pass (one token while
      the sequences are shorter than the window ``W``)
      and the next-token logits and probabilities (``rows x vocabulary``, a few fp32 copies);
    * weights: the weight files' size;
    * host: the generated ids of all rows as Python lists (what the last step hands back) and one
      row's decoded text.

    Parts the config does not tell (an unknown architecture) count 0: the estimate is then a lower bound.
    """
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
    size = _DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 4)
    layers = _first(config, "n_layer", "num_hidden_layers", "num_layers") or 0
    heads = _first(config, "n_head", "num_attention_heads") or 0
    hidden = _first(config, "n_embd", "hidden_size", "d_model") or 0
    kv_heads = _first(config, "num_key_value_heads") or heads
    head_dim = _first(config, "head_dim") or (hidden // heads if heads else 0)
    inner = _first(config, "n_inner", "intermediate_size", "ffn_dim") or 4 * hidden
    vocab = _first(config, "vocab_size") or 0
    cached = min(max_new_tokens, window - 1) if window else max_new_tokens   # KV cache length, at most
    fed = window - 1 if window and max_new_tokens >= window else 1          # tokens per forward pass, at most
    on_device = {"token buffer": rows * (1 + max_new_tokens) * 8,
                 "KV cache": 2 * layers * rows * kv_heads * head_dim * cached * size,
                 "forward pass": 2 * rows * fed * max(inner, hidden) * size + 4 * rows * vocab * 4,
                 "weights": _weight_bytes(Path(model_dir))}
    on_host = {"token ids": rows * max_new_tokens * _PY_INT_BYTES, "decoded text": max_new_tokens * _TEXT_BYTES}
    return on_device, on_host


def window_memory(model, *, rows: int, window: int, training: bool) -> dict[str, int]:
    """What a forward pass over ``rows`` windows of ``window`` tokens needs at least, in bytes, on the
    model's device: the weights (and, ``training``, their gradients and AdamW's two moments) and the
    logits (``rows x window x vocabulary``: the logits, their fp32 copy and log-softmax, and their
    gradient when ``training``).  The layers' activations come on top."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else 0
    logits = rows * window * vocab * 4
    parts = {"weights": weights, "logits": logits * (4 if training else 3)}
    if training:
        parts["gradients and optimizer state"] = 3 * sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    return parts
