"""An optional record of each criticism in an experiment tracker that works offline; off by default.

``critic report|compare|run ... --track TARGET`` (or ``$CRITIC_TRACKING``) logs the run once its report is written
(``critic run``: each report the study or report config writes, named ``STUDY/REPORT-FOLDER``):

- ``mlflow:DIR``: an MLflow run in the store in folder ``DIR`` (SQLite ``DIR/mlflow.db``, artifacts under
  ``DIR/artifacts``; nothing is sent anywhere), experiment ``critic``; read back with MLflow's own API
  (``MlflowClient(tracking_uri="sqlite:///DIR/mlflow.db")``) or ``mlflow ui --backend-store-uri ...``.  Needs
  ``pip install 'critic[tracking]'`` (``mlflow-skinny``, SQLAlchemy, Alembic).  ``mlflow:URI`` (a URI with
  ``://``: ``sqlite:///...``, ``file:///...``, a tracking server) is used as it is.
- ``jsonl:FILE``: one JSON line per run appended to ``FILE`` (no dependency): the same params, metrics and tags and
  the report folder's path.

What a run holds (:func:`run_record`): **params** -- each critic's kind, folder and settings, the criticism's
settings (:class:`critic.settings.CriticismSettings`), the flag rule, each set's path, the seed and critic's version;
**metrics** -- per critic and set (``LABEL.SET.``): ``latent_ppl``, ``latent_nll``, ``n``, ``skipped``, and for a
candidate set ``difference`` and ``p_value`` of the critic's headline statistic against the reference and
``flagged``; **artifacts** -- the report folder (``report/``).  A metric that is not a finite number is left out.
Keys keep letters, digits and ``_ - . / :`` and space (MLflow's rule); any other character becomes ``_``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .terminal import get_logger, path_text

if TYPE_CHECKING:  # annotations only
    from .panel import PanelResult

__all__ = ["TRACKING_ENV", "Target", "RunRecord", "target_from", "run_record", "track", "track_report", "key",
           "EXPERIMENT", "mlflow_uri", "add_track_option"]

TRACKING_ENV = "CRITIC_TRACKING"
"""Environment variable: the ``--track`` target of every command that takes one, when the option is not given
(empty or ``off``: none)."""

EXPERIMENT = "critic"
"""The MLflow experiment the runs are logged under."""

_KINDS = ("mlflow", "jsonl")
_KEY = re.compile(r"[^\w\-./: ]")
_PARAM_CHARS = 500  # a setting's JSON is cut here (MLflow takes 6,000; nobody reads more in a table)

_log = get_logger(__name__)


@dataclass(frozen=True)
class Target:
    """Where runs are logged: ``kind`` (``mlflow`` or ``jsonl``) and ``where`` (a folder or URI, a file)."""

    kind: str
    where: str

    @classmethod
    def parse(cls, text: str, *, option: str = "--track") -> "Target":
        """``KIND:WHERE``; a ``ValueError`` naming ``option`` for anything else, or for ``mlflow`` when MLflow is
        not installed (said before any work)."""
        kind, sep, where = text.partition(":")
        if not sep or kind not in _KINDS or not where:
            raise ValueError(f"{option} {text!r}: expected mlflow:DIR (an offline MLflow store) or jsonl:FILE")
        if kind == "mlflow" and importlib.util.find_spec("mlflow") is None:
            raise ValueError(f"{option} {text}: MLflow is not installed: pip install 'critic[tracking]'")
        if kind == "jsonl" and Path(where).is_dir():
            raise ValueError(f"{option} {text}: {where} is a folder; jsonl: takes a file (one JSON line per run)")
        return cls(kind, where)

    def __str__(self) -> str:
        return f"{self.kind}:{self.where}"


def target_from(option: str | None) -> Target | None:
    """The ``--track`` option's target, else ``$CRITIC_TRACKING``'s, else ``None`` (tracking off)."""
    if option is not None:
        return Target.parse(option)
    text = os.environ.get(TRACKING_ENV, "").strip()
    if not text or text.lower() == "off":
        return None
    return Target.parse(text, option=f"${TRACKING_ENV}")


@dataclass
class RunRecord:
    """One run: string params, finite metrics, tags, its name and the report folder logged as its artifacts."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    report: Path | None = None


def key(*parts: object) -> str:
    """``parts`` joined with ``.``, each character MLflow refuses in a key made ``_``."""
    return ".".join(_KEY.sub("_", path_text(part)) for part in parts)


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return path_text(text)[:_PARAM_CHARS]


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def run_record(panel: PanelResult, *, command: str, report: Path | None = None, settings: Any = None,
               critic_dirs: Mapping[str, Path] | None = None, seed: int | None = None,
               name: str | None = None) -> RunRecord:
    """What a criticism logs (see the module's docstring): ``settings`` a dataclass (the criticism's settings),
    ``critic_dirs`` the critics' folders by label."""
    from . import __version__

    record = RunRecord(name or (Path(report).name if report is not None else command), report=report)
    params, metrics = record.params, record.metrics
    params["command"] = command
    params["critic_version"] = __version__
    if seed is not None:
        params["seed"] = str(seed)
    if settings is not None and dataclasses.is_dataclass(settings):
        params.update({key("settings", k): _param(v) for k, v in dataclasses.asdict(settings).items()})
    params["flags.rule"] = _param(panel.rule)
    for name_, read in panel.reads.items():
        if read.get("path") is not None:
            params[key("set", name_, "path")] = _param(read["path"])
    counts = panel.flag_counts()
    for label, result in panel.results.items():
        params[key("critic", label)] = _param(result.critic_name)
        if critic_dirs and label in critic_dirs:
            params[key("critic", label, "dir")] = _param(str(critic_dirs[label]))
        for setting, value in sorted((result.critic.get("params") or {}).items()):
            params[key("critic", label, "params", setting)] = _param(value)
        headline = result.headline
        for s in result.sets:
            values = {"latent_ppl": s.latent_ppl, "latent_nll": s.latent_nll, "n": s.n, "skipped": s.n_skipped}
            comparison = s.headline_comparison(headline)
            if comparison is not None:
                values.update(difference=comparison.difference, p_value=comparison.p_value)
            if s is not result.reference:
                values["flagged"] = counts[label].get(s.name, 0)
            for stat, value in values.items():
                number = _finite(value)
                if number is not None:
                    metrics[key(label, s.name, stat)] = number
        record.tags[key("critic", label, "headline")] = headline
    return record


