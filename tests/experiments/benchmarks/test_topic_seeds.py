"""The topic-seed reproducibility benchmark runs at toy size (synthetic documents from a known CTM): every
configuration of the CTM and LDA critics is fitted per seed, and the agreement figures are what their definition
says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.benchmarks.topic_seeds import agreement, main


def test_benchmark_toy_scale(tmp_path, capsys):
    out = tmp_path / "seeds.json"
    res = main(["--corpus", "synthetic", "--docs", "150", "--heldout", "40", "--topics", "4", "--seeds", "2",
                "--configs", "before,default", "--set", "steps=60", "--set", "em_iterations=15", "--json", str(out)])
    assert set(res["ctm"]) == {"before", "default"} and set(res["lda"]) == {"before", "default"}   # --lda-configs default
    for block in (*res["ctm"].values(), *res["lda"].values()):
        assert len(block["fits"]) == 2
        for name in ("corr_exact", "corr_mean_only", "top_overlap", "topic_cosine"):
            assert len(block["agreement"][name]["pairs"]) == 1          # two seeds: one pair
        assert 0 <= block["agreement"]["top_overlap"]["min"] <= 20
        assert all(np.isfinite(f["heldout_ll_per_token"]) and f["heldout_ll_per_token"] < 0 for f in block["fits"])
    default = res["ctm"]["default"]
    assert all(f["steps"] <= 15 for f in default["fits"]) and all(f["steps"] <= 60 for f in res["ctm"]["before"]["fits"])
    assert default["agreement"]["corr_exact"]["min"] > 0.9                # the EM + NMF fit reproduces on toy data
    lda = res["lda"]["default"]                                              # the NMF start: one fit for every seed
    assert lda["agreement"]["corr_exact"]["min"] == pytest.approx(1.0, abs=1e-12)
    assert lda["agreement"]["top_overlap"]["min"] == 20
    assert lda["agreement"]["topic_cosine"]["min"] == pytest.approx(1.0)
    assert len({f["heldout_ll_per_token"] for f in lda["fits"]}) == 1
    assert all(f["steps"] == 10 and isinstance(f["converged"], bool) for b in res["lda"].values() for f in b["fits"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    printed = capsys.readouterr().out
    assert "ctm default" in printed and "top-20 outlier overlap" in printed and "lda default (critic defaults)" in printed


def test_lda_only_and_bad_configurations():
    res = main(["--corpus", "synthetic", "--docs", "100", "--heldout", "30", "--topics", "3", "--seeds", "2",
                "--configs", "", "--lda-configs", "before"])
    assert res["ctm"] == {} and set(res["lda"]) == {"before"}
    assert main(["--corpus", "synthetic", "--docs", "100", "--heldout", "30", "--configs", "", "--no-lda"])["lda"] == {}
    with pytest.raises(SystemExit):
        main(["--corpus", "synthetic", "--lda-configs", "spectral"])


def test_agreement_by_hand():
    topics = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    a = {"exact": np.arange(30.0), "mean_only": np.arange(30.0), "topics": topics}
    b = {"exact": np.arange(30.0)[::-1].copy(), "mean_only": 2 * np.arange(30.0) + 1, "topics": topics[::-1].copy()}
    got = agreement([a, b])
    assert got["corr_exact"]["mean"] == pytest.approx(-1.0)
    assert got["corr_mean_only"]["mean"] == pytest.approx(1.0)
    assert got["top_overlap"]["pairs"] == [10.0]                        # tops {10..29} and {0..19}
    assert got["topic_cosine"]["min"] == pytest.approx(1.0)             # the swap is undone by the matching
