"""Fixtures for the LM tests: real man-page text, tiny GPT-2 models built from configs (never a hub
download), one torch thread (the test machine's cores are shared; more threads only contend)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from critic.corpora.manpages import load_manpages  # noqa: E402
from critic.document import Section  # noqa: E402
from critic.lm.format import DocumentFormat  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "manpages"

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def manpage_docs():
    """The 30 real man pages of the fixture, in a fixed order, with short sections trimmed to keep
    the models' work small (each section's first 400 characters)."""
    docs = load_manpages(sorted(DATA.glob("man*/*")))
    return [d.replace_sections([Section(s.title, s.text[:400]) for s in d.sections]) for d in docs]


@pytest.fixture(scope="session")
def _tokenizer(manpage_docs):
    from critic.lm.model import train_tokenizer

    texts = [p for d in manpage_docs for s in d.sections for p in (s.title, s.text) if p]
    return train_tokenizer(texts, vocab_size=400, special_tokens=DocumentFormat(True).special_tokens)


@pytest.fixture
def tiny_pair(_tokenizer):
    """A factory of fresh ``(model, tokenizer)`` pairs: a 2-layer, 32-dim GPT-2 (seeded) and the
    fixture's BPE tokenizer (400 entries, the format's tokens included)."""
    from critic.lm.model import build_tiny_lm

    def make(n_positions: int = 48, seed: int = 0):
        tok = copy.deepcopy(_tokenizer)
        return build_tiny_lm(tok, n_positions=n_positions, seed=seed, **TINY), tok

    return make
