"""Read documents from wherever a model's generations are: one reader for every command.

Besides the project's own document JSONL (``documents``, read by :func:`critic.document.iter_jsonl`),
the registered formats (:func:`critic.registry.register_format`; :data:`FORMAT_NAMES`) read free text: JSON lines with a text field (``text-jsonl``), lm-evaluation-harness
per-sample logs (``lm-eval``), Parquet (``parquet``), a folder written by ``datasets``'
``save_to_disk`` (``datasets``), a folder of ``.txt`` files (``text-dir``), one generation per line
(``lines``) and one text file with a separator between generations (``text``).  ``auto``
(:func:`detect_format`) tells them apart by suffix, folder contents and the first JSON line.  An lm-eval
``--output_path`` folder is several sets, one per samples file, named by model and task
(:func:`lm_eval_output`, :func:`expand_lm_eval_outputs`); an lm-eval run's generations held in memory are read
as its samples file would be (:func:`lm_eval_generations`).

Free text becomes a :class:`Document` with sections as :attr:`InputOptions.sections` says: by default
(``auto``) split at its Markdown headings when it has any, else one untitled section; or always one untitled
section, or always split at headings or at a separator.  Text from a field (JSON, Arrow) is kept verbatim;
text cut from a plain-text file (a line, a piece between separators, a ``.txt`` file) loses its
surrounding whitespace.  A missing id is made up as ``NAME:LINE`` (``NAME:ROW`` for Arrow formats).

Text files (every format but ``parquet`` and ``datasets``) are read by :func:`critic.document.iter_input_lines`:
a ``.gz`` file decompressed (other compressions refused by name), its format told by the name less that
suffix, and a UTF-8 byte order mark at the start dropped.  A named pipe is read as it comes when ``--format`` is
given (``auto`` would have to read it twice to tell a JSON-lines format: it refuses, saying so).

As in :mod:`critic.document`, nothing is dropped silently: bad input raises :class:`DocumentError`
naming the file and line (or row, or file in a folder), and an empty generation is skipped and
counted in the :class:`ReadReport`.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from . import collector
from .document import Document, DocumentError, Section, _json_type, check_file, compression, \
    UniqueIds, is_pipe, iter_input_lines, iter_json_lines, iter_jsonl, read_input, uncompressed_name
from .registry import get_format, list_formats, register_format
from .spans import Span
from .terminal import path_text

__all__ = ["InputOptions", "ReadReport", "InputFormat", "DocumentBuilder", "FORMAT_NAMES", "LM_EVAL_TEXTS", "iter_documents",
           "read_documents", "LineInput", "SpanRead", "line_input", "detect_format", "split_sections", "LmEvalOutput",
           "lm_eval_output", "expand_lm_eval_outputs", "lm_eval_generations"]

BATCH_ROWS = 1024
"""Rows per record batch read from a Parquet file (it is never loaded whole)."""

LM_EVAL_TEXTS = ("continuation", "prompt+continuation")
"""What an lm-eval sample's document holds (:attr:`InputOptions.lm_eval_text`)."""


@dataclass(frozen=True)
class InputOptions:
    """How to read an input: its format and, for free text, where the text, id and sections are.

    ``format`` is ``"auto"`` or a registered format's name (:data:`FORMAT_NAMES`).  ``text_field`` and ``id_field`` name the
    fields of ``text-jsonl``, ``parquet`` and ``datasets`` records.  ``sections`` is ``"auto"``
    (``markdown`` for a text with a Markdown heading, else ``none``, decided per document), ``"none"``
    (one untitled section), ``"markdown"`` (see :func:`split_sections`) or ``"separator:STRING"``.
    ``separator`` is what stands between generations in a ``text`` file.  ``lm_eval_text`` is what an
    lm-eval sample's document holds: the generation alone (``"continuation"``) or the request's prompt
    followed by it (``"prompt+continuation"``, the text the model saw and wrote).
    """

    format: str = "auto"
    text_field: str = "text"
    id_field: str = "id"
    sections: str = "auto"
    separator: str | None = None
    lm_eval_text: str = "continuation"

    def __post_init__(self) -> None:
        if self.format != "auto":
            try:
                get_format(self.format)  # plugins are imported only when the name is not a built-in format's
            except KeyError:
                raise DocumentError(f"unknown input format {self.format!r}; choose auto, "
                                    f"{', '.join(list_formats())}") from None
        if self.sections not in ("auto", "none", "markdown") and not (
                self.sections.startswith("separator:") and len(self.sections) > len("separator:")):
            raise DocumentError(f"unknown sections mode {self.sections!r}; choose auto, none, markdown or "
                                "separator:STRING")
        if self.separator == "":
            raise DocumentError("the separator between generations is empty")
        if self.lm_eval_text not in LM_EVAL_TEXTS:
            raise DocumentError(f"unknown lm-eval text {self.lm_eval_text!r}; choose {' or '.join(LM_EVAL_TEXTS)}")


