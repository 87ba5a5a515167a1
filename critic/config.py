"""Checked settings: experiment configs (TOML) against a runner's schema, critic params against a signature.

A runner declares what its config may hold as a :class:`Schema`: top-level
keys and tables, each key a :class:`Key` (a type written as a Python
annotation -- ``int``, ``float | None``, ``list[str]`` -- a default, a range or
choices, and a help line)::

    SCHEMA = Schema(tables={"criticism": {
        "n_bootstrap": Key(int, 1000, min=1, help="bootstrap resamples"),
        "corruptions": Key(list[str], ["permuted"], choices=("permuted", "repeated", "dropped")),
    }})

:func:`load_config` reads a TOML file and checks it: bad syntax, unknown
tables or keys (with a did-you-mean), wrong types and out-of-range values are
a :class:`ConfigError` naming the file, the line where it can be found, the
table and the key.  The checked config has every declared default filled in.

:func:`check_params` applies the same type checks to the settings a user
gives a critic (``critic fit NAME --params JSON``), from the annotations of
the critic's ``__init__``.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Sequence as AbcSequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["Key", "Schema", "ConfigError", "REQUIRED", "load_config", "read_toml", "check_config",
           "check_value", "check_call", "check_params", "describe_settings", "keys_from_dataclass", "settings_table",
           "suggest",
           "line_of", "Range", "Divides", "Pattern"]


class ConfigError(ValueError):
    """A config or a set of settings that does not fit its schema; the message says where and why."""


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED = _Marker("REQUIRED")
"""Default of a key that must be given."""

_ABSENT = _Marker("ABSENT")


@dataclass(frozen=True)
class Key:
    """One config key: its type (a Python annotation), default, allowed range or choices, help.

    ``default`` is filled in when the key is absent; leave it out (``_ABSENT``)
    for a key that stays absent unless given, ``REQUIRED`` for one that must be
    given.  ``min`` / ``max`` bound numbers (inclusive), ``gt`` from below
    (exclusive); they apply to a number or to each item of a list.  ``choices``
    restrict a string, or each item of a list (a list with choices may not
    repeat an item).
    """

    type: Any
    default: Any = _ABSENT
    gt: float | None = None
    min: float | None = None
    max: float | None = None
    choices: Sequence[Any] | None = None
    help: str = ""


@dataclass(frozen=True)
class Divides:
    """A combination check: ``[table] divisor`` must divide ``[table] multiple`` (attention heads the model
    width), checked with the rest of the config, before a run starts; absent keys are not checked."""

    table: str
    divisor: str
    multiple: str

    def problem(self, config: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """``(table, key, message)`` when the combination is impossible, else ``None``."""
        values = config.get(self.table) or {}
        a, b = values.get(self.divisor), values.get(self.multiple)
        if isinstance(a, int) and isinstance(b, int) and a > 0 and b % a:
            return (self.table, self.divisor, f"[{self.table}] {self.divisor} = {a} does not divide "
                                              f"{self.multiple} = {b}: choose {self.divisor} among "
                                              f"{', '.join(str(d) for d in range(1, b + 1) if b % d == 0)}")
        return None


@dataclass(frozen=True)
class Pattern:
    """A check: ``[table] key``, when given, must be a regular expression Python's :mod:`re` compiles."""

    table: str
    key: str

    def problem(self, config: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """``(table, key, message)`` when the value does not compile, else ``None``."""
        value = (config.get(self.table) or {}).get(self.key)
        if not isinstance(value, str):
            return None
        try:
            re.compile(value)
        except re.error as exc:
            return self.table, self.key, f"[{self.table}] {self.key} = {value!r} is not a regular expression: {exc}"
        return None


@dataclass(frozen=True)
class Schema:
    """Top-level ``keys`` and ``tables`` (table name -> key name -> :class:`Key`) of a config, and ``checks``
    of keys (:class:`Divides`, :class:`Pattern`) run once every key is known."""

    keys: Mapping[str, Key] = field(default_factory=dict)
    tables: Mapping[str, Mapping[str, Key]] = field(default_factory=dict)
    checks: Sequence[Divides | Pattern] = ()


def suggest(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or ``''``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ------------------------------------------------------------------ type checks
_PLURAL = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


@dataclass(frozen=True)
class Range:
    """Bounds of a number setting, declared once where the setting is, in its annotation:
    ``valid_fraction: Annotated[float, Range(gt=0, lt=1)] = 0.1``.  :func:`check_params` and
    :func:`check_call` enforce them; ``--help`` shows them."""

    gt: float | None = None
    min: float | None = None
    max: float | None = None
    lt: float | None = None

    def violation(self, value: Any) -> str | None:
        """Why ``value`` is out of range, or ``None``."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if not math.isfinite(value):
            return f"must be a finite number {self}, got {_show(value)}"
        inside = ((self.gt is None or value > self.gt) and (self.min is None or value >= self.min)
                  and (self.max is None or value <= self.max) and (self.lt is None or value < self.lt))
        return None if inside else f"must be {self}, got {_show(value)}"

    def __str__(self) -> str:
        return " and ".join(f"{op} {b:g}" for op, b in ((">", self.gt), (">=", self.min), ("<=", self.max),
                                                        ("<", self.lt)) if b is not None)


def _ranges(annotation: Any) -> list[Range]:
    if typing.get_origin(annotation) is typing.Annotated:
        return [m for m in typing.get_args(annotation)[1:] if isinstance(m, Range)]
    return []

def _describe(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        bounds = " and ".join(str(r) for r in _ranges(annotation))
        return _describe(args[0]) + (f" ({bounds})" if bounds else "")
    if annotation is type(None) or annotation is None:
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (list, tuple, AbcSequence):
        inner = [a for a in args if a is not Ellipsis]
        return f"a list of {_PLURAL.get(inner[0], _describe(inner[0]))}" if inner else "a list"
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return "a table"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        annotation, getattr(annotation, "__name__", str(annotation)))


def _fits(value: Any, annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _fits(value, args[0])
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (list, tuple, AbcSequence) or annotation in (list, tuple, AbcSequence):
        if not isinstance(value, (list, tuple)):
            return False
        inner = [a for a in args if a is not Ellipsis]
        return not inner or all(_fits(v, inner[0]) for v in value)
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return isinstance(value, dict)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True  # an annotation this checker does not model: accept, the code behind it decides


def _show(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", tuple: "list",
            dict: "table"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def check_value(name: str, value: Any, key: Key) -> str | None:
    """Why ``value`` does not fit ``key`` (a sentence starting with ``name``), or ``None``."""
    if not _fits(value, key.type):
        return f"{name} must be {_describe(key.type)}, got {_show(value)}"
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if key.gt is not None and item <= key.gt:
                return f"{name} must be > {key.gt:g}, got {item!r}"
            if key.min is not None and item < key.min:
                return f"{name} must be >= {key.min:g}, got {item!r}"
            if key.max is not None and item > key.max:
                return f"{name} must be <= {key.max:g}, got {item!r}"
        if key.choices is not None and item not in key.choices:
            return (f"{name}: {item!r} is not one of {', '.join(map(repr, key.choices))}"
                    + (suggest(item, key.choices) if isinstance(item, str) else ""))
    if key.choices is not None and isinstance(value, (list, tuple)) and len(set(value)) != len(value):
        dup = next(v for v in value if list(value).count(v) > 1)
        return f"{name} lists {dup!r} more than once"
    return None


# ------------------------------------------------------------------ TOML configs
def line_of(text: str, table: str | None, key: str | None) -> int | None:
    """Line number (1-based) of ``[table]`` or of ``key`` inside ``[table]`` (top level: table None)."""
    current: str | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", stripped)
        if header:
            parts = [p.strip().strip('"') for p in header.group(1).split(".")]
            current = parts[0]
            if current == table and (key is None or parts[1:2] == [key]):
                return lineno
            continue
        if key is not None and current == table and re.match(rf'^"?{re.escape(key)}"?\s*[=.]', stripped):
            return lineno
    return None


def read_toml(path: str | Path) -> tuple[dict, str]:
    """Parse a TOML file; errors name the file (and the line, for bad syntax). Returns (data, text)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a TOML file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        where = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if where:
            msg = msg[:where.start()].strip()
            raise ConfigError(f"{path}:{where.group(1)}: invalid TOML at column {where.group(2)}: {msg}") from None
        raise ConfigError(f"{path}: invalid TOML: {msg}") from None


def check_config(config: Mapping[str, Any], schema: Schema, *, where: str = "<config>", text: str = "",
                 allowed: Sequence[str] = ()) -> dict:
    """Check ``config`` against ``schema``; return a copy with the declared defaults filled in.

    ``where`` names the source in messages and ``text`` (the file's text)
    gives them line numbers; ``allowed`` are top-level keys the caller handles
    itself (``runner``).
    """

    def fail(table: str | None, key: str | None, message: str) -> ConfigError:
        line = line_of(text, table, key) if text else None
        return ConfigError(f"{where}{f':{line}' if line else ''}: {message}")

    out: dict[str, Any] = {}
    top_known = [*schema.keys, *schema.tables, *allowed]
    for name, value in config.items():
        if name in allowed:
            out[name] = value
        elif name in schema.tables:
            if not isinstance(value, dict):
                raise fail(None, name, f"{name} must be a table [{name}], got {_show(value)}")
            out[name] = _check_table(value, schema.tables[name], name, fail)
        elif name in schema.keys:
            problem = check_value(name, value, schema.keys[name])
            if problem:
                raise fail(None, name, problem)
            out[name] = value
        elif isinstance(value, dict):
            tables = list(schema.tables)
            close = difflib.get_close_matches(name, tables, n=1, cutoff=0.6)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            raise fail(name, None, f"unknown table [{name}]{hint}; known tables: "
                                   f"{', '.join(f'[{t}]' for t in tables) or 'none'}")
        else:
            raise fail(None, name, f"unknown top-level key {name!r}{suggest(name, top_known)}")
    for name, key in schema.keys.items():
        if name not in out:
            if key.default is REQUIRED:
                raise fail(None, None, f"missing top-level key {name!r}" + (f" ({key.help})" if key.help else ""))
            if key.default is not _ABSENT:
                out[name] = key.default
    for name, keys in schema.tables.items():
        if name not in out:
            out[name] = _check_table({}, keys, name, fail)
    for check in schema.checks:
        problem = check.problem(out)
        if problem:
            raise fail(*problem)
    return out


def _check_table(values: Mapping[str, Any], keys: Mapping[str, Key], table: str, fail) -> dict:
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in keys:
            raise fail(table, name, f"[{table}] unknown key {name!r}{suggest(name, list(keys))}; "
                                    f"known keys: {', '.join(keys)}")
        problem = check_value(name, value, keys[name])
        if problem:
            raise fail(table, name, f"[{table}] {problem}")
        out[name] = value
    for name, key in keys.items():
        if name not in out:
            if key.default is REQUIRED:
                raise fail(table, None, f"[{table}] missing key {name!r}" + (f" ({key.help})" if key.help else ""))
            if key.default is not _ABSENT:
                out[name] = key.default
    return out


def load_config(path: str | Path, schema: Schema, *, allowed: Sequence[str] = ()) -> dict:
    """Read a TOML config and check it against ``schema`` (see :func:`check_config`)."""
    data, text = read_toml(path)
    return check_config(data, schema, where=str(path), text=text, allowed=allowed)


def keys_from_dataclass(cls: type, *, defaults: bool = True, **bounds: dict) -> dict[str, Key]:
    """Keys for the fields of a dataclass, typed by its annotations.

    ``defaults=False`` leaves absent keys absent (a preset decides them);
    ``bounds`` gives a field extra :class:`Key` arguments, e.g. ``lr={"min": 0}``.
    """
    import dataclasses

    hints = typing.get_type_hints(cls)
    keys = {}
    for f in dataclasses.fields(cls):
        default = f.default if defaults and f.default is not dataclasses.MISSING else _ABSENT
        keys[f.name] = Key(hints[f.name], default, **bounds.get(f.name, {}))
    unknown = set(bounds) - set(keys)
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {sorted(unknown)}")
    return keys


def settings_table(cls: type, *, keep: Sequence[str] | None = None, defaults: Mapping[str, Any] | None = None,
                 notes: Mapping[str, str] | None = None, exclude: Sequence[str] = ("seed",)) -> dict[str, Key]:
    """A config table of the settings of ``cls.__init__`` (a critic's, or a settings dataclass's): type from the
    annotation (bounds from its :class:`Range`), default from the signature (or ``defaults``, an entry point's
    own), help from ``notes`` (what the setting means in a study: ``"K (paper: 100)"``), else the help string of
    its ``Annotated`` annotation, else naming the setting.  The one introspector of settings every config
    uses; the command-line options of the same settings come from :func:`critic.cli_args.signature_options`.
    ``keep`` limits it to some settings; ``seed`` is the run's (``--seed``) and left out by default.

    A study passes the checked table straight to ``cls(**table, seed=run.seed)``: the setting is declared where
    the critic takes it, and nowhere else.
    """
    hints = typing.get_type_hints(cls.__init__, include_extras=True)
    params = {n: p for n, p in inspect.signature(cls.__init__).parameters.items()
              if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n not in exclude}
    names = list(params) if keep is None else list(keep)
    notes = notes or {}
    unknown = [n for n in [*names, *(defaults or {}), *notes] if n not in params]
    if unknown:
        raise ValueError(f"{cls.__name__} has no settings {unknown}")
    unannotated = [n for n in names if n not in hints]
    if unannotated:
        raise ValueError(f"{cls.__name__}.__init__ does not annotate {unannotated}: a table needs their types")
    table = {}
    for name in names:
        default = (defaults or {}).get(name, params[name].default)
        kwargs = {} if default is inspect.Parameter.empty else {"default": _plain(default)}
        kind, gt, low, high = _unwrap(hints[name])
        about = notes.get(name) or _annotated_help(hints[name]) or f"{cls.__name__}({name}=...)"
        table[name] = Key(kind, gt=gt, min=low, max=high, help=about, **kwargs)
    return table


def _unwrap(annotation: Any) -> tuple[Any, ...]:
    """``(type, gt, min, max)`` of an annotation, its :class:`~critic.config.Range` (if any) as a key's bounds."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation, None, None, None
    base, *meta = typing.get_args(annotation)
    bounds = [m for m in meta if isinstance(m, Range)]
    if not bounds:
        return base, None, None, None
    if len(bounds) > 1 or bounds[0].lt is not None:
        raise ValueError(f"a config key takes one Range without lt, got {meta}")
    return base, bounds[0].gt, bounds[0].min, bounds[0].max


def _plain(default: Any) -> Any:
    """A tuple default as the list a TOML table would hold (so the checked config is JSON as written)."""
    return list(default) if isinstance(default, tuple) else default


def _annotated_help(annotation: Any) -> str:
    """The help strings in an ``Annotated`` annotation's metadata, joined."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return ""
    return " ".join(m for m in typing.get_args(annotation)[1:] if isinstance(m, str))


# ------------------------------------------------------------------ critic params
def describe_settings(cls: type) -> list[str]:
    """One line per setting of ``cls.__init__``: ``name: type (default value)``, for ``--help``."""
    sig = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__, include_extras=True)
    except Exception:  # annotations that do not resolve: names and defaults only
        hints = {}
    lines = []
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind = f": {_describe(hints[name])}" if name in hints else ""
        shown = json.dumps(p.default) if _jsonable(p.default) else repr(p.default)
        default = "required" if p.default is p.empty else f"default {shown}"
        lines.append(f"{name}{kind} ({default})")
    return lines


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def check_call(fn: Callable, params: Any, *, where: str = "params", what: str = "setting",
               owner: str = "", skip: Sequence[str] = ("self",)) -> dict:
    """Check keyword arguments for ``fn(**params)`` against its signature and annotations (types, and the
    :class:`Range` of an ``Annotated`` number), before any work.

    Unknown names (with a did-you-mean), a missing required one, a value of the wrong type or out of range
    are a :class:`ConfigError` starting with ``where`` and naming the ``what`` (``setting``, ``option``)
    of ``owner`` (``critic 'sections'``, ``corpus 'manpages'``).
    """
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: expected a JSON object of {what}s, got {_show(params)}")
    sig = inspect.signature(fn)
    accepted = {k: p for k, p in sig.parameters.items()
                if k not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    open_ended = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # annotations that do not resolve: check names only
        hints = {}
    for name, value in params.items():
        if name not in accepted:
            if open_ended:
                continue
            raise ConfigError(f"{where}: {owner} has no {what} {name!r}{suggest(name, list(accepted))}"
                              f"; its {what}s: {', '.join(accepted) or 'none'}")
        if name in hints and not _fits(value, hints[name]):
            raise ConfigError(f"{where}: {owner} {what} {name} must be {_describe(hints[name])}, got {_show(value)}")
        items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for bounds in _ranges(hints.get(name)):  # a list's bounds hold for each item
            for k, item in items:
                why = bounds.violation(item)
                if why:
                    raise ConfigError(f"{where}: {owner} {what} {name}{'' if k is None else f'[{k}]'} {why}")
    missing = [k for k, p in accepted.items() if p.default is p.empty and k not in params]
    if missing:
        raise ConfigError(f"{where}: {owner} needs the {what}(s) {', '.join(missing)}")
    return dict(params)


def check_params(cls: type, params: Any, *, where: str = "params") -> dict:
    """Check settings for ``cls(**params)`` against its ``__init__`` (see :func:`check_call`)."""
    return check_call(cls.__init__, params, where=where, owner=f"critic {getattr(cls, 'name', cls.__name__)!r}")


def seeded_params(cls: type, params: dict, seed: int, *, where: str = "params", seed_option: str = "--seed") -> dict:
    """``params`` with the run's ``seed`` as the critic's own ``seed`` setting, where its ``__init__`` has one: one
    seed, recorded once in the saved critic.  A ``seed`` among ``params`` is refused, naming ``seed_option``."""
    if "seed" in params:
        raise ConfigError(f"{where}: 'seed' is the run's seed: give {seed_option} {params['seed']} instead")
    return {**params, "seed": seed} if "seed" in inspect.signature(cls.__init__).parameters else dict(params)
