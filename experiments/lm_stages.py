"""Stages shared by the studies that train and sample language models with ``critic lm``.

A study declares its stages on a :class:`~critic.study.Pipeline`; :class:`LmStages` is the LM part of
them (the coherence, coreference and topics studies): a BPE tokenizer trained on the training
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
from critic.stages import Stage, config_key
from critic.study import Pipeline

__all__ = ["SPLITS", "LM_TABLE", "LM_CHECK", "SECOND_LM_TABLE", "SAMPLE_TABLE", "LmStages", "read_splits",
           "word_ppl", "second_lm", "add_openings"]

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
    "eval_every": Key(int, min=1, help="steps between validations, each also a checkpoint a killed run resumes from "
                                       "(absent: once per epoch and at the end)"),
    "aligned_windows": Key(bool, True, help="each training window starts at a document start, after the end token "
                                            "(docs/lm.md); false: windows cut from one stream of all documents"),
    "end_of_document": Key(str, DocumentFormat(with_titles=False).end_of_document,
                           help="the token that ends a document: by default a new special token; a pretrained "
                                "model's own separator is already trained (SmolLM2, GPT-2: <|endoftext|>)"),
    "start_of_document": Key(str, help="a token given before each document, after the end token, never predicted: "
                                       "SmolLM2's <|im_start|> teaches fine-tuning how documents open, where "
                                       "its state at a lone end token barely moves (docs/lm.md; absent: none)"),
    "section_marker": Key(str, DocumentFormat(with_titles=False).section_marker,
                          help="the token between sections: by default a new special token; a pretrained model "
                               "emits one of its own trained tokens sooner (SmolLM2: <file_sep>; docs/lm.md)"),
    "shared_dir": Key(str, help="a folder studies share: the tokenizer and the LMs are trained there, each in a "
                                "folder named by its key, so a study with the same corpus, [lm] and seed reuses "
                                "them (absent: in the run directory)"),
}

TRAINING_KEYS = ("model", "layers", "heads", "dim", "context", "batch_size", "learning_rate", "epochs", "max_tokens",
                 "bf16", "eval_every", "aligned_windows")
"""The ``[lm]`` keys a second LM may change (:data:`SECOND_LM_TABLE`): what it is and how it is trained, not the
tokens of the format or where models are shared."""

SECOND_LM_TABLE = {
    "name": Key(str, help="a second LM to compare with [lm]'s: its set's name in the tables (absent: one LM)"),
    **{k: Key(LM_TABLE[k].type, gt=LM_TABLE[k].gt, min=LM_TABLE[k].min, max=LM_TABLE[k].max,
              choices=LM_TABLE[k].choices, help=f"as [lm] {k}, for the second LM (absent: [lm]'s)")
       for k in TRAINING_KEYS},
}
"""A study's ``[second_lm]`` table: the ``[lm]`` settings a second LM changes (e.g. a smaller token budget, or
another model), the rest taken from ``[lm]``."""

LM_CHECK = Divides("lm", "heads", "dim")
"""A tiny model's attention heads must divide its width: checked with the config, before the run starts."""

SAMPLE_TABLE = {
    "n": Key(int, 100, min=1, help="generations per LM"),
    "batch_size": Key(int, 32, min=1, help="generations sampled together"),
    "max_new_tokens": Key(int, 2048, min=1, help="a generation without end-of-document by then fails"),
    "mask_special_tokens": Key(bool, False, help="the tokenizer's special tokens other than the format's two get "
                                                 "probability 0 (a pretrained model's own: docs/lm.md)"),
}


def read_splits(directory: Path) -> dict[str, list[Document]]:
    """``{split: documents}`` of a folder holding ``train.jsonl``, ``valid.jsonl`` and ``test.jsonl``."""
    return {s: read_jsonl(directory / f"{s}.jsonl") for s in SPLITS}


def word_ppl(stage: Stage) -> float:
    """The word perplexity a ``ppl`` stage measured."""
    return json.loads((stage.path / "ppl.json").read_text(encoding="utf-8"))["word_ppl"]


def second_lm(config: dict) -> tuple[str, dict] | None:
    """``(name, [lm] keys it changes)`` of a study's ``[second_lm]`` table, or ``None`` without one."""
    table = {k: v for k, v in (config.get("second_lm") or {}).items() if v is not None}
    if "name" not in table:
        if table:
            raise ValueError(f"[second_lm] {', '.join(sorted(table))}: give the second LM a name (its set's name)")
        return None
    name = table.pop("name")
    if name == "lm" or not name.startswith("lm_") or not name[3:].isidentifier():
        raise ValueError(f"[second_lm] name must be lm_<word> and not 'lm' (its stages are samples_<word> and "
                         f"ppl_<word>), got {name!r}")
    return name, table


