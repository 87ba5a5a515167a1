"""``critic run REPORT.toml``: the report of :mod:`critic.panel` from a config that names the critics and the
sets, so a criticism of a model's generations is a file that can be rerun (and resumes).

::

    runner = "report"

    [sets]
    reference = "data/manpages/test.jsonl"
    candidates = {mymodel = "generations.jsonl", other = "other.jsonl"}

    [inputs]                       # how the files are read (critic.inputs); all optional
    sections = "markdown"

    [[critics]]                    # a saved critic
    label = "sections"
    path = "models/sections"

    [[critics]]                    # or one fitted here, from training documents
    label = "topics"
    fit = "lda"
    train = "data/manpages/train.jsonl"
    params = {num_topics = 10}
    calibration_folds = 5          # optional: the critic's own default (docs/outliers.md)

    [report]                       # all optional
    top = 20
    fdr = 0.1                      # flags at this false discovery rate (or flag_level = P, per document)

Paths are relative to the working directory, as on the command line.  Each critic fitted here is a stage
``critic-LABEL`` of the run directory, keyed by its settings and the SHA-256 of its training files; the
report (``report/``) is keyed by the sets' SHA-256, the reading options, the report settings, the seed and
the critics' keys: a rerun recomputes only what changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ConfigError, Key, Schema, check_params, seeded_params
from .critic import Critic
from .inputs import FORMAT_NAMES, LM_EVAL_TEXTS, InputOptions
from .io import sha256_file
from .registry import get_critic, register_runner
from .stages import Stage
from .terminal import get_logger
from .settings import CriticismSettings, criticism_keys
from .workflows import criticise, fit_critic, read_set, read_sets

__all__ = ["SCHEMA", "main"]

SCHEMA = Schema(
    keys={"critics": Key(list[dict], help="the critics: [[critics]] tables with label and path, or label, fit, "
                                          "train (valid, params)")},
    tables={
        "sets": {
            "reference": Key(str, help="real documents to compare with"),
            "candidates": Key(dict, help="name -> file of generations to criticise"),
        },
        "inputs": {
            "format": Key(str, "auto", choices=FORMAT_NAMES, help="the candidates' format (the reference's "
                                                                        "is detected)"),
            "text_field": Key(str, "text", help="free-text formats: the text field"),
            "id_field": Key(str, "id", help="free-text formats: the id field"),
            "sections": Key(str, "auto", help="auto (Markdown headings where a document has them), none, markdown or "
                                              "separator:STRING"),
            "lm_eval_text": Key(str, "continuation", choices=LM_EVAL_TEXTS,
                                help="lm-eval samples: the generation alone, or prompt+continuation"),
            "separator": Key(str, help="format text: the string between generations"),
        },
        "report": {
            **criticism_keys(),
            "word_ppl": Key(dict, {}, help="candidate -> its word perplexity (critic lm ppl), shown beside"),
            "mauve": Key(bool, False, help="MAUVE of each candidate against the reference (50+ documents)"),
        },
    },
)

_CRITIC_KEYS = {"label", "path", "fit", "train", "valid", "params", "calibration_folds"}


_logger = get_logger(__name__)


def _log(message: str) -> None:
    """``critic: [report] message`` on stderr (logged at INFO: :mod:`critic.terminal`)."""
    _logger.info("[report] %s", message)


def _check_critics(entries: list[dict]) -> list[dict]:
    """Each ``[[critics]]`` table: a label, and either ``path`` or ``fit`` with ``train``; errors name the entry."""
    if not entries:
        raise ConfigError("report config: [[critics]]: name at least one critic")
    labels: set[str] = set()
    for k, entry in enumerate(entries, start=1):
        where = f"report config: [[critics]] #{k}"
        unknown = sorted(set(entry) - _CRITIC_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_CRITIC_KEYS))}")
        label = entry.get("label")
        if not isinstance(label, str) or not label or label in labels:
            raise ConfigError(f"{where}: needs a label of its own (got {label!r})")
        labels.add(label)
        if ("path" in entry) == ("fit" in entry):
            raise ConfigError(f"{where} ({label}): give either path (a saved critic) or fit (a critic name) with train")
        if "fit" in entry:
            if "train" not in entry:
                raise ConfigError(f"{where} ({label}): fit needs train (the real documents to fit on)")
            params = check_params(get_critic(entry["fit"]), entry.get("params", {}), where=f"{where} ({label}) params")
            seeded_params(get_critic(entry["fit"]), params, 0, where=f"{where} ({label}) params",
                          seed_option="the run's --seed")  # refuses a seed of its own before anything runs
            folds = entry.get("calibration_folds")
            if folds is not None and (isinstance(folds, bool) or not isinstance(folds, int) or folds < 0 or folds == 1):
                raise ConfigError(f"{where} ({label}): calibration_folds must be 0 (no cross-fitting) or an integer "
                                  f">= 2, got {folds!r}")
        elif set(entry) & {"train", "valid", "params", "calibration_folds"}:
            raise ConfigError(f"{where} ({label}): train, valid, params and calibration_folds go with fit, not with a "
                              "saved critic")
    return entries


def _critic(entry: dict, out: Path, device: str, seed: int, options: InputOptions) -> tuple[Critic, Stage | None]:
    """The critic of one ``[[critics]]`` table: loaded from its folder, or fitted (a resumable stage)."""
    if "path" in entry:
        return Critic.load(entry["path"], device=device), None
    files = {k: entry[k] for k in ("train", "valid") if k in entry}
    stage = Stage(out, f"critic-{entry['label']}", {"fit": entry["fit"], "params": entry.get("params", {}),
                                                     "calibration_folds": entry.get("calibration_folds"),
                                                     "files": {k: sha256_file(v) for k, v in files.items()},
                                                     "inputs": options.__dict__, "seed": seed})
    if stage.done():
        _log(f"critic {entry['label']}: up to date ({stage.path})")
        return Critic.load(stage.path, device=device), stage
    stage.begin()
    train = read_set(entry["train"], options, "train", log=_log)[0]
    valid = read_set(entry["valid"], options, "valid", log=_log)[0] if "valid" in entry else None
    _log(f"critic {entry['label']}: fitting {entry['fit']} on {len(train)} documents")
    cls = get_critic(entry["fit"])
    params = seeded_params(cls, entry.get("params", {}), seed, where=f"[[critics]] {entry['label']!r} params",
                           seed_option="the run's --seed")
    critic = fit_critic(cls(**params).to(device), train, valid, calibration_folds=entry.get("calibration_folds"),
                        seed=seed, log=lambda message: _log(f"critic {entry['label']}: {message}"))
    critic.save(stage.path)
    stage.commit()
    _log(f"critic {entry['label']}: {critic.fit_summary(len(train))}; calibration: {critic.calibration.summary()}")
    for warning in critic.fit_warnings():
        _logger.warning("[report] critic %s: %s", entry["label"], warning)
    return critic, stage


@register_runner("report", SCHEMA, "several critics over a reference and candidate sets: one HTML report")
def main(config: dict[str, Any], *, out: Path, seed: int = 0, device: str = "cpu", track: Any = None) -> dict:
    """Fit or load every critic, read the sets, write ``OUT/report/`` (:mod:`critic.workflows`, the same code as
    ``critic report``); with ``track`` (a :class:`critic.tracking.Target`) the report written is logged there."""
    from .report import write_report

    entries = _check_critics(config.get("critics") or [])
    sets, settings = config["sets"], dict(config["report"])
    if "reference" not in sets or not sets.get("candidates"):
        raise ConfigError("report config: [sets] needs reference = FILE and candidates = {NAME = FILE, ...}")
    word_ppl, mauve = settings.pop("word_ppl"), settings.pop("mauve")
    try:
        criticism = CriticismSettings(**settings)
    except ConfigError as exc:
        raise ConfigError(f"report config: [report] {exc}") from None
    for name, value in word_ppl.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name not in sets["candidates"] or not number or value <= 0:
            raise ConfigError(f"report config: [report] word_ppl: {name} = {value!r}: needs a candidate set's name "
                              "and a positive number")
    options = InputOptions(**config["inputs"])
    out = Path(out)
    critics, stages, dirs = {}, [], {}
    for entry in entries:
        critics[entry["label"]], stage = _critic(entry, out, device, seed, options)
        stages += [stage] if stage else []
        dirs[entry["label"]] = stage.path if stage else Path(entry["path"])
    files = {"reference": sets["reference"], **sets["candidates"]}
    report = Stage(out, "report", {"files": {k: sha256_file(v) for k, v in files.items()},
                                   "inputs": options.__dict__, "settings": config["report"], "seed": seed,
                                   "critics": {label: c.state_sha256() for label, c in critics.items()}},
                   upstream=stages)
    if report.done():
        _log(f"report: up to date ({report.path})")
    else:
        report.begin()
        reference, candidates, reads = read_sets(sets["reference"], sets["candidates"], options, log=_log,
                                                 option="[inputs] sections =")
        panel = criticise(critics, reference, candidates, criticism, seed=seed, reads=reads, paths=files,
                          word_ppl=word_ppl, mauve=mauve)
        write_report(panel, report.path, documents={"reference": reference, **candidates}, critics=critics,
                     extra={"run": {"config": config, "seed": seed, "device": str(device)}})
        report.commit()
        _log(f"{len(panel.flagged())} flagged document(s)")
        if track is not None:
            from .tracking import track_report

            track_report(track, panel, command="run", report=report.path, settings=criticism, seed=seed,
                         critic_dirs=dirs,
                         name=f"report/{report.path.name}")
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print(f"wrote {report.path / 'index.html'}")
    return {"report": str(report.path)}
