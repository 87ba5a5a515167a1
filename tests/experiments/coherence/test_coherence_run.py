"""``critic run experiments/coherence/*.toml`` at toy scale on the 30 man-page fixture: table 2's sets and
statistics, numbers recomputed independently from the saved stages, and stages that resume."""

from __future__ import annotations

import json
import math
import numpy as np
import pytest

from critic.critic import Critic
from critic.document import read_jsonl

STAGES = ("data", "filtered", "critic", "tokenizer", "lm_w_title", "samples_w_title", "ppl_w_title",
          "lm_wo_title", "samples_wo_title", "ppl_wo_title", "report")


@pytest.fixture
def run(run_experiment):
    """``run(config, out)``: (what it printed, stage -> 'reused' or 'computed')."""
    return lambda config, out: run_experiment(config, out, "[coherence:manpages]", STAGES)


@pytest.fixture(scope="module")
def first(toy_job, fixture_manpage_root, coherence_config):
    return toy_job("coherence", lambda path: coherence_config(path, fixture_manpage_root))


def test_results_have_the_three_sets_with_word_and_latent_ppl(first, report_json):
    _, out = first
    results = report_json(out / "manpages" / "report" / "results.json")
    sets = {"data": results["reference"], **results["candidates"]}
    assert results["reference"]["name"] == "data" and set(results["candidates"]) == {"lm_w_title", "lm_wo_title"}
    for name, s in sets.items():
        assert {"word_ppl", "latent_ppl", "latent_ppl_ci", "pdd"} <= set(s), name
    assert sets["data"]["word_ppl"] is None and "reference.word_ppl" in results["null_reasons"]
    # a few toy documents: MAUVE is withheld with its reason, not reported
    assert sets["data"]["mauve"] is None
    assert "< mauve_min_documents = 50" in results["null_reasons"]["reference.mauve"]
    for name in ("lm_w_title", "lm_wo_title"):
        ppl = json.loads((out / "manpages" / f"ppl_{name[3:]}" / "ppl.json").read_text())
        assert sets[name]["word_ppl"] == pytest.approx(math.exp(ppl["nll"] / ppl["n_words"]), rel=1e-12)
        # every generation is either scored, skipped with a reason, or counted as unparseable
        sample = json.loads((out / "manpages" / f"samples_{name[3:]}" / "sample.json").read_text())
        unparsed = results["run"]["unparsed_generations"][name]
        assert sets[name]["n"] + sets[name]["n_skipped"] + sum(unparsed.values()) == 16, (sample, unparsed)
        # the preset's [lm] start_of_document opens each training document and is the sampler's prompt
        fmt = json.loads((out / "manpages" / name / "best" / "format.json").read_text())
        assert (fmt["end_of_document"], fmt["start_of_document"]) == ("<|endoftext|>", "<|im_start|>"), name
    table = (out / "table2.md").read_text()
    assert "| Data |" in table and "| LM W/ Title |" in table and "| LM W/O Title |" in table


def test_w_title_against_wo_title_recomputed_from_the_documents(first, report_json):
    _, out = first
    rows = [json.loads(line) for line in (out / "manpages" / "report" / "documents.jsonl").read_text().splitlines()]
    sets = {n: [r for r in rows if r["set"] == n] for n in ("lm_w_title", "lm_wo_title")}
    ppl = {n: math.exp(sum(r["latent_nll"] for r in d) / sum(r["latent_steps"] for r in d)) for n, d in sets.items()}
    mean = {n: np.mean([r["latent_nll"] for r in d]) for n, d in sets.items()}
    titles = report_json(out / "manpages" / "report" / "results.json")["run"]["w_title_vs_wo_title"]
    assert titles["n"] == {n: len(d) for n, d in sets.items()} and min(titles["n"].values()) >= 1
    assert titles["latent_ppl"]["difference"] == pytest.approx(ppl["lm_w_title"] - ppl["lm_wo_title"], rel=1e-9)
    assert titles["mean_latent_nll"]["difference"] == pytest.approx(mean["lm_w_title"] - mean["lm_wo_title"],
                                                                    rel=1e-9)
    for key in ("latent_ppl", "mean_latent_nll"):
        if min(titles["n"].values()) < 2:       # the toy LMs parse few: no CI, no p-value, and not invented
            assert titles[key]["difference_ci"] == [None, None] and titles[key]["p_value"] is None
            continue
        lo, hi = titles[key]["difference_ci"]
        assert lo <= titles[key]["difference"] <= hi and 1 / 51 <= titles[key]["p_value"] <= 1   # 50 permutations
    table = (out / "table2.md").read_text()
    assert f"- manpages: W/ Title minus W/O Title (n = {titles['n']['lm_w_title']} and" in table
    p_value = titles["latent_ppl"]["p_value"]
    assert f"p = {'—' if p_value is None else format(p_value, '.4f')}" in table


