"""The coherence study's toy config: ``experiments/coherence/cpu.toml`` at toy sizes (the preset's own keys, so the
preset's schema is exercised by every toy run)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def coherence_config(toy_preset):
    """``write(path, manroot, *, n=16, extra={})``: the cpu preset with the man-page fixture as ``manroot``, a tiny
    LM, ``n`` samples per LM, toy criticism sizes and each ``old -> new`` of ``extra``; returns ``path``."""

    def write(path: Path, manroot: Path, *, n: int = 16, extra: dict[str, str] | None = None) -> Path:
        replace = {
            'root = "/usr/share/man"': f'root = "{manroot}"\nvalid_fraction = 0.25\ntest_fraction = 0.25',
            "min_title_count = 5\nmax_document_tokens = 400": "min_title_count = 2",
            "threads = 2": "threads = 1",
            'model = "smollm2"': 'model = "tiny"\nvocab_size = 400\nlayers = 1\nheads = 2\ndim = 32',
            "context = 1024": "context = 96", "batch_size = 8": "batch_size = 4", "bf16 = true": "bf16 = false",
            "learning_rate = 5e-4": "learning_rate = 3e-3", "epochs = 20": "epochs = 1",
            "max_tokens = 320_000": "max_tokens = 12000",
            "n = 240": f"n = {n}", "batch_size = 24": "batch_size = 4",
            "max_new_tokens = 1023": "max_new_tokens = 120",
            "n_bootstrap = 1000": "n_bootstrap = 50", "n_permutations = 2000": "n_permutations = 50",
            **(extra or {}),
        }
        return toy_preset("coherence", path, replace)

    return write
