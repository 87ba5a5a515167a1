"""The ``critic`` command line.

Every command is registered in :mod:`critic.registry` (:func:`~critic.registry.register_command`) and built from
it: the core's commands here (``list``, ``fit``, ``run``) and by group in :mod:`critic.commands` (``score`` and
``merge`` in ``scoring``; ``compare``, ``report`` and ``outliers`` in ``criticism``; ``data build|convert``,
``metric`` and ``setup`` in ``tools``; ``lm`` in :mod:`critic.lm.cli`), each by reference, imported only when
used; those of plugins where they register.  ``critic metric NAME``, ``critic setup NAME`` and ``critic data convert NAME`` have a
sub-command per registered metric, tool and format, whose options are a function's keyword parameters
(:func:`critic.cli_args.signature_options`); ``critic fit NAME`` one per critic, its settings in ``--help``.

Only the parser of the command asked for is filled, and the plugins are imported only when a command needs them,
so ``critic --help`` imports neither torch nor numpy (a plugin's own commands are listed by ``critic list``).

Bad input is never a traceback: an unreadable file, a malformed document, a
config that does not fit its runner's schema, a damaged saved critic or an
absent device prints one ``critic: error: ...`` line naming the file (and the
line or document where there is one) and exits with status 2; Ctrl-C prints
``critic: interrupted`` and exits with 130 (every output is written
atomically, so a rerun resumes).  ``critic --debug ...`` re-raises instead,
for bugs.

What a command says beside its output goes through :mod:`logging` on the ``critic`` loggers, to stderr
(:mod:`critic.terminal`): ``-v`` adds debug lines, ``-q`` keeps warnings and errors only and hides the progress
bars, ``-qq`` the error line only (before the command or after it: ``critic -q report ...``, ``critic report ... -q``).
``critic --version`` prints the version (``critic.__version__``, the one the package is built with).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import __version__, collector, progress, registry
from .cli_args import (add_input_arguments, common_options, criticism_settings, fold_count, positive_int, read_with_args,
                       say)
from .catalogue import catalogue, errors_known
from .config import ConfigError, check_config, check_params, line_of, read_toml, seeded_params, suggest
from .io import atomic_write_text, check_replaceable, claim_folder, output_lock
from .saved import check_device_name
from .stages import is_run_folder
from .terminal import get_logger, level_of, printable_streams, verbosity
from .workflows import fit_critic

__all__ = ["main", "build_parser", "set_up_torch", "EXIT_ERROR", "EXIT_INTERRUPTED"]

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

_log = get_logger(__name__)

_USER_ERRORS = (ValueError, KeyError, OSError, RuntimeError, EOFError)
"""What bad input raises (DocumentError, ConfigError, CriticLoadError, JSON and TOML decode errors are
ValueErrors; a missing file is an OSError; an absent device a RuntimeError)."""


def set_up_torch(device: str, seed: int | None = None, threads: int | None = None) -> None:
    """Before a command computes: ``device`` checked present (never a fallback), Python, torch and NumPy's global
    generator (when NumPy is loaded already) seeded with ``seed``, and torch's ``threads`` set (each when given).
    Every draw of critic's own from NumPy goes through a seeded ``Generator`` (and every library it calls is given its
    seed: gensim's and scikit-learn's ``random_state``), so a command that never loads ``numpy.random`` does not pay
    its import (80 ms) to seed a generator nothing draws from. Torch's CPU generator is seeded, and CUDA's when the
    device is a GPU: ``torch.manual_seed`` would queue CUDA's seeding with a formatted stack (70 ms reading torch's
    sources) on a machine that never computes on one."""
    import torch

    from .critic import resolve_device

    resolve_device(device)
    if seed is not None:
        random.seed(seed)
        if "numpy.random" in sys.modules:
            sys.modules["numpy.random"].seed(seed % 2**32)
        torch.default_generator.manual_seed(seed)
        if device.startswith("cuda"):
            torch.cuda.manual_seed_all(seed)
    if threads is not None:
        torch.set_num_threads(threads)


def _computes_here(args) -> bool:
    """Whether a command computes in this process: not ``critic score --workers N`` or ``--scheduler ADDRESS``,
    which plans chunks and writes what Dask workers return (each worker loads the critic on the device, runs one
    torch thread, and seeds each batch from its chunk's index), so it never imports torch."""
    return not (getattr(args, "workers", None) or getattr(args, "scheduler", None))


_INVALID_CHOICE = re.compile(r"argument (?P<what>[\w -]+?): invalid choice: '(?P<given>[^']*)' "
                             r"\(choose from (?P<known>.*)\)")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors also name the plugins that failed to import
    (their commands and critics are missing, and this is why)."""

    def error(self, message: str):
        choice = _INVALID_CHOICE.fullmatch(message)
        if choice:  # "argument CRITIC: invalid choice: 'x' (choose from 'a', 'b')" -> unknown critic, closest name
            what, given, known = choice["what"].lower(), choice["given"], re.findall(r"'([^']*)'", choice["known"])
            message = f"unknown {what} {given!r}{suggest(given, known)}; known: {', '.join(known)}"
        for name, err in errors_known().items():
            message += f"\nnote: plugin {name!r} failed to import ({err})"
        super().error(message)


# ------------------------------------------------------------------ commands
def cmd_list(args) -> int:
    known = catalogue()
    print("Critics (critic fit NAME --help for settings):")
    for name, card in sorted(known.critics.items()):
        print(f"  {name:<18} {card.summary}")
        print(f"  {'':<18}   needs: {card.needs}")
        if card.extra:
            print(f"  {'':<18}   install: pip install 'critic[{card.extra}]'")
    for title, entries in (("Metrics (critic metric NAME --help for options)", known.metrics),
                           ("Corpora (critic data build)", known.corpora),
                           ("Formats (critic data convert NAME)", known.converters),
                           ("Tools (critic setup NAME)", known.setups)):
        print(f"{title}:")
        for name, description in sorted(entries.items()):
            print(f"  {name:<18} {description}")
    print("Commands (critic COMMAND --help):")
    for name, description in known.commands.items():
        print(f"  {name:<18} {description}")
    for name, err in known.plugin_errors.items():
        _log.warning("plugin %r could not be loaded: %s", name, err, extra={"label": ""})
    return 0


def _params(cls: type, text: str | None) -> dict:
    """``--params`` JSON, checked against the critic's settings."""
    if not text:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--params: invalid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    return check_params(cls, params, where="--params")


def cmd_fit(args) -> int:
    cls = registry.get_critic(args.critic)
    params = seeded_params(cls, _params(cls, args.params), args.seed, where="--params")
    check_replaceable(args.out, "critic")
    train, _ = read_with_args(args, args.train)
    valid = read_with_args(args, args.valid)[0] if args.valid else None
    _log.info("fitting %s on %d documents%s ...", args.critic, len(train),
              f" (validation: {len(valid)})" if valid else "")
    check = _fit_checking_seeds(args, cls, params, train, valid) if args.check_seeds else None
    with progress.shown():
        critic = fit_critic(cls(**params).to(args.device) if check is None else check.critics[0], train, valid,
                            calibration_folds=args.calibration_folds, seed=args.seed, log=say,
                            fitted=check is not None)
    critic.save(args.out)
    print(f"fitted {args.critic}: {critic.fit_summary(len(train))}; calibration: {critic.calibration.summary()}; "
          f"saved to {args.out}")
    if check is not None:  # beside the critic's folder, which holds the critic's own files only
        written = args.out.with_name(args.out.name + ".seed_check.json")
        atomic_write_text(written, json.dumps(check.to_json(), indent=1) + "\n")
        print(f"seed check ({'--valid' if valid else 'the training documents'}), written to {written}:\n"
              + "\n".join(check.lines()))
    for warning in critic.fit_warnings():
        _log.warning("%s", warning)
    return 0


def _fit_checking_seeds(args, cls: type, params: dict, train: list, valid: list | None):
    """``--check-seeds N``: fit with seeds ``--seed``, ``--seed + 1``, ..., and score ``--valid`` (else the training
    documents) with each fit (:mod:`critic.seeds`); the first seed's fit is the critic saved, the agreement is
    printed and written beside its folder (``OUT.seed_check.json``)."""
    from .seeds import check_seeds

    if args.check_seeds < 2:
        raise ConfigError(f"--check-seeds: compare at least 2 seeds, got {args.check_seeds}")
    if "seed" not in params:
        raise ConfigError(f"--check-seeds: critic {args.critic!r} has no seed setting, so its fits cannot differ "
                          "by seed")
    seeds = [params["seed"] + i for i in range(args.check_seeds)]
    scored = valid if valid else train
    with progress.shown():
        return check_seeds(lambda seed: cls(**{**params, "seed": seed}).to(args.device), train, scored, seeds,
                           validation=valid)


def cmd_run(args) -> int:
    from .tracking import target_from

    path = Path(args.config)
    data, text = read_toml(path)
    spec = data.get("runner")
    line = line_of(text, None, "runner")
    where = f"{path}:{line}" if line else str(path)
    if not isinstance(spec, str):
        raise ConfigError(f"{where}: needs a top-level key runner = \"package.module:function\" (or a runner name)"
                          + ("" if spec is None else f", got {spec!r}"))
    try:
        runner = registry.get_runner(spec, source_roots=(path.parent, Path.cwd()))
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: {exc.args[0]}") from None
    config = check_config(data, runner.schema, where=str(path), text=text, allowed=("runner",))
    track = {"track": target} if (target := target_from(args.track)) is not None else {}
    if track and "track" not in inspect.signature(runner.fn, follow_wrapped=False).parameters:
        raise ConfigError(f"--track: runner {spec!r} writes no report it can log (it takes no track=)")
    out = claim_folder(Path(args.out) if args.out else Path("runs") / path.stem, "run", legacy=is_run_folder)
    with output_lock(out, inside=True):  # two runs in one folder would recompute each other's stages
        runner.fn(config, out=out, seed=args.seed, device=args.device, **track)
    return 0


# ------------------------------------------------------------------ parsers, one filler per command


def _add_list(p: argparse.ArgumentParser) -> None:
    p.set_defaults(func=cmd_list)


def _add_fit(p: argparse.ArgumentParser) -> None:
    fit_sub = p.add_subparsers(dest="critic", required=True, metavar="CRITIC")
    for name, card in sorted(catalogue().critics.items()):  # from the catalogue: no critic's stack imported
        f = fit_sub.add_parser(name, help=card.summary or None, formatter_class=argparse.RawDescriptionHelpFormatter,
                               description=f"{card.doc}\n\nNeeds: {card.needs}"
                               + (f"\nInstall: pip install 'critic[{card.extra}]'" if card.extra else ""),
                               epilog="settings (--params JSON):\n  " + "\n  ".join(card.settings))
        f.add_argument("--train", required=True, type=Path, help="real documents to fit on")
        f.add_argument("--valid", type=Path, help="held-out real documents (settings chosen on them, where a "
                                                  "critic does)")
        f.add_argument("--out", required=True, type=Path, help="folder to save the fitted critic in")
        f.add_argument("--params", help='critic settings as JSON, e.g. \'{"delta": 0.1}\' (listed below)')
        f.add_argument("--check-seeds", type=positive_int, metavar="N",
                       help="fit with N seeds (--seed, --seed + 1, ...; N >= 2), score --valid (else the training "
                            "documents) with each and print how well they agree: Latent NLL correlation, top-20 "
                            "outliers shared, matched topics' cosine (OUT.seed_check.json); the first fit is saved")
        f.add_argument("--calibration-folds", type=fold_count, metavar="K",
                       help="calibration documents for outlier p-values: score each training document with a critic "
                            "fitted on the other K - 1 folds (K more fits), beside --valid scored by the critic; 0: "
                            f"--valid only (default for this critic: {card.calibration_folds}; docs/outliers.md)")
        common_options(f)
        add_input_arguments(f)
        f.set_defaults(func=cmd_fit)


def _add_run(p: argparse.ArgumentParser) -> None:
    from .tracking import add_track_option

    p.add_argument("config", type=Path, help="the experiment's TOML config (runner = NAME or module:function)")
    p.add_argument("--out", type=Path, help="run directory (default runs/CONFIG-NAME)")
    add_track_option(p)
    common_options(p)
    p.set_defaults(func=cmd_run)


_COMMANDS: tuple[tuple[str, Callable | str, str], ...] = (
    ("list", _add_list, "list critics, metrics, corpora, formats, tools and commands (plugins' included)"),
    ("fit", _add_fit, "fit a critic on real documents and save it (critic fit NAME --help)"),
    ("score", "critic.commands.scoring:add_score", "per-document T(x), M(x) as JSONL, streamed in chunks (resumable, shardable)"),
    ("merge", "critic.commands.scoring:add_merge", "put the shards of critic score --shard together (the serial run's bytes)"),
    ("compare", "critic.commands.criticism:add_compare", "criticise candidate sets against a reference set"),
    ("report", "critic.commands.criticism:add_report", "criticise generations with several critics: one report (HTML, JSON)"),
    ("outliers", "critic.commands.criticism:add_outliers", "flag the documents least likely in latent space"),
    ("run", _add_run, "run an experiment from a TOML config (stages resume when unchanged)"),
    ("data", "critic.commands.tools:add_data", "build or convert corpora"),
    ("lm", "critic.lm.cli:add_parser", "fine-tune a causal LM, sample documents, measure perplexity"),
    ("metric", "critic.commands.tools:add_metric", "compute a registered metric (critic metric NAME --help)"),
    ("setup", "critic.commands.tools:add_setup", "build an optional tool that a critic or metric needs (critic setup TOOL --help)"),
)
"""The core's commands: name, the function filling its parser (or ``module:function``), its line in --help."""


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``critic`` parser with every registered command, the parsers of ``commands`` filled (all when ``None``).

    The plugins are imported only when a command needs them: one of ``commands`` that is not the core's (it may be
    a plugin's), or filling a command that lists what they register (``critic fit``, ``critic metric``).
    """
    for name, add, help in _COMMANDS:
        registry.register_command(name, add, help)
    parser = _Parser(prog="critic", description="Model criticism in latent space.",
                     epilog="Plugins add commands of their own: critic list shows every command.")
    parser.add_argument("--version", action="version", version=f"critic {__version__}",
                        help="print critic's version and exit")
    parser.add_argument("--debug", action="store_true", help="show the traceback of any error (for bug reports)")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                        help="import a module (or .py file) of your own critics first, e.g. critic --plugin "
                             "my_critics.py fit my-critic ...; repeatable, also read from $CRITIC_PLUGINS")
    _verbosity_options(parser, 0)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    core = [name for name, _, _ in _COMMANDS]
    everything = registry.list_commands(plugins=commands is None or not set(commands) <= set(core))
    for name in core + [name for name in everything if name not in core]:
        # "resolve": a plugin's command that has a -v or -q of its own keeps it
        p = sub.add_parser(name, help=everything[name].help, description=everything[name].help,
                           conflict_handler="resolve")
        _verbosity_options(p, argparse.SUPPRESS)  # after the command too; unset there, the one before it holds
        if commands is None or name in commands:
            everything[name].fill(p)
            _nested_verbosity_options(p)
    return parser


def _verbosity_options(parser: argparse.ArgumentParser, default) -> None:
    """``-v`` / ``-q`` (each repeatable): more or less of what critic says on stderr (:func:`_verbosity`)."""
    parser.add_argument("-v", "--verbose", dest="log_verbose", action="count", default=default,
                        help="say more on stderr: debug lines (what was loaded, read, decided)")
    parser.add_argument("-q", "--quiet", dest="log_quiet", action="count", default=default,
                        help="say less on stderr: warnings and errors only, no progress bars; -qq: the error line "
                             "only")


def _nested_verbosity_options(parser: argparse.ArgumentParser) -> None:
    """``-v`` / ``-q`` on every sub-command below a command too (``critic fit sections ... -q``), unless one has an
    option of either name of its own (a function's ``verbose`` parameter as ``--verbose``), which it keeps."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if not {"-v", "--verbose", "-q", "--quiet"} & set(sub._option_string_actions):
                    _verbosity_options(sub, argparse.SUPPRESS)
                _nested_verbosity_options(sub)


def _verbosity(args) -> int:
    """``-v`` count minus ``-q`` count (:func:`critic.terminal.level_of`)."""
    return getattr(args, "log_verbose", 0) - getattr(args, "log_quiet", 0)


class _Ahead(argparse.ArgumentParser):
    """The parser that reads ahead; a usage error is left to the full parser to report."""

    def error(self, message: str):
        raise ValueError(message)


def _ahead(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """The ``--plugin`` values and the command, read ahead of the full parse (which needs the plugins' critics and
    fills only the command's parser)."""
    ahead = _Ahead(add_help=False)
    ahead.add_argument("--debug", action="store_true")
    ahead.add_argument("--plugin", action="append", default=[])
    ahead.add_argument("command", nargs="?")
    try:
        known = ahead.parse_known_args(list(argv))[0]
    except ValueError:
        return [], None
    return known.plugin, known.command


def _counted(argv: Sequence[str]) -> int:
    """The ``-v`` count minus the ``-q`` count of the options before the command (``-vv``, ``--quiet`` too), read
    ahead of the parse so that what loading the plugins says is said at the level asked for."""
    count, skip = 0, False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--plugin":
            skip = True
        elif arg in ("--verbose", "--quiet"):
            count += 1 if arg == "--verbose" else -1
        elif len(arg) > 1 and arg[0] == "-" and arg[1] != "-" and set(arg[1:]) <= {"v", "q"}:
            count += arg.count("v") - arg.count("q")
        elif not arg.startswith("-"):
            break  # the command: what follows is its own
    return count


def _message(exc: BaseException) -> str:
    """What an error says on stderr: its message, or, where that is a bare word (a ``KeyError``'s key, an
    empty message), what kind of error it is and where to look, so no error reads ``critic: error: error``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename2 or exc.filename}: {exc.strerror}"  # a rename names its target second
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if " " in text.strip():
        return text
    what = f"no {text!r} where one was expected" if isinstance(exc, KeyError) else repr(text) if text else "no message"
    return f"{type(exc).__name__}: {what} (rerun with --debug to see where)"


_INPUT_OPTIONS = ("input", "reference", "train", "valid", "candidate")
"""The options that name documents to read: each must be there before a command starts (a missing file is said
at once, before torch, a critic or a plugin loads)."""


def _require_inputs(args) -> None:
    from .document import DocumentError

    for option in _INPUT_OPTIONS:
        value = getattr(args, option, None)
        for path in ([p for _, p in value] if option == "candidate" else [value]) if value else []:
            if isinstance(path, Path) and not os.path.lexists(path):
                raise DocumentError(f"{path}: no such file or folder")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, 2 for bad input or usage, 130 on Ctrl-C).  Whatever it
    prints passes :func:`critic.terminal.printable_streams`: data never acts on the terminal."""
    with printable_streams():
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    with verbosity(_counted(argv)) as logger:  # the level of the options before the command, then the parsed one's
        return _run(argv, logger)


def _run(argv: list[str], logger) -> int:
    debug = "--debug" in argv
    try:
        plugins, command = _ahead(argv)
        for spec in plugins:
            registry.add_plugin(spec)  # before the parser: a plugin's critics become `critic fit NAME` choices
        parser = build_parser([command] if command else [])
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # usage errors (status 2), --help and --version (0)
            return exc.code if isinstance(exc.code, int) else EXIT_ERROR
        logger.setLevel(level_of(_verbosity(args)))
        _log.debug("critic %s (Python %s), command %r", __version__, sys.version.split()[0], args.command)
        if hasattr(args, "criticism"):  # the settings with their bounds, together, before any file or model
            args.criticism = criticism_settings(args)
        _require_inputs(args)
        if hasattr(args, "device"):
            check_device_name(args.device)
        if _computes_here(args) and {"device", "seed", "threads"} & set(vars(args)):
            set_up_torch(getattr(args, "device", "cpu"), getattr(args, "seed", None), getattr(args, "threads", None))
        with collector.frozen():  # torch's and the tool's objects, alive until exit, out of every collection
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        _log.error("interrupted", extra={"label": ""})
        return EXIT_INTERRUPTED
    except _USER_ERRORS as exc:
        if debug:
            raise
        _log.error("%s", _message(exc))
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    from critic.cli import main as _main  # critic.cli's functions are the registered commands, not __main__'s

    sys.exit(_main())