@dataclass
class ReadReport:
    """What a read did, for the caller to print (:meth:`summary`) and keep in results (:meth:`to_dict`).

    ``skipped`` counts records that gave no document by reason, ``examples`` holds the first place
    (``FILE:LINE``, ``FOLDER row N``, a file) of each reason, ``generated_ids`` counts ids made up as
    ``NAME:LINE`` and ``dropped_metadata`` counts, per field, values left out of metadata because
    they are not JSON (an Arrow timestamp, bytes, NaN).  ``sectioned_by_headings`` counts documents
    that ``--sections auto`` split at their Markdown headings (the others are one untitled section),
    so a set read partly one way and partly the other shows it.  ``warnings`` says what was read as
    asked but likely not as meant (Markdown headings read with ``--sections none``).
    """

    path: str = ""
    format: str = ""
    name: str = ""
    n_read: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    generated_ids: int = 0
    dropped_metadata: Counter[str] = field(default_factory=Counter)
    sectioned_by_headings: int = 0
    unsplit_headings: int = 0
    """Documents with Markdown headings read as one section (``--sections none``): :meth:`finish` warns of many."""
    warnings: list[str] = field(default_factory=list)
    skipped_documents: list[tuple[str, str]] | None = None
    """When a list (a consumer asked for it): each generation skipped since the consumer last emptied it, as
    ``(id, reason)`` -- the id it has, or the ``NAME:NUMBER`` it would have been given.  ``critic score`` lists
    them as rows of its output; records that are no generation (a duplicate filter, a file that is not
    ``.txt``) are counted only."""

    def skip(self, reason: str, where: str, doc_id: str | None = None) -> None:
        """Count one record skipped for ``reason``, remembering where the first one was; ``doc_id``: the id of
        a skipped generation (listed in :attr:`skipped_documents` when that is a list)."""
        self.skipped[reason] += 1
        self.examples.setdefault(reason, where)
        if doc_id is not None and self.skipped_documents is not None:
            self.skipped_documents.append((doc_id, reason))

    def merge(self, part: "ReadReport") -> None:
        """Add what the read of a later part of the same input (a :class:`LineInput` span's) counted."""
        self.n_read += part.n_read
        self.skipped.update(part.skipped)
        for reason, where in part.examples.items():
            self.examples.setdefault(reason, where)
        self.generated_ids += part.generated_ids
        self.dropped_metadata.update(part.dropped_metadata)
        self.sectioned_by_headings += part.sectioned_by_headings
        self.unsplit_headings += part.unsplit_headings

    def finish(self) -> None:
        """After the last document: :class:`DocumentError` when the input gave none (nothing to criticise), and a
        warning when most documents were read whole under ``--sections none`` though they have Markdown headings
        (not an error, as it is what was asked, but a section critic then sees one untitled section per document
        and its verdict is meaningless)."""
        if not self.n_read:
            raise DocumentError(f"{self.path}: holds no documents" + (f"; {self.skips()}" if self.skipped else ""))
        if self.unsplit_headings * 2 > self.n_read:
            self.warnings.append(
                f"{self.unsplit_headings} of {self.n_read} documents have Markdown headings but --sections none "
                "reads each as one untitled section: use --sections auto or markdown")

    def skips(self) -> str:
        """``"skipped N: REASON (first at WHERE), ..."``, or ``""`` when nothing was skipped."""
        if not self.skipped:
            return ""
        several = len(self.skipped) > 1
        reasons = ", ".join(f"{reason}{f' ×{n}' if several else ''} (first at {self.examples[reason]})"
                            for reason, n in self.skipped.items())
        return f"skipped {self.skipped.total()}: {reasons}"

    def worth_saying(self) -> bool:
        """Whether :meth:`summary` tells more than the count: a skip, made-up ids, documents split at
        headings by ``--sections auto``, or a warning (commands print it on stderr then)."""
        return bool(self.skipped or self.generated_ids or self.sectioned_by_headings or self.warnings)

    def summary(self) -> str:
        """One line for stderr, e.g. ``gens.jsonl: 998 documents (text-jsonl); skipped 2: empty text
        (first at gens.jsonl:17); 998 ids made as gens:LINE``."""
        parts = [f"{self.path}: {self.n_read} documents ({self.format})"]
        if self.skipped:
            parts.append(self.skips())
        if self.generated_ids:
            parts.append(f"{self.generated_ids} ids made as {self.name}:{get_format(self.format).unit}")
        if self.dropped_metadata:
            parts.append("not JSON, left out of metadata: "
                         + ", ".join(f"{key} ×{n}" for key, n in self.dropped_metadata.items()))
        if self.sectioned_by_headings:
            parts.append(f"{self.sectioned_by_headings} split at Markdown headings (--sections auto)")
        parts += [f"warning: {warning}" for warning in self.warnings]
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "n_read": self.n_read, "skipped": dict(self.skipped),
                "examples": dict(self.examples), "generated_ids": self.generated_ids,
                "dropped_metadata": dict(self.dropped_metadata),
                "sectioned_by_headings": self.sectioned_by_headings, "warnings": list(self.warnings)}


# ------------------------------------------------------------------ from free text to documents
_HEADING = re.compile(r"(#{1,6}) (.*)")


def split_sections(text: str, mode: str) -> list[Section]:
    """Cut ``text`` into sections as :attr:`InputOptions.sections` says.

    ``none``: one untitled section, verbatim.  ``markdown``: a line starting with one to six ``#`` and
    a space is the title of the section below it (not inside a ```` ``` ```` or ``~~~`` code fence);
    text before the first heading is an untitled first section when it is not blank.
    ``separator:STRING``: untitled sections between the STRINGs, blank ones dropped.  In these two
    modes section texts lose their surrounding whitespace.  ``auto``: ``markdown`` when the text has a
    heading with a non-blank title, else ``none`` (:func:`_sections_mode`).
    """
    mode = _sections_mode(text, mode)
    if mode == "none":
        return [Section(None, text)]
    if mode.startswith("separator:"):
        pieces = (piece.strip() for piece in text.split(mode[len("separator:"):]))
        return [Section(None, piece) for piece in pieces if piece]
    sections: list[Section] = []
    title: str | None = None
    body: list[str] = []
    for line, heading in _markdown_lines(text):
        if heading is None:
            body.append(line)
            continue
        if title is not None or "".join(body).strip():
            sections.append(Section(title, "\n".join(body).strip()))
        title, body = heading.group(2).strip(), []
    if title is not None or "".join(body).strip():
        sections.append(Section(title, "\n".join(body).strip()))
    return sections


