"""``critic run experiments/codemixing/cpu.toml`` at toy scale on the machine's real gettext catalogs: the
sets, the data's Latent NLL recomputed with the saved critic, table 10 and fig. 7 written, and stages that
resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from critic.critic import Critic
from critic.document import read_jsonl

STAGES = ("data", "critic", "ar", "nar", "report")
N_SOURCES = 15


def write_config(toy_preset, path: Path) -> Path:
    """The cpu preset with toy sizes (same keys, so the preset's schema is tested)."""
    replace = {
        "max_train_pairs = 40_000": "max_train_pairs = 600", "max_valid_pairs = 1_000": "max_valid_pairs = 40",
        "max_test_sources = 1_000": f"max_test_sources = {N_SOURCES}", "passes = 5": "passes = 2",
        "layers = 2": "layers = 1", "dim = 128": "dim = 32", "ff = 512": "ff = 64", "max_len = 64": "max_len = 32",
        "vocab_size = 4096": "vocab_size = 400", "warmup_steps = 200": "warmup_steps = 5",
        "max_steps = 3000": "max_steps = 20", "eval_every = 500": "eval_every = 10",
        "n_bootstrap = 1000": "n_bootstrap = 50", "n_permutations = 2000": "n_permutations = 50",
    }
    return toy_preset("codemixing", path, replace)


@pytest.fixture(scope="module")
def first(toy_job, toy_preset):
    from critic.corpora.gettext_pairs import find_catalogs

    if not all(find_catalogs(lang) for lang in ("de", "es", "fr")):
        pytest.skip("no de / es / fr gettext catalogs under /usr/share/locale")
    return toy_job("codemixing", lambda path: write_config(toy_preset, path))


def test_sets_and_data_latent_nll_recomputed(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    assert results["reference"]["name"] == "data"
    assert set(results["candidates"]) == {"ar", "nar"}
    train = read_jsonl(out / "data" / "train.jsonl")
    test = read_jsonl(out / "data" / "test.jsonl")
    sources = json.loads((out / "data" / "test_sources.json").read_text())
    assert len(train) == 600 and len(sources) == N_SOURCES
    assert {d.metadata["source"] for d in test} == set(sources)
    assert {d.metadata["language"] for d in train} == {"de", "es", "fr"}   # one pooled multi-target set
    assert not {d.metadata["source"] for d in train} & set(sources)
    critic = Critic.load(out / "critic" / "critic")
    assert critic.num_topics == 3
    scores = critic.score(test)
    assert results["reference"]["n"] == scores.n
    assert results["reference"]["latent_nll"] == pytest.approx(float(scores.latent_nll.mean()), rel=1e-12)
    np.testing.assert_array_equal(scores.latent_steps, 1.0)   # M(x) = 1
    lo, hi = results["reference"]["latent_nll_ci"]
    assert lo <= results["reference"]["latent_nll"] <= hi
    for kind in ("ar", "nar"):
        samples = read_jsonl(out / kind / "samples.jsonl")
        assert len(samples) == N_SOURCES
        s = results["candidates"][kind]
        assert s["n"] + s["n_skipped"] == N_SOURCES     # an empty sample is a counted skip


def test_mixed_share_table10_and_figure(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    rows = [json.loads(line) for line in (out / "report" / "documents.jsonl").read_text().splitlines()]
    data = [r["extras"]["topic_weights"] for r in rows if r["set"] == "data" and "extras" in r]
    assert len(data) == results["reference"]["n"]
    assert results["reference"]["mixed_share"] == pytest.approx(np.mean([max(w) < 0.9 for w in data]))
    table = (out / "table10.md").read_text()
    assert table.count("topic ") >= 3 and len([line for line in table.splitlines() if line.startswith("| ")]) == 21
    assert results["run"]["top_words"] and len(results["run"]["top_words"][0]) == 20
    assert (out / "report" / "fig7.png").stat().st_size > 0
    summary = (out / "summary.md").read_text()
    assert f"{results['reference']['latent_nll']:.3f}" in summary
    for name in ("| data |", "| ar |", "| nar |"):
        assert name in summary


def test_rerun_reuses_every_stage(first, run_experiment):
    config, out = first
    _, status = run_experiment(config, out, "[codemixing]", STAGES)
    assert status == {s: "reused" for s in STAGES}
