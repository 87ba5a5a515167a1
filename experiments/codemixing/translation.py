"""Train an AR or NAR translator (:mod:`experiments.codemixing.models`) on (source, target) pairs, sample
it, and hand the samples to the LDA code-mixing critic as documents (paper app. C).

Pairs are English -> de/es/fr strings with no target-language tag (as Zhou et al. 2019): the model must
choose the language itself, and a model whose target tokens are independent given the length (NAR) can
choose it differently at each position.

**Training** (:func:`train`): the BPE tokenizer is trained on both sides of the training pairs; pairs with
an empty side or more than ``max_len`` tokens on a side are left out (counted in the log and the result).
Each epoch is a permutation seeded by ``(seed, epoch)``, cut into chunks of 32 batches; each chunk is
sorted by target length and cut into batches (less padding), and the batch order is shuffled (seeded).
One step: mean loss of a batch (AR: token CE with eos; NAR: token CE + ``length_weight`` * length CE),
gradient clipped, AdamW with linear warm-up and linear decay to 0 at ``max_steps``.  Training stops at
``max_steps`` or once ``max_tokens`` target tokens were seen.  At step 0, every ``eval_every`` steps and at
the end:
the validation loss = total NLL of the validation pairs / (target tokens + pairs), i.e. nats per
prediction (AR: tokens and eos; NAR: tokens and the length) -- the two kinds' numbers are
comparable; the best model is kept in ``best/`` and the latest state in ``checkpoint/`` (model folder,
``trainer.pt`` = optimizer and RNG state read back with ``weights_only=True``, ``state.json``).  A killed
run continues from its last checkpoint and ends with the same weights as an uninterrupted one (tested).
The out folder is claimed with its settings (:func:`critic.lm.runs.claim_out_dir`): a rerun with other
settings is refused, a finished one returns its ``result.json``.

**Sampling** (:func:`train_and_sample`): ``samples_per_source`` samples of each test source from
``best/`` (:func:`~experiments.codemixing.models.sample`), written as documents to ``samples.jsonl``
(:func:`samples_to_documents`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from critic.document import Document, Section, read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.lm.runs import claim_out_dir, derived_seed, read_json_object

from .models import (KINDS, TranslationConfig, build_model, build_tokenizer, count_parameters, encode, load_model,
                     pad_batch, sample, sample_ids, save_model, special_ids)

__all__ = ["TranslationConfig", "TrainResult", "train", "train_and_sample", "samples_to_documents",
           "build_tokenizer", "build_model", "count_parameters", "load_model", "save_model", "sample", "sample_ids",
           "KINDS"]

BEST_DIR, CHECKPOINT_DIR, RESULT_FILE, SAMPLES_FILE = "best", "checkpoint", "result.json", "samples.jsonl"
CHUNK_BATCHES = 32

Pairs = Sequence[tuple[str, str]]


@dataclass
class TrainResult:
    """A finished training run: the best model folder, its validation loss (nats per prediction), the
    steps and target tokens trained on, ``history`` = ``[step, train loss, valid loss]`` per validation,
    the parameter count, pairs left out and the training speed (target tokens per second)."""

    kind: str
    best_dir: Path
    best_valid_loss: float
    best_step: int
    steps: int
    tokens_seen: int
    parameters: int
    history: list[list[float]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    tokens_per_second: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best_dir"] = BEST_DIR
        return d

    @classmethod
    def from_dict(cls, obj: dict[str, Any], out_dir: Path) -> "TrainResult":
        return cls(**{**obj, "best_dir": out_dir / BEST_DIR})


def _pairs_sha256(pairs: Pairs) -> str:
    return hashlib.sha256(json.dumps([list(p) for p in pairs], ensure_ascii=False).encode("utf-8")).hexdigest()


def _encode_pairs(tokenizer, pairs: Pairs, max_len: int) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """Token ids of the pairs that fit (both sides 1 .. max_len tokens) and the counts of those that do not."""
    src, tgt = encode(tokenizer, [p[0] for p in pairs]), encode(tokenizer, [p[1] for p in pairs])
    kept, dropped = [], {"empty": 0, "too_long": 0}
    for s, t in zip(src, tgt):
        if not s or not t:
            dropped["empty"] += 1
        elif len(s) > max_len or len(t) > max_len:
            dropped["too_long"] += 1
        else:
            kept.append((s, t))
    return kept, dropped


def _batch(data, rows, pad_id: int, device) -> tuple[torch.Tensor, ...]:
    src, src_pad = pad_batch([data[i][0] for i in rows], pad_id)
    tgt, tgt_pad = pad_batch([data[i][1] for i in rows], pad_id)
    return tuple(x.to(device) for x in (src, src_pad, tgt, tgt_pad))


def _epoch_batches(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The batches of one epoch (module docstring): a function of the seed and the epoch only."""
    gen = torch.Generator().manual_seed(derived_seed(seed, "epoch", epoch))
    order = torch.randperm(len(lengths), generator=gen).tolist()
    chunk = batch_size * CHUNK_BATCHES
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: lengths[i])
        batches += [part[k:k + batch_size] for k in range(0, len(part), batch_size)]
    return [batches[k] for k in torch.randperm(len(batches), generator=gen).tolist()]