def _markdown_lines(text: str) -> Iterator[tuple[str, re.Match | None]]:
    """Each line of ``text`` with its Markdown heading match, ``None`` for a line of text (inside a
    ```` ``` ```` or ``~~~`` code fence a ``#`` line is code, a shell or Python comment)."""
    in_fence = False
    for line in text.splitlines():
        if line.startswith(("```", "~~~")):
            in_fence = not in_fence
        yield line, None if in_fence else _HEADING.fullmatch(line)


def _has_titled_heading(text: str) -> bool:
    """Whether ``text`` has a Markdown heading with a non-blank title.  A bare ``#`` line does not count:
    a degenerate generation of ``"# "`` lines is no sectioned document, and auto must not turn it into
    many empty sections with empty titles."""
    return any(heading is not None and heading.group(2).strip() for _, heading in _markdown_lines(text))


def _sections_mode(text: str, mode: str) -> str:
    """The mode ``text`` is cut in: ``auto`` becomes ``markdown`` when the text has a titled heading, else
    ``none``; other modes are kept.  Decided per document, so a document's sections never depend on the
    other documents of its file."""
    if mode != "auto":
        return mode
    return "markdown" if _has_titled_heading(text) else "none"


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


class DocumentBuilder:
    """Turns one input's generations into documents: skips empty text, makes and claims ids (:attr:`ids`),
    counts how the sections were found in the report."""

    def __init__(self, name: str, options: InputOptions, report: ReadReport) -> None:
        self.name, self.options, self.report = name, options, report
        self.ids = UniqueIds()

    def document(self, where: str, number: int | str, text: str, doc_id: str | None = None,
                 metadata: dict[str, Any] | None = None) -> Document | None:
        """The document of one generation found at ``where`` (``number``: its line or row, as the format's
        ``unit`` says), or ``None`` when it is skipped; ``doc_id`` ``None`` makes the id ``NAME:NUMBER``."""
        mode = _sections_mode(text, self.options.sections)
        sections = split_sections(text, mode) if text.strip() else []
        if not sections:
            self.report.skip("empty text", where, f"{self.name}:{number}" if doc_id is None else doc_id)
            return None
        if doc_id is None:
            doc_id = f"{self.name}:{number}"
            self.report.generated_ids += 1
        self.ids.claim(doc_id, where)
        if self.options.sections == "auto" and mode == "markdown":
            self.report.sectioned_by_headings += 1
        elif self.options.sections == "none" and _has_titled_heading(text):
            self.report.unsplit_headings += 1
        return Document(id=doc_id, sections=tuple(sections), metadata=metadata or {})

    def record(self, where: str, number: int, record: Any) -> Document | None:
        """The document of one JSON object or Arrow row with the text and id fields of the options."""
        text_field, id_field = self.options.text_field, self.options.id_field
        if not isinstance(record, dict):
            raise DocumentError(f"{where}: expected a JSON object, got a {_json_type(record)}")
        if text_field not in record:
            raise DocumentError(f"{where}: no {text_field!r} field (keys: {', '.join(map(str, record))}); "
                                "name the field holding the generation with --text-field")
        text = record[text_field]
        if not isinstance(text, str):
            raise DocumentError(f"{where}: field {text_field!r} is a {_json_type(text)}, not a string "
                                "(--text-field names the field holding the generation)")
        metadata = {}
        for key, value in record.items():
            if key in (text_field, id_field):
                continue
            if _is_json(value):
                metadata[key] = value
            else:
                self.report.dropped_metadata[key] += 1
        doc_id = _record_id(record.get(id_field), where, id_field, "; --id-field names the id field")
        return self.document(where, number, text, doc_id, metadata)


def _record_id(value: Any, where: str, id_field: str, hint: str = "") -> str | None:
    """A record's id as a string, ``None`` when it has none; :class:`DocumentError` for another value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise DocumentError(f"{where}: field {id_field!r} must be a non-empty string or an integer, got "
                            f"{value!r} ({_json_type(value)}){hint}")
    return str(value)


def _line_number(where: str) -> int:
    """The line of an :func:`iter_json_lines` ``"FILE:LINE"``."""
    return int(where.rpartition(":")[2])


def _decode(data: bytes, path: Path, first_line: int = 1) -> str:
    """``data`` (read from ``path`` starting at ``first_line``) as text; not UTF-8 names the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data[:exc.start].count(b"\n")
        raise DocumentError(f"{path}:{line}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DocumentError("reading Parquet and datasets folders needs pyarrow: pip install pyarrow "
                            "(critic[arrow])") from None
    return pyarrow