def add_openings(result, openings: dict[str, dict]) -> None:
    """:meth:`LmStages.openings` added to ``result`` as each LM set's statistic ``opening_ratio`` (the data's own
    share is the denominator: null, with that reason)."""
    def why(o: dict) -> str:
        return ("no generation to count" if not o["samples"][1] else
                "no training document begins as a document: no share to compare with")

    result.add_statistic("opening_ratio", {"data": None, **{n: o["ratio"] for n, o in openings.items()}},
                         reasons={"data": "the training documents' share is the ratio's denominator",
                                  **{n: why(o) for n, o in openings.items() if o["ratio"] is None}})


def _format(lm: dict, with_titles: bool) -> DocumentFormat:
    return DocumentFormat(with_titles=with_titles, section_marker=lm["section_marker"],
                          end_of_document=lm["end_of_document"], start_of_document=lm.get("start_of_document"))


class LmStages:
    """The LM stages of a study, declared once on its :class:`~critic.study.Pipeline` and computed in order.

    ``tokenizer`` (``[lm] model = "tiny"`` only: a BPE tokenizer trained on the training split), then per
    entry of ``formats`` (stage name -> trained with section titles) the LM ``<name>``, its samples
    ``samples<suffix>`` and its word perplexity on the test split ``ppl<suffix>``, where ``<suffix>`` is the
    name after its leading ``lm`` (``"lm"`` -> ``samples``, ``"lm_w_title"`` -> ``samples_w_title``).
    ``data`` is the stage whose folder holds the splits.  ``settings`` (LM name -> the ``[lm]`` keys it changes)
    trains an LM with other settings than ``[lm]``'s (a second budget or model: :func:`second_lm`).
    """

    def __init__(self, run: Pipeline, data: Stage, formats: dict[str, bool] | None = None,
                 settings: dict[str, dict] | None = None):
        self.run, self.data = run, data
        self.formats = {"lm": False} if formats is None else dict(formats)
        lm = run.config["lm"]
        self.settings = {n: {**lm, **(settings or {}).get(n, {})} for n in self.formats}
        try:  # a bad [lm] section_marker or end_of_document is refused before any stage runs
            _format(lm, with_titles=True)
        except ValueError as exc:
            raise ValueError(f"[lm] {exc}") from None              # names the key
        shared = lm.get("shared_dir")
        if shared is not None and Path(shared).exists() and not Path(shared).is_dir():
            raise ValueError(f"[lm] shared_dir: {shared} exists and is not a folder")  # refused before any stage
        tiny = any(c["model"] == "tiny" for c in self.settings.values())
        vocabulary = ("vocab_size", "section_marker", "end_of_document", "start_of_document")
        self.tokenizer = (self._model_stage("tokenizer", {k: lm.get(k) for k in vocabulary}, [data]) if tiny else None)
        self.lms = {n: self._model_stage(n, {**{k: v for k, v in self.settings[n].items() if k != "shared_dir"},
                                             "with_titles": w, "seed": run.seed},
                                         [data] + ([self.tokenizer] if self.settings[n]["model"] == "tiny" else []))
                    for n, w in self.formats.items()}
        self.samples = {n: run.stage(f"samples{n[2:]}", {**run.config["sample"], "seed": run.seed}, upstream=[s])
                        for n, s in self.lms.items()}
        self.ppls = {n: run.stage(f"ppl{n[2:]}", {}, upstream=[s, data]) for n, s in self.lms.items()}

    def _model_stage(self, name: str, config: dict, upstream: list[Stage]) -> Stage:
        """Stage ``name`` in the run directory, or, with ``[lm] shared_dir``, in that folder as
        ``<name>-<first 16 hex digits of its key>``: the same corpus split (the data stage's key), settings and
        seed give the same folder, whichever study asks."""
        shared = self.run.config["lm"].get("shared_dir")
        if shared is None:
            return self.run.stage(name, config, upstream=upstream)
        digest = config_key({"config": config, "upstream": {u.name: u.key for u in upstream}})[:16]
        return self.run.stage(f"{name}-{digest}", config, upstream=upstream, root=Path(shared))

    def compute(self) -> None:
        """Compute the stages that are not up to date (each resumes where a killed run left it)."""
        run = self.run
        if self.tokenizer is not None and run.needs(self.tokenizer):
            self._tokenizer()
        for name, with_titles in self.formats.items():
            if run.needs(self.lms[name]):
                run.log(f"training {name}")
                self._finetune(self.lms[name], self.settings[name], with_titles)
            if run.needs(self.samples[name]):
                run.log(f"sampling {name}")
                self._sample(self.samples[name], self.lms[name])
            if run.needs(self.ppls[name]):
                self._ppl(self.ppls[name], self.lms[name])

    def openings(self, opening: str | None = None) -> dict[str, dict]:
        """Per LM, :func:`critic.lm.openings.opening_shares`: how many of its generations (parsed or not) begin as
        the training documents, rendered in its format, begin, and the ratio of the two shares (W/O Title: a
        start matching the corpus's ``opening`` pattern, without one the prose rule)."""
        from critic.lm.generations import read_log
        from critic.lm.openings import opening_shares
        from critic.lm.sample import LOG_FILE

        train = read_jsonl(self.data.path / "train.jsonl")
        out = {}
        for name, stage in self.samples.items():
            log, _ = read_log(stage.path / LOG_FILE, n=self.run.config["sample"]["n"], repair=False)
            out[name] = opening_shares(_format(self.settings[name], self.formats[name]), train,
                                       [log[i].text for i in sorted(log)], opening)
        return out

    def _tokenizer(self) -> None:
        from critic.lm.model import train_tokenizer

        lm, stage = self.run.config["lm"], self.tokenizer
        with self.run.computing(stage):
            fmt = _format(lm, with_titles=True)  # the titles' words too: one tokenizer for both formats
            train = read_jsonl(self.data.path / "train.jsonl")
            tok = train_tokenizer((fmt.render(d) for d in train), vocab_size=lm["vocab_size"],
                                  special_tokens=fmt.special_tokens)
            tok.save_pretrained(str(stage.path))

    def _finetune(self, stage: Stage, lm: dict, with_titles: bool) -> None:
        from critic.lm.finetune import FinetuneConfig, finetune
        from critic.lm.model import build_tiny_lm, prepare_for_format

        run = self.run
        with run.computing(stage):  # a checkpoint under the same key is kept: training resumes
            fmt = _format(lm, with_titles)
            splits = read_splits(self.data.path)
            if lm["model"] == "tiny":
                from transformers import PreTrainedTokenizerFast

                tok = PreTrainedTokenizerFast.from_pretrained(str(self.tokenizer.path))
                model = build_tiny_lm(tok, n_layer=lm["layers"], n_head=lm["heads"], n_embd=lm["dim"],
                                      n_positions=lm["context"], seed=run.seed)
                prepare_for_format(model, tok, fmt)
                source = (model, tok)
            else:
                source = lm["model"]
            config = FinetuneConfig(batch_size=lm["batch_size"], learning_rate=lm["learning_rate"],
                                    epochs=lm["epochs"], max_tokens=lm.get("max_tokens"), context=lm["context"],
                                    eval_every=lm.get("eval_every"), seed=run.seed, device=run.device,
                                    bf16=lm["bf16"], aligned=lm["aligned_windows"])
            result = finetune(source, None, splits["train"], splits["valid"], fmt, stage.path, config)
        run.log(f"{stage.name}: best validation loss {result.best_valid_loss:.4f} after {result.steps} steps, "
                f"{result.tokens_seen} tokens")

    def _sample(self, stage: Stage, lm_stage: Stage) -> None:
        from critic.lm.sample import sample

        run, settings = self.run, self.run.config["sample"]
        with run.computing(stage):  # generations already written under the same key are kept: sampling resumes
            report = sample(lm_stage.path / "best", stage.path, n=settings["n"], batch_size=settings["batch_size"],
                            max_new_tokens=settings["max_new_tokens"], seed=run.seed, device=run.device,
                            mask_special_tokens=settings["mask_special_tokens"])
        run.log(f"{stage.name}: {json.dumps(report.counts())}")

    def _ppl(self, stage: Stage, lm_stage: Stage) -> None:
        from critic.lm.ppl import perplexity

        with self.run.computing(stage):
            result = perplexity(lm_stage.path / "best", read_jsonl(self.data.path / "test.jsonl"),
                                device=self.run.device)
            atomic_write_text(stage.path / "ppl.json", json.dumps(result.to_dict(), indent=1) + "\n")
        self.run.log(f"{stage.name}: word PPL {result.word_ppl:.3f} (token PPL {result.token_ppl:.3f}, "
                     f"{result.n_words} words)")
