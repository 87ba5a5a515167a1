"""Stages shared by the studies that train and sample language models with ``critic lm``.

A study's runner chains :class:`~critic.stages.Stage` objects; :class:`LmPipeline` is the LM part of
such a chain (the coherence, coreference and topics studies): a BPE tokenizer trained on the training
split (``[lm] model = "tiny"``), fine-tuning (resumed from its checkpoint), sampling (resumed from
the last generation written) and word perplexity on the test split.  ``LM_TABLE`` and
``SAMPLE_TABLE`` are the config tables they read.
"""

from __future__ import annotations

import json
from pathlib import Path

from critic.config import Divides, Key
from critic.document import Document, read_jsonl
from critic.io import atomic_write_text
from critic.lm.format import DocumentFormat
from critic.stages import Stage

__all__ = ["SPLITS", "LM_TABLE", "LM_CHECK", "SAMPLE_TABLE", "StageChain", "LmPipeline", "read_splits",
           "train_tokenizer_stage", "finetune_stage", "sample_stage", "ppl_stage"]

SPLITS = ("train", "valid", "test")

LM_TABLE = {
    "model": Key(str, "tiny", help='"tiny" (GPT-2-style from a config), "smollm2", a model name or path'),
    "vocab_size": Key(int, 4096, min=256, help="tiny: BPE vocabulary trained on the training split"),
    "layers": Key(int, 4, min=1, help="tiny: transformer layers"),
    "heads": Key(int, 4, min=1, help="tiny: attention heads"),
    "dim": Key(int, 256, min=8, help="tiny: model width"),
    "context": Key(int, 512, min=16, help="window (truncated BPTT in training, cut context in sampling)"),
    "batch_size": Key(int, 8, min=1, help="windows per step (app. E: 8)"),
    "learning_rate": Key(float, 5e-5, gt=0, help="Adam learning rate (app. E: 5e-5)"),
    "epochs": Key(int, 20, min=1, help="passes over the training windows (app. E: 20)"),
    "max_tokens": Key(int, min=1, help="token budget: stop after this many training tokens"),
    "bf16": Key(bool, False, help="bf16 autocast in training"),
    "end_of_document": Key(str, DocumentFormat(with_titles=False).end_of_document,
                           help="the token that ends a document: by default a new special token; a pretrained "
                                "model's own separator is already trained (SmolLM2, GPT-2: <|endoftext|>)"),
}

LM_CHECK = Divides("lm", "heads", "dim")
"""A tiny model's attention heads must divide its width: checked with the config, before the run starts."""

SAMPLE_TABLE = {
    "n": Key(int, 100, min=1, help="generations per LM"),
    "batch_size": Key(int, 32, min=1, help="generations sampled together"),
    "max_new_tokens": Key(int, 2048, min=1, help="a generation without end-of-document by then fails"),
}


class StageChain:
    """Runs stages in order: a stage is computed when it is not done or something upstream was redone."""

    def __init__(self, log):
        self.log = log
        self.redone: set[str] = set()

    def needs(self, stage: Stage) -> bool:
        why = "upstream recomputed" if stage.upstream.keys() & self.redone else stage.missing()
        if why is not None:
            self.redone.add(stage.name)
            if why not in ("no marker", "upstream recomputed"):
                self.log(f"{stage.name}: recomputing ({why})")
            return True
        self.log(f"{stage.name}: up to date ({stage.path})")
        return False


def read_splits(directory: Path) -> dict[str, list[Document]]:
    """``{split: documents}`` of a folder holding ``train.jsonl``, ``valid.jsonl`` and ``test.jsonl``."""
    return {s: read_jsonl(directory / f"{s}.jsonl") for s in SPLITS}


def _format(lm: dict, with_titles: bool) -> DocumentFormat:
    return DocumentFormat(with_titles=with_titles, end_of_document=lm["end_of_document"])


def train_tokenizer_stage(stage: Stage, filtered: Stage, lm: dict) -> None:
    from critic.lm.model import train_tokenizer

    stage.begin()
    fmt = _format(lm, with_titles=True)  # the titles' words too: one tokenizer for both formats
    train = read_jsonl(filtered.path / "train.jsonl")
    tok = train_tokenizer((fmt.render(d) for d in train), vocab_size=lm["vocab_size"],
                          special_tokens=[fmt.section_marker, fmt.end_of_document])
    tok.save_pretrained(str(stage.path))
    stage.commit()