# ------------------------------------------------------------------ formats
class InputFormat:
    """One way generations are stored: a ``name``, a one-line ``help``, the ``unit`` made-up ids count (``LINE``
    or ``ROW``), :meth:`documents`, and how ``auto`` knows it (:func:`detect_format`):

    - a folder: ``folder_files`` (one of these names in it) or ``folder_suffix`` (files of this suffix in it);
    - a file: one of ``suffixes`` (after a compression suffix), then :meth:`claims_file` (a format that reads
      JSON lines says no there and decides by the first record, :meth:`claims_record`; ``record_hint`` says
      what it looks for when no format takes a record).

    A new format is a subclass registered with :func:`critic.registry.register_format` (a plugin's too); the
    formats are tried in the order they were registered.

    ``line_records``: each line of a file is read on its own (no state from one line to the next), so a
    :class:`~critic.spans.Span` of lines can be read by itself (:class:`LineInput`); :meth:`documents` is then
    given a span as ``path`` too (it reads it with :func:`~critic.document.iter_input_lines` or
    :func:`~critic.document.iter_json_lines`, and names it as its file)."""

    name: str
    help: str
    unit = "LINE"
    line_records = False
    folder_files: tuple[str, ...] = ()
    folder_suffix: str | None = None
    suffixes: tuple[str, ...] = ()

    def documents(self, path: Path, options: InputOptions, build: DocumentBuilder) -> Iterator[Document]:
        """The documents at ``path``, made with ``build``; :class:`DocumentError` for bad input."""
        raise NotImplementedError

    def claims_file(self, path: Path, options: InputOptions) -> bool:
        """Whether a file of one of :attr:`suffixes` is this format without reading it (``False``: the first
        record decides); may raise :class:`DocumentError` with advice (a ``.txt`` file without a separator)."""
        return type(self).claims_record is InputFormat.claims_record

    def claims_record(self, record: dict, options: InputOptions) -> bool:
        """Whether the first JSON object of a file is this format's."""
        return False

    def record_hint(self, options: InputOptions) -> str:
        """What :meth:`claims_record` looks for, for the message when no format takes a record."""
        return ""


class DocumentsFormat(InputFormat):
    name = "documents"
    line_records = True
    help = 'the project\'s document JSONL: {"id", "title", "sections": [{"title", "text"}], "metadata"}'
    suffixes = (".jsonl", ".json")

    def claims_record(self, record, options):  # a misspelt 'sections' gets the document reader's "did you mean"
        return "sections" in record or (options.text_field not in record and _looks_like_sections(record))

    def record_hint(self, options):
        return "no 'sections' (documents)"

    def documents(self, path, options, build):
        return iter_jsonl(path, build.ids)  # documents carry their own sections: options.sections is for free text


class TextJsonlFormat(InputFormat):
    name = "text-jsonl"
    line_records = True
    help = "JSON lines, each an object with the generation in --text-field and its id in --id-field"
    suffixes = (".jsonl", ".json")

    def claims_record(self, record, options):
        return options.text_field in record

    def record_hint(self, options):
        return f"no {options.text_field!r} (text-jsonl)"

    def documents(self, path, options, build):
        for where, obj in iter_json_lines(path):
            doc = build.record(where, _line_number(where), obj)
            if doc is not None:
                yield doc


_UNSET = object()
_LM_EVAL_NAME = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(\.\d+)?)\.jsonl")


class LmEvalFormat(InputFormat):
    """lm-evaluation-harness ``--log_samples`` output, ``samples_TASK_DATE.jsonl``.

    Each line is one document of a task: ``doc_id``, ``doc``, ``target``, ``arguments`` (the requests'
    arguments), ``resps`` (the raw responses, one list per request) and ``filtered_resps``.  The text
    is the raw generation ``resps[0][0]`` (a filter may cut it down to an extracted answer), else
    ``filtered_resps[0]``.  A task run with ``repeats`` holds several generations in ``resps[0]``:
    each is a document, ``DOC_ID/R`` (R = 0, 1, ...) with ``repeat: R`` in its metadata; a single
    generation keeps the id ``DOC_ID``.  With ``lm_eval_text="prompt+continuation"`` the text is the
    request's context immediately followed by the generation (the model continued it verbatim).  A
    task with several filters logs each document once per filter, with the same ``resps``: lines of
    filters other than the first one's are skipped and counted.
    """

    name = "lm-eval"
    help = "lm-evaluation-harness per-sample logs (samples_TASK_DATE.jsonl) of a generate_until task"
    suffixes = (".jsonl", ".json")

    def claims_record(self, record, options):
        return "doc_id" in record and ("resps" in record or "filtered_resps" in record)

    def record_hint(self, options):
        return "no 'doc_id' with 'resps' (lm-eval)"

    def documents(self, path, options, build):
        task = _LM_EVAL_NAME.fullmatch(uncompressed_name(path).name)
        first_filter: Any = _UNSET
        for where, obj in iter_json_lines(path):
            if not isinstance(obj, dict) or obj.get("doc_id") is None:
                raise DocumentError(f"{where}: not an lm-eval sample (an object with 'doc_id'), got "
                                    + (f"keys {', '.join(obj)}" if isinstance(obj, dict) else f"a {_json_type(obj)}"))
            if first_filter is _UNSET:
                first_filter = obj.get("filter")
            elif obj.get("filter") != first_filter:
                build.report.skip(f"filter {obj.get('filter')!r} (same generations as {first_filter!r})", where)
                continue
            generations = _lm_eval_generations(obj, where)
            prompt = _lm_eval_prompt(obj, where) if options.lm_eval_text == "prompt+continuation" else ""
            doc_id = _record_id(obj["doc_id"], where, "doc_id")
            metadata = {"task": task["task"]} if task else {}
            if "target" in obj:
                metadata["target"] = obj["target"]
            repeated = len(generations) > 1
            for r, generation in enumerate(generations):
                # a blank generation stays blank (skipped and counted as empty), prompt or not
                text = prompt + generation if generation.strip() else generation
                doc = build.document(where, _line_number(where), text, f"{doc_id}/{r}" if repeated else doc_id,
                                     {**metadata, "repeat": r} if repeated else metadata)
                if doc is not None:
                    yield doc


