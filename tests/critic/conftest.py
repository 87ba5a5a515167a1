"""Fixtures the core's tests share: the tutorial critic, and two section critics over the man-page fixture and its
corruptions (the report tests)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "section_count_critic.py"
"""The tutorial's first critic (docs/write-your-own-critic.md): a Poisson prior over the number of sections."""


@pytest.fixture(scope="module")
def tutorial():
    """The tutorial critic's module, loaded from docs/examples."""
    spec = importlib.util.spec_from_file_location("section_count_critic", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sets(tmp_path_factory, fixture_manpage_root):
    """``(critics, reference, candidates)``: a smooth and a sharp section critic fitted on the fixture's train
    pages; the reference is train + test, the candidates its pages with sections permuted and one dropped."""
    from critic.corpora.manpages import build_manpages
    from critic.corrupt import corrupt_all
    from critic.document import read_jsonl
    from critics.sections import SectionTransitionCritic

    out = tmp_path_factory.mktemp("corpus")
    build_manpages(out, root=fixture_manpage_root, install=False)
    train, test = read_jsonl(out / "train.jsonl"), read_jsonl(out / "test.jsonl")
    reference = train + test
    candidates = {"permuted": corrupt_all(reference, "permuted", seed=1), "dropped": corrupt_all(reference, "dropped")}
    critics = {"smooth": SectionTransitionCritic(delta=1.0).fit(train),
               "sharp": SectionTransitionCritic(delta=0.001).fit(train)}
    return critics, reference, candidates


@pytest.fixture(scope="module")
def panel(sets):
    """The two critics over those sets: flags at p <= 0.2 among each critic's 5 least likely per set."""
    from critic.panel import criticize_panel

    critics, reference, candidates = sets
    return criticize_panel(critics, reference, candidates, level=0.2, top=5, n_bootstrap=50, n_permutations=50)
