"""The section-critic benchmark runs end to end on the 30-page fixture, and its baseline is right."""

from __future__ import annotations

import math
import pytest

from critic.document import Document, Section
from experiments.benchmarks.sections_speed import dictionary_baseline, load_train, main


def test_benchmark_on_fixture_agrees_with_the_dictionary_baseline(fixture_manpage_root, capsys):
    res = main(["--root", str(fixture_manpage_root), "--repeat", "3", "--repeats", "1"])
    train = load_train(fixture_manpage_root, 1)
    assert res["docs"] == 3 * len(train) > 0
    assert res["max_abs_diff"] <= 1e-9
    assert res["total_latent_nll"] > 0
    assert "plain/ours" in capsys.readouterr().out


def test_dictionary_baseline_by_hand():
    docs = [Document("a", (Section("x", "t"), Section("y", "t"))), Document("b", (Section("x", "t"),)),
            Document("c", (Section("y", "t"), Section("Drop", "t"), Section("z", "t")))]
    nll = dictionary_baseline(docs, 0.5, str.lower, {"drop"})
    # states x, y, z, <unk> (K = 4); counts: <bos>->x 2, <bos>->y 1, x->y 1, x-><eos> 1, y-><eos> 1,
    # y->z 1, z-><eos> 1
    by_hand = math.log((2 + 0.5) / (3 + 0.5 * 4)) + math.log((1 + 0.5) / (2 + 0.5 * 5)) \
        + math.log((1 + 0.5) / (2 + 0.5 * 5))
    assert nll["a"] == pytest.approx(-by_hand, abs=1e-12)
    # "Drop" is removed: c is <bos> y z <eos>
    by_hand_c = math.log((1 + 0.5) / (3 + 0.5 * 4)) + math.log((1 + 0.5) / (2 + 0.5 * 5)) \
        + math.log((1 + 0.5) / (1 + 0.5 * 5))
    assert nll["c"] == pytest.approx(-by_hand_c, abs=1e-12)
    assert list(nll) == ["a", "b", "c"]
