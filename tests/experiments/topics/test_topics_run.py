"""``critic run experiments/topics/cpu.toml`` at toy scale on the real Wikipedia summaries and man pages: the
sets of table 9, numbers recomputed from the saved stages, fig. 6's covariances, table9.md against
results.json, and stages that resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from critic.critic import Critic
from critic.document import read_jsonl
from critic.lm.sample import read_generations

STAGES = ("data", "baseline", "tokenizer", "lm", "samples", "ppl", "critic", "critic_seed1", "seeds", "report",
          "report_mean_only")
N_SAMPLES = 10
N_TEST = 30
N_MAN = 12


def needs_man_pages():
    if not any(Path("/usr/share/man/man2").glob("*")):
        pytest.skip("no man pages under /usr/share/man (apt-get install manpages manpages-dev)")


def write_config(toy_preset, path: Path) -> Path:
    """The cpu preset with toy sizes (same keys, so the preset's schema is tested)."""
    replace = {
        'topic = ""': f'topic = ""\nmax_train_documents = 150\nmax_test_documents = {N_TEST}',
        'root = "/usr/share/man"': f'root = "/usr/share/man"\nmax_documents = {N_MAN}', "threads = 2": "threads = 1",
        'model = "smollm2"': 'model = "tiny"\nvocab_size = 400\nlayers = 1\nheads = 2\ndim = 32',
        "context = 512": "context = 128", "batch_size = 8": "batch_size = 4", "bf16 = true": "bf16 = false",
        "learning_rate = 5e-4": "learning_rate = 3e-3", "epochs = 20": "epochs = 1",
        "max_tokens = 1_000_000": "max_tokens = 8000", "eval_every = 45": "eval_every = 5",
        "n = 300": f"n = {N_SAMPLES}", "batch_size = 32": "batch_size = 10",
        "em_iterations = 200": "em_iterations = 15", "min_count = 1 ": "min_count = 2 ",
        "infer_steps = 300": "infer_steps = 30", "num_topics = 100 ": "num_topics = 4 ",
        "n_bootstrap = 1000": "n_bootstrap = 50", "n_permutations = 2000": "n_permutations = 50",
        "top = 10": "top = 3", "n_words = 10": "n_words = 5",
    }
    return toy_preset("topics", path, replace)


@pytest.fixture(scope="module")
def first(wiki_wheel, toy_job, toy_preset):
    needs_man_pages()
    return toy_job("topics", lambda path: write_config(toy_preset, path))


def _sets(out: Path) -> dict:
    generated, _ = read_generations(out / "samples")
    return {"data": read_jsonl(out / "data" / "test.jsonl")[:N_TEST], "lm": generated,
            "manpages": read_jsonl(out / "baseline" / "test.jsonl")[:N_MAN]}


def test_sets_and_latent_nll_recomputed_from_the_saved_critic(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    assert results["reference"]["name"] == "data"
    assert set(results["candidates"]) == {"lm", "manpages"}
    assert results["critic"]["name"] == "ctm" and results["critic"]["params"]["num_topics"] == 4
    sets = _sets(out)
    critic = Critic.load(out / "critic" / "critic")
    scores = critic.score(sets["data"])
    assert results["reference"]["n"] == scores.n == N_TEST
    assert results["reference"]["latent_nll"] == pytest.approx(float(np.mean(scores.latent_nll)), rel=1e-12)
    man = critic.score(sets["manpages"])
    assert results["candidates"]["manpages"]["latent_nll"] == pytest.approx(float(np.mean(man.latent_nll)),
                                                                            rel=1e-12)
    # every generation is scored, skipped with its reason, or counted as unparseable
    generated, unparsed = read_generations(out / "samples")
    lm = results["candidates"]["lm"]
    assert len(generated) + sum(unparsed.values()) == N_SAMPLES
    assert lm["n"] + lm["n_skipped"] == len(generated)
    assert results["run"]["unparsed_generations"] == dict(unparsed)
    assert results["candidates"]["manpages"]["n"] + results["candidates"]["manpages"]["n_skipped"] == N_MAN
    # the preset's [lm] end_of_document ends the training documents and the generations; its
    # start_of_document opens each training document and is the sampler's prompt
    fmt = json.loads((out / "lm" / "best" / "format.json").read_text())
    assert (fmt["end_of_document"], fmt["start_of_document"]) == ("<|endoftext|>", "<|im_start|>")
    # M(x) = 1: the Latent PPL is exp(mean T)
    assert results["reference"]["latent_ppl"] == pytest.approx(np.exp(np.mean(scores.latent_nll)), rel=1e-9)


def test_mean_only_scores_the_same_fitted_critic(first, report_json):
    _, out = first
    exact = report_json(out / "report" / "results.json")
    mean = report_json(out / "report_mean_only" / "results.json")
    assert mean["critic"]["params"]["mean_only"] is True and exact["critic"]["params"]["mean_only"] is False
    critic = Critic.load(out / "critic" / "critic")
    critic.mean_only = True
    scores = critic.score(_sets(out)["data"])
    assert mean["reference"]["latent_nll"] == pytest.approx(float(np.mean(scores.latent_nll)), rel=1e-12)
    assert mean["reference"]["latent_nll"] != pytest.approx(exact["reference"]["latent_nll"], rel=1e-6)


def test_covariance_figures(first):
    from critics.topics.ctm_plots import aggregated_covariance

    _, out = first
    for name in ("fig6_covariance", "fig6_covariance_centred", "fig6_data", "fig6_lm", "fig6_manpages"):
        assert (out / "report" / f"{name}.png").stat().st_size > 1000, name
    critic = Critic.load(out / "critic" / "critic")
    saved = np.load(out / "report" / "covariance_data.npy")
    np.testing.assert_allclose(saved, aggregated_covariance(critic, _sets(out)["data"]), rtol=1e-10, atol=1e-12)
    assert saved.shape == (4, 4)
    topics = json.loads((out / "report" / "topics.json").read_text())
    assert sorted(topics["order"]) == [0, 1, 2, 3] and len(topics["top_words"]) == 4
    # table 14: the top outliers by T(x) of each set, highest first
    rows = {json.loads(line)["id"]: json.loads(line) for line in (out / "report" / "documents.jsonl").read_text()
            .splitlines() if json.loads(line)["set"] == "lm" and "latent_nll" in json.loads(line)}
    listed = topics["outliers"]["lm"]
    assert [r["id"] for r in listed] == sorted(rows, key=lambda i: -rows[i]["latent_nll"])[:len(listed)]
    assert "Table 14" in (out / "report" / "report.md").read_text()
    # table 14 re-read (issue 22): the documents flagged first, smallest outlier p-value, ties by T(x)
    flagged = topics["flagged"]["lm"]
    order = sorted(rows, key=lambda i: (rows[i]["outlier_p_value"], -rows[i]["latent_nll"]))[:len(flagged)]
    assert [r["id"] for r in flagged] == order and len(flagged) == min(3, len(rows))
    assert [r["outlier_p_value"] for r in flagged] == [rows[i]["outlier_p_value"] for i in order]
    assert "smallest outlier p-value (length score" in (out / "report" / "report.md").read_text()


def test_table9_matches_results(first, report_json):
    _, out = first
    table = (out / "table9.md").read_text()
    exact = report_json(out / "report" / "results.json")
    mean = report_json(out / "report_mean_only" / "results.json")
    for name in ("data", "lm", "manpages"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        for k, res in enumerate((exact, mean)):
            s = res["reference"] if name == "data" else res["candidates"][name]
            lo, hi = s["latent_nll_ci"]
            assert cells[1 + 2 * k] == f"{s['latent_nll']:.2f} [{lo:.2f}, {hi:.2f}]", (name, k)
            if name != "data":
                c = s["comparison"]
                assert cells[2 + 2 * k].startswith(f"{c['difference']:+.2f}")
                assert cells[2 + 2 * k].endswith(f"p = {c['p_value']:.4f}")
        s = exact["reference"] if name == "data" else exact["candidates"][name]
        assert cells[-2:] == [str(s["n"]), str(s["n_skipped"])]


def test_the_seeds_agreement_is_recomputed_from_the_saved_critics(first):
    """``[critic] check_seeds = 1``: a second fit with seed 1; its agreement with the first on the test summaries
    (exact and mean-only Latent NLL correlation, top-20 overlap, matched topics) recomputed from the two saved
    critics, and stated in table9.md."""
    from critic.seeds import matched_cosines

    _, out = first
    info = json.loads((out / "seeds" / "agreement.json").read_text())
    assert info["seeds"] == [0, 1] and info["documents"] == N_TEST
    critics = [Critic.load(out / name / "critic") for name in ("critic", "critic_seed1")]
    assert [c.seed for c in critics] == [0, 1] and all(c.fit_method_ == "em" for c in critics)
    docs = _sets(out)["data"]
    exact = [c.score(docs, seed=c.seed).latent_nll for c in critics]
    assert info["corr_exact"]["pairs"] == [pytest.approx(float(np.corrcoef(*exact)[0, 1]), abs=1e-9)]
    for c in critics:
        c.mean_only = True
    mean = [c.score(docs, seed=c.seed).latent_nll for c in critics]
    assert info["corr_mean_only"]["pairs"] == [pytest.approx(float(np.corrcoef(*mean)[0, 1]), abs=1e-9)]
    top = [set(np.argsort(-e)[:20]) for e in exact]
    assert info["top_overlap"]["pairs"] == [float(len(top[0] & top[1]))]
    cosine = float(np.median(matched_cosines(*(c.latent_components() for c in critics))))
    assert info["topic_cosine"]["pairs"] == [pytest.approx(cosine, abs=1e-12)]
    table = (out / "table9.md").read_text()
    assert f"Seeds 0, 1 (one fit each), on the {N_TEST} test summaries" in table
    assert f"Latent NLL correlation {info['corr_exact']['min']:.3f}" in table


def test_rerun_reuses_every_stage(first, run_experiment):
    config, out = first
    _, status = run_experiment(config, out, "[topics]", STAGES)
    assert status == {s: "reused" for s in STAGES}


def test_a_bad_end_of_document_is_refused_before_any_stage(toy_preset, tmp_path, capsys):
    from critic.cli import main

    config = toy_preset("topics", tmp_path / "job.toml",
                        {'end_of_document = "<|endoftext|>"': 'end_of_document = "<|section|>"'})
    assert main(["run", str(config), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "[lm] section_marker '<|section|>' and end_of_document '<|section|>' must not contain one another" in err
    assert not (tmp_path / "a" / "data").exists()