def test_opening_ratios_counted_by_hand(first, report_json):
    """W/ Title: a generation opens as a document when its first line is a training document's first title;
    W/O Title, when it opens as a man page's NAME line does (a name, then a comma or a dash: the preset's
    default)."""
    _, out = first
    results = report_json(out / "manpages" / "report" / "results.json")
    train = read_jsonl(out / "manpages" / "filtered" / "train.jsonl")
    titles = {d.sections[0].title for d in train}

    def name_start(text: str) -> bool:
        name = next((i for i, c in enumerate(text) if c.isspace() or c == ","), len(text))
        rest = text[name:]
        return name > 0 and (rest.startswith(",") or (rest[:1].isspace() and rest.lstrip().startswith("-")))

    opens = {"lm_w_title": lambda t: "\n" in t and t.split("\n", 1)[0] in titles, "lm_wo_title": name_start}
    for name, begins in opens.items():
        texts = [json.loads(line)["text"] for line in
                 (out / "manpages" / f"samples_{name[3:]}" / "generations.jsonl").read_text().splitlines()]
        data = 1.0 if name == "lm_w_title" else np.mean([begins(d.sections[0].text) for d in train])
        assert data > 0.9, name           # the toy man pages open with their NAME lines ('ls - list ...')
        expected = np.mean([begins(t) for t in texts]) / data
        assert results["candidates"][name]["opening_ratio"] == pytest.approx(expected, rel=1e-12), name
        assert results["run"]["openings"][name]["samples"] == [sum(map(begins, texts)), len(texts)]
    assert results["reference"]["opening_ratio"] is None and "reference.opening_ratio" in results["null_reasons"]


def test_data_latent_ppl_and_pdd_recomputed_from_the_saved_critic(first, report_json):
    """The data row: MAP labels of the test split under the saved classifier, scored by hand with the
    bigram prior's P(z_m | z_m-1); PDD of validation against test labels by the seed-002 definition."""
    from critics.metrics.pdd import pdd

    _, out = first
    run_dir = out / "manpages"
    critic = Critic.load(run_dir / "critic" / "critic")
    test = read_jsonl(run_dir / "filtered" / "test.jsonl")
    valid = read_jsonl(run_dir / "filtered" / "valid.jsonl")
    total, steps = 0.0, 0
    for labels in critic.labels(test):
        path = ["<bos>", *labels, "<eos>"]
        total -= sum(math.log(critic.transition_probability(a, b)) for a, b in zip(path, path[1:]))
        steps += len(labels) + 1
    results = report_json(run_dir / "report" / "results.json")
    assert results["reference"]["latent_ppl"] == pytest.approx(math.exp(total / steps), rel=1e-9)
    index = lambda docs: [[critic.index_[t] for t in p] for p in critic.labels(docs)]  # noqa: E731
    assert results["reference"]["pdd"] == pytest.approx(
        pdd(index(valid), index(test), num_bins=5, num_classes=len(critic.vocab_)), rel=1e-12)


def test_rerun_reuses_every_stage_and_a_sampling_change_redoes_only_what_follows(
        first, run, tmp_path, fixture_manpage_root, coherence_config, report_json):
    config, out = first
    printed, how = run(config, out)
    assert how == dict.fromkeys(STAGES, "reused")
    assert "## Table 2" in printed
    changed = coherence_config(tmp_path / "job.toml", fixture_manpage_root, n=18)
    before = (out / "manpages" / "lm_w_title" / "best").stat().st_mtime_ns
    _, how = run(changed, out)
    redone = {s for s, h in how.items() if h == "computed"}
    assert redone == {"samples_w_title", "samples_wo_title", "report"}
    assert (out / "manpages" / "lm_w_title" / "best").stat().st_mtime_ns == before
    generations = [json.loads(line) for line in
                   (out / "manpages" / "samples_w_title" / "generations.jsonl").read_text().splitlines()]
    assert sorted(g["index"] for g in generations) == list(range(18))
    assert np.isfinite(report_json(out / "manpages" / "report" / "results.json")
                       ["reference"]["latent_ppl"])
