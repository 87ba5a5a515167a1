"""Runner of the topic-correlation study (paper sec. 6, app. F; table 9, fig. 6, table 14).

``critic run experiments/topics/cpu.toml --out DIR`` does, in ``DIR/``:

=====================  ============================================================
``data/``              English Wikipedia lead summaries (``critic data build wiki-summaries``;
                       every topic by default, or one), split 80/10/10 by the builder
``baseline/``          the Linux man pages (``critic data build manpages``): the mismatched set,
                       a corpus whose topics and their correlations differ (fig. 6, right)
``tokenizer/``         (``[lm] model = "tiny"``) a BPE tokenizer trained on train
``lm/``                an LM trained on the summaries' training split (``critic lm``)
``samples/``           its ancestral samples (resumable)
``ppl/``               its word perplexity on the test split (context only: the topic critic has
                       ``M(x) = 1``, so no per-step claim is made from the critic)
``critic/``            the CTM critic (``ctm``) fitted on the training split (the first
                       ``max_train_documents``; variational EM by default), its held-out ELBO per token on
                       the validation split
``critic_seed<s>/``    (``[critic] check_seeds``) the same fit with the next seeds
``seeds/``             how well the fits of the seeds agree on the test summaries (``agreement.json``)
``report/``            ``criticize(critic, reference = test summaries, candidates = {lm, manpages})``
                       with the exact ``T(x) = H(q, P_c)``: results.json, report.md, fig. 6
                       (``fig6_covariance.png``, one PNG per set, the centred version), the
                       aggregated-posterior covariances (``covariance_<set>.npy``), table 14
                       (top outliers by ``T(x)`` with their top topics), the top words per topic
``report_mean_only/``  the same criticism scoring only the variational mean, ``-log N(m; mu, Sigma)``
                       (the authors' variant), with the same fitted critic (no refit)
=====================  ============================================================

and ``DIR/table9.md``: the Latent NLL [95% CI] (n) of each set under both scorings (table 9 layout),
the difference to the data with its permutation p-value, and what was not scored.

Every stage is keyed by the config it depends on (:mod:`critic.stages`) and resumes.  Nothing is
dropped silently: unparseable generations, documents the critic cannot project (no in-vocabulary
word) and man pages the builder excluded are counted in the logs, the reports and ``table9.md``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from critic.config import Key
from critic.document import Document, read_jsonl
from critic.io import atomic_write_text
from critic.results import CriticismResult
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, read_json, register_study, study_schema
from critic.workflows import fit_critic
from critics.topics.ctm_critic import CorrelatedTopicCritic
from experiments.lm_stages import LM_CHECK, LM_TABLE, SAMPLE_TABLE, LmStages, add_openings, read_splits, word_ppl
from experiments.tables import openings_line

from .tables import outlier_tables, table9

__all__ = ["main", "SCHEMA", "table9", "SETS"]

SETS = ("data", "lm", "manpages")
"""Set names of the criticism: the test summaries (reference), the LM's samples, the man pages."""

SCHEMA = study_schema({
    "data": {
        "language": Key(str, "en", choices=("en",), help="summaries' language"),
        "topic": Key(str, "", help='keep one topic of the summaries ("" keeps all 12)'),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the validation split"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the test split"),
        "max_train_documents": Key(int, min=1, help="training documents the critic is fitted on (absent: all)"),
        "max_test_documents": Key(int, min=1, help="test documents scored (absent: all)"),
    },
    "baseline": {
        "root": Key(str, "/usr/share/man", help="man page root (Debian manpages + manpages-dev)"),
        "max_documents": Key(int, min=1, help="man-page test documents scored (absent: all)"),
    },
    "lm": LM_TABLE,
    "sample": SAMPLE_TABLE,
    "critic": {
        **settings_table(CorrelatedTopicCritic, exclude=("seed", "mean_only"), defaults={"infer_steps": 300}, notes={
            "num_topics": "K, topics of the CTM (paper: 100)",
            "steps": "SVI steps of the fit (fit_method = \"svi\"; stops earlier when the ELBO settles)",
            "em_iterations": "most EM iterations (fit_method = \"em\"; stops earlier when the objective settles)",
            "max_doc_freq": "app. F: types in more than this share of training documents are removed"}),
        "validate": Key(bool, True, help="record the held-out ELBO per token on the validation split"),
        "check_seeds": Key(int, 0, min=0, help="fit this many more critics, with the next seeds, and report how "
                                               "well the fits agree on the test summaries (issue 21)"),
    },
}, criticism={
    "n_words": Key(int, 10, min=1, help="top words listed per topic"),
    "clamp": Key(float, 5.0, gt=0, help="fig. 6: covariances clamped to [-clamp, clamp] (app. F: 5)"),
    "mean_only": Key(bool, True, help="also report the authors' mean-only scoring (same fitted critic)"),
}, checks=(LM_CHECK,))


