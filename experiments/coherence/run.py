"""Runner of the coherence study (paper sec. 4, app. E; tables 2 and 12, fig. 4).

``critic run experiments/coherence/cpu.toml --out DIR`` does, for each corpus in ``corpora``
(man pages, linux-doc; arXiv, PubMed and Wikipedia as ``critic data convert`` writes them), in
``DIR/<corpus>/``:

==================  ===============================================================
``data/``           the corpus's train/valid/test splits: built (``critic data build``,
                    ``kind = "built"``) or read from converted document JSONL
                    (``kind = "converted"``: a file per split, or one file split by a
                    hash of each document id)
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
last generation written).  ``paper-arxiv.toml``, ``paper-pubmed.toml`` and ``paper-wikipedia.toml`` study the
paper's corpora (docs/experiments/coherence.md says how to get and convert them).

Sets: ``data`` is the real test split; its MAUVE and PDD compare the validation split with
it (real text against real text), the LMs' compare their samples with it.  All three are
projected by the same classifier posterior, as in the paper.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from contextlib import ExitStack
from itertools import islice
from pathlib import Path

from critic.config import ConfigError, Key, Pattern
from critic.critic import Critic
from critic.document import Document, DocumentError, iter_jsonl, write_jsonl
from critic.io import atomic_open, atomic_write_text, sha256_file
from critic.lm.openings import MAN_NAME_START
from critic.registry import get_corpus
from critic.results import CriticismResult
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, register_study, study_schema
from critic.workflows import fit_critic
from critics.sections import CorpusFilter
from critics.sections.classifier_critic import ClassifierSectionCritic
from critics.sections.normalize import FilterReport
from experiments.lm_stages import (LM_CHECK, LM_TABLE, SAMPLE_TABLE, SPLITS, LmStages, add_openings, read_splits,
                                   word_ppl)
from experiments.tables import openings_line, set_comparison

from .tables import TITLES_KEY, label_indices, table2, titles_line

__all__ = ["main", "SCHEMA", "FORMATS"]

FORMATS = {"lm_w_title": True, "lm_wo_title": False}
"""Set name -> whether the LM is trained with section titles (paper: W/ Title, W/O Title)."""
BUILT = ("manpages", "linux-doc")
"""Corpora ``critic data build NAME`` builds from their source files (``kind = "built"``, ``root``)."""
CONVERTED = ("arxiv", "pubmed", "wikipedia")
"""The paper's corpora, as ``critic data convert cohan|wikipedia`` writes them (``kind = "converted"``)."""
CORPORA = (*BUILT, *CONVERTED)
KINDS = ("built", "converted")
FILES = ("documents", "train", "valid", "test")
"""A converted corpus's files: one ``documents`` file split here, or one file per split."""
FILTER_KEYS = ("min_sections", "min_section_tokens", "max_section_tokens", "min_title_count", "max_document_tokens")
FILTER_CHUNK = 10_000
"""Documents filtered at a time: a converted Wikipedia dump never sits in memory whole, only what the length
filters keep."""
COHAN_OPENING = r"[a-z0-9@]"
"""W/O Title openings of Cohan et al.'s arXiv and PubMed: their text is lower-cased, with @xmath / @xcite
placeholders, so a document opens with a lower-case word, a number or a placeholder (no character tells a
document's start from a sentence's middle here; the prose rule's capital would count no training document)."""


