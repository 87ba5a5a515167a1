"""Options and argument types that every command line of the package shares (``critic``, ``critic lm``, the
commands of plugins): argparse types that name what they expected, the option groups of computing commands, and
:func:`signature_options`, which turns a function's keyword parameters into options (``critic metric NAME``,
``critic setup NAME``, ``critic data convert NAME``); and the reader's options (:func:`add_input_arguments`), so
that :mod:`critic.inputs` knows nothing of argparse."""

from __future__ import annotations

import argparse
import inspect
import math
import os
import types
import typing
from collections.abc import Sequence as AbcSequence
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .config import Range
from .document import Document
from .inputs import LM_EVAL_TEXTS, InputOptions
from .registry import list_formats
from .settings import CriticismSettings
from .terminal import get_logger
from .workflows import read_set

__all__ = ["positive_int", "fold_count", "named_number", "named_file", "common_options",
           "add_criticism_options", "criticism_settings", "signature_options", "called_options", "add_input_arguments",
           "input_options", "read_with_args"]

_log = get_logger(__name__)


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def fold_count(text: str) -> int:
    """Cross-fitting folds: 0 (none) or an integer >= 2."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 0 or an integer >= 2, got {text!r}") from None
    if value < 0 or value == 1:
        raise argparse.ArgumentTypeError(f"must be 0 (no cross-fitting) or at least 2, got {value}")
    return value


def named_number(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` with a positive, finite value."""
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not name or not (number > 0 and number < float("inf")):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with a positive number, got {text!r}")
    return set_name(name), number


def set_name(name: str) -> str:
    """A name given on the command line for a set or a critic: text (UTF-8), since it is written into results and
    reports; ``ArgumentTypeError`` otherwise (a name of bytes that are not UTF-8 failed only when results were
    written, after all the work)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"the name {name!r} is not UTF-8 text") from None
    return name


def named_file(text: str) -> tuple[str, Path]:
    """``NAME=FILE``: a set's name and where it is (a file, or a folder: an lm-eval ``--output_path`` folder is a
    set per samples file, ``NAME/MODEL/TASK``, when the sets are read: :func:`critic.workflows.read_sets`)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {text!r}")
    return set_name(name), Path(path)


