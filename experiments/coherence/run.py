"""Runner of the coherence study (paper sec. 4, app. E; tables 2 and 12, fig. 4).

``critic run experiments/coherence/cpu.toml --out DIR`` does, for each corpus in ``corpora``
(man pages, linux-doc), in ``DIR/<corpus>/``:

==================  ===============================================================
``data/``           the built corpus (``critic data build``)
``filtered/``       app. E: titles normalised, boilerplate dropped, filters
``critic/``         the section critic with a classifier posterior P(z_m | x_m)
``tokenizer/``      (``[lm] model = "tiny"``) a BPE tokenizer trained on train
``lm_w_title/``     the LM fine-tuned with titles ("W/ Title"), ``lm_wo_title/`` without
``samples_*/``      ancestral samples of each LM (resumable, one generation at a time)
``ppl_*/``          the word perplexity of each LM on the test split
``report/``         results.json (sets ``data``, ``lm_w_title``, ``lm_wo_title``), report.md,
                    documents.jsonl, the table 12 errors, the fig. 4 graphs
==================  ===============================================================

and finally ``DIR/table2.md``: the paper's table 2 layout for all corpora.  Every stage is
keyed by the part of the config it depends on (:mod:`critic.stages`); a rerun reuses what is
done and resumes what was interrupted (LM training from its checkpoint, sampling from the
last generation written).

Sets: ``data`` is the real test split; its MAUVE and PDD compare the validation split with
it (real text against real text), the LMs' compare their samples with it.  All three are
projected by the same classifier posterior, as in the paper.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from critic.config import Key, Pattern
from critic.critic import Critic
from critic.document import write_jsonl
from critic.io import atomic_write_text
from critic.lm.openings import MAN_NAME_START
from critic.registry import get_corpus
from critic.results import CriticismResult
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, register_study, study_schema
from critic.workflows import fit_critic
from critics.sections import CorpusFilter
from critics.sections.classifier_critic import ClassifierSectionCritic
from experiments.lm_stages import (LM_CHECK, LM_TABLE, SAMPLE_TABLE, SPLITS, LmStages, add_openings, read_splits,
                                   word_ppl)
from experiments.tables import openings_line, set_comparison

from .tables import TITLES_KEY, label_indices, table2, titles_line

__all__ = ["main", "SCHEMA", "FORMATS"]

FORMATS = {"lm_w_title": True, "lm_wo_title": False}
"""Set name -> whether the LM is trained with section titles (paper: W/ Title, W/O Title)."""
CORPORA = ("manpages", "linux-doc")
FILTER_KEYS = ("min_sections", "min_section_tokens", "max_section_tokens", "min_title_count", "max_document_tokens")


def _corpus_table(root: str, min_sections: int, min_section_tokens: int, max_section_tokens: int,
                  min_title_count: int, opening: str | None = None) -> dict[str, Key]:
    return {
        "root": Key(str, root, help="where the corpus's source files are"),
        "min_sections": Key(int, min_sections, min=1, help="app. E: sections a document keeps"),
        "min_section_tokens": Key(int, min_section_tokens, min=0, help="fewest whitespace tokens of a section"),
        "max_section_tokens": Key(int, max_section_tokens, min=1, help="most whitespace tokens of a section"),
        "min_title_count": Key(int, min_title_count, min=1, help="a title must occur this often in train"),
        "max_document_tokens": Key(int, min=1, help="most whitespace tokens of a whole document, so an LM can "
                                                   "generate it within [sample] max_new_tokens (absent: no limit)"),
        "max_train_documents": Key(int, min=1, help="keep the first N training documents (absent: all)"),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the validation split"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the test split"),
        "opening": Key(str, *([opening] if opening else []),
                       help="W/O Title: a regular expression the start of a text matches when it begins as a "
                            "document (absent: a capital, a digit or a quote; critic.lm.openings)"),
    }


SCHEMA = study_schema({
    "manpages": _corpus_table("/usr/share/man", 3, 1, 2000, 5, opening=MAN_NAME_START),
    "linux-doc": _corpus_table("/usr/share/doc/linux-doc-6.1/Documentation", 3, 30, 2000, 10),
    "lm": LM_TABLE,
    "sample": SAMPLE_TABLE,
    "critic": settings_table(ClassifierSectionCritic, keep=("classifier", "encoder", "finetune", "mode", "delta_grid",
                                                          "drop_titles"), notes={
        "classifier": 'posterior P(z_m | x_m): "tfidf" or "encoder"',
        "encoder": "encoder name or path (absent: the bundled all-MiniLM-L6-v2)",
        "finetune": "fine-tune the encoder (app. E) instead of a frozen-encoder head",
        "mode": 'Latent NLL of the MAP labels ("map", paper) or its "expectation" under the posterior',
        "delta_grid": "add-delta values tried", "drop_titles": "boilerplate titles removed"}),
}, criticism={
    "mauve": Key(bool, True, help="MAUVE on MiniLM document features"),
    "mauve_min_documents": Key(int, 50, min=2, help="MAUVE of a set with fewer documents is not reported "
                                                  "(its k-means quantisation has too few points)"),
    "pdd_bins": Key(int, 5, min=1, help="positional bins of PDD over the posterior labels"),
    "error_threshold": Key(float, 0.01, gt=0, help="table 12: a transition with P_c below is an error"),
    "graph_threshold": Key(float, 0.05, gt=0, help="fig. 4: red edges have P_c below this"),
}, keys={"corpora": Key(list[str], list(CORPORA), choices=CORPORA, help="corpora studied, each in OUT/<name>/")},
   checks=(LM_CHECK, *(Pattern(corpus, "opening") for corpus in CORPORA)))


def _build(run: Pipeline, stage: Stage, corpus: str, settings: dict) -> None:
    with run.computing(stage):
        report = get_corpus(corpus).build(stage.path, root=Path(settings["root"]),
                                          valid_fraction=settings["valid_fraction"],
                                          test_fraction=settings["test_fraction"])
    run.log(f"built corpus: {report.counts}")


def _filter(run: Pipeline, stage: Stage, data: Stage, corpus: str, settings: dict) -> None:
    with run.computing(stage):
        filt = CorpusFilter(**{k: settings.get(k) for k in FILTER_KEYS})
        kept, report = filt.apply(read_splits(data.path))
        if settings.get("max_train_documents"):
            kept["train"] = kept["train"][:settings["max_train_documents"]]
        empty = [s for s in SPLITS if not kept[s]]
        if empty:
            raise ValueError(f"[{corpus}] filters left no documents in the {' and '.join(empty)} split(s): "
                             "loosen them")
        for s in SPLITS:
            write_jsonl(kept[s], stage.path / f"{s}.jsonl")
        atomic_write_text(stage.path / "filter.json", json.dumps(report.to_dict(), indent=1) + "\n")
    run.log(f"filtered: {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}; removed {len(report.removed)}")


def _fit_critic(run: Pipeline, stage: Stage, filtered: Stage) -> None:
    settings = run.config["critic"]
    with run.computing(stage):
        splits = read_splits(filtered.path)
        critic = ClassifierSectionCritic(**{k: v for k, v in settings.items() if v is not None}).to(run.device)
        fit_critic(critic, splits["train"], splits["valid"], seed=run.seed, log=run.log)
        accuracy, compared = critic.accuracy(splits["test"])
        critic.save(stage.path / "critic")
        atomic_write_text(stage.path / "accuracy.json", json.dumps(
            {"valid_accuracy": critic.valid_accuracy_, "test_accuracy": accuracy, "test_sections": compared,
             "states": len(critic.vocab_), "delta": critic.delta_}, indent=1) + "\n")
    run.log(f"section critic: {len(critic.vocab_)} states, delta={critic.delta_}, classifier "
            f"{settings['classifier']} accuracy valid {critic.valid_accuracy_:.4f}, test {accuracy:.4f} "
            f"({compared} sections)")


def _report(run: Pipeline, stage: Stage, corpus: str, filtered: Stage, critic_stage: Stage, lm: LmStages) -> None:
    from critic.lm.sample import read_generations
    from critics.metrics.pdd import pdd
    from critics.sections.analysis import section_paths, transition_errors_table
    from critics.sections.plots import transition_difference_graph, transition_difference_heatmap

    settings = run.config["criticism"]
    with run.computing(stage):
        critic = Critic.load(critic_stage.path / "critic", device=run.device)
        splits = read_splits(filtered.path)
        test, valid = splits["test"], splits["valid"]
        generated, unparsed = {}, {}
        for name, s in lm.samples.items():
            generated[name], unparsed[name] = read_generations(s.path)
        panel = run.criticize(critic, test, generated, reference_name="data",
                              paths={"data": f"{filtered.name}/test.jsonl",
                                     **{n: f"{s.name}/documents.jsonl" for n, s in lm.samples.items()}})
        result = panel.result
        result.add_statistic("word_ppl", {"data": None, **{n: word_ppl(s) for n, s in lm.ppls.items()}},
                             reasons={"data": "real text: no model to score"})

        # the MAP labels each scored document got (its projection's extras): classified once, here and in T(x)
        paths = {s.name: [d.extras["labels"] for d in s.documents] for s in result.sets}
        valid_paths = section_paths(critic, valid)
        ref_labels = label_indices(critic, paths["data"])
        pdd_values = {"data": pdd(label_indices(critic, valid_paths), ref_labels, num_bins=settings["pdd_bins"],
                                  num_classes=len(critic.vocab_))}
        for name in generated:
            cand = label_indices(critic, paths[name])
            pdd_values[name] = (pdd(cand, ref_labels, num_bins=settings["pdd_bins"], num_classes=len(critic.vocab_))
                                if cand else float("nan"))
        result.add_statistic("pdd", pdd_values, reasons={n: "no generation could be projected" for n in generated})
        if settings["mauve"]:
            from critic.lm.encoders import SentenceEncoder
            from critics.metrics.mauve import mauve_score

            encoder = SentenceEncoder(device=run.device)
            features = {n: encoder.encode([d.text for d in docs]) for n, docs in
                        {"test": test, "valid": valid, **generated}.items()}
            least = settings["mauve_min_documents"]
            mauve, reasons = {}, {}
            for name, docs in {"data": "valid", **{n: n for n in generated}}.items():
                pair = (len(features[docs]), len(features["test"]))
                if min(pair) >= least:
                    mauve[name] = mauve_score(features[docs], features["test"], seed=run.seed)
                else:
                    mauve[name] = None
                    reasons[name] = (f"{pair[0]} documents against {pair[1]} (< mauve_min_documents = {least}): "
                                     "too few for MAUVE's quantisation to be trusted")
            result.add_statistic("mauve", mauve, reasons=reasons)

        titles = set_comparison(result, "lm_wo_title", "lm_w_title", settings, run.seed)
        openings = lm.openings(run.config[corpus].get("opening"))
        add_openings(result, openings)
        sections = [f"Classifier posterior: `{critic.classifier}`, Latent NLL in `{critic.mode}` mode; held-out "
                    f"accuracy {json.loads((critic_stage.path / 'accuracy.json').read_text())['test_accuracy']:.4f} "
                    "on the test split's sections.", "",
                    "Unparseable generations (counted, not scored): "
                    + "; ".join(f"`{n}`: {dict(c) or 'none'}" for n, c in unparsed.items()), "",
                    openings_line(openings), "", "## W/ Title against W/O Title", "", titles_line(titles), "",
                    f"## Top section-transition errors (paper table 12: P_c(z_m | z_{{m-1}}) < "
                    f"{settings['error_threshold']})", ""]
        for name, set_paths in paths.items():
            sections += [f"### {name}", "", transition_errors_table(critic, set_paths,
                                                                    threshold=settings["error_threshold"], top=5), ""]

        sections += ["## Top flagged generations (smallest outlier p-value of T(x)/M(x) against the data)", ""]
        for name in generated:
            sections += [f"### {name}", "", "| document | T(x)/M(x) | outlier p | section types (MAP) |",
                         "|---|---:|---:|---|"]
            sections += [f"| {d.id} | {d.latent_nll_per_step:.3f} | {d.outlier_p_value:.4f} | "
                         f"{' → '.join(d.extras['labels'])} |" for _, d in result.outliers(name=name, top=5)]
            sections.append("")

        def figures(directory: Path) -> dict[str, Path]:
            out = {}
            for name in generated:
                out[f"graph_{name}"] = transition_difference_graph(
                    critic, paths["data"], paths[name], directory / f"transitions_graph_{name}.png", name=name,
                    threshold=settings["graph_threshold"])
                out[f"heatmap_{name}"] = transition_difference_heatmap(
                    critic, paths["data"], paths[name], directory / f"transitions_{name}.png", name=name,
                    threshold=settings["graph_threshold"])
            return out

        run.write_report(stage.path, panel, critics={critic.name: critic},
                         sections=["\n".join(sections)], figures=figures,
                         record={"corpus": corpus, "unparsed_generations": {n: dict(c) for n, c in unparsed.items()},
                                 TITLES_KEY: titles, "openings": openings})


def _study(run: Pipeline, corpus: str) -> CriticismResult:
    settings = run.config[corpus]
    data = run.stage("data", {"corpus": corpus, **{k: settings[k] for k in ("root", "valid_fraction",
                                                                             "test_fraction")}})
    filtered = run.stage("filtered", {k: settings.get(k) for k in (*FILTER_KEYS, "max_train_documents")},
                         upstream=[data])
    critic_stage = run.stage("critic", run.config["critic"], upstream=[filtered])
    lm = LmStages(run, filtered, FORMATS)
    report = run.stage("report", run.criticism_key({"opening": settings.get("opening")}),
                       upstream=[critic_stage, *lm.samples.values(), *lm.ppls.values()])
    if run.needs(data):
        _build(run, data, corpus, settings)
    if run.needs(filtered):
        _filter(run, filtered, data, corpus, settings)
    if run.needs(critic_stage):
        _fit_critic(run, critic_stage, filtered)
    lm.compute()
    if run.needs(report):
        _report(run, report, corpus, filtered, critic_stage, lm)
    return load_results(report.path).result


@register_study("coherence", SCHEMA, "paper sec. 4: LMs with and without titles, classifier posterior, table 2")
def main(run: Pipeline) -> dict[str, CriticismResult]:
    """Run every corpus's stages (resumed when unchanged), print each report and table 2."""
    results = {}
    for corpus in run.config["corpora"]:
        start = time.perf_counter()
        part = run.part(corpus)
        results[corpus] = _study(part, corpus)
        part.log(f"done in {time.perf_counter() - start:.0f} s; report in {run.out / corpus / 'report'}")
    table = table2(results, {c: json.loads((run.out / c / "report" / "results.json").read_text())["run"][TITLES_KEY]
                             for c in results})
    atomic_write_text(run.out / "table2.md", "# Coherence study (paper table 2 layout)\n\n" + table + "\n")
    for corpus in results:
        print(f"\n## {corpus}\n")
        print((run.out / corpus / "report" / "report.md").read_text(encoding="utf-8"))
    print("\n## Table 2\n\n" + table)
    return results