def _corpus_table(kind: str, min_sections: int, min_section_tokens: int, max_section_tokens: int,
                  min_title_count: int, *, root: str | None = None, opening: str | None = None) -> dict[str, Key]:
    file_help = ("kind = \"converted\": document JSONL of the {} split (critic data convert; e.g. Cohan et al.'s "
                 "{}); relative paths are read from the folder critic run runs in")
    return {
        "kind": Key(str, kind, choices=KINDS, help='"built": critic data build <this corpus> from root; '
                                                  '"converted": document JSONL files (critic data convert cohan | '
                                                  'wikipedia): documents, or train, valid and test'),
        "root": Key(str, *([root] if root else []), help='kind = "built": where the corpus\'s source files are'),
        "documents": Key(str, help='kind = "converted": one document JSONL (a converted Wikipedia dump), split into '
                                   'train/valid/test by a hash of each document id with valid_fraction and '
                                   'test_fraction; relative paths are read from the folder critic run runs in'),
        "train": Key(str, help=file_help.format("training", "train.txt")),
        "valid": Key(str, help=file_help.format("validation", "val.txt")),
        "test": Key(str, help=file_help.format("test", "test.txt")),
        "min_sections": Key(int, min_sections, min=1, help="app. E: sections a document keeps"),
        "min_section_tokens": Key(int, min_section_tokens, min=0, help="fewest whitespace tokens of a section"),
        "max_section_tokens": Key(int, max_section_tokens, min=1, help="most whitespace tokens of a section"),
        "min_title_count": Key(int, min_title_count, min=1, help="a title must occur this often in train"),
        "max_document_tokens": Key(int, min=1, help="most whitespace tokens of a whole document, so an LM can "
                                                   "generate it within [sample] max_new_tokens (absent: no limit)"),
        "max_train_documents": Key(int, min=1, help="keep the first N training documents (absent: all)"),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the validation split (built, "
                                                             "or converted from one documents file)"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the test split (built, or "
                                                            "converted from one documents file)"),
        "opening": Key(str, *([opening] if opening else []),
                       help="W/O Title: a regular expression the start of a text matches when it begins as a "
                            "document (absent: a capital, a digit or a quote; critic.lm.openings)"),
    }


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """A check of the config: each studied corpus says where its documents come from in one way -- built from
    ``root`` (a corpus ``critic data build`` knows), or converted files: ``documents``, or ``train``, ``valid``
    and ``test``.  Whether the files exist is checked when the run starts, before any stage."""

    def problem(self, config) -> tuple[str, str | None, str] | None:
        for corpus in config.get("corpora") or ():
            table = config.get(corpus) or {}
            given = [k for k in FILES if table.get(k) is not None]
            if table.get("kind") == "built":
                if corpus not in BUILT:
                    return corpus, "kind", (f"[{corpus}] kind = 'built': only {', '.join(BUILT)} are built from "
                                            f"their sources; give {corpus} as kind = \"converted\" with documents "
                                            "or train, valid and test (critic data convert)")
                if given:
                    return corpus, given[0], (f"[{corpus}] {given[0]} names a converted corpus's file, but kind = "
                                              "'built' (set kind = \"converted\" to read the files)")
                continue
            if not given:
                return corpus, None, (f"[{corpus}] kind = 'converted' needs documents = FILE (split here) or "
                                      "train, valid and test (a file per split), from critic data convert")
            if "documents" in given and len(given) > 1:
                return corpus, given[1], (f"[{corpus}] give documents (one file, split here) or train, valid and "
                                          f"test, not both: {', '.join(given)}")
            missing = [k for k in SPLITS if k not in given]
            if "documents" not in given and missing:
                return corpus, given[0], (f"[{corpus}] {', '.join(given)} given without {', '.join(missing)}: a "
                                          "converted corpus gives every split's file (or one documents file)")
        return None


SCHEMA = study_schema({
    "manpages": _corpus_table("built", 3, 1, 2000, 5, root="/usr/share/man", opening=MAN_NAME_START),
    "linux-doc": _corpus_table("built", 3, 30, 2000, 10, root="/usr/share/doc/linux-doc-6.1/Documentation"),
    # app. E: sections of 30-2000 tokens; titles seen >= 200 (arXiv), 500 (PubMed), 4,000 (Wikipedia) times in
    # train; Wikipedia counts its introduction as an "abstract" section, so it keeps >= 4 sections
    "arxiv": _corpus_table("converted", 3, 30, 2000, 200, opening=COHAN_OPENING),
    "pubmed": _corpus_table("converted", 3, 30, 2000, 500, opening=COHAN_OPENING),
    "wikipedia": _corpus_table("converted", 4, 30, 2000, 4000),
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
}, keys={"corpora": Key(list[str], list(BUILT), choices=CORPORA, help="corpora studied, each in OUT/<name>/ "
                                                                    "(absent: the built ones)")},
   checks=(LM_CHECK, CorpusSource(), *(Pattern(corpus, "opening") for corpus in CORPORA)))


def _files(settings: dict) -> dict[str, Path]:
    """A converted corpus's files (``documents``, or ``train``, ``valid`` and ``test``) as paths."""
    return {k: Path(settings[k]) for k in FILES if settings.get(k) is not None}


def _check_files(config: dict) -> None:
    """Every studied converted corpus's files exist: a wrong path stops the run before any stage, not after the
    corpora before it were studied."""
    for corpus in config["corpora"]:
        if config[corpus]["kind"] != "converted":
            continue
        for key, path in _files(config[corpus]).items():
            if not path.is_file():
                raise ConfigError(f"[{corpus}] {key} = {str(path)!r}: no such file (write it with critic data "
                                  f"convert {'wikipedia' if corpus == 'wikipedia' else 'cohan'} SOURCE --out FILE)")


def _data_key(corpus: str, settings: dict) -> dict:
    """What the data stage is keyed by: a built corpus's source and split; a converted corpus's files by their
    SHA-256 (read once a run: moving a file keeps its stages, changing it redoes them)."""
    if settings["kind"] == "built":
        return {"corpus": corpus, **{k: settings[k] for k in ("root", "valid_fraction", "test_fraction")}}
    files = _files(settings)
    key = {"corpus": corpus, "kind": "converted", "sha256": {k: sha256_file(p) for k, p in files.items()}}
    if "documents" in files:
        key.update(valid_fraction=settings["valid_fraction"], test_fraction=settings["test_fraction"])
    return key


def _build(run: Pipeline, stage: Stage, corpus: str, settings: dict) -> None:
    if settings["kind"] == "converted":
        return _split_converted(run, stage, corpus, settings)
    with run.computing(stage):
        report = get_corpus(corpus).build(stage.path, root=Path(settings["root"]),
                                          valid_fraction=settings["valid_fraction"],
                                          test_fraction=settings["test_fraction"])
    run.log(f"built corpus: {report.counts}")


def _line(doc: Document) -> str:
    return json.dumps(doc.to_dict(), ensure_ascii=False) + "\n"


def _split_converted(run: Pipeline, stage: Stage, corpus: str, settings: dict) -> None:
    """``data/{train,valid,test}.jsonl`` from converted document JSONL, streamed (a converted Wikipedia is large):
    a file per split copied, or one ``documents`` file split by :func:`critic.corpora.manpages.split_of` of each
    id (SHA-1 of the id against valid_fraction and test_fraction, as the built corpora are split)."""
    from critic.corpora.manpages import split_of

    files = _files(settings)
    counts, seen, repeated = Counter(), {}, []
    with run.computing(stage), ExitStack() as stack:
        out = {s: stack.enter_context(atomic_open(stage.path / f"{s}.jsonl")) for s in SPLITS}
        sources = ([(files["documents"], None)] if "documents" in files else [(files[s], s) for s in SPLITS])
        for path, fixed in sources:
            for doc in iter_jsonl(path):
                split = fixed or split_of(doc.id, valid_fraction=settings["valid_fraction"],
                                          test_fraction=settings["test_fraction"])
                if seen.setdefault(doc.id, split) != split:
                    repeated.append(doc.id)
                out[split].write(_line(doc))
                counts[split] += 1
        empty = [s for s in SPLITS if not counts[s]]
        if empty:
            raise DocumentError(f"[{corpus}] no documents in the {' and '.join(empty)} split(s) of "
                                f"{', '.join(map(str, files.values()))}")
        build = {"counts": {s: counts[s] for s in SPLITS}, "files": {k: str(p) for k, p in files.items()},
                 "ids_in_two_splits": repeated[:20], "n_ids_in_two_splits": len(repeated)}
        atomic_write_text(stage.path / "build.json", json.dumps(build, indent=1) + "\n")
    run.log(f"converted corpus: {dict(build['counts'])}"
            + (f"; {len(repeated)} ids in two splits (e.g. {repeated[0]!r})" if repeated else ""))


def _chunks(docs):
    while chunk := list(islice(docs, FILTER_CHUNK)):
        yield chunk


def filter_splits(filt: CorpusFilter, directory: Path) -> tuple[dict[str, list[Document]], FilterReport]:
    """``filt.apply`` to the splits in ``directory``, streamed: the per-document rules (boilerplate dropped,
    section counts and lengths) a chunk at a time, then the title rule (titles counted on the kept training
    documents) on what they keep.  The same documents and reasons as ``filt.apply(read_splits(directory))``."""
    each = dataclasses.replace(filt, min_title_count=0)
    kept, report = {s: [] for s in SPLITS}, FilterReport()
    for s in SPLITS:
        for chunk in _chunks(iter_jsonl(directory / f"{s}.jsonl")):
            part, r = each.apply({s: chunk})
            kept[s] += part[s]
            report.removed.update(r.removed)
            report.sections_dropped.update(r.sections_dropped)
    # titles are normalised and boilerplate is gone: the title rule alone (the other rules hold already)
    kept, r = dataclasses.replace(filt, normalizer=str, drop_titles=()).apply(kept)
    report.removed.update(r.removed)
    return kept, report


def _filter(run: Pipeline, stage: Stage, data: Stage, corpus: str, settings: dict) -> None:
    with run.computing(stage):
        filt = CorpusFilter(**{k: settings.get(k) for k in FILTER_KEYS})
        kept, report = filter_splits(filt, data.path)
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
    data = run.stage("data", _data_key(corpus, settings))
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
    _check_files(run.config)
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
