"""End to end: the study runner on the tiny preset (seconds), and its resume from checkpoints."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from critic import stats
from experiments.synthetic.generator import make_dataset
from experiments.synthetic.run import data_config, main

CONFIG = Path(__file__).parents[3] / "experiments" / "synthetic" / "tiny.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    config = tomllib.loads(CONFIG.read_text())
    return out, config, main(config, out=out, seed=0, device="cpu", log=lambda s: None)


def test_results_json_has_table_1(run):
    out, _, res = run
    saved = json.loads((out / "results.json").read_text())
    for key in ("true", "transformer", "hsmm"):
        assert saved["word_ppl"][key] >= 1.0
    for key in ("data", "transformer", "hsmm"):
        lo, hi = saved["latent_ppl"][f"{key}_ci"]
        assert lo <= saved["latent_ppl"][key] <= hi
    assert "data_latent_ppl_closed_form" in saved
    assert (out / "table.md").read_text().startswith("| |")


def test_hsmm_latent_ppl_close_to_data(run):
    _, _, res = run
    lat = res["latent_ppl"]
    # Monte Carlo data estimate agrees with the closed form, and the fitted HSMM's samples are near it
    assert lat["data"] == pytest.approx(res["data_latent_ppl_closed_form"], rel=0.10)
    assert lat["hsmm"] == pytest.approx(lat["data"], rel=0.10)
    assert res["projection"]["hsmm"]["n_scored"] >= 0.5 * res["projection"]["hsmm"]["n"]
    # the true process has the best word-level perplexity
    assert res["word_ppl"]["true"] <= min(res["word_ppl"]["hsmm"], res["word_ppl"]["transformer"]) + 1e-9


def test_data_latent_ppl_from_criticize_matches_true_states(run):
    """Independent reference: T(x) from the states the test split was drawn with, z_0 = start state."""
    _, config, res = run
    process, splits = make_dataset(data_config(config["data"], 0))
    states = splits["test"].states
    prev = np.concatenate([np.full((len(states), 1), process.num_states), states[:, :-1]], 1)
    t = -process.log_trans[prev, states].sum(1)
    m = np.full(len(states), states.shape[1], dtype=float)
    assert res["latent_ppl"]["data"] == pytest.approx(np.exp(t.sum() / m.sum()), rel=1e-12)
    ci = stats.bootstrap_latent_ppl_ci(t, m, n_resamples=config["eval"]["bootstrap"], seed=0)
    assert res["latent_ppl"]["data_ci"] == pytest.approx(list(ci), rel=1e-12)
    crit = res["criticism"]
    assert crit["reference"]["name"] == "data" and sorted(crit["candidates"]) == ["hsmm", "transformer"]
    for name in ("hsmm", "transformer"):
        assert crit["candidates"][name]["latent_ppl"] == res["latent_ppl"][name]
        proj = res["projection"][name]
        failed = proj["reasons"]["unknown_subsequence"] + proj["reasons"]["no_final_delimiter"]
        assert proj["n"] == proj["n_scored"] + failed == crit["candidates"][name]["n"] + crit["candidates"][name]["n_skipped"]


def test_rerun_resumes_from_checkpoints(run):
    out, config, res = run
    again = main(config, out=out, seed=0, device="cpu", log=lambda s: None)
    assert again["word_ppl"] == res["word_ppl"]
    assert again["latent_ppl"] == res["latent_ppl"]
    assert again["training"] == res["training"]  # nothing retrained
