"""Sample documents from a fine-tuned LM, resumably, and parse them for the critics.

``sample(model_dir, out_dir, n=...)`` draws generations ``0 .. n-1`` in batches: generation ``i``
belongs to batch ``b = i // batch_size`` (rows ``b * batch_size ..``), and batch ``b`` draws from its
own ``torch.Generator`` seeded by ``(seed, b)`` (:func:`~critic.lm.runs.derived_seed`), so what a batch
gives does not depend on what ran before it (:mod:`critic.lm.sampler` for the loop, the window and
the cache).

``out_dir`` holds

* ``settings.json``: model fingerprint, format, n, batch size, budget, seed, device, warps: a rerun
  with other settings is refused (its generations would not be those of one run);
* ``generations.jsonl``: one line per finished generation, appended and fsynced as each ends
  (:mod:`critic.lm.generations`);
* at the end, ``documents.jsonl`` (the parsed generations in index order, ids ``gen-000123``,
  metadata ``index``, ``n_tokens`` and, W/ Title, ``generated_titles``) and ``sample.json`` (settings and
  counts: requested, written, parsed, failures by reason), both written atomically.

Resuming: a rerun reads the log (a torn last line is discarded and reported), skips the batches
whose generations are all written, regenerates each incomplete batch from its seed and appends
only the missing indices; it checks that the regenerated ones it already had are the same (a
mismatch is counted and warned about: a different device or library gives other numbers).  A run
killed at any point and rerun gives exactly the generations of an uninterrupted run.

Generations that do not parse are never dropped silently: each line carries its ``parse_error``
and ``sample.json`` counts them by reason (a generation cut by ``max_new_tokens`` is
``"no end-of-document"``).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from ..document import Document, iter_jsonl, write_jsonl
from ..io import atomic_write_text
from ..terminal import get_logger
from .budget import config_window, require_memory, sampling_memory
from .format import DocumentFormat, GenerationParseError
from .generations import Generation, LogWriter, read_log
from .model import check_model_dir, load_model_dir, model_fingerprint, quiet_transformers
from .runs import SETTINGS_FILE, claim_out_dir, derived_seed, read_json_object
from .sampler import Warp, generate_batch

__all__ = ["sample", "read_generations", "SampleReport", "parse_generation", "doc_id", "unused_special_ids"]

_log = get_logger(__name__)

LOG_FILE = "generations.jsonl"
DOCUMENTS_FILE = "documents.jsonl"
REPORT_FILE = "sample.json"


def doc_id(index: int) -> str:
    return f"gen-{index:06d}"


@dataclass
class SampleReport:
    """What :func:`sample` did.  ``written`` = generations in the log (``requested`` when complete),
    ``new`` = appended by this call, ``parsed`` = documents in ``documents.jsonl``, ``failures`` =
    unparseable generations by reason; ``generated_tokens`` and ``seconds`` = every token this call
    drew (regenerated ones included) and the time of its sampling loop."""

    out_dir: Path
    requested: int
    written: int
    new: int
    parsed: int
    failures: Counter = field(default_factory=Counter)
    finished: int = 0
    total_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    torn_lines: int = 0
    resume_mismatches: int = 0
    complete_before: bool = False
    """The run had finished before this call, which wrote nothing."""

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else float("nan")

    def counts(self) -> dict[str, Any]:
        return {"requested": self.requested, "written": self.written, "new": self.new, "parsed": self.parsed,
                "failures": dict(sorted(self.failures.items())), "finished": self.finished,
                "total_tokens": self.total_tokens, "generated_tokens": self.generated_tokens,
                "seconds": round(self.seconds, 3), "torn_lines": self.torn_lines,
                "resume_mismatches": self.resume_mismatches}


def parse_generation(fmt: DocumentFormat, gen: Generation) -> Document:
    """The document of a generation (raises :class:`GenerationParseError`)."""
    return fmt.parse(gen.text, doc_id=doc_id(gen.index), metadata={"index": gen.index, "n_tokens": gen.n_tokens})


def _parse_error(fmt: DocumentFormat, index: int, text: str) -> str | None:
    try:
        fmt.parse(text, doc_id=doc_id(index))
    except GenerationParseError as exc:
        return exc.reason
    return None


def _check(n: int, batch_size: int, max_new_tokens: int, seed: int) -> None:
    for name, value in (("n", n), ("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")


def sample(model_dir: str | Path, out_dir: str | Path, *, n: int, batch_size: int = 32, max_new_tokens: int = 1024,
           seed: int = 0, device: str = "cpu", temperature: float | None = None, top_k: int | None = None,
           top_p: float | None = None, opening: int = 0, mask_special_tokens: bool = False, progress: bool = True,
           on_write: Callable[[int], None] | None = None) -> SampleReport:
    """Draw ``n`` generations from the model folder ``model_dir`` into ``out_dir`` (module docstring).

    ``temperature``, ``top_k`` (1: greedy decoding), ``top_p`` (nucleus) warp each next-token distribution after
    the first ``opening`` tokens, which are drawn unwarped (:class:`~critic.lm.sampler.Warp`).

    ``mask_special_tokens``: the tokenizer's special tokens other than the format's section marker and end of
    document get probability 0 (:func:`unused_special_ids`): a pretrained model fine-tuned for a few steps still
    writes its own (SmolLM2's ``<repo_name>``, ``<jupyter_output>`` ...) where no training document has one.
    ``on_write(index)`` runs after each generation is appended to the log (tests interrupt there).
    """
    from ..critic import resolve_device

    _check(n, batch_size, max_new_tokens, seed)
    warp = Warp(temperature, top_k, top_p, opening=opening)
    dev = resolve_device(device)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    fmt, training, config = check_model_dir(model_dir)   # every file of the folder, before anything is written
    rows = min(batch_size, n)
    on_device, on_host = sampling_memory(model_dir, config, rows=rows, max_new_tokens=max_new_tokens,
                                         window=training.get("context") or config_window(config))
    require_memory(f"{model_dir}: sampling", on_device, on_host, device=dev,
                   scale=f"for batch {rows} x {max_new_tokens:,} new tokens",
                   fix="lower --max-new-tokens or --batch-size (nothing was written)")
    settings = {"what": "critic lm sample", "model_sha256": model_fingerprint(model_dir),
                "format": fmt.to_dict(), "n": n, "batch_size": batch_size, "max_new_tokens": max_new_tokens,
                "seed": seed, "device": str(dev), "temperature": temperature, "top_k": top_k, "top_p": top_p,
                **({"opening": opening} if opening else {}),  # absent at 0: earlier runs' folders still match
                "mask_special_tokens": mask_special_tokens, "context": training.get("context")}
    claim_out_dir(out_dir, settings, what="sampling")
    if (out_dir / REPORT_FILE).is_file() and (out_dir / DOCUMENTS_FILE).is_file():
        return _report_from_file(out_dir)  # finished before; a removed documents.jsonl is made again below

    log, torn = read_log(out_dir / LOG_FILE, n=n)
    if torn:
        _log.warning("%s: discarded a torn last line (a run was killed while writing it); its generation is drawn "
                     "again", out_dir / LOG_FILE, extra={"label": ""})
    report = SampleReport(out_dir=out_dir, requested=n, written=len(log), new=0, parsed=0, torn_lines=torn)
    n_batches = math.ceil(n / batch_size)
    todo = [b for b in range(n_batches)
            if any(i not in log for i in range(b * batch_size, min((b + 1) * batch_size, n)))]
    if todo:
        _sample_batches(model_dir, out_dir, todo, log, report, fmt=fmt, n=n, batch_size=batch_size,
                        max_new_tokens=max_new_tokens, seed=seed, device=dev, warp=warp, progress=progress,
                        on_write=on_write, mask_special_tokens=mask_special_tokens)
    if report.resume_mismatches:
        _log.warning("%s: %d regenerated generation(s) differ from the ones written before (another device or "
                     "library version?); the written ones are kept", out_dir, report.resume_mismatches,
                     extra={"label": ""})
    return _finish(out_dir, fmt, log, report, {"model": str(model_dir), **settings})


def _sample_batches(model_dir: Path, out_dir: Path, todo: list[int], log: dict[int, Generation], report: SampleReport,
                    *, fmt: DocumentFormat, n: int, batch_size: int, max_new_tokens: int, seed: int,
                    device: torch.device, warp: Warp, progress: bool, on_write, mask_special_tokens: bool) -> None:
    """Generate the batches ``todo``, appending the generations missing from ``log`` (updated in place)."""
    lm = load_model_dir(model_dir, device=str(device))
    end_id = lm.token_id(fmt.end_of_document)
    prompt = [lm.token_id(t) for t in fmt.prompt_tokens]
    if mask_special_tokens:
        warp = replace(warp, masked=unused_special_ids(lm.tokenizer, fmt))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, initial=len(log), desc="sampling", unit="doc")
    start = time.perf_counter()
    try:
        with LogWriter(out_dir / LOG_FILE) as writer, quiet_transformers():
            for b in todo:
                first = b * batch_size
                rows = min(batch_size, n - first)
                generator = torch.Generator(device=device).manual_seed(derived_seed(seed, "batch", b))
                for row, ids, finished in generate_batch(lm.model, rows=rows, prompt=prompt, end_id=end_id,
                                                         max_new_tokens=max_new_tokens, window=lm.context,
                                                         generator=generator, warp=warp, device=device,
                                                         what=str(model_dir), where={"batch": b}):
                    report.generated_tokens += len(ids)
                    index = first + row
                    text = lm.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                    gen = Generation(index, text, len(ids), finished, _parse_error(fmt, index, text))
                    if index in log:
                        report.resume_mismatches += int(log[index] != gen)
                        continue
                    writer.write(gen)
                    log[index] = gen
                    report.new += 1
                    if bar is not None:
                        bar.update(1)
                    if on_write is not None:
                        on_write(index)
    finally:
        report.seconds = time.perf_counter() - start
        if bar is not None:
            bar.close()


def _finish(out_dir: Path, fmt: DocumentFormat, log: dict[int, Generation], report: SampleReport,
            settings: dict[str, Any]) -> SampleReport:
    """Write ``documents.jsonl`` and ``sample.json`` from the complete log."""
    missing = [i for i in range(report.requested) if i not in log]
    if missing:  # cannot happen unless the loop above is wrong: never write a partial result
        raise RuntimeError(f"{out_dir}: generations {missing[:5]} are missing after sampling")
    docs = []
    for index in range(report.requested):
        gen = log[index]
        if gen.parse_error is None:
            docs.append(parse_generation(fmt, gen))
        else:
            report.failures[gen.parse_error] += 1
    report.written = len(log)
    report.parsed = len(docs)
    report.finished = sum(g.finished for g in log.values())
    report.total_tokens = sum(g.n_tokens for g in log.values())
    write_jsonl(docs, out_dir / DOCUMENTS_FILE)
    payload = {"settings": settings, "counts": report.counts()}
    atomic_write_text(out_dir / REPORT_FILE, json.dumps(payload, indent=1, allow_nan=False) + "\n")
    return report


def unused_special_ids(tokenizer, fmt: DocumentFormat) -> tuple[int, ...]:
    """The ids of ``tokenizer``'s special tokens other than ``fmt``'s section marker and end of document: the
    tokens a document rendered in ``fmt`` does not use (a text that spells one is tokenized as one only by a
    tokenizer that matches special tokens in text; the rendered documents of the studies hold none).  The
    format's start of document is among them: it is given before each document, never a target."""
    keep = {fmt.section_marker, fmt.end_of_document}
    special = set(tokenizer.all_special_tokens) | {t.content for t in tokenizer.added_tokens_decoder.values()
                                                   if t.special}
    return tuple(sorted(tokenizer.convert_tokens_to_ids(t) for t in special - keep))


def _report_from_file(out_dir: Path) -> SampleReport:
    """The report of a finished run (nothing sampled by this call)."""
    counts = read_json_object(out_dir / REPORT_FILE).get("counts", {})
    try:
        return SampleReport(out_dir=out_dir, requested=counts["requested"], written=counts["written"], new=0,
                            parsed=counts["parsed"], failures=Counter(counts["failures"]),
                            finished=counts["finished"], total_tokens=counts["total_tokens"], complete_before=True)
    except (KeyError, TypeError):
        raise ValueError(f"{out_dir / REPORT_FILE}: not a sampling report (no counts)") from None


def read_generations(out_dir: str | Path, *, cut: bool = False) -> tuple[list[Document], Counter]:
    """The parsed documents of a finished sampling run and its unparseable generations by reason.

    ``cut``: a generation its token budget cut (``"no end-of-document"``) is a document too, read as if it ended
    there, with ``metadata["cut"] = True``, in index order among the others (a study of loops needs the
    generations that never end: they are the loops)."""
    out_dir = Path(out_dir)
    if not (out_dir / REPORT_FILE).is_file():
        if (out_dir / SETTINGS_FILE).is_file():
            raise ValueError(f"{out_dir}: sampling has not finished (no {REPORT_FILE}); run it again to finish")
        raise ValueError(f"{out_dir}: not a sampling output folder (no {REPORT_FILE})")
    report = _report_from_file(out_dir)
    docs = list(iter_jsonl(out_dir / DOCUMENTS_FILE))
    if len(docs) != report.parsed:
        raise ValueError(f"{out_dir / DOCUMENTS_FILE}: holds {len(docs)} documents, {REPORT_FILE} says {report.parsed}")
    failures = Counter(report.failures)
    if cut and failures["no end-of-document"]:
        fmt = DocumentFormat.from_dict(read_json_object(out_dir / SETTINGS_FILE)["format"])
        log, _ = read_log(out_dir / LOG_FILE, n=report.requested, repair=False)
        for gen in log.values():
            if gen.parse_error == "no end-of-document":
                failures["no end-of-document"] -= 1
                try:
                    doc = parse_generation(fmt, replace(gen, text=gen.text + fmt.end_of_document))
                except GenerationParseError as exc:
                    failures[exc.reason] += 1
                    continue
                doc.metadata["cut"] = True
                docs.append(doc)
        docs.sort(key=lambda d: d.metadata["index"])
    return docs, +failures