def _lm_eval_generations(obj: dict, where: str) -> list[str]:
    """A sample's generations: every one of ``resps[0]`` (several when the task ran with ``repeats``),
    else ``filtered_resps[0]``; :class:`DocumentError` for the log of a task that generates nothing."""
    resps, filtered = obj.get("resps"), obj.get("filtered_resps")
    first = resps[0] if _non_empty_list(resps) and _non_empty_list(resps[0]) else None
    generations = first if first else [filtered[0]] if _non_empty_list(filtered) else [None]
    if not all(isinstance(g, str) for g in generations) or not _takes_generation_arguments(obj.get("arguments")):
        shown = json.dumps(resps if resps is not None else filtered)
        raise DocumentError(f"{where}: not the output of a generation task (resps: {shown[:80]}); a "
                            "loglikelihood task logs [logprob, is_greedy] and loglikelihood_rolling a "
                            "log-likelihood: criticise the samples of a generate_until task")
    return generations


def _lm_eval_prompt(obj: dict, where: str) -> str:
    """The context of a sample's first request, the prompt its generations continue; without one
    (no ``arguments``, or not a string first) :class:`DocumentError` saying the option that asked."""
    request = _first_request(obj.get("arguments"))
    context = request[0] if isinstance(request, list) and request else None
    if not isinstance(context, str):
        shown = json.dumps(obj.get("arguments"))
        raise DocumentError(f"{where}: --lm-eval-text prompt+continuation needs the prompt, the first request's "
                            f"context, and this sample has none (arguments: {shown[:80]}); criticise the "
                            "generations alone with --lm-eval-text continuation")
    return context


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _first_request(arguments: Any) -> Any:
    """The first request's arguments as logged: ``{"gen_args_0": {"arg_0": context, "arg_1": {...}}}``
    gives ``[context, {...}]``, as does (older logs) ``[[context, {...}], ...]``; ``None`` when absent."""
    if isinstance(arguments, dict):
        first = arguments.get("gen_args_0")
        return list(first.values()) if isinstance(first, dict) else first
    return arguments[0] if isinstance(arguments, list) and arguments else None


def _takes_generation_arguments(arguments: Any) -> bool:
    """Whether the first request is a ``generate_until`` one: ``(context, {generation kwargs})``;
    unknown (absent, empty) arguments are taken on trust."""
    first = _first_request(arguments)
    return first is None or (isinstance(first, list) and len(first) > 1 and isinstance(first[1], dict))



def lm_eval_generations(generations: Iterable[Any], options: InputOptions = InputOptions(), *, name: str,
                        report: ReadReport) -> Iterator[Document]:
    """The documents of an lm-eval task's generations held in memory, one per sample in order (an lm-eval run's own
    ``process_results`` items: :mod:`critic.lm_eval`), made as :class:`LmEvalFormat` makes those of the samples
    file the run logs: the k-th generation is the document ``str(k)`` (the sample's ``doc_id`` in a run over the
    whole task on one process), sections as ``options`` say, an empty one skipped and counted in ``report`` (listed
    in its ``skipped_documents`` when that is a list), ``{"task": name}`` its metadata.  ``options.lm_eval_text``
    must be ``continuation``: the prompt is not among the items.  ``report`` is finished by the caller."""
    if options.lm_eval_text != "continuation":
        raise DocumentError(f"{name}: the generations of an lm-eval run are read alone (lm_eval_text "
                            f"'continuation'), not {options.lm_eval_text!r}: the prompt is not among them")
    report.name, report.format = name, LmEvalFormat.name
    build = DocumentBuilder(name, options, report)
    for number, generation in enumerate(generations):
        where = f"{name} sample {number}"
        if not isinstance(generation, str):
            raise DocumentError(f"{where}: a generation must be a string, got a {_json_type(generation)}")
        doc = build.document(where, number, generation, str(number), {"task": name})
        if doc is not None:
            report.n_read += 1
            yield doc


# ------------------------------------------------------------------ lm-eval output folders
@dataclass(frozen=True)
class LmEvalOutput:
    """The samples files of an lm-evaluation-harness ``--output_path`` folder (:func:`lm_eval_output`).

    lm-eval writes ``OUTPUT/MODEL/results_DATE.json`` and, with ``--log_samples``, one
    ``OUTPUT/MODEL/samples_TASK_DATE.jsonl`` per task (``MODEL``: the model's name with ``/`` and other characters
    a path cannot hold made ``__``), adding files on every run and replacing none.  ``sets`` names each samples file
    ``MODEL/TASK``, or ``TASK`` for one directly in the folder (a model's folder, or that of an ``--output_path
    FILE.json``), in the order of their names; of several runs of one model and task it holds the latest (by the
    date in the file's name) and lists the others in ``superseded``."""

    folder: Path
    sets: dict[str, Path]
    superseded: tuple[Path, ...] = ()

    def not_one_set(self) -> DocumentError:
        """The error of reading the folder where one set is read (a folder is no format of its own)."""
        return DocumentError(f"{path_text(self.folder)}: an lm-eval output folder of {len(self.sets)} samples file(s) "
                             f"({', '.join(self.sets)}): give one of them, e.g. "
                             f"{path_text(next(iter(self.sets.values())))}, or the folder as candidate sets "
                             "(NAME=DIR: each samples file a set)")

    def note(self) -> str | None:
        """What was left out, for the log (``None`` when nothing was)."""
        if not self.superseded:
            return None
        return (f"{path_text(self.folder)}: an lm-eval output folder: each model and task read from its latest run; "
                f"{len(self.superseded)} earlier samples file(s) left out: "
                + ", ".join(path_text(p.relative_to(self.folder)) for p in self.superseded))