_STUDY_KEYS = ("validate", "check_seeds")
"""``[critic]`` keys of the study, not settings of the critic."""


def _fit(run: Pipeline, stage: Stage, train: list[Document], valid: list[Document] | None, seed: int) -> None:
    settings = {k: v for k, v in run.config["critic"].items() if k not in _STUDY_KEYS}
    with run.computing(stage):
        start = time.perf_counter()
        critic = fit_critic(CorrelatedTopicCritic(**settings, seed=seed).to(run.device), train, valid, seed=seed,
                            log=run.log)
        seconds = time.perf_counter() - start
        critic.save(stage.path / "critic")
        info = {"fit_and_calibration_seconds": seconds, "training_docs": critic.training_docs_,
                "training_skipped": len(critic.training_skipped_), "vocabulary": len(critic.vocab_),
                "removed_frequent": critic.frequent_, "fit_method": critic.fit_method_, "fit_init": critic.fit_init_,
                "fit_steps": critic.fit_steps_, "fit_converged": critic.fit_converged_,
                "validation_elbo_per_token": critic.validation_elbo_per_token_,
                "final_objective_per_document": critic.elbo_trace_[-1], "warnings": critic.fit_warnings()}
        atomic_write_text(stage.path / "fit.json", json.dumps(info, indent=1) + "\n")
    elbo = info["validation_elbo_per_token"]
    run.log(f"critic: K={critic.num_topics}, {len(critic.vocab_)} word types ({len(critic.frequent_)} removed as "
            f"too frequent), {critic.training_docs_} documents ({len(critic.training_skipped_)} skipped), "
            f"{_steps(info)}, {seconds:.0f} s with its calibration, seed {seed}; held-out "
            "ELBO/token " + ("—" if elbo is None else f"{elbo:.3f}"))


def _steps(fit: dict) -> str:
    """``"38 EM iterations, converged"`` from a ``fit.json``."""
    unit = "EM iterations" if fit.get("fit_method", "svi") == "em" else "SVI steps"
    return f"{fit['fit_steps']} {unit}, " + ("converged" if fit["fit_converged"] else "NOT converged")


def _seed_agreement(run: Pipeline, stage: Stage, critic_stages: list[Stage], docs: list[Document]) -> None:
    """Score ``docs`` with every fit (exact and mean-only ``T(x)``) and write how well they agree
    (:func:`critic.seeds.seed_agreement`) to ``agreement.json``."""
    from critic.critic import Critic
    from critic.seeds import seed_agreement

    with run.computing(stage):
        critics = [Critic.load(s.path / "critic", device=run.device) for s in critic_stages]
        scores: dict[str, list[dict[str, float]]] = {"exact": [], "mean_only": []}
        for critic in critics:
            for scoring in scores:
                critic.mean_only = scoring == "mean_only"
                got = critic.score(docs, seed=critic.seed)
                scores[scoring].append(dict(zip(got.doc_ids, got.latent_nll)))
        ids = [d.id for d in docs if all(d.id in s for s in scores["exact"])]
        exact = seed_agreement([np.array([s[i] for i in ids]) for s in scores["exact"]],
                               [c.latent_components() for c in critics])
        mean_only = seed_agreement([np.array([s[i] for i in ids]) for s in scores["mean_only"]])
        info = {"seeds": [c.seed for c in critics], "documents": len(ids), "corr_exact": exact["corr"],
                "corr_mean_only": mean_only["corr"], "top_overlap": exact["top_overlap"],
                "topic_cosine": exact["component_cosine"]}
        atomic_write_text(stage.path / "agreement.json", json.dumps(info, indent=1) + "\n")


def _seeds_note(info: dict) -> str:
    worst = (lambda name: info[name]["min"])
    return (f"- Seeds {', '.join(map(str, info['seeds']))} (one fit each), on the {info['documents']} test summaries, "
            f"worst pair: Latent NLL correlation {worst('corr_exact'):.3f} (mean-only {worst('corr_mean_only'):.3f}), "
            f"{worst('top_overlap'):.0f} of the top 20 by T(x) shared, matched topics' cosine (median) "
            f"{worst('topic_cosine'):.3f}")