def _learning_rate(config: TranslationConfig, step: int) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    rest = max(config.max_steps - config.warmup_steps, 1)
    return config.learning_rate * max(0.0, 1.0 - (step - config.warmup_steps) / rest)


@torch.no_grad()
def validation_loss(model, data, pad_id: int, batch_size: int, device) -> float:
    """Total NLL / (target tokens + pairs) over ``data`` (nats per prediction)."""
    was_training = model.training
    model.eval()
    nll, count = 0.0, 0
    by_length = sorted(range(len(data)), key=lambda i: len(data[i][1]))
    for start in range(0, len(data), batch_size):
        out = model.nll(*_batch(data, by_length[start:start + batch_size], pad_id, device))
        nll, count = nll + float(out["nll"]), count + out["predictions"]
    model.train(was_training)
    return nll / max(count, 1)


def _save_checkpoint(out_dir: Path, model, tokenizer, optimizer, state: dict[str, Any]) -> None:
    from critic.io import atomic_directory

    with atomic_directory(out_dir / CHECKPOINT_DIR) as tmp:
        save_model(model, tokenizer, tmp / "model")
        torch.save({"optimizer": optimizer.state_dict(), "rng_cpu": torch.get_rng_state()}, tmp / "trainer.pt")
        atomic_write_text(tmp / "state.json", json.dumps(state, indent=1, allow_nan=False) + "\n")


