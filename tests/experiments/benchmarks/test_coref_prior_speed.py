"""The coreference-prior benchmark runs end to end at toy scale, and its dictionary baseline is right."""

from __future__ import annotations

import numpy as np

from critics.coref.kenlm_prior import KenLMChainPrior
from critics.coref.windows import KindTable, encode
from experiments.benchmarks.coref_prior_speed import PythonChainModel, main, synthetic_chains


def test_benchmark_at_toy_scale(tmp_path, capsys):
    res = main(["--chains", "40", "--train", "60", "--repeats", "1", "--memory", "64M",
                "--json", str(tmp_path / "bench.json")])
    assert res["chains"] == 40 and res["positions"] > 0
    assert res["max_abs_diff"] <= 1e-9
    assert res["distinct_windows"] <= res["positions"]
    for name in ("kenlm", "plain", "direct", "authors"):
        assert res[f"{name}_positions_per_s"] > 0
    for name in ("encode", "windows", "context_rows", "table_gather", "per-chain_sums"):
        assert res[f"stage_{name}_ns_per_position"] > 0
    assert 0 < res["window_seen_share"] <= res["context_seen_share"] <= 1
    assert (tmp_path / "bench.json").is_file()
    out = capsys.readouterr().out
    assert "plain/this" in out and "no window table" in out and "bit-identical" in out


def test_synthetic_chains_look_like_chains():
    chains = synthetic_chains(200, seed=3)
    assert synthetic_chains(200, seed=3) == chains
    enc = encode(chains, KindTable())  # every token parses
    assert 20 < np.mean([len(c) for c in chains]) < 40
    assert all(c[0] == "." for c in chains)
    entities = [len({t.split(":")[1] for t in c if ":" in t}) for c in chains]
    assert 1 <= min(entities) and max(entities) <= 4
    assert (enc.ids >= 0).mean() > 0.5
    for c in chains:  # ids numbered by first appearance, the subject first (as chains.py builds them)
        ids = [int(t.split(":")[1]) for t in c if ":" in t]
        assert not ids or ids[0] == 0
        assert list(dict.fromkeys(ids)) == list(range(len(set(ids))))
    # runs about one person: consecutive mentions mostly share the entity, most mentions are the subject
    pairs = [(a, b) for c in chains for a, b in zip(c, c[1:]) if ":" in a and ":" in b]
    assert np.mean([a.split(":")[1] == b.split(":")[1] for a, b in pairs]) > 0.6
    assert (enc.ids == 0).sum() / (enc.ids >= 0).sum() > 0.6


def test_dictionary_baseline_matches_the_prior_on_unseen_tokens():
    train = synthetic_chains(30, seed=0)
    prior = KenLMChainPrior.fit(train, memory="64M", binary=False)
    plain = PythonChainModel.from_prior(prior)
    odd = [["Xyz:4", ".", "M:9", "We:9", "he:1"], []]
    for got, want in zip(plain.position_logprobs(odd), prior.position_logprobs(odd)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
