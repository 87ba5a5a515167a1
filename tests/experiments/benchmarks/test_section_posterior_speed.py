"""The classifier-posterior benchmark runs end to end on the 30-page fixture and counts what it timed."""

from __future__ import annotations

import json

import pytest

from critics.sections import SectionTransitionCritic
from critics.sections.classifier import bf16_supported
from experiments.benchmarks.corpus import filtered_manpages
from experiments.benchmarks.section_posterior_speed import main


def test_benchmark_bookkeeping_on_the_fixture(fixture_manpage_root, tmp_path, capsys):
    out = tmp_path / "bench.json"
    res = main(["--root", str(fixture_manpage_root), "--quick", "--encoder-train", "3", "--encoder-docs", "1",
                "--json", str(out)])
    splits = filtered_manpages(fixture_manpage_root)
    given = SectionTransitionCritic()
    kept = {s: [len(given.titles(d)) for d in docs] for s, docs in splits.items()}
    assert res["docs"] == {s: len(v) for s, v in splits.items()}
    tfidf = res["tfidf"]
    assert tfidf["docs"] == sum(res["docs"].values()) and tfidf["failures"] == 0
    assert tfidf["sections"] == sum(sum(v) for v in kept.values()) > 0
    assert tfidf["sections_per_s"] == pytest.approx(tfidf["sections"] / tfidf["seconds"])
    assert tfidf["test_sections"] == sum(kept["test"]) and 0 <= tfidf["test_accuracy"] <= 1
    assert tfidf["distinct_texts"] <= sum(len(d.sections) for v in splits.values() for d in v)
    enc = res["encoder"]
    assert enc["train_docs"] == 3 and enc["train_sections"] == sum(kept["train"][:3])
    assert enc["fp32"]["docs"] == 1 and enc["fp32"]["sections"] == kept["test"][0]
    seen = {t for d in splits["train"][:3] for t in given.titles(d)}  # the encoder critic's titles
    known = sum(t in seen for t in given.titles(splits["test"][0]))
    assert enc["test_sections"] == known > 0 and 0 <= enc["test_accuracy"] <= 1
    if bf16_supported("cpu"):
        assert enc["bf16"]["sections"] == enc["fp32"]["sections"]
        assert enc["bf16_speedup"] == pytest.approx(enc["bf16"]["sections_per_s"] / enc["fp32"]["sections_per_s"])
        assert 0 <= enc["map_agreement"] <= 1 and enc["max_abs_prob_diff"] >= 0
    else:
        assert enc["bf16"] is None
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    printed = capsys.readouterr().out
    assert "sections/s" in printed and "test accuracy" in printed
