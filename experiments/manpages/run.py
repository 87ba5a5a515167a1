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

from critic.config import Key, Schema, check_config
from critic.corpora.manpages import build_manpages
from critic.corrupt import CORRUPTIONS, corrupt_all
from critic.critic import Critic
from critic.criticism import criticize
from critic.document import Document, read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.registry import get_critic, register_runner
from critic.report import write_report
from critic.stages import Stage
from critics.sections import DEFAULT_DELTA_GRID, DEFAULT_DROP_TITLES, CorpusFilter
from critics.sections.analysis import section_paths, transition_errors_table
from critics.sections.plots import transition_difference_heatmap

__all__ = ["main", "SCHEMA"]

SPLITS = ("train", "valid", "test")
FILTER_KEYS = ("min_sections", "min_section_tokens", "max_section_tokens", "min_title_count")

SCHEMA = Schema(tables={
    "corpus": {
        "root": Key(str, "/usr/share/man", help="man page root (Debian manpages + manpages-dev)"),
        "min_sections": Key(int, 3, min=0, help="app. E: sections a page keeps after dropping boilerplate"),
        "min_section_tokens": Key(int, 1, min=0, help="fewest whitespace tokens of a section"),
        "max_section_tokens": Key(int, min=1, help="most whitespace tokens of a section (absent: no limit)"),
        "min_title_count": Key(int, 1, min=1, help="a title must occur this often in train, or the page goes"),
    },
    "critic": {
        "name": Key(str, "sections", choices=("sections",), help="the section-transition critic"),
        "delta": Key(float, gt=0, help="fixed add-delta smoothing (absent: chosen on validation)"),
        "delta_grid": Key(list[float], list(DEFAULT_DELTA_GRID), gt=0, help="deltas tried on validation"),
        "normalize_titles": Key(bool, True, help="app. E title normalisation"),
        "drop_titles": Key(list[str], list(DEFAULT_DROP_TITLES), help="boilerplate titles removed"),
    },
    "criticism": {
        "corruptions": Key(list[str], ["permuted"], choices=tuple(CORRUPTIONS),
                           help="candidate sets: corruptions of the real test pages"),
        "n_bootstrap": Key(int, 1000, min=1, help="bootstrap resamples of the CIs"),
        "n_permutations": Key(int, 2000, min=1, help="permutations of the two-sample test"),
        "top": Key(int, 10, min=1, help="outliers listed in the report"),
    },
})


def _log(msg: str) -> None:
    print(f"[manpages] {msg}", flush=True)


def _stale(stage: Stage, upstream_redone: bool) -> bool:
    """Whether ``stage`` must be computed: an upstream stage was, or it is not done under its key."""
    why = "upstream recomputed" if upstream_redone else stage.missing()
    if why is not None:
        if why not in ("no marker", "upstream recomputed"):
            _log(f"{stage.name}: recomputing ({why})")
        return True
    _log(f"{stage.name}: up to date ({stage.path}, key {stage.key[:12]})")
    return False


def _splits(directory: Path) -> dict[str, list[Document]]:
    return {s: read_jsonl(directory / f"{s}.jsonl") for s in SPLITS}


def _build(stage: Stage, root: str) -> None:
    stage.begin()
    report = build_manpages(stage.path, root=Path(root))
    stage.commit()
    _log(f"built corpus: {report.counts}")


def _filter(stage: Stage, data: Stage, corpus: dict) -> None:
    stage.begin()
    filt = CorpusFilter(**{k: corpus.get(k) for k in FILTER_KEYS})
    kept, report = filt.apply(_splits(data.path))
    empty = [s for s in SPLITS if not kept[s]]
    if empty:
        raise ValueError(f"[corpus] filters left no documents in the {' and '.join(empty)} split(s) "
                         f"(kept {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}); loosen min_sections, "
                         "min_section_tokens or min_title_count")
    for s in SPLITS:
        write_jsonl(kept[s], stage.path / f"{s}.jsonl")
    atomic_write_text(stage.path / "filter.json", json.dumps(report.to_dict(), indent=1) + "\n")
    stage.commit()
    _log(f"filtered: kept {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}; "
         f"removed {len(report.removed)} documents (reasons in {stage.path / 'filter.json'})")


