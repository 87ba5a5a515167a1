"""Runner of the coreference study (paper sec. 5, app. G; tables 6, 7, 15, 16, 17).

``critic run experiments/coreference/cpu.toml --out DIR`` does, in ``DIR/``:

=====================  ============================================================
``data/``              Wikipedia lead summaries (``critic data build wiki-summaries``,
                       topic "People" by default, or the app. G film filter)
``tokenizer/``         (``[lm] model = "tiny"``) a BPE tokenizer trained on train
``lm/``                an LM fine-tuned on the summaries (``critic lm``)
``samples/``           its ancestral samples (resumable)
``ppl/``               its word perplexity on the test split
``lm_<name>/`` ...     with ``[second_lm] name = "lm_<name>"``, a second LM (``[lm]`` with the keys
                       ``[second_lm]`` changes: a smaller budget, another model), its
                       ``samples_<name>/``, ``ppl_<name>/`` and ``resolved_lm_<name>/``
``resolved_train/``    neuralcoref resolutions (resumable) of the first ``max_train_documents``
``resolved_test/``     ... of the test split, ``resolved_lm/`` of the samples
``critic_kenlm/``      the coreference critic with the KenLM prior, ``critic_authors/`` with
                       the authors' smoothing, both fitted on ``resolved_train``
``report/``            results.json + report.md for the KenLM critic (sets ``data``, ``lm`` and one
                       per corruption), tables 6, 15, 16, 17, the top flagged documents
                       rendered (``flagged_*.html``); ``report_authors/`` the same criticism
                       under the authors' smoothing
=====================  ============================================================

and ``DIR/table7.md``: Latent PPL with 95% CIs and the per-document test against the data per set under
both priors, the LMs' word PPL, and with two LMs the second against the first.

Corruptions (:mod:`critics.coref.corrupt`) are made from the resolved test documents: one
pronoun per document takes the other gender, or the other number, with the clusters kept.
Every stage is keyed by the config it depends on (:mod:`critic.stages`) and resumes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from critic.config import Key
from critic.critic import Critic
from critic.document import Document, read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.results import CriticismResult
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, register_study, study_schema
from critic.workflows import fit_critic
from critics.coref.critic import CorefChainCritic
from experiments.lm_stages import (LM_CHECK, LM_TABLE, SAMPLE_TABLE, SECOND_LM_TABLE, LmStages, add_openings,
                                   read_splits, second_lm, word_ppl)
from experiments.tables import comparison_line, openings_line, set_comparison

from .tables import diagnostic_tables, originals_latent_ppl, table7

__all__ = ["main", "SCHEMA", "table7"]

SMOOTHINGS = {"kenlm": "critic_kenlm", "authors": "critic_authors"}
LMS_KEY = "second_lm_vs_lm"
"""Where a report's ``results.json`` keeps the second LM against the first, under ``run``
(:func:`experiments.tables.set_comparison`)."""

SCHEMA = study_schema({
    "data": {
        "language": Key(str, "en", choices=("en",), help="summaries' language (coreference needs English)"),
        "topic": Key(str, "People", help='keep one topic of the summaries ("" keeps all)'),
        "film": Key(bool, False, help="app. G: keep summaries matching .*is a.*film.*"),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the validation split"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the test split"),
        "max_train_documents": Key(int, min=1, help="training documents resolved for the critic (absent: all)"),
        "max_test_documents": Key(int, min=1, help="test documents resolved and scored (absent: all)"),
    },
    "lm": LM_TABLE,
    "second_lm": SECOND_LM_TABLE,
    "sample": SAMPLE_TABLE,
    "neuralcoref": {"batch_size": Key(int, 16, min=1, help="documents per worker request")},
    "critic": settings_table(CorefChainCritic, keep=("order", "memory"), notes={
        "order": "n-gram order of the prior (paper: 5; a 1-gram has no context)",
        "memory": "lmplz -S memory bound"}),
    "corruptions": {
        "names": Key(list[str], ["gender", "number"], choices=("gender", "number"),
                     help="corrupted copies of the resolved test set"),
    },
}, criticism={
    "threshold": Key(float, -7.0, help="table 15 / rendering: log P below this is implausible"),
    "min_count": Key(int, 5, min=1, help="tables 16, 17: windows seen this often in both sets"),
    "render": Key(int, 3, min=0, help="top flagged LM documents rendered (Markdown and HTML)"),
}, checks=(LM_CHECK,))


def _resolve(run: Pipeline, stage: Stage, docs: list[Document], worker) -> None:
    from critics.coref.resolvers import annotate

    start = time.perf_counter()
    with run.computing(stage):  # resolutions already logged under the same key are kept: resolving resumes
        resolved, counts = annotate(docs, stage.path, batch_size=run.config["neuralcoref"]["batch_size"],
                                    neuralcoref=worker(), progress=True)
        write_jsonl(resolved, stage.path / "documents.jsonl")
        atomic_write_text(stage.path / "counts.json", json.dumps(dict(counts), indent=1) + "\n")
    chars = sum(len(d.text) for d in docs)
    run.log(f"{stage.name}: {dict(counts)} ({chars} characters, {time.perf_counter() - start:.0f} s)")


def _fit(run: Pipeline, stage: Stage, resolved_train: Stage, smoothing: str) -> None:
    with run.computing(stage):
        critic = CorefChainCritic(smoothing=smoothing, resolver="metadata", **run.config["critic"])
        train = read_jsonl(resolved_train.path / "documents.jsonl")
        fit_critic(critic, train, seed=run.seed, log=run.log)
        critic.save(stage.path / "critic")
    run.log(f"{stage.name}: {critic.training_chains_} chains, {critic.training_tokens_} tokens, "
            f"{len(critic.prior_.vocabulary)} target tokens; skipped {len(critic.training_skipped_)}")


def _report(run: Pipeline, stage: Stage, critic_stage: Stage, test: list[Document],
            candidates: dict[str, list[Document]], lm: LmStages, *, diagnostics: bool) -> None:
    from critics.coref.diagnostics import render_html, render_markdown

    settings = run.config["criticism"]
    with run.computing(stage):
        critic = Critic.load(critic_stage.path / "critic")
        panel = run.criticize(critic, test, candidates, reference_name="data")
        result = panel.result
        lm_word_ppl = {n: word_ppl(p) for n, p in lm.ppls.items()}
        corruptions = [c for c in candidates if c not in lm_word_ppl]
        result.add_statistic("word_ppl", {"data": None, **lm_word_ppl, **{c: None for c in corruptions}},
                             reasons={"data": "real text: no model to score",
                                      **{c: "a corruption of the data: no model" for c in corruptions}})
        result.add_statistic("originals_latent_ppl", originals_latent_ppl(result, corruptions),
                             reasons={n: "not a corruption" for n in ("data", *lm_word_ppl)})
        lms = list(lm_word_ppl)
        between = ({LMS_KEY: set_comparison(result, lms[0], lms[1], settings, run.seed)} if len(lms) == 2 else {})
        openings = lm.openings()
        add_openings(result, openings)
        sections = [openings_line(openings), ""]
        if between:
            sections += [comparison_line(f"{lms[1]} minus {lms[0]}", between[LMS_KEY]), ""]
        files: dict[str, str] = {}
        if diagnostics:
            chains = {s.name: [tuple(d.extras["chain"].split()) for d in s.documents] for s in result.sets}
            sections += diagnostic_tables(critic, chains, settings)
            by_id = {d.id: d for d in candidates.get("lm", [])}
            flagged = [d for _, d in result.outliers(name="lm", top=settings["render"])] if "lm" in candidates else []
            if flagged:
                sections += ["## Top flagged LM documents (smallest outlier p-value of T(x)/M(x))", ""]
            for k, d in enumerate(flagged):
                tokens = d.extras["chain"].split()
                spans = [tuple(s) if s else None for s in d.extras["mention_spans"]]
                text = by_id[d.id].text
                sections += [f"### {d.id} (T/M = {d.latent_nll_per_step:.3f}, p = {d.outlier_p_value:.4f})", "",
                             render_markdown(critic.prior_, text, tokens, spans, threshold=settings["threshold"])]
                files[f"flagged_{k + 1}.html"] = render_html(critic.prior_, text, tokens, spans,
                                                              threshold=settings["threshold"])

        def figures(directory: Path) -> dict[str, Path]:
            out = {}
            for fname, html in files.items():
                atomic_write_text(directory / fname, html)
                out[fname] = directory / fname
            return out

        run.write_report(stage.path, panel, critics={critic.name: critic},
                         sections=["\n".join(sections)], figures=figures,
                         record={"critic": critic_stage.name, "openings": openings, **between})


@register_study("coreference", SCHEMA, "paper sec. 5: coreference chains of LM samples and corruptions, table 7")
def main(run: Pipeline) -> dict[str, CriticismResult]:
    """Run the study's stages (resumed when unchanged); print the report and table 7."""
    from critic.lm.sample import read_generations
    from critics.coref.corrupt import corrupt_resolved

    start = time.perf_counter()
    data_cfg = run.config["data"]
    worker_box: list = []

    def worker():
        if not worker_box:
            from critics.coref.neuralcoref import NeuralcorefResolver

            worker_box.append(NeuralcorefResolver(batch_size=run.config["neuralcoref"]["batch_size"]))
        return worker_box[0]

    data = run.stage("data", {k: data_cfg[k] for k in ("language", "topic", "film", "valid_fraction",
                                                         "test_fraction")})
    second = second_lm(run.config)
    lm = LmStages(run, data, {"lm": False, **({second[0]: False} if second else {})},
                  settings=dict([second]) if second else None)
    resolved = {"train": run.stage("resolved_train", {"n": data_cfg.get("max_train_documents")}, upstream=[data]),
                "test": run.stage("resolved_test", {"n": data_cfg.get("max_test_documents")}, upstream=[data]),
                **{name: run.stage(f"resolved_{name}", {}, upstream=[samples]) for name, samples in lm.samples.items()}}
    critics = {s: run.stage(d, {**run.config["critic"], "smoothing": s}, upstream=[resolved["train"]])
               for s, d in SMOOTHINGS.items()}
    reports = {s: run.stage("report" if s == "kenlm" else f"report_{s}",
                            run.criticism_key(run.config["corruptions"]),
                            upstream=[critics[s], *resolved.values(), *lm.ppls.values()]) for s in SMOOTHINGS}
    try:
        if run.needs(data):
            run.build_corpus(data, "wiki-summaries", language=data_cfg["language"], topic=data_cfg["topic"] or None,
                             film=data_cfg["film"], valid_fraction=data_cfg["valid_fraction"],
                             test_fraction=data_cfg["test_fraction"])
        splits = read_splits(data.path)
        lm.compute()
        sources = {"train": splits["train"][:data_cfg.get("max_train_documents")],
                   "test": splits["test"][:data_cfg.get("max_test_documents")]}
        for name, samples in lm.samples.items():
            sources[name], unparsed = read_generations(samples.path)
            if unparsed:
                run.log(f"{name}: unparseable generations (counted, not scored): {dict(unparsed)}")
        for name, stage in resolved.items():
            if run.needs(stage):
                run.log(f"resolving {name} with neuralcoref ({len(sources[name])} documents)")
                _resolve(run, stage, sources[name], worker)
        for smoothing, stage in critics.items():
            if run.needs(stage):
                _fit(run, stage, resolved["train"], smoothing)
    finally:
        for w in worker_box:
            w.close()

    test = read_jsonl(resolved["test"].path / "documents.jsonl")
    candidates = {name: read_jsonl(resolved[name].path / "documents.jsonl") for name in lm.lms}
    for name in run.config["corruptions"]["names"]:
        candidates[name], counts = corrupt_resolved(test, name, seed=run.seed)
        run.log(f"corruption {name}: {dict(counts)}")
    for smoothing, stage in reports.items():
        if run.needs(stage):
            _report(run, stage, critics[smoothing], test, candidates, lm, diagnostics=smoothing == "kenlm")
    results = {smoothing: load_results(stage.path).result for smoothing, stage in reports.items()}
    table = table7(results, {s: json.loads((stage.path / "results.json").read_text())["run"].get(LMS_KEY)
                             for s, stage in reports.items()})
    atomic_write_text(run.out / "table7.md", "# Coreference study (paper table 7 layout)\n\n" + table + "\n")
    print((reports["kenlm"].path / "report.md").read_text(encoding="utf-8"))
    print("\n## Table 7\n\n" + table)
    run.log(f"done in {time.perf_counter() - start:.0f} s")
    return results
