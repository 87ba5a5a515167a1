"""Runner of ``experiments/manpages/sections.toml`` (see the README's first command).

``critic run experiments/manpages/sections.toml --out DIR`` checks the config
against :data:`SCHEMA` and runs four stages, each in its own folder of ``DIR``
and keyed by the part of the config that produced it (:mod:`critic.stages`):

=============  ==========================================  =====================================
``data/``      the built corpus (train/valid/test JSONL)   ``[corpus] root``
``filtered/``  after the app. E filters, ``filter.json``   the ``[corpus]`` filters + data
``critic/``    the fitted section critic                   ``[critic]`` + filtered
``report/``    results.json, documents.jsonl, report.md,   ``[criticism]`` + seed + critic
               the T(x) histogram, fig. 4 heatmaps
=============  ==========================================  =====================================

An unchanged stage is reused; a changed one is recomputed with everything
downstream of it.  An interrupted run resumes from the last finished stage.
"""

from __future__ import annotations

import json
from pathlib import Path

from critic.config import Key
from critic.corpora.manpages import build_manpages
from critic.corrupt import CORRUPTIONS, corrupt_all
from critic.critic import Critic
from critic.document import read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.registry import get_critic
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, register_study, study_schema
from critic.workflows import fit_critic
from critics.sections import CorpusFilter, SectionTransitionCritic
from critics.sections.analysis import section_paths, transition_errors_table
from critics.sections.plots import transition_difference_heatmap
from experiments.lm_stages import SPLITS, read_splits

__all__ = ["main", "SCHEMA"]

FILTER_KEYS = ("min_sections", "min_section_tokens", "max_section_tokens", "min_title_count")

SCHEMA = study_schema({
    "corpus": {
        "root": Key(str, "/usr/share/man", help="man page root (Debian manpages + manpages-dev)"),
        "min_sections": Key(int, 3, min=0, help="app. E: sections a page keeps after dropping boilerplate"),
        "min_section_tokens": Key(int, 1, min=0, help="fewest whitespace tokens of a section"),
        "max_section_tokens": Key(int, min=1, help="most whitespace tokens of a section (absent: no limit)"),
        "min_title_count": Key(int, 1, min=1, help="a title must occur this often in train, or the page goes"),
    },
    "critic": {
        "name": Key(str, "sections", choices=("sections",), help="the section-transition critic"),
        **settings_table(SectionTransitionCritic, notes={
            "delta": "fixed add-delta smoothing (absent: chosen on validation)",
            "delta_grid": "deltas tried on validation", "normalize_titles": "app. E title normalisation",
            "drop_titles": "boilerplate titles removed"}),
        "calibration_folds": Key(int, SectionTransitionCritic.calibration_folds, min=0,
                                 help="cross-fitted folds of the training pages kept as calibration documents for "
                                      "outlier p-values (0: the validation pages only; docs/outliers.md)"),
    },
}, criticism={
    "corruptions": Key(list[str], ["permuted"], choices=tuple(CORRUPTIONS),
                       help="candidate sets: corruptions of the real test pages"),
})


def _build(run: Pipeline, stage: Stage, root: str) -> None:
    with run.computing(stage):
        report = build_manpages(stage.path, root=Path(root))
    run.log(f"built corpus: {report.counts}")


def _filter(run: Pipeline, stage: Stage, data: Stage, corpus: dict) -> None:
    with run.computing(stage):
        filt = CorpusFilter(**{k: corpus.get(k) for k in FILTER_KEYS})
        kept, report = filt.apply(read_splits(data.path))
        empty = [s for s in SPLITS if not kept[s]]
        if empty:
            raise ValueError(f"[corpus] filters left no documents in the {' and '.join(empty)} split(s) "
                             f"(kept {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}); loosen min_sections, "
                             "min_section_tokens or min_title_count")
        for s in SPLITS:
            write_jsonl(kept[s], stage.path / f"{s}.jsonl")
        atomic_write_text(stage.path / "filter.json", json.dumps(report.to_dict(), indent=1) + "\n")
    run.log(f"filtered: kept {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}; "
            f"removed {len(report.removed)} documents (reasons in {stage.path / 'filter.json'})")


def _fit(run: Pipeline, stage: Stage, filtered: Stage) -> Critic:
    settings = run.config["critic"]
    with run.computing(stage):
        params = {k: v for k, v in settings.items() if k not in ("name", "calibration_folds")}
        splits = read_splits(filtered.path)
        critic = fit_critic(get_critic(settings["name"])(**params).to(run.device), splits["train"], splits["valid"],
                            calibration_folds=settings["calibration_folds"], seed=run.seed, log=run.log)
        critic.save(stage.path)
    run.log(f"fitted {settings['name']} critic: {len(critic.vocab_)} states, delta={critic.delta_} "
            f"(validation Latent PPL {critic.validation_ppl_.get(critic.delta_, float('nan')):.4f}; "
            f"{len(critic.validation_skipped_)} validation documents could not be used); calibration: "
            f"{critic.calibration.summary()}")
    return critic


def _report(run: Pipeline, stage: Stage, filtered: Stage, critic: Critic) -> None:
    corruptions = run.config["criticism"]["corruptions"]
    with run.computing(stage):
        test = read_jsonl(filtered.path / "test.jsonl")
        candidates = {c: corrupt_all(test, c, seed=run.seed) for c in corruptions}
        panel = run.criticize(critic, test, candidates, reference_name="real",
                              paths={"real": f"{filtered.name}/test.jsonl"})
        paths = {name: section_paths(critic, docs) for name, docs in {"real": test, **candidates}.items()}
        errors = ["## Top section-transition errors (paper table 12: P_c(z_m | z_{m-1}) < 0.01)", ""]
        for name, set_paths in paths.items():
            errors += [f"### {name}", "", transition_errors_table(critic, set_paths, threshold=0.01, top=5), ""]

        def figures(directory: Path) -> dict[str, Path]:
            return {f"transitions_{name}": transition_difference_heatmap(
                        critic, paths["real"], paths[name], directory / f"transitions_{name}.png", name=name,
                        reference_name="real")
                    for name in candidates}

        run.write_report(stage.path, panel, critics={critic.name: critic},
                         sections=["\n".join(errors)], figures=figures,
                         documents={"real": test, **candidates})


@register_study("manpages", SCHEMA, "man-page corpus, section-transition critic, three corruptions")
def main(run: Pipeline):
    """Build, filter, fit and criticise (each stage resumed when unchanged); print the report."""
    corpus = run.config["corpus"]
    data = run.stage("data", {"root": corpus["root"]})
    filtered = run.stage("filtered", {k: corpus.get(k) for k in FILTER_KEYS}, upstream=[data])
    fitted = run.stage("critic", run.config["critic"], upstream=[filtered])
    report = run.stage("report", run.criticism_key(), upstream=[fitted])
    if run.needs(data):
        _build(run, data, corpus["root"])
    if run.needs(filtered):
        _filter(run, filtered, data, corpus)
    critic = _fit(run, fitted, filtered) if run.needs(fitted) else None
    if run.needs(report):
        _report(run, report, filtered, critic or Critic.load(fitted.path, device=run.device))
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print(f"wrote {report.path}/: {', '.join(sorted(p.name for p in report.path.iterdir()))}")
    return load_results(report.path).result
