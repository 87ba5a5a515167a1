"""``critic run experiments/decoding/cpu.toml`` at toy scale on the real Wikipedia people summaries: three decodings
of one LM as sets, the critics' numbers recomputed from the saved stages, seq-rep-4 against an independent count,
cut generations kept as documents, and stages that resume."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from critic.critic import Critic
from critic.document import Document, Section
from critic.lm.generations import read_log
from critic.lm.sample import read_generations
from critic.panel import load_results
from experiments.decoding.run import seq_rep

STAGES = ("data", "tokenizer", "lm", "samples", "ppl", "samples_nucleus", "samples_greedy", "critic_repetition",
          "critic_entity-grid", "report")
N_SAMPLES = 12


def write_config(toy_preset, path: Path) -> Path:
    """The cpu preset with toy sizes (same keys, so the preset's schema is tested)."""
    replace = {
        'topic = "People"': 'topic = "People"\nmax_train_documents = 80', "threads = 2": "threads = 1",
        'model = "smollm2"': 'model = "tiny"\nvocab_size = 400\nlayers = 1\nheads = 2\ndim = 32',
        "context = 512": "context = 128", "batch_size = 8": "batch_size = 4", "bf16 = true": "bf16 = false",
        "learning_rate = 5e-4": "learning_rate = 3e-3", "epochs = 20": "epochs = 1",
        "max_tokens = 160_000": "max_tokens = 3000", "n = 150": f"n = {N_SAMPLES}", "batch_size = 30": "batch_size = 6",
        "max_new_tokens = 384": "max_new_tokens = 60", "n_bootstrap = 1000": "n_bootstrap = 50",
        "n_permutations = 2000": "n_permutations = 50",
    }
    return toy_preset("decoding", path, replace)


@pytest.fixture(scope="module")
def first(wiki_wheel, toy_job, toy_preset):
    return toy_job("decoding", lambda path: write_config(toy_preset, path))


def _seq_rep_by_count(doc: Document) -> float:
    """seq-rep-4 as repeats over 4-grams: each 4-gram seen before counts once per repeat."""
    tokens = re.findall(r"\w+", " ".join(s.text for s in doc.sections).lower())
    grams = Counter(zip(tokens, tokens[1:], tokens[2:], tokens[3:]))
    total = sum(grams.values())
    return sum(c - 1 for c in grams.values()) / total if total else 0.0


def test_seq_rep_by_hand():
    loop = Document("l", (Section(None, "a b c d a b c d"),))
    assert seq_rep(loop) == pytest.approx(1 / 5) == _seq_rep_by_count(loop)
    assert seq_rep(Document("s", (Section(None, "too short"),))) == 0.0


def test_sets_and_numbers_recomputed_from_the_stages(first):
    _, out = first
    panel = load_results(out / "report")
    assert set(panel.results) == {"repetition", "entity-grid"}
    for label, result in panel.results.items():
        assert result.reference.name == "data" and set(result.candidates) == {"ancestral", "nucleus", "greedy"}
        critic = Critic.load(out / f"critic_{label}")
        for name, stage in (("ancestral", "samples"), ("nucleus", "samples_nucleus"), ("greedy", "samples_greedy")):
            docs, unparsed = read_generations(out / stage, cut=True)
            plain, _ = read_generations(out / stage)
            assert len(docs) + sum(unparsed.values()) == N_SAMPLES and len(docs) >= len(plain)
            s = result.set(name)
            scores = critic.score(docs)
            assert s.n == scores.n
            assert s.latent_ppl == pytest.approx(math.exp(scores.latent_nll.sum() / scores.latent_steps.sum()),
                                                 rel=1e-12)
            assert s.statistics["seq_rep_4"] == pytest.approx(np.mean([_seq_rep_by_count(d) for d in docs]),
                                                              abs=1e-12)
            log, _ = read_log(out / stage / "generations.jsonl", repair=False)
            assert s.statistics["cut_share"] == pytest.approx(np.mean([not log[d.metadata["index"]].finished
                                                                       for d in docs]))
            assert s.statistics["seq_rep_4_lo"] <= s.statistics["seq_rep_4"] <= s.statistics["seq_rep_4_hi"]
    table = (out / "decoding.md").read_text()
    assert table.count("| greedy |") == 2 and "seq-rep-4" in table


def test_a_rerun_computes_nothing(first, run_experiment):
    config, out = first
    _, stages = run_experiment(config, out, "[decoding]", STAGES)
    assert set(stages.values()) == {"reused"}, stages