def _train(kind: str, pairs_train: Pairs, pairs_valid: Pairs, out_dir: Path, config: TranslationConfig, seed: int,
           log: Callable[[str], None], callback: Callable[[int], None] | None) -> TrainResult:
    if (out_dir / RESULT_FILE).is_file():
        return TrainResult.from_dict(read_json_object(out_dir / RESULT_FILE), out_dir)
    device = torch.device("cpu")
    ckpt = out_dir / CHECKPOINT_DIR
    if (ckpt / "state.json").is_file():
        model, tokenizer = load_model(ckpt / "model", device=device)
        trainer = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=True)
        state = read_json_object(ckpt / "state.json")
        log(f"{kind}: resuming at step {state['step']}")
    else:
        tokenizer = build_tokenizer(pairs_train, config.vocab_size)
        model = build_model(kind, config, len(tokenizer), seed=derived_seed(seed, "init"), **special_ids(tokenizer))
        trainer = None
        state = {"epoch": 0, "position": 0, "step": 0, "tokens_seen": 0, "train_nll": 0.0, "train_predictions": 0,
                 "history": [], "best_valid_loss": None, "best_step": 0, "train_seconds": 0.0}
    pad_id = model.pad_id
    train_data, dropped = _encode_pairs(tokenizer, pairs_train, config.max_len)
    valid_data, dropped_valid = _encode_pairs(tokenizer, pairs_valid, config.max_len)
    if not train_data or not valid_data:
        raise ValueError("no training or validation pairs fit max_len")
    dropped = {**{f"train_{k}": v for k, v in dropped.items()}, **{f"valid_{k}": v for k, v in dropped_valid.items()}}
    n_params = count_parameters(model)
    log(f"{kind}: {n_params:,} parameters, vocabulary {len(tokenizer)}, {len(train_data)} training / "
        f"{len(valid_data)} validation pairs (left out: {dropped})")
    lengths = [len(t) for _, t in train_data]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    if trainer is not None:
        optimizer.load_state_dict(trainer["optimizer"])

    def out_of_budget() -> bool:
        return state["step"] >= config.max_steps or (config.max_tokens is not None
                                                     and state["tokens_seen"] >= config.max_tokens)

    def validate() -> None:
        valid = validation_loss(model, valid_data, pad_id, max(config.batch_size, 64), device)
        train_loss = state["train_nll"] / max(state["train_predictions"], 1)
        state["history"].append([state["step"], train_loss, valid])
        state["train_nll"], state["train_predictions"] = 0.0, 0
        if state["best_valid_loss"] is None or valid < state["best_valid_loss"]:
            state["best_valid_loss"], state["best_step"] = valid, state["step"]
            save_model(model, tokenizer, out_dir / BEST_DIR)
        _save_checkpoint(out_dir, model, tokenizer, optimizer, state)
        speed = state["tokens_seen"] / max(state["train_seconds"], 1e-9)
        log(f"{kind}: step {state['step']}/{config.max_steps}: train {train_loss:.3f}, valid {valid:.3f} "
            f"nats/prediction ({speed:,.0f} target tokens/s)")

    with torch.random.fork_rng(devices=[]):   # dropout RNG: seeded, or restored on resume
        if trainer is not None:
            torch.set_rng_state(trainer["rng_cpu"])
        else:
            torch.manual_seed(derived_seed(seed, "dropout"))
        model.train()
        if not state["history"]:
            validate()                          # step 0: the untrained model's loss
        while not out_of_budget():
            batches = _epoch_batches(lengths, config.batch_size, seed, state["epoch"])
            for position in range(state["position"], len(batches)):
                started = time.perf_counter()
                for group in optimizer.param_groups:
                    group["lr"] = _learning_rate(config, state["step"])
                out = model.nll(*_batch(train_data, batches[position], pad_id, device))
                optimizer.zero_grad(set_to_none=True)
                out["loss"].backward()
                if config.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                state["step"] += 1
                state["tokens_seen"] += sum(lengths[i] for i in batches[position])
                state["train_nll"] += float(out["nll"])
                state["train_predictions"] += out["predictions"]
                state["train_seconds"] += time.perf_counter() - started
                state["position"] = position + 1
                if state["position"] == len(batches):
                    state["epoch"], state["position"] = state["epoch"] + 1, 0
                if state["step"] % config.eval_every == 0 or out_of_budget():
                    validate()
                if callback is not None:
                    callback(state["step"])
                if out_of_budget():
                    break
    result = TrainResult(kind=kind, best_dir=out_dir / BEST_DIR, best_valid_loss=float(state["best_valid_loss"]),
                         best_step=state["best_step"], steps=state["step"], tokens_seen=state["tokens_seen"],
                         parameters=n_params, history=state["history"], dropped=dropped,
                         tokens_per_second=state["tokens_seen"] / max(state["train_seconds"], 1e-9))
    atomic_write_text(out_dir / RESULT_FILE, json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n")
    return result


@contextlib.contextmanager
def _threads(n: int | None):
    """torch's intra-op threads set to ``n`` inside the block (``None``: left alone), restored after."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _settings(kind: str, pairs_train: Pairs, pairs_valid: Pairs, config: TranslationConfig, seed: int) -> dict:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    config.check()
    return {"what": "codemixing translation", "kind": kind, "seed": seed, "config": asdict(config),
            "train_sha256": _pairs_sha256(pairs_train), "valid_sha256": _pairs_sha256(pairs_valid)}


def train(kind: str, pairs_train: Pairs, pairs_valid: Pairs, out_dir: str | Path,
          config: TranslationConfig | None = None, *, seed: int = 0, log: Callable[[str], None] = print,
          callback: Callable[[int], None] | None = None, threads: int | None = None) -> TrainResult:
    """Train a ``kind`` (``"ar"`` / ``"nar"``) translator into ``out_dir`` (module docstring); resumes.
    ``callback(step)`` runs after each optimizer step (after the checkpoint when one is written).
    ``threads``: torch intra-op threads while training (``None``: as set; on a busy shared CPU 1 can be
    much faster than 2 for these small models)."""
    config = config or TranslationConfig()
    out_dir = Path(out_dir)
    claim_out_dir(out_dir, _settings(kind, pairs_train, pairs_valid, config, seed), what="translation training")
    with _threads(threads):
        return _train(kind, list(pairs_train), list(pairs_valid), out_dir, config, seed, log, callback)


def samples_to_documents(sources: Sequence[str], samples: Sequence[Sequence[str]], *, kind: str,
                         prefix: str | None = None) -> list[Document]:
    """One document per sample: id ``<prefix>-<source index>-<sample index>`` (prefix: ``kind``), one
    untitled section holding the translation, metadata ``{"source", "model", "source_index", "sample"}``."""
    if len(sources) != len(samples):
        raise ValueError(f"{len(sources)} sources but {len(samples)} sample lists")
    prefix = prefix or kind
    return [Document(id=f"{prefix}-{i}-{j}", sections=(Section(title=None, text=text),),
                     metadata={"source": source, "model": kind, "source_index": i, "sample": j})
            for i, (source, texts) in enumerate(zip(sources, samples)) for j, text in enumerate(texts)]


def train_and_sample(pairs_train: Pairs, pairs_valid: Pairs, sources_test: Sequence[str], out_dir: str | Path, *,
                     kind: str, config: TranslationConfig | None = None, seed: int = 0,
                     log: Callable[[str], None] = print, threads: int | None = None
                     ) -> tuple[TrainResult, list[Document]]:
    """Train (or resume, or reuse) a ``kind`` translator in ``out_dir``, then sample each test source
    ``config.samples_per_source`` times from the best model; the samples are ``out_dir/samples.jsonl``
    (documents, :func:`samples_to_documents`).  Returns the training result and the documents.
    ``threads`` as in :func:`train`."""
    if not sources_test:
        raise ValueError("no test sources to translate")
    config = config or TranslationConfig()
    out_dir = Path(out_dir)
    settings = _settings(kind, pairs_train, pairs_valid, config, seed)
    settings["test_sha256"] = _pairs_sha256([(s, "") for s in sources_test])
    claim_out_dir(out_dir, settings, what="translation training and sampling")
    with _threads(threads):
        result = _train(kind, list(pairs_train), list(pairs_valid), out_dir, config, seed, log, None)
        path = out_dir / SAMPLES_FILE
        if path.is_file():
            log(f"{kind}: samples up to date ({path})")
            return result, read_jsonl(path)
        model, tokenizer = load_model(result.best_dir)
        started = time.perf_counter()
        texts = sample(model, tokenizer, list(sources_test), n=config.samples_per_source,
                       seed=derived_seed(seed, "sample"), batch_size=config.sample_batch_size)
    docs = samples_to_documents(list(sources_test), texts, kind=kind)
    write_jsonl(docs, path)
    log(f"{kind}: {len(docs)} samples in {time.perf_counter() - started:.1f} s -> {path}")
    return result, docs
