"""``critic run experiments/coreference/cpu.toml`` at toy scale on the real Wikipedia people summaries with the
real neuralcoref: table 7's sets, numbers recomputed independently from the saved stages, corruptions that
change one pronoun, and stages that resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from critic.critic import Critic
from critic.document import read_jsonl
from critic.lm.sample import read_generations

STAGES = ("data", "tokenizer", "lm", "samples", "ppl", "lm_short", "samples_short", "ppl_short", "resolved_train",
          "resolved_test", "resolved_lm", "resolved_lm_short", "critic_kenlm", "critic_authors", "report",
          "report_authors")
N_SAMPLES = 12


def needs_neuralcoref():
    from critics.coref.neuralcoref import NeuralcorefNotInstalled, NeuralcorefResolver

    try:
        NeuralcorefResolver().close()
    except NeuralcorefNotInstalled as exc:
        pytest.skip(str(exc))


def write_config(toy_preset, path: Path) -> Path:
    """The cpu preset with toy sizes (same keys, so the preset's schema is tested)."""
    replace = {
        "film = false": "film = false\nmax_train_documents = 60\nmax_test_documents = 25", "threads = 2": "threads = 1",
        'model = "smollm2"': 'model = "tiny"\nvocab_size = 400\nlayers = 1\nheads = 2\ndim = 32',
        "context = 512": "context = 128", "batch_size = 8": "batch_size = 4", "bf16 = true": "bf16 = false",
        "learning_rate = 5e-4": "learning_rate = 3e-3", "epochs = 20": "epochs = 1",
        "max_tokens = 160_000": "max_tokens = 3000", "max_tokens = 80_000": "max_tokens = 1500",
        "n = 340": f"n = {N_SAMPLES}", "batch_size = 32": "batch_size = 6", "max_new_tokens = 511": "max_new_tokens = 120",
        "n_bootstrap = 1000": "n_bootstrap = 50", "n_permutations = 2000": "n_permutations = 50",
    }
    return toy_preset("coreference", path, replace)


@pytest.fixture(scope="module")
def first(wiki_wheel, toy_job, toy_preset):
    needs_neuralcoref()
    return toy_job("coreference", lambda path: write_config(toy_preset, path))


def test_sets_and_numbers_recomputed_from_the_stages(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    assert results["reference"]["name"] == "data"
    assert set(results["candidates"]) == {"lm", "lm_short", "gender", "number"}
    test = read_jsonl(out / "resolved_test" / "documents.jsonl")
    assert len(test) == 25 and all("coref" in d.metadata for d in test)
    # the data's Latent PPL, recomputed with the saved critic from the resolved documents
    critic = Critic.load(out / "critic_kenlm" / "critic")
    scores = critic.score(test)
    assert results["reference"]["n"] == scores.n
    expected = math.exp(scores.latent_nll.sum() / scores.latent_steps.sum())
    assert results["reference"]["latent_ppl"] == pytest.approx(expected, rel=1e-12)
    # ... and T(x) = -sum_i log P(z_i | window), M(x) = chain length, from each document's chain
    chains = [tuple(json.loads(line)["extras"]["chain"].split())
              for line in (out / "report" / "documents.jsonl").read_text().splitlines()
              if json.loads(line)["set"] == "data"]
    logp = critic.prior_.position_logprobs(chains)
    np.testing.assert_allclose(sorted(-lp.sum() for lp in logp), sorted(scores.latent_nll), rtol=1e-12)
    # the LM's word PPL is its ppl stage's; every generation is scored, skipped or unparsed
    ppl = json.loads((out / "ppl" / "ppl.json").read_text())
    lm = results["candidates"]["lm"]
    assert lm["word_ppl"] == pytest.approx(math.exp(ppl["nll"] / ppl["n_words"]), rel=1e-12)
    generated, unparsed = read_generations(out / "samples")
    resolved_lm = read_jsonl(out / "resolved_lm" / "documents.jsonl")
    assert len(resolved_lm) + json.loads((out / "resolved_lm" / "counts.json").read_text()).get("failed", 0) <= \
        len(generated)
    assert len(generated) + sum(unparsed.values()) == N_SAMPLES
    assert lm["n"] + lm["n_skipped"] == len(resolved_lm) + sum(
        v for k, v in json.loads((out / "resolved_lm" / "counts.json").read_text()).items() if k.startswith("failed"))


def test_the_second_lm_is_its_own_set_and_is_compared_with_the_first(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    short, lm = results["candidates"]["lm_short"], results["candidates"]["lm"]
    for stage, budget in (("lm", 3000), ("lm_short", 1500)):       # [second_lm] changed the budget, nothing else
        training = json.loads((out / stage / "best" / "training.json").read_text())
        assert budget <= training["tokens_seen"] < budget + 4 * 127, stage
    ppl = json.loads((out / "ppl_short" / "ppl.json").read_text())
    assert short["word_ppl"] == pytest.approx(math.exp(ppl["nll"] / ppl["n_words"]), rel=1e-12)
    assert short["word_ppl"] != pytest.approx(lm["word_ppl"])
    rows = [json.loads(line) for line in (out / "report" / "documents.jsonl").read_text().splitlines()]
    sets = {n: [r for r in rows if r["set"] == n] for n in ("lm", "lm_short")}
    ppls = {n: math.exp(sum(r["latent_nll"] for r in d) / sum(r["latent_steps"] for r in d)) for n, d in sets.items()}
    between = results["run"]["second_lm_vs_lm"]
    assert between["n"] == {"lm": len(sets["lm"]), "lm_short": len(sets["lm_short"])} == {"lm": lm["n"],
                                                                                          "lm_short": short["n"]}
    assert between["latent_ppl"]["difference"] == pytest.approx(ppls["lm_short"] - ppls["lm"], rel=1e-9)
    table = (out / "table7.md").read_text()
    assert f"- kenlm: lm_short minus lm (n = {short['n']} and {lm['n']}): Latent PPL" in table
    row = next(line for line in table.splitlines() if line.startswith("| lm_short |"))
    p_value = short["comparison"]["p_value"]            # null from fewer than 2 documents: printed as such
    assert f"{short['latent_ppl']:.3f}" in row and ("—" if p_value is None else f"{p_value:.4f}") in row


def test_corruptions_swap_one_pronoun_and_raise_the_latent_ppl(first, report_json):
    _, out = first
    results = report_json(out / "report" / "results.json")
    data = results["reference"]["latent_ppl"]
    for name in ("gender", "number"):
        s = results["candidates"][name]
        assert s["n"] >= 10, name
        assert s["latent_ppl"] > data, name
    rows = [json.loads(line) for line in (out / "report" / "documents.jsonl").read_text().splitlines()]
    by_set = {}
    for r in rows:
        by_set.setdefault(r["set"], {})[r["id"]] = r
    for name in ("gender", "number"):
        # the paired baseline: the same documents uncorrupted, from the data set's T(x) and M(x)
        originals = [by_set["data"][i.split("#")[0]] for i in by_set[name]]
        paired = math.exp(sum(r["latent_nll"] for r in originals) / sum(r["latent_steps"] for r in originals))
        assert results["candidates"][name]["originals_latent_ppl"] == pytest.approx(paired, rel=1e-12)
        assert results["candidates"][name]["latent_ppl"] > paired
        for doc_id, row in by_set[name].items():
            source = by_set["data"][doc_id.split("#")[0]]
            a, b = source["extras"]["chain"].split(), row["extras"]["chain"].split()
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1, (name, doc_id)


def test_tables_and_rendering(first, report_json):
    _, out = first
    report = (out / "report" / "report.md").read_text()
    for heading in ("Table 6", "Table 15", "Table 16", "Table 17"):
        assert heading in report
    table = (out / "table7.md").read_text()
    kenlm = report_json(out / "report" / "results.json")
    authors = report_json(out / "report_authors" / "results.json")
    row = next(line for line in table.splitlines() if line.startswith("| data |"))
    assert f"{kenlm['reference']['latent_ppl']:.3f}" in row and f"{authors['reference']['latent_ppl']:.3f}" in row


def test_rerun_reuses_every_stage(first, run_experiment):
    config, out = first
    _, status = run_experiment(config, out, "[coreference]", STAGES)
    assert status == {s: "reused" for s in STAGES}


@pytest.mark.parametrize("table, message", [
    ('[second_lm]\nmax_tokens = 10', "[second_lm] max_tokens: give the second LM a name"),
    ('[second_lm]\nname = "lm"', "[second_lm] name must be lm_<word> and not 'lm'"),
    ('[second_lm]\nname = "short"', "[second_lm] name must be lm_<word>"),
])
def test_a_bad_second_lm_is_refused_before_any_stage(toy_preset, tmp_path, capsys, table, message):
    from critic.cli import main

    config = toy_preset("coreference", tmp_path / "job.toml",
                        {"[second_lm]                  # table 7's second LM: [lm] with these keys changed\n"
                         'name = "lm_short"\nmax_tokens = 80_000': table})
    assert main(["run", str(config), "--out", str(tmp_path / "a")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "a" / "data").exists()


def test_a_bad_start_of_document_is_refused_before_any_stage(toy_preset, tmp_path, capsys):
    from critic.cli import main

    config = toy_preset("coreference", tmp_path / "job.toml",
                        {'start_of_document = "<|im_start|>"': 'start_of_document = "<|endoftext|>"'})
    assert main(["run", str(config), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert ("[lm] end_of_document '<|endoftext|>' and start_of_document '<|endoftext|>' must not contain one another"
            in err) and "Traceback" not in err
    assert not (tmp_path / "a" / "data").exists()
