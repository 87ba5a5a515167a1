"""Latent NLL and Latent PPL inside an lm-evaluation-harness run: a task template and its metrics.

lm-eval asks a task for ``process_results(doc, results)`` per sample and for an aggregation per metric, a
function of the list of per-sample items.  A task written by :func:`write_task` (the template: :data:`TASK_YAML`
and :data:`TASK_MODULE`) generates text (``generate_until``) from the prompts of a local JSON-lines file and
reports two metrics of a saved critic in lm-eval's own results table and results JSON:

- ``latent_ppl``: ``exp(sum_x T(x) / sum_x M(x))`` over the generations (``docs/design.md``);
- ``latent_nll``: the mean ``T(x)`` over them.

Where the critic scores: in the aggregation, over the whole set at once.  :func:`process_results` only hands
each sample's generation on (``{"generation": TEXT}``, the item lm-eval keeps and logs under the metric's name);
the aggregation loads the critic once, makes the documents as ``critic score`` makes those of the samples file
the run logs (:func:`critic.inputs.lm_eval_generations`: the k-th generation is document ``k``, sections as
``critic score``'s default ``--sections auto``, an empty one skipped) and scores them in ``critic score``'s own
chunks, batches and Monte Carlo seeds (:func:`critic.streaming.scored_chunks`, seed 0, one torch thread).  So the
numbers are ``critic score CRITIC --input samples_TASK_DATE.jsonl`` over the samples logged, to the bit, also for
a critic whose ``T(x)`` is a Monte Carlo estimate seeded per batch, which a per-sample score in
``process_results`` (a batch of one per document, seeded by its place) could not be; and the critic (and its
torch memory) is loaded once, after the model has generated, and projects batches, not single documents.  Both
metrics are computed from one scoring (kept for the same generations).

The equality holds for what the template writes: one generation per document (no ``repeats``: with repeats
``process_results`` sees the first, ``critic score`` reads them all) and lm-eval's default filter (a filter that
cuts a generation down, to an answer say, gives ``process_results`` the cut text, while ``critic score`` reads the
raw generation).

This package imports no lm-eval (lm-eval imports it, through the task's module) and ``import critic`` imports
neither.  See ``docs/lm-eval.md``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["METRICS", "CRITIC_ENV", "TASK_YAML", "TASK_MODULE", "process_results", "aggregations",
           "score_generations", "write_task"]

METRICS = ("latent_ppl", "latent_nll")
"""The metrics a task of the template reports (lm-eval's results keys ``latent_ppl,none`` and ``latent_nll,none``)."""

CRITIC_ENV = "CRITIC_LM_EVAL_CRITIC"
"""The environment variable naming the saved critic's folder, read when a task was written without one."""

TASK_YAML = """\
# An lm-eval task whose generations a saved critic scores (written by critic.lm_eval.write_task; docs/lm-eval.md).
# latent_ppl and latent_nll equal `critic score CRITIC --input samples_{task}_DATE.jsonl` over the samples this
# run logs (--log_samples): keep one generation per document (no repeats) and lm-eval's default filter.
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: {doc_to_text}
doc_to_target: ""
generation_kwargs: {generation_kwargs}
process_results: !function {module}.process_results
metric_list:
  - metric: latent_ppl
    aggregation: !function {module}.latent_ppl
    higher_is_better: false
  - metric: latent_nll
    aggregation: !function {module}.latent_nll
    higher_is_better: false
metadata:
  version: 1.0
"""
"""The task's YAML: ``{task}``, ``{data}`` (the prompts' JSON-lines file), ``{doc_to_text}`` (the prompt, a Jinja
template over a record's fields), ``{generation_kwargs}`` and ``{module}`` (the metrics' module beside it), each
filled in as a JSON value (JSON is YAML)."""

TASK_MODULE = """\
\"\"\"The critic's metrics of the lm-eval task {task} (written by critic.lm_eval.write_task; docs/lm-eval.md).\"\"\"

from critic.lm_eval import aggregations, process_results  # noqa: F401  (process_results: the task's)

latent_ppl, latent_nll = aggregations({critic}, task={task!r}, seed={seed!r}, sections={sections!r},
                                      device={device!r})
"""
"""The task's Python module (lm-eval loads it from beside the YAML): ``{critic}`` is the saved critic's folder as a
Python string, or ``None`` to read it from :data:`CRITIC_ENV` when the metrics are computed."""


# ------------------------------------------------------------------ the metrics
def process_results(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, dict[str, str]]:
    """lm-eval's per-sample step: the sample's generation, handed on to the aggregations (``results``: the filtered
    response of the sample's one request), as ``{"generation": TEXT}`` for each of :data:`METRICS`."""
    if len(results) != 1 or not isinstance(results[0], str):
        raise ValueError(f"a task scored by a critic takes one generated text per sample (a generate_until task "
                         f"with one request and lm-eval's default filter), got {json.dumps(results, default=str)[:80]}")
    item = {"generation": results[0]}
    return {metric: item for metric in METRICS}


def aggregations(critic: str | Path | None = None, *, task: str = "lm-eval", seed: int = 0, sections: str = "auto",
                 device: str = "cpu", threads: int = 1
                 ) -> tuple[Callable[[Sequence[Any]], float], Callable[[Sequence[Any]], float]]:
    """The ``(latent_ppl, latent_nll)`` aggregations of a task: each a function of the per-sample items of
    :func:`process_results` (in the samples' order) that scores their generations with the critic saved at
    ``critic`` (``None``: the folder :data:`CRITIC_ENV` names when it runs), as :func:`score_generations` says;
    ``exp(sum T / sum M)`` and the mean ``T`` over the scored documents, NaN when none could be scored."""
    from ..stats import MEAN, latent_ppl as ppl_of

    def rows(items: Sequence[Any]) -> tuple[list[float], list[float]]:
        folder = critic if critic is not None else os.environ.get(CRITIC_ENV)
        if not folder:
            raise ValueError(f"the task {task!r} was written without a critic: name a saved critic's folder in "
                             f"${CRITIC_ENV}")
        scored = [row for row in score_generations(folder, [_generation(item) for item in items], task=task,
                                                   seed=seed, sections=sections, device=device, threads=threads)
                  if "latent_nll" in row]
        return [row["latent_nll"] for row in scored], [row["latent_steps"] for row in scored]

    def latent_ppl(items: Sequence[Any]) -> float:
        nll, steps = rows(items)
        return float(ppl_of(nll, steps)) if nll else float("nan")

    def latent_nll(items: Sequence[Any]) -> float:
        nll, _ = rows(items)
        return float(MEAN([[t] for t in nll])) if nll else float("nan")

    return latent_ppl, latent_nll


def _generation(item: Any) -> str:
    """The generation of one :func:`process_results` item."""
    if isinstance(item, dict) and isinstance(item.get("generation"), str):
        return item["generation"]
    raise ValueError(f"expected an item of critic.lm_eval.process_results ({{'generation': TEXT}}), got "
                     f"{json.dumps(item, default=str)[:80]}")


_SCORED: dict[tuple, list[dict[str, Any]]] = {}
"""The last scoring's rows, by everything they depend on: the second metric of a run reuses the first's."""

_LOADED: dict[tuple[str, str], Any] = {}
"""The last critic loaded, by folder and device."""


def score_generations(critic: str | Path, generations: Sequence[str], *, task: str = "lm-eval", seed: int = 0,
                      sections: str = "auto", device: str = "cpu", threads: int = 1) -> list[dict[str, Any]]:
    """The rows ``critic score CRITIC --input SAMPLES --seed SEED --sections SECTIONS --threads THREADS`` writes for
    the samples file of a run that generated ``generations`` (in its samples' order): the k-th generation is
    document ``str(k)`` (:func:`critic.inputs.lm_eval_generations`), scored in ``critic score``'s chunks, batches
    and seeds (:func:`critic.streaming.scored_chunks`) with ``threads`` torch threads (restored after).  What the
    reader skipped (empty generations) is said on stderr.  The rows of the last call are kept for the same
    arguments."""
    import torch

    from ..critic import Critic
    from ..inputs import InputOptions, ReadReport, lm_eval_generations
    from ..streaming import scored_chunks

    folder = str(Path(critic).resolve())
    key = (folder, tuple(generations), task, seed, sections, device, threads)
    if key in _SCORED:
        return _SCORED[key]
    if (folder, device) not in _LOADED:
        _LOADED.clear()
        _LOADED[folder, device] = Critic.load(folder, device=device)
    model = _LOADED[folder, device]
    report = ReadReport(path=task, skipped_documents=[])
    docs = lm_eval_generations(generations, InputOptions(sections=sections), name=task, report=report)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = [json.loads(line) for _, output in scored_chunks(model, docs, seed=seed, report=report)
                if output is not None for line in output.data.decode("utf-8").splitlines()]
    finally:
        torch.set_num_threads(before)
    if report.worth_saying():
        print(f"critic: {report.summary()}", file=sys.stderr, flush=True)
    _SCORED.clear()
    _SCORED[key] = rows
    return rows


# ------------------------------------------------------------------ the task
_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def write_task(out: str | Path, *, data: str | Path, critic: str | Path | None = None, task: str = "critic_latent",
               doc_to_text: str = "{{prompt}}", generation_kwargs: Mapping[str, Any] | None = None, seed: int = 0,
               sections: str = "auto", device: str = "cpu") -> Path:
    """Write the task template filled in into the folder ``out`` (give it to lm-eval as ``--include_path OUT``,
    the task as ``--tasks TASK``): ``TASK.yaml`` and the metrics' module ``TASK_critic.py`` beside it.  ``data``: a
    JSON-lines file of prompts (``doc_to_text``: the prompt, a Jinja template over a record's fields);
    ``generation_kwargs``: lm-eval's (``until``, ``max_gen_toks``, ``do_sample``, ``temperature``, ...; default
    ``{"max_gen_toks": 256}``); ``critic``: the saved critic's folder (``None``: :data:`CRITIC_ENV` names it when the
    metrics are computed); ``seed``, ``sections`` and ``device``: those of the ``critic score`` the metrics equal.
    Paths are written absolute.  Returns the YAML's path."""
    from ..inputs import InputOptions

    if not _TASK_NAME.fullmatch(task):
        raise ValueError(f"task name {task!r}: letters, digits, '_' and '-' only, starting with a letter or digit")
    data = Path(data).resolve()
    if not data.is_file():
        raise FileNotFoundError(f"{data}: no such file (the prompts, one JSON object a line)")
    if critic is not None:
        critic = Path(critic).resolve()
        if not (critic / "critic.json").is_file():
            raise FileNotFoundError(f"{critic}: not a saved critic's folder (no critic.json)")
    InputOptions(sections=sections)  # a bad mode fails here, not after the model has generated
    module = f"{task.replace('-', '_')}_critic"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    yaml_path = out / f"{task}.yaml"
    yaml_path.write_text(TASK_YAML.format(
        task=task, data=_json(str(data)), doc_to_text=_json(doc_to_text), module=module,
        generation_kwargs=_json(dict(generation_kwargs) if generation_kwargs is not None else {"max_gen_toks": 256})),
        encoding="utf-8")
    (out / f"{module}.py").write_text(TASK_MODULE.format(
        task=task, critic=repr(str(critic)) if critic is not None else "None", seed=seed, sections=sections,
        device=device), encoding="utf-8")
    return yaml_path


def _json(value: Any) -> str:
    """``value`` as YAML: JSON, non-ASCII characters kept (PyYAML reads an escaped surrogate pair as two)."""
    return json.dumps(value, ensure_ascii=False)