def track(target: Target, record: RunRecord) -> str:
    """Log ``record`` at ``target``; returns what identifies the run there (``mlflow run ID in STORE``, ``line N of
    FILE``).  A ``RuntimeError`` naming the target when the tracker fails."""
    if target.kind == "jsonl":
        return _track_jsonl(Path(target.where), record)
    return _track_mlflow(target.where, record)


def track_report(target: Target, panel: PanelResult, *, command: str, report: Path, settings: Any = None,
                 critic_dirs: Mapping[str, Path] | None = None, seed: int | None = None,
                 name: str | None = None) -> str:
    """Log a written report at ``target`` (:func:`run_record`, :func:`track`): what every command and study that
    writes a report calls.  A ``RuntimeError`` saying that the report is written when the tracker fails."""
    record = run_record(panel, command=command, report=report, settings=settings, critic_dirs=critic_dirs,
                        seed=seed, name=name)
    try:
        where = track(target, record)
    except RuntimeError as exc:
        raise RuntimeError(f"the report is written ({path_text(report)}); tracking it failed: {exc}") from None
    _log.info("tracked: %s", where)
    return where


def add_track_option(parser) -> None:
    """``--track TARGET`` on a command that writes a report."""
    parser.add_argument("--track", metavar="mlflow:DIR|jsonl:FILE",
                        help="also log this run (params, metrics, the report folder) to an experiment tracker, "
                             "offline: mlflow:DIR (an MLflow store in DIR; pip install 'critic[tracking]') or "
                             f"jsonl:FILE (a JSON line per run); default ${TRACKING_ENV}, else off")


# ------------------------------------------------------------------ JSON lines


def _track_jsonl(path: Path, record: RunRecord) -> str:
    row = {"run_id": uuid.uuid4().hex, "name": record.name, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "params": record.params, "metrics": record.metrics, "tags": record.tags,
           "artifacts": path_text(Path(record.report).resolve()) if record.report is not None else None}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write(2) in append mode: runs sharing the file never interleave their lines, however long
            if os.write(fd, line) != len(line):
                raise OSError("the disk took only part of the line")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RuntimeError(f"--track jsonl:{path}: cannot append the run: {exc.strerror or exc}") from None
    return f"run {row['run_id']} appended to {path}"


# ------------------------------------------------------------------ MLflow


def mlflow_uri(where: str) -> tuple[str, str | None]:
    """The tracking URI of ``mlflow:WHERE`` and the artifact location of its experiment: a folder's SQLite store
    (``DIR/mlflow.db``) with artifacts in ``DIR/artifacts``; a URI as it is (its own artifact location)."""
    if "://" in where:
        return where, None
    folder = Path(where).resolve()
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


@contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow's and Alembic's INFO lines (creating the store's tables) left out: critic says what it logged."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, before):
            lg.setLevel(level)


def _track_mlflow(where: str, record: RunRecord) -> str:
    uri, artifacts = mlflow_uri(where)
    if artifacts is not None:
        Path(where).mkdir(parents=True, exist_ok=True)
    from mlflow.entities import Metric, Param  # importing mlflow sets its loggers' levels: before quieting them
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    with _quiet_mlflow():
        try:
            client = MlflowClient(tracking_uri=uri)
            experiment = client.get_experiment_by_name(EXPERIMENT)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else client.create_experiment(EXPERIMENT, artifact_location=artifacts))
            run = client.create_run(experiment_id, run_name=record.name, tags=record.tags)
            run_id = run.info.run_id
        except MlflowException as exc:
            raise RuntimeError(f"--track mlflow:{where}: {exc.message}") from None
        try:
            now = int(time.time() * 1000)
            params = [Param(k, v) for k, v in record.params.items()]
            metrics = [Metric(k, v, now, 0) for k, v in record.metrics.items()]
            for start in range(0, max(len(params), len(metrics)), 100):  # MLflow's batch limits
                client.log_batch(run_id, metrics=metrics[start:start + 100], params=params[start:start + 100])
            if record.report is not None:
                client.log_artifacts(run_id, str(record.report), artifact_path="report")
        except (MlflowException, OSError) as exc:
            client.set_terminated(run_id, "FAILED")
            raise RuntimeError(f"--track mlflow:{where}: run {run_id}: {getattr(exc, 'message', exc)}") from None
        client.set_terminated(run_id, "FINISHED")
    _log.debug("tracked %d params and %d metrics in MLflow run %s (%s)", len(params), len(metrics), run_id, uri)
    return f"MLflow run {run_id} in {where} (experiment {EXPERIMENT!r})"