def _fit(stage: Stage, filtered: Stage, settings: dict, device: str) -> Critic:
    stage.begin()
    params = {k: v for k, v in settings.items() if k != "name"}
    splits = _splits(filtered.path)
    critic = get_critic(settings["name"])(**params).to(device).fit(splits["train"], validation=splits["valid"])
    critic.save(stage.path)
    stage.commit()
    _log(f"fitted {settings['name']} critic: {len(critic.vocab_)} states, delta={critic.delta_} "
         f"(validation Latent PPL {critic.validation_ppl_.get(critic.delta_, float('nan')):.4f}; "
         f"{len(critic.validation_skipped_)} validation documents could not be used)")
    return critic


def _report(stage: Stage, filtered: Stage, critic: Critic, config: dict, seed: int, device: str,
            stages: list[Stage]) -> None:
    stage.begin()
    settings = config["criticism"]
    test = read_jsonl(filtered.path / "test.jsonl")
    candidates = {c: corrupt_all(test, c, seed=seed) for c in settings["corruptions"]}
    result = criticize(critic, test, candidates, reference_name="real",
                       paths={"real": f"{filtered.name}/test.jsonl"}, n_bootstrap=settings["n_bootstrap"],
                       n_permutations=settings["n_permutations"], seed=seed)
    paths = {name: section_paths(critic, docs) for name, docs in {"real": test, **candidates}.items()}
    errors = ["## Top section-transition errors (paper table 12: P_c(z_m | z_{m-1}) < 0.01)", ""]
    for name, set_paths in paths.items():
        errors += [f"### {name}", "", transition_errors_table(critic, set_paths, threshold=0.01, top=5), ""]

    def figures(directory: Path) -> dict[str, Path]:
        return {f"transitions_{name}": transition_difference_heatmap(
                    critic, paths["real"], paths[name], directory / f"transitions_{name}.png", name=name)
                for name in candidates}

    run = {"config": config, "seed": seed, "device": str(device), "stages": {s.name: s.key for s in stages}}
    write_report(result, stage.path, top=settings["top"], extra={"run": run}, sections=["\n".join(errors)],
                 figures=figures, documents={"real": test, **candidates})
    stage.commit()


@register_runner("manpages", SCHEMA, "man-page corpus, section-transition critic, three corruptions")
def main(config: dict, *, out: Path, seed: int = 0, device: str = "cpu") -> dict:
    """Build, filter, fit and criticise (each stage resumed when unchanged); print the report."""
    config = check_config(config, SCHEMA, where="manpages config", allowed=("runner",))
    out = Path(out)
    corpus = config["corpus"]
    data = Stage(out, "data", {"root": corpus["root"]})
    filtered = Stage(out, "filtered", {k: corpus.get(k) for k in FILTER_KEYS}, upstream=[data])
    fitted = Stage(out, "critic", config["critic"], upstream=[filtered])
    report = Stage(out, "report", {**config["criticism"], "seed": seed}, upstream=[fitted])
    stages = [data, filtered, fitted, report]
    redo = _stale(data, False)
    if redo:
        _build(data, corpus["root"])
    redo = _stale(filtered, redo)
    if redo:
        _filter(filtered, data, corpus)
    refit = _stale(fitted, redo)
    if _stale(report, refit):
        critic = (_fit(fitted, filtered, config["critic"], device) if refit
                  else Critic.load(fitted.path, device=device))
        _report(report, filtered, critic, config, seed, device, stages)
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print(f"wrote {report.path}/: {', '.join(sorted(p.name for p in report.path.iterdir()))}")
    return json.loads((report.path / "results.json").read_text(encoding="utf-8"))