def finetune_stage(stage: Stage, filtered: Stage, tokenizer: Stage | None, with_titles: bool, lm: dict,
                   seed: int, device: str) -> None:
    from critic.lm.finetune import FinetuneConfig, finetune
    from critic.lm.model import build_tiny_lm, prepare_for_format

    stage.begin()  # a checkpoint under the same key is kept: training resumes
    fmt = _format(lm, with_titles)
    splits = read_splits(filtered.path)
    if lm["model"] == "tiny":
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer.path))
        model = build_tiny_lm(tok, n_layer=lm["layers"], n_head=lm["heads"], n_embd=lm["dim"],
                              n_positions=lm["context"], seed=seed)
        prepare_for_format(model, tok, fmt)
        source = (model, tok)
    else:
        source = lm["model"]
    config = FinetuneConfig(batch_size=lm["batch_size"], learning_rate=lm["learning_rate"], epochs=lm["epochs"],
                            max_tokens=lm.get("max_tokens"), context=lm["context"], seed=seed, device=device,
                            bf16=lm["bf16"])
    result = finetune(source, None, splits["train"], splits["valid"], fmt, stage.path, config)
    stage.commit()
    print(f"  {stage.name}: best validation loss {result.best_valid_loss:.4f} after {result.steps} steps, "
          f"{result.tokens_seen} tokens", flush=True)


def sample_stage(stage: Stage, lm_stage: Stage, settings: dict, seed: int, device: str) -> None:
    from critic.lm.sample import sample

    stage.begin()  # generations already written under the same key are kept: sampling resumes
    report = sample(lm_stage.path / "best", stage.path, n=settings["n"], batch_size=settings["batch_size"],
                    max_new_tokens=settings["max_new_tokens"], seed=seed, device=device)
    stage.commit()
    print(f"  {stage.name}: {json.dumps(report.counts())}", flush=True)


def ppl_stage(stage: Stage, lm_stage: Stage, filtered: Stage, device: str) -> None:
    from critic.lm.ppl import perplexity

    stage.begin()
    result = perplexity(lm_stage.path / "best", read_jsonl(filtered.path / "test.jsonl"), device=device)
    atomic_write_text(stage.path / "ppl.json", json.dumps(result.to_dict(), indent=1) + "\n")
    stage.commit()
    print(f"  {stage.name}: word PPL {result.word_ppl:.3f} (token PPL {result.token_ppl:.3f}, "
          f"{result.n_words} words)", flush=True)


class LmPipeline:
    """The LM stages of a study, declared once and run in order.

    ``tokenizer`` (``[lm] model = "tiny"`` only: a BPE tokenizer trained on the training split), then per
    entry of ``formats`` (stage name -> trained with section titles) the LM ``<name>``, its samples
    ``samples<suffix>`` and its word perplexity on the test split ``ppl<suffix>``, where ``<suffix>`` is the
    name after its leading ``lm`` (``"lm"`` -> ``samples``, ``"lm_w_title"`` -> ``samples_w_title``).
    ``data`` is the stage whose folder holds the splits.
    """

    def __init__(self, root: Path, data: Stage, config: dict, seed: int, formats: dict[str, bool] | None = None):
        self.data, self.config, self.seed = data, config, seed
        self.formats = {"lm": False} if formats is None else dict(formats)
        lm = config["lm"]
        try:  # a bad [lm] end_of_document is refused before any stage runs
            _format(lm, with_titles=True)
        except ValueError as exc:
            raise ValueError(f"[lm] end_of_document: {exc}") from None
        self.tokenizer = (Stage(root, "tokenizer", {k: lm[k] for k in ("vocab_size", "end_of_document")},
                                upstream=[data])
                          if lm["model"] == "tiny" else None)
        upstream = [data] + ([self.tokenizer] if self.tokenizer else [])
        self.lms = {n: Stage(root, n, {**lm, "with_titles": w, "seed": seed}, upstream=upstream)
                    for n, w in self.formats.items()}
        self.samples = {n: Stage(root, f"samples{n[2:]}", {**config["sample"], "seed": seed}, upstream=[s])
                        for n, s in self.lms.items()}
        self.ppls = {n: Stage(root, f"ppl{n[2:]}", {}, upstream=[s, data]) for n, s in self.lms.items()}

    @property
    def stages(self) -> list[Stage]:
        return [*([self.tokenizer] if self.tokenizer else []), *self.lms.values(), *self.samples.values(),
                *self.ppls.values()]

    def run(self, chain: StageChain, device: str) -> None:
        """Compute the stages that are not up to date (each resumes where a killed run left it)."""
        lm = self.config["lm"]
        if self.tokenizer is not None and chain.needs(self.tokenizer):
            train_tokenizer_stage(self.tokenizer, self.data, lm)
        for name, with_titles in self.formats.items():
            if chain.needs(self.lms[name]):
                chain.log(f"training {name}")
                finetune_stage(self.lms[name], self.data, self.tokenizer, with_titles, lm, self.seed, device)
            if chain.needs(self.samples[name]):
                chain.log(f"sampling {name}")
                sample_stage(self.samples[name], self.lms[name], self.config["sample"], self.seed, device)
            if chain.needs(self.ppls[name]):
                ppl_stage(self.ppls[name], self.lms[name], self.data, device)