def _report(run: Pipeline, stage: Stage, critic_stage: Stage, sets: dict[str, list[Document]], extra: dict, *,
            mean_only: bool) -> None:
    from critic.critic import Critic
    from critics.topics.ctm import centre
    from critics.topics.ctm_plots import aggregated_covariance, clustered_order, covariance_heatmaps, top_words

    settings = run.config["criticism"]
    with run.computing(stage):
        critic = Critic.load(critic_stage.path / "critic", device=run.device)
        critic.mean_only = mean_only  # a scoring setting: the fitted globals are the same
        start = time.perf_counter()
        panel = run.criticize(critic, sets["data"], {k: v for k, v in sets.items() if k != "data"},
                              reference_name="data")
        result = panel.result
        add_openings(result, extra["openings"])
        seconds = {"criticize": time.perf_counter() - start}
        sections: list[str] = []
        arrays: dict[str, np.ndarray] = {}
        tables: dict = {}
        if not mean_only:
            start = time.perf_counter()
            missing = {}
            for name, docs in sets.items():
                n = result.set(name).n
                if n < 2:  # a covariance needs two documents: said in the report, never drawn from one
                    missing[name] = f"{n} projected document(s): no covariance"
                    if name == "data":
                        raise ValueError(f"the reference set has {n} projected document(s): fig. 6 needs two")
                    continue
                arrays[name] = aggregated_covariance(critic, docs)
            seconds["covariances"] = time.perf_counter() - start
            if missing:
                sections += ["## Sets without a fig. 6 panel", "", *[f"- `{k}`: {v}" for k, v in missing.items()], ""]
                tables["no_covariance"] = missing
            words = top_words(critic, settings["n_words"])
            blocks, tables["outliers"] = outlier_tables(critic, result, sets, settings["top"])
            flagged_blocks, tables["flagged"] = outlier_tables(critic, result, sets, settings["top"], flagged=True)
            order = clustered_order(arrays["data"])
            tables.update(top_words=words, order=order.tolist())
            sections += ["## Table 14: outliers by T(x)", "", *blocks,
                         "## Table 14 re-read: the documents flagged first (length-matched outlier p-value)", "",
                         *flagged_blocks,
                         f"## Top {settings['n_words']} words per topic (fig. 6 order)", "",
                         "| topic | words |", "|---:|---|", *[f"| {k} | {' '.join(words[k])} |" for k in order], ""]

        def figures(directory: Path) -> dict[str, Path]:
            if mean_only:
                return {}
            nll = {s.name: s.latent_nll for s in result.sets}
            order = np.asarray(tables["order"])
            out = {"fig6": covariance_heatmaps(arrays, directory / "fig6_covariance.png", reference="data",
                                               clamp=settings["clamp"], order=order, latent_nll=nll),
                   "fig6_centred": covariance_heatmaps({k: centre(v, covariance=True) for k, v in arrays.items()},
                                                       directory / "fig6_covariance_centred.png", reference="data",
                                                       clamp=settings["clamp"], order=order, latent_nll=nll)}
            for name, cov in arrays.items():
                out[f"fig6_{name}"] = covariance_heatmaps({name: cov}, directory / f"fig6_{name}.png",
                                                          clamp=settings["clamp"], order=order, latent_nll=nll)
                np.save(directory / f"covariance_{name}.npy", cov)
                out[f"covariance_{name}"] = directory / f"covariance_{name}.npy"
            atomic_write_text(directory / "topics.json", json.dumps(tables, indent=1, ensure_ascii=False) + "\n")
            out["topics"] = directory / "topics.json"
            return out

        run.write_report(stage.path, panel, critics={critic.name: critic},
                         sections=["\n".join(sections)], figures=figures,
                         record={"scoring": "mean_only" if mean_only else "exact", "seconds": seconds, **extra})


