"""The study kit: what every study runner shares, declared once.

A study is a config :class:`~critic.config.Schema` and a function of a :class:`Pipeline`.  The pipeline checks
the config once, applies the runtime keys (``threads``), declares the study's stages (:class:`~critic.stages.Stage`,
keyed by the config that produced them), computes those that are not up to date -- and with them everything
downstream -- logs as ``[study] ...``, criticises with the ``[criticism]`` settings and writes reports that record
the run.  Results are read back as objects (:func:`load_results`), so tables are rendered from
:class:`~critic.results.CriticismResult`, never from dictionary keys::

    SCHEMA = study_schema({"data": {"root": Key(str, "/usr/share/man")},
                           "critic": settings_table(SectionCritic)})

    @register_study("mystudy", SCHEMA, "one line for `critic run --list`")
    def main(run: Pipeline) -> CriticismResult:
        data = run.stage("data", run.config["data"])
        if run.needs(data):
            with run.computing(data):
                build(data.path)
        report = run.stage("report", run.criticism_key(), upstream=[data])
        if run.needs(report):
            with run.computing(report):
                run.write_report(report.path, run.criticize(critic, test, candidates))
        return load_results(report.path)

Shared keys live in :data:`RUNTIME_KEYS` (top level) and :data:`CRITICISM_KEYS` (``[criticism]``); a critic's
settings table is derived from its ``__init__`` (:func:`~critic.config.settings_table`), so a setting is declared once, where the
critic takes it.
"""

from __future__ import annotations

import functools
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .config import ConfigError, Divides, Key, Schema, check_config, settings_table
from .panel import load_results
from .registry import register_runner
from .stages import Stage
from .settings import CriticismSettings, criticism_keys
from .workflows import criticise

__all__ = ["Pipeline", "register_study", "study_schema", "settings_table", "load_results", "read_json",
           "RUNTIME_KEYS", "CRITICISM_KEYS"]

RUNTIME_KEYS = {
    "threads": Key(int, 1, min=1, help="torch threads while the study runs (1 is fastest for small models here)"),
}
"""Top-level keys every study accepts."""

CRITICISM_KEYS = criticism_keys(top=10)
"""Keys of every study's ``[criticism]`` table (:class:`~critic.settings.CriticismSettings`, listing 10 documents);
a study adds its own beside them."""


def study_schema(tables: Mapping[str, Mapping[str, Key]], *, criticism: Mapping[str, Key] | None = None,
                 keys: Mapping[str, Key] | None = None, checks: Sequence[Divides] = ()) -> Schema:
    """A study's schema: its own ``tables`` and top-level ``keys`` beside the shared :data:`RUNTIME_KEYS`, and a
    ``[criticism]`` table of :data:`CRITICISM_KEYS` plus the study's own ``criticism`` keys.  A study may not
    redeclare a shared key."""
    criticism, keys = dict(criticism or {}), dict(keys or {})
    for what, own, shared in (("[criticism] keys", criticism, CRITICISM_KEYS), ("top-level keys", keys, RUNTIME_KEYS)):
        clash = sorted(set(own) & set(shared))
        if clash:
            raise ValueError(f"{what} {clash} are shared: declared once in critic.study")
    if "criticism" in tables:
        raise ValueError("give the study's own [criticism] keys as criticism=, not as a table")
    return Schema(keys={**RUNTIME_KEYS, **keys}, tables={**tables, "criticism": {**CRITICISM_KEYS, **criticism}},
                  checks=tuple(checks))