def lm_eval_output(path: str | Path) -> LmEvalOutput | None:
    """``path`` as an lm-eval ``--output_path`` folder (:class:`LmEvalOutput`): a folder holding samples files
    (``samples_TASK_DATE.jsonl``) or folders that hold them, hidden ones aside; ``None`` for anything else."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    latest: dict[str, tuple[str, Path]] = {}
    superseded: list[Path] = []

    def scan(where: Path, prefix: str) -> None:
        for file in sorted(where.iterdir()):
            match = _LM_EVAL_NAME.fullmatch(file.name)
            if match is None or not file.is_file():
                continue
            name, run = prefix + path_text(match["task"]), (match["date"], file)
            if name in latest:
                older, run = sorted([latest[name], run])
                superseded.append(older[1])
            latest[name] = run

    scan(folder, "")
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and not sub.name.startswith("."):
            scan(sub, path_text(sub.name) + "/")
    if not latest:
        return None
    return LmEvalOutput(folder, {name: latest[name][1] for name in sorted(latest)}, tuple(sorted(superseded)))


def expand_lm_eval_outputs(named: Mapping[str, str | Path], options: InputOptions = InputOptions(), *,
                           log: Callable[[str], None] | None = None) -> dict[str, Path]:
    """``named`` (set name -> path) with each lm-eval ``--output_path`` folder (:func:`lm_eval_output`; read so when
    ``options.format`` is ``auto`` or ``lm-eval``) replaced by its samples files, ``NAME/MODEL/TASK`` each
    (``NAME/TASK`` for a model's folder); files and other folders are kept as given.  What a folder left out
    (earlier runs) is said through ``log``; a set name given twice is a :class:`ValueError`."""
    out: dict[str, Path] = {}
    for name, path in named.items():
        output = lm_eval_output(path) if options.format in ("auto", LmEvalFormat.name) else None
        parts = {name: Path(path)} if output is None else {f"{name}/{sub}": file for sub, file in output.sets.items()}
        if output is not None and output.note() and log is not None:
            log(output.note())
        for part, file in parts.items():
            if part in out:
                raise ValueError(f"the set name {part!r} is given twice: {path_text(out[part])} and {path_text(file)}")
            out[part] = file
    return out

class ParquetFormat(InputFormat):
    name = "parquet"
    help = "a Parquet file, one generation a row in --text-field (needs pyarrow)"
    unit = "ROW"
    suffixes = (".parquet",)

    def documents(self, path, options, build):
        pa = _pyarrow()
        check_file(path)
        if is_pipe(path):
            raise DocumentError(f"{path}: a pipe cannot be read as Parquet (it is read from its end, so it must be "
                                "a file): write it to a file first")
        if compression(path):
            raise DocumentError(f"{path}: a {compression(path)}-compressed Parquet file: decompress it first "
                                "(Parquet compresses its columns itself)")
        row = 0
        try:
            with pa.parquet.ParquetFile(str(path)) as parquet:
                for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                    for record in batch.to_pylist():
                        row += 1
                        doc = build.record(f"{path} row {row}", row, record)
                        if doc is not None:
                            yield doc
        except (pa.ArrowException, OSError) as exc:
            raise DocumentError(f"{path}: not a readable Parquet file ({exc})") from None


class DatasetsFormat(InputFormat):
    name = "datasets"
    help = "a folder written by datasets' save_to_disk (state.json and data-*.arrow; needs pyarrow)"
    unit = "ROW"
    folder_files = ("dataset_info.json", "state.json", "dataset_dict.json")

    def documents(self, path, options, build):
        pa = _pyarrow()
        if not path.is_dir():
            raise DocumentError(f"{path}: no such folder (a datasets folder holds state.json and data-*.arrow)")
        if (path / "dataset_dict.json").is_file():
            splits = _json_file(path / "dataset_dict.json").get("splits")
            raise DocumentError(f"{path}: a DatasetDict with splits {', '.join(map(str, splits or []))}; "
                                "point at one of its sub-folders" + (f", e.g. {path / splits[0]}" if splits else ""))
        state = _json_file(path / "state.json")
        files = state.get("_data_files")
        if not isinstance(files, list) or not files or not all(
                isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files):
            raise DocumentError(f"{path / 'state.json'}: '_data_files' is not a list of {{\"filename\": ...}}")
        row = 0
        for entry in files:
            file = path / entry["filename"]
            if not file.is_file():
                raise DocumentError(f"{file}: no such file (state.json lists it)")
            try:
                with pa.memory_map(str(file)) as source:
                    for batch in pa.ipc.open_stream(source):
                        for record in batch.to_pylist():
                            row += 1
                            doc = build.record(f"{path} row {row}", row, record)
                            if doc is not None:
                                yield doc
            except (pa.ArrowException, OSError) as exc:
                raise DocumentError(f"{file}: not a readable Arrow stream ({exc})") from None


def _json_file(path: Path) -> dict:
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    try:
        value = json.loads(_decode(read_input(path), path))
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise DocumentError(f"{path}: JSON nested deeper than Python's JSON parser allows") from None
    if not isinstance(value, dict):
        raise DocumentError(f"{path}: expected a JSON object, got a {_json_type(value)}")
    return value


class TextDirFormat(InputFormat):
    name = "text-dir"
    help = "a folder of .txt files, one generation each, the file name (less .txt) its id"
    folder_suffix = ".txt"

    def documents(self, path, options, build):
        if not path.is_dir():
            raise DocumentError(f"{path}: no such folder")
        for number, file in enumerate(sorted(path.iterdir()), start=1):
            if file.suffix.lower() != ".txt" or not file.is_file():
                build.report.skip("not a .txt file", str(file))
                continue
            doc = build.document(str(file), number, _decode(read_input(file), file).strip(), path_text(file.stem))
            if doc is not None:
                yield doc


class LinesFormat(InputFormat):
    name = "lines"
    line_records = True
    help = "a text file, one generation a line (a blank line is an empty generation, skipped and counted)"

    def documents(self, path, options, build):
        for number, raw in iter_input_lines(path):
            doc = build.document(f"{path}:{number}", number, _decode(raw, path, number).strip())
            if doc is not None:
                yield doc


class TextFormat(InputFormat):
    """One text file, generations separated by :attr:`InputOptions.separator`.

    Blank text before the first or after the last separator is no generation (a file may start or
    end with one); a blank piece in between is an empty generation, skipped and counted.  A made-up
    id is ``NAME:LINE`` with the line where the generation starts; the second, third ... generation starting
    on one line (a separator within a line) is ``NAME:LINE.2``, ``NAME:LINE.3`` ...
    """

    name = "text"
    help = "a text file holding several generations separated by --separator"
    unit = "LINE[.K]"
    suffixes = (".txt",)

    def claims_file(self, path, options):
        if options.separator is None:
            raise DocumentError(f"{path}: a .txt file: give --format lines (one generation per line) or "
                                "--separator STRING (generations separated by STRING)")
        return True

    def documents(self, path, options, build):
        if options.separator is None:
            raise DocumentError(f"{path}: format 'text' needs the separator between generations "
                                "(--separator STRING); for one generation per line use --format lines")
        pieces = _decode(read_input(path), path).split(options.separator)
        line, last = 1, len(pieces) - 1
        on_line: Counter[int] = Counter()  # generations seen starting on each line
        for k, piece in enumerate(pieces):
            generation = piece.strip()
            start = line + piece[:len(piece) - len(piece.lstrip())].count("\n") if generation else line
            if generation or 0 < k < last:
                on_line[start] += 1
                number = start if on_line[start] == 1 else f"{start}.{on_line[start]}"
                doc = build.document(f"{path}:{start}", number, generation)
                if doc is not None:
                    yield doc
            line += piece.count("\n") + options.separator.count("\n")


for _format in (DocumentsFormat(), LmEvalFormat(), TextJsonlFormat(), ParquetFormat(), DatasetsFormat(),
                TextDirFormat(), LinesFormat(), TextFormat()):
    register_format(_format)


class _FormatNames(Sequence[str]):
    """``auto`` and the name of every registered input format (plugins' included), read when asked: the choices
    of a config's ``format`` key."""

    def __getitem__(self, index):
        return ["auto", *list_formats()][index]

    def __len__(self) -> int:
        return 1 + len(list_formats())


FORMAT_NAMES: Sequence[str] = _FormatNames()


# ------------------------------------------------------------------ reading
def detect_format(path: str | Path, options: InputOptions = InputOptions()) -> str:
    """The format ``auto`` reads ``path`` as (each format says how it is known: :class:`InputFormat`, tried in
    the order registered); :class:`DocumentError` naming what was looked at when nothing fits.

    Built in: a folder is ``datasets`` when it has ``dataset_info.json``, ``state.json`` or
    ``dataset_dict.json``, else ``text-dir`` when it has ``.txt`` files.  ``.parquet`` is ``parquet``;
    ``.txt`` is ``text`` when a separator is given.  In a ``.jsonl`` or ``.json`` file the first object
    decides: ``sections`` makes ``documents``, ``doc_id`` with ``resps`` or ``filtered_resps`` ``lm-eval``,
    the text field ``text-jsonl``.  A compression suffix (``.gz``) is looked through (``gens.jsonl.gz`` is a
    ``.jsonl`` file).  A named pipe is refused where its first line would decide (it can be read only once).
    The formats registered so far decide first; only a path none of them knows imports the plugins (whose formats
    may know it), so reading a built-in format imports no critic.
    """
    known = list_formats(plugins=False)
    try:
        return _detect_format(Path(path), options, list(known.values()))
    except DocumentError:
        every = list_formats()
        if len(every) == len(known):
            raise
        return _detect_format(Path(path), options, list(every.values()))


def _detect_format(path: Path, options: InputOptions, formats: list[InputFormat]) -> str:
    """:func:`detect_format` over ``formats``, in their order."""
    if path.is_dir():
        names = {p.name for p in path.iterdir()}
        for fmt in formats:
            if names & set(fmt.folder_files) or (
                    fmt.folder_suffix and any(Path(n).suffix.lower() == fmt.folder_suffix for n in names)):
                return fmt.name
        output = lm_eval_output(path)
        if output is not None:
            raise output.not_one_set()
        known = [n for f in formats for n in f.folder_files] + [f"{f.folder_suffix} files" for f in formats
                                                                 if f.folder_suffix]
        raise DocumentError(f"{path}: " + ("empty folder" if not names else f"a folder with none of {', '.join(known)}")
                            + "; give --format")
    if not os.path.exists(path):
        raise DocumentError(f"{path}: no such file or folder")
    suffix = uncompressed_name(path).suffix.lower()
    candidates = [f for f in formats if suffix in f.suffixes]
    if not candidates:
        known = list(dict.fromkeys(s for f in formats for s in f.suffixes))
        raise DocumentError(f"{path}: cannot tell the format from the suffix {suffix or '(none)'!r} "
                            f"(auto knows {', '.join(known)} and folders); give --format")
    for fmt in candidates:
        if fmt.claims_file(path, options):
            return fmt.name
    if is_pipe(path):  # telling the format reads its first line, and a pipe can be read only once
        raise DocumentError(f"{path}: a pipe can be read only with --format FORMAT given (auto would read its "
                            "first line to tell the format, and a pipe can be read only once)")
    for where, obj in iter_json_lines(path):
        if not isinstance(obj, dict):
            raise DocumentError(f"{where}: expected a JSON object per line, got a {_json_type(obj)}")
        for fmt in candidates:
            if fmt.claims_record(obj, options):
                return fmt.name
        hints = ", ".join(h for h in (f.record_hint(options) for f in candidates) if h)
        raise DocumentError(f"{where}: cannot tell the format: {hints}; keys: {', '.join(obj)}; "
                            "name the text field with --text-field or give --format")
    raise DocumentError(f"{path}: holds no documents (empty, or blank lines only)")


def _looks_like_sections(obj: dict) -> bool:
    import difflib

    return any(difflib.get_close_matches(str(key), ["sections"], n=1, cutoff=0.75) for key in obj)


def iter_documents(path: str | Path, options: InputOptions = InputOptions(), *, name: str | None = None,
                   report: ReadReport | None = None) -> Iterator[Document]:
    """Yield the documents at ``path`` as ``options`` say, filling ``report`` as it goes.

    ``name`` (made-up ids are ``NAME:LINE``) defaults to the file's stem (less a compression suffix:
    ``gens`` for ``gens.jsonl.gz``), or a folder's name.  The report's warnings are added once the last
    document has been read.  An input that gives no document at all (an empty file or Parquet table, only
    blank lines or empty generations) is an error once it has been read (nothing to criticise):
    :class:`DocumentError` ``"PATH: holds no documents"`` with what was skipped.
    """
    path = Path(path)
    fmt = detect_format(path, options) if options.format == "auto" else options.format
    report = ReadReport() if report is None else report
    report.path, report.format = str(path), fmt
    report.name = name if name is not None else _input_name(path)
    build = DocumentBuilder(report.name, options, report)
    for doc in get_format(fmt).documents(path, options, build):
        report.n_read += 1
        yield doc
    report.finish()


def _input_name(path: Path) -> str:
    """What made-up ids are named by: a file's stem (less a compression suffix), or a folder's name."""
    return path_text(path.name if path.is_dir() else uncompressed_name(path).stem)


@dataclass(frozen=True)
class SpanRead:
    """What reading one span of a :class:`LineInput` gave: its documents, its part of the read's report (its
    skipped generations listed in ``skipped_documents``) and the ids it claimed, for the reader of the whole to
    check across spans (:meth:`ReadReport.merge`, :meth:`~critic.document.UniqueIds.claim_all`)."""

    documents: list[Document]
    report: ReadReport
    ids: UniqueIds


@dataclass(frozen=True)
class LineInput:
    """An input whose lines are read each on its own: a regular, uncompressed file of a format with
    :attr:`InputFormat.line_records`.  A span of its lines (:func:`critic.spans.plan_spans`) is read anywhere
    the file can be opened (:meth:`read`), so a stream is cut by newlines alone and each chunk read by whoever
    scores it.  ``options.format`` is the format's name (told once, by :func:`line_input`)."""

    path: str
    options: InputOptions
    name: str

    def report(self) -> ReadReport:
        """An empty report of a read of the whole input."""
        return ReadReport(path=self.path, format=self.options.format, name=self.name)

    def read(self, span: Span) -> SpanRead:
        """The documents of ``span`` (a span of this file); :class:`DocumentError` as for the whole file."""
        report = ReadReport(path=self.path, format=self.options.format, name=self.name, skipped_documents=[])
        build = DocumentBuilder(self.name, self.options, report)
        with collector.paused():
            documents = list(get_format(self.options.format).documents(span, self.options, build))
        report.n_read = len(documents)
        return SpanRead(documents, report, build.ids)


def line_input(path: str | Path, options: InputOptions = InputOptions(), *, name: str | None = None
               ) -> LineInput | None:
    """``path`` as a :class:`LineInput` when it is one (a regular file, not compressed, of a format with
    :attr:`InputFormat.line_records`, ``auto`` telling it as :func:`iter_documents` would), else ``None``."""
    path = Path(path)
    if not path.is_file() or compression(path) is not None:
        return None
    fmt = detect_format(path, options) if options.format == "auto" else options.format
    if not get_format(fmt).line_records:
        return None
    return LineInput(str(path), replace(options, format=fmt), name if name is not None else _input_name(path))


def read_documents(path: str | Path, options: InputOptions = InputOptions(), *, name: str | None = None,
                   report: ReadReport | None = None) -> list[Document]:
    """Every document at ``path`` (see :func:`iter_documents`); none is an error (nothing to criticise)."""
    with collector.paused():
        return list(iter_documents(path, options, name=name, report=report))