@register_study("topics", SCHEMA, "paper sec. 6: topic correlations of LM samples under a CTM, table 9, fig. 6")
def main(run: Pipeline) -> dict[str, CriticismResult]:
    """Run the study's stages (resumed when unchanged); print the report and table 9."""
    from critic.lm.sample import read_generations

    start = time.perf_counter()
    config = run.config
    data_cfg, base_cfg, critic_cfg = config["data"], config["baseline"], config["critic"]
    data = run.stage("data", {k: data_cfg[k] for k in ("language", "topic", "valid_fraction", "test_fraction")})
    baseline = run.stage("baseline", {"root": base_cfg["root"], "valid_fraction": data_cfg["valid_fraction"],
                                      "test_fraction": data_cfg["test_fraction"]})
    lm = LmStages(run, data)
    samples, ppl = lm.samples["lm"], lm.ppls["lm"]
    fit_key = {**{k: v for k, v in critic_cfg.items() if k != "check_seeds"},
               "max_train_documents": data_cfg.get("max_train_documents")}
    critic = run.stage("critic", {**fit_key, "seed": run.seed}, upstream=[data])
    seed_critics = [run.stage(f"critic_seed{run.seed + i}", {**fit_key, "seed": run.seed + i}, upstream=[data])
                    for i in range(1, critic_cfg["check_seeds"] + 1)]
    seeds = (run.stage("seeds", {"max_test_documents": data_cfg.get("max_test_documents")},
                       upstream=[critic, *seed_critics, data]) if seed_critics else None)
    report_key = run.criticism_key({"max_test_documents": data_cfg.get("max_test_documents"),
                                    "max_baseline_documents": base_cfg.get("max_documents")})
    reports = {"exact": run.stage("report", report_key, upstream=[critic, data, baseline, samples, ppl])}
    if config["criticism"]["mean_only"]:
        reports["mean_only"] = run.stage("report_mean_only", report_key,
                                         upstream=[critic, data, baseline, samples, ppl])

    if run.needs(data):
        run.build_corpus(data, "wiki-summaries", language=data_cfg["language"], topic=data_cfg["topic"] or None,
                         valid_fraction=data_cfg["valid_fraction"], test_fraction=data_cfg["test_fraction"])
    if run.needs(baseline):
        run.build_corpus(baseline, "manpages", root=Path(base_cfg["root"]),
                         valid_fraction=data_cfg["valid_fraction"], test_fraction=data_cfg["test_fraction"])
    splits = read_splits(data.path)
    lm.compute()
    train = splits["train"][:data_cfg.get("max_train_documents")]
    for seed, stage in enumerate([critic, *seed_critics], start=run.seed):
        if run.needs(stage):
            run.log(f"fitting the CTM on {len(train)} training summaries (seed {seed})")
            _fit(run, stage, train, splits["valid"] if critic_cfg["validate"] else None, seed)
    test = splits["test"][:data_cfg.get("max_test_documents")]
    if seeds is not None and run.needs(seeds):
        run.log(f"scoring the {len(test)} test summaries with the fits of {len(seed_critics) + 1} seeds")
        _seed_agreement(run, seeds, [critic, *seed_critics], test)

    generated, unparsed = read_generations(samples.path)
    if unparsed:
        run.log(f"unparseable generations (counted, not scored): {dict(unparsed)}")
    baseline_build = read_json(baseline.path / "build.json")
    sets = {"data": test, "lm": generated,
            "manpages": read_jsonl(baseline.path / "test.jsonl")[:base_cfg.get("max_documents")]}
    fit = read_json(critic.path / "fit.json")
    extra = {"unparsed_generations": dict(unparsed), "sampled": config["sample"]["n"], "lm_word_ppl": word_ppl(ppl),
             "openings": lm.openings(),
             "baseline_excluded": baseline_build.get("counts", {}).get("excluded"), "critic_fit": fit,
             "set_sizes": {k: len(v) for k, v in sets.items()}}
    for scoring, stage in reports.items():
        if run.needs(stage):
            run.log(f"criticizing ({scoring}): {extra['set_sizes']}")
            _report(run, stage, critic, sets, extra, mean_only=scoring == "mean_only")
    results = {scoring: load_results(stage.path).result for scoring, stage in reports.items()}
    table = table9(results)
    notes = [f"- LM: {len(generated)} of {config['sample']['n']} samples parsed"
             + (f" (unparseable: {dict(unparsed)})" if unparsed else "") + f"; word PPL on the test summaries "
             f"{word_ppl(ppl):.2f} (the LM's, not the critic's: M(x) = 1)",
             f"- CTM: K = {critic_cfg['num_topics']}, {fit['vocabulary']} word types, fitted on "
             f"{fit['training_docs']} summaries ({fit['training_skipped']} without an in-vocabulary word) in "
             f"{_steps(fit)}, {fit['fit_and_calibration_seconds']:.0f} s with its calibration"
             + ("" if fit["validation_elbo_per_token"] is None
                else f"; held-out ELBO per token {fit['validation_elbo_per_token']:.3f}"),
             "- " + openings_line(extra["openings"]),
             "- Latent NLL = mean T(x) per document (nats); `exact`: H(q, P_c); `mean_only`: −log P_c(m) "
             "(the authors' scoring, same fitted critic)"]
    if seeds is not None:
        notes.append(_seeds_note(read_json(seeds.path / "agreement.json")))
    text = "# Topic-correlation study (paper table 9 layout)\n\n" + table + "\n\n" + "\n".join(notes) + "\n"
    atomic_write_text(run.out / "table9.md", text)
    print((reports["exact"].path / "report.md").read_text(encoding="utf-8"))
    print("\n## Table 9\n\n" + table + "\n\n" + "\n".join(notes))
    run.log(f"done in {time.perf_counter() - start:.0f} s")
    return results