def common_options(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--device`` and ``--threads``: every command that computes."""
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (default 0); a critic fitted here takes it as its own seed setting")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda[:N]; never a silent fallback")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads of this process (default 1: the same bytes on any machine, and 3.7-4x faster "
                        "than one per core beside another job; more can help on an idle many-core machine; Dask "
                        "workers use 1; a study's own threads setting applies to its stages); recorded in "
                        "results.json")


def add_criticism_options(parser: argparse.ArgumentParser, *, keep: Sequence[str] | None = None,
                          **defaults: Any) -> None:
    """The options of :class:`~critic.settings.CriticismSettings` (``--top``, ``--n-bootstrap``,
    ``--n-permutations``, ``--outlier-score``, ``--fdr``, ``--flag-level``; ``keep``: some of them) with a command's
    own ``defaults``.  The command line checks them together before any file or model is read and gives the
    command ``args.criticism`` (:func:`criticism_settings`)."""
    signature_options(parser, CriticismSettings, keep=keep, defaults=defaults)
    parser.set_defaults(criticism=None)


def criticism_settings(args: argparse.Namespace) -> CriticismSettings:
    """The :class:`~critic.settings.CriticismSettings` of a command's :func:`add_criticism_options`."""
    return CriticismSettings(**called_options(args))


# ------------------------------------------------------------------ options from a function's signature
_DEST = "option:"
"""Prefix of the attributes that :func:`signature_options` fills (kept apart from the command's own)."""


class _OutOfRange(ValueError):
    """A value of the right type outside its ``Range``: the message says which bound."""


class _Converter:
    """Text -> value for one annotation, with what it expects in words (``an integer >= 1``, and the plural for a
    list of them)."""

    def __init__(self, parse: Callable[[str], Any], expects: str, plural: str = ""):
        self.parse, self.expects, self.plural = parse, expects, plural or expects

    def __call__(self, text: str) -> Any:
        try:
            return self.parse(text)
        except _OutOfRange as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {self.expects}, got {text!r}") from None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _bounded(parse: Callable[[str], Any], bounds: tuple, expects: str) -> Callable[[str], Any]:
    def bounded(text: str) -> Any:
        value = parse(text)
        if any(bound.violation(value) for bound in bounds):
            raise _OutOfRange(f"must be {expects}, got {text}")
        return value

    return bounded


def _literal(choices: tuple) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        for choice in choices:
            if text == str(choice):
                return choice
        raise ValueError(text)

    return parse


def _first_of(parsers: list[Callable[[str], Any]]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        for one in parsers:
            try:
                return one(text)
            except _OutOfRange:
                raise
            except (TypeError, ValueError):
                continue
        raise ValueError(text)

    return parse


def _comma_separated(item: Callable[[str], Any]) -> Callable[[str], list]:
    return lambda text: [item(piece.strip()) for piece in text.split(",") if piece.strip()]


_SIMPLE = {int: (int, "an integer", "integers"), float: (_finite, "a number", "numbers"),
           str: (str, "a string", "strings"), Path: (Path, "a path", "paths"), os.PathLike: (Path, "a path", "paths")}


def _converter(annotation: Any, bounds: tuple = ()) -> _Converter | None:
    """The converter of an annotation (numbers, strings, paths, ``Literal`` choices, unions and comma-separated
    lists of them), numbers checked against the ``Range`` bounds of ``Annotated``; ``None`` when text cannot give
    a value of the annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converter(args[0], bounds + tuple(m for m in args[1:] if isinstance(m, Range)))
    if origin in (typing.Union, types.UnionType):
        members = [_converter(a, bounds) for a in args if a is not type(None)]
        if not members or None in members:
            return None
        return _Converter(_first_of([m.parse for m in members]), " or ".join(m.expects for m in members),
                          " or ".join(m.plural for m in members))
    if origin is typing.Literal:
        return _Converter(_literal(args), " or ".join(repr(a) for a in args))
    if origin in (list, tuple, AbcSequence):
        inner = [a for a in args if a is not Ellipsis]
        item = _converter(inner[0], bounds) if len(inner) == 1 else None
        return None if item is None else _Converter(_comma_separated(item.parse), f"comma-separated {item.plural}")
    if annotation not in _SIMPLE:
        return None
    parse, singular, plural = _SIMPLE[annotation]
    if annotation in (int, float) and bounds:
        limits = " " + " and ".join(str(b) for b in bounds)
        return _Converter(_bounded(parse, bounds, singular + limits), singular + limits, plural + limits)
    return _Converter(parse, singular, plural)


def _help_of(annotation: Any) -> str:
    """The help text of a parameter: the strings in its ``Annotated`` metadata."""
    if typing.get_origin(annotation) is typing.Annotated:
        return " ".join(m for m in typing.get_args(annotation)[1:] if isinstance(m, str))
    return ""


def _annotation(param: inspect.Parameter, hints: dict) -> Any:
    """A parameter's annotation; an unannotated one with a number or string default is of that type."""
    if param.name in hints:
        return hints[param.name]
    if param.default is not param.empty and type(param.default) in (bool, int, float, str):
        return type(param.default)
    return str if param.default is param.empty else None


def _word_choices(annotation: Any) -> tuple[str, ...] | None:
    """The words of a ``Literal`` of strings (possibly ``Annotated``), else ``None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _word_choices(typing.get_args(annotation)[0])
    words = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()
    return words if words and all(isinstance(w, str) for w in words) else None


def _is_bool(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_bool(typing.get_args(annotation)[0])
    return annotation is bool


def signature_options(parser: argparse.ArgumentParser, fn: Callable, *, skip: int = 0,
                      keep: Sequence[str] | None = None, defaults: Mapping[str, Any] | None = None) -> list[str]:
    """Add an option per parameter of ``fn`` (after its first ``skip``; ``keep``: only these): ``--name-with-dashes``,
    read by the parameter's annotation (see :func:`_converter`; a ``bool`` is a flag), required when it has no
    default (``defaults``: the command's own, in place of the signature's); ``Range`` bounds in ``Annotated`` are
    checked and a string there is the option's help.

    A parameter with a default that no text can give (a callable, an object) is left to its default.  Returns the
    names of required parameters that no text can give: ``fn`` has no command-line form while there are any.
    Read the values back with :func:`called_options`.
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # annotations that do not resolve: names, defaults and strings only
        hints = {}
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)][skip:]
    unknown = sorted({*(keep or ()), *(defaults or {})} - {p.name for p in params})
    if unknown:
        raise ValueError(f"{getattr(fn, '__name__', fn)} has no parameters {unknown}")
    params = [p.replace(default=(defaults or {}).get(p.name, p.default)) for p in params
              if keep is None or p.name in keep]
    impossible = []
    for param in params:
        annotation = _annotation(param, hints)
        flag, dest = "--" + param.name.replace("_", "-"), _DEST + param.name
        required = param.default is param.empty
        text = _help_of(annotation)
        if _is_bool(annotation):
            parser.add_argument(flag, dest=dest, default=False if required else param.default,
                                action=argparse.BooleanOptionalAction if param.default is True else "store_true",
                                help=(text or "a flag").replace("%", "%%"))
            continue
        convert = _converter(annotation) if annotation is not None else None
        if convert is None:
            if required:
                impossible.append(param.name)
            continue
        about = convert.expects + ("; required" if required else "" if param.default is None
                                   else f"; default {param.default}")
        words = _word_choices(annotation)  # argparse's choices: an unknown word gets the closest known one
        parser.add_argument(flag, dest=dest, required=required, default=None if required else param.default,
                            help=(f"{text} ({about})" if text else about).replace("%", "%%"),
                            **({"choices": words} if words else {"type": convert, "metavar": param.name.upper()}))
    return impossible