class Pipeline:
    """One run of a study: its checked ``config``, ``out`` directory, ``seed``, ``device`` and stages.

    :meth:`stage` declares a stage (recorded in the run's record); :meth:`needs` says whether it must be
    computed -- not done under its key, or a stage upstream of it was computed in this run -- and logs why;
    :meth:`computing` wraps the computation (:meth:`Stage.begin` before, :meth:`Stage.commit` after it
    succeeded).
    """

    def __init__(self, name: str, config: Mapping[str, Any], schema: Schema, *, out: str | Path, seed: int = 0,
                 device: str = "cpu", log: Callable[[str], None] | None = None, track: Any = None):
        self.name = name
        self.track = track  # a critic.tracking.Target: each report written is logged there (critic run --track)
        self.config = check_config(config, schema, where=f"{name} config", allowed=("runner",))
        table = self.config.get("criticism", {})
        try:  # the run's CriticismSettings, checked together (one flag rule) before any stage runs
            self.settings = CriticismSettings(**{key: table[key] for key in CRITICISM_KEYS if key in table})
        except ConfigError as exc:
            raise ConfigError(f"{name} config: [criticism] {exc}") from None
        self.out = Path(out)
        self.seed = seed
        self.device = device
        self._print = log
        self.root = self.out
        self.prefix = name
        self.stages: list[Stage] = []
        self.redone: set[str] = set()  # keys of the stages computed in this run
        self.shared: set[str] = set()  # keys of the stages declared in a folder runs share
        if "threads" in self.config:
            import torch

            torch.set_num_threads(self.config["threads"])

    def log(self, message: str) -> None:
        """``[study] message`` on stdout (or to the ``log`` the pipeline was given)."""
        if self._print is not None:
            self._print(message)
        else:
            print(f"[{self.prefix}] {message}", flush=True)

    def part(self, name: str) -> "Pipeline":
        """The same run for one part of a study (a corpus): stages under ``out/name``, logged as
        ``[study:name]``, recorded apart; what was recomputed is shared with the whole run."""
        part = object.__new__(Pipeline)
        part.__dict__.update(self.__dict__)
        part.root, part.prefix, part.stages = self.out / name, f"{self.prefix}:{name}", []
        return part

    def stage(self, name: str, config: Mapping[str, Any], *, upstream: Sequence[Stage] = (),
              outputs: Sequence[str] | None = None, root: str | Path | None = None) -> Stage:
        """Declare stage ``name`` (in the run directory, the part's, or ``root``: a folder runs share), keyed by
        ``config`` and ``upstream``; ``outputs`` as :class:`~critic.stages.Stage` takes them.

        A stage in a shared ``root`` is reused whenever it finished under its key, even when an upstream stage
        was computed in this run: another run computed that upstream stage's twin under the same key (its
        config), and what it made from it stands."""
        stage = Stage(self.root if root is None else root, name, config, upstream=upstream, outputs=outputs)
        if root is not None:
            self.shared.add(stage.key)
        self.stages.append(stage)
        return stage

    def needs(self, stage: Stage) -> bool:
        """Whether ``stage`` must be computed in this run (logged either way)."""
        redone_upstream = stage.key not in self.shared and set(stage.upstream.values()) & self.redone
        why = "upstream recomputed" if redone_upstream else stage.missing()
        if why is None:
            self.log(f"{stage.name}: up to date ({stage.path})")
            return False
        self.redone.add(stage.key)
        if why not in ("no marker", "upstream recomputed"):
            self.log(f"{stage.name}: recomputing ({why})")
        return True

    @contextmanager
    def computing(self, stage: Stage) -> Iterator[Stage]:
        """Begin ``stage`` (work left under the same key is kept, so it resumes) and commit it on success."""
        stage.begin()
        yield stage
        stage.commit()

    def criticism_key(self, *extra: Mapping[str, Any]) -> dict:
        """The config a report stage is keyed by: ``[criticism]``, the seed and any ``extra`` tables."""
        out = {**self.config["criticism"], "seed": self.seed}
        for table in extra:
            out.update(table)
        return out

    def criticize(self, critic, reference, candidates, **kwargs):
        """:func:`critic.workflows.criticise` with the run's settings and seed: ``critic`` (labelled by its name),
        or a panel of critics (label -> critic), over the sets; a :class:`~critic.panel.PanelResult`."""
        critics = dict(critic) if isinstance(critic, Mapping) else {critic.name: critic}
        return criticise(critics, reference, candidates, self.settings, seed=self.seed, **kwargs)

    def build_corpus(self, stage: Stage, corpus: str, **kwargs: Any) -> None:
        """Compute ``stage``: the registered corpus ``corpus`` built into its folder (``critic data build``)."""
        from .registry import get_corpus

        with self.computing(stage):
            report = get_corpus(corpus).build(stage.path, **kwargs)
        self.log(f"built {corpus}: {report.counts}")

    def record(self, **extra: Any) -> dict:
        """The run's record written beside every report: config, seed, device and the stages' keys."""
        return {"config": self.config, "seed": self.seed, "device": str(self.device),
                "stages": {s.name: s.key for s in self.stages}, **extra}

    def write_report(self, directory: str | Path, panel, **kwargs) -> dict[str, Path]:
        """:func:`critic.report.write_report` (the one report writer) with the run's record."""
        from .report import write_report

        extra = {"run": self.record(**kwargs.pop("record", {}))}
        written = write_report(panel, directory, extra=extra, **kwargs)
        if self.track is not None:
            from .tracking import track_report

            track_report(self.track, panel, command="run", report=Path(directory), settings=self.settings,
                         seed=self.seed, name=f"{self.name}/{Path(directory).name}")
        return written


def register_study(name: str, schema: Schema, description: str = ""):
    """Function decorator: ``fn(run: Pipeline)`` as the runner of ``critic run`` for study ``name``.

    The registered runner has the runners' signature ``main(config, *, out, seed=0, device="cpu", log=None,
    track=None)`` and returns what ``fn`` returns.
    """

    def decorator(fn: Callable[[Pipeline], Any]):
        @functools.wraps(fn)
        def main(config: dict, *, out: str | Path, seed: int = 0, device: str = "cpu",
                 log: Callable[[str], None] | None = None, track: Any = None):
            return fn(Pipeline(name, config, schema, out=out, seed=seed, device=device, log=log, track=track))

        register_runner(name, schema, description or (fn.__doc__ or "").strip().split("\n")[0])(main)
        main.study = fn
        return main

    return decorator


def read_json(path: str | Path) -> Any:
    """A JSON file a stage wrote (``ppl.json``, ``counts.json``)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