def called_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments that the options of :func:`signature_options` were given (or their defaults)."""
    return {name[len(_DEST):]: value for name, value in vars(args).items() if name.startswith(_DEST)}


# ------------------------------------------------------------------ the reader's options
def add_input_arguments(parser, *, format_option: str = "--format", reference: bool = False) -> None:
    """The reader's options on a command that reads documents (``format_option``: the format flag's name,
    for a command whose ``--format`` means something else, such as ``critic lm finetune``'s; ``reference``:
    the command reads a ``--reference`` file, whose format is always detected)."""
    g = parser.add_argument_group("input files", "how document files are read (every file this command reads)")
    g.add_argument(format_option, dest="input_format", default="auto", metavar="FORMAT",
                   help=f"input format: auto (the default: detected from each file), "
                        f"{', '.join(list_formats(plugins=False))} or a plugin's"
                        + ("; a --reference file's is always detected" if reference else ""))
    g.add_argument("--text-field", default="text", help="free-text JSONL / Parquet / datasets: the text field")
    g.add_argument("--id-field", default="id", help="free-text formats: the id field (absent: ids are NAME:LINE)")
    g.add_argument("--sections", default="auto", metavar="auto|none|markdown|separator:STRING",
                   help="free text into sections: auto (the default) splits a document at its Markdown headings "
                        "when it has one with a title, else keeps it one untitled section (decided per document); "
                        "none: always one untitled section; markdown: always split at # headings; or split on a "
                        "separator such as separator:<|section|>")
    g.add_argument("--lm-eval-text", default="continuation", choices=LM_EVAL_TEXTS,
                   help="lm-eval samples: the generation alone (continuation, the default) or the request's prompt "
                        "immediately followed by the generation (prompt+continuation: the whole text the model saw "
                        "and wrote)")
    g.add_argument("--separator", help=f"{format_option} text: the string between generations in one text file")


def input_options(args, *, detect: bool = False) -> InputOptions:
    """The :class:`InputOptions` of a command's :func:`add_input_arguments` options (``detect``: format ``auto``)."""
    return InputOptions(format="auto" if detect else args.input_format, text_field=args.text_field,
                        id_field=args.id_field, sections=args.sections, separator=args.separator,
                        lm_eval_text=args.lm_eval_text)


def read_with_args(args, path: str | Path, name: str | None = None, *, detect: bool = False
                   ) -> tuple[list[Document], dict[str, Any]]:
    """The documents at ``path`` as a command's :func:`add_input_arguments` options say, and what the reader did
    (:func:`critic.workflows.read_set`, said on stderr).  ``detect``: detect the format even when one is forced
    (a reference set's: usually the project's documents while the candidates are free text)."""
    return read_set(path, input_options(args, detect=detect), name, log=say)


def say(message: str) -> None:
    """``critic: message`` on stderr, at once: what a command reports beside its output (logged at INFO on the
    ``critic.cli`` logger: ``critic -q`` leaves it out; :mod:`critic.terminal`)."""
    _log.info("%s", message)
