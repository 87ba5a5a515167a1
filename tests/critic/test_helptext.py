"""Help text is plain: no Sphinx roles or literal markup in any ``--help`` or ``critic list``, and a command
shows only options it takes."""

from __future__ import annotations

import argparse
import re

from critic.cli import build_parser, main
from critic.helptext import plain_help

MARKUP = re.compile(r":[a-z]+:`|``|see the module docstring")


def test_roles_and_literals_become_what_they_show():
    doc = ("Fits by :func:`~critics.topics.ctm.fit_ctm` (see :mod:`critics.coref.resolvers`); ``None`` picks "
           "it, :ref:`the guide <write-your-own>` says how (see the module docstring).")
    assert plain_help(doc) == ("Fits by fit_ctm (see critics.coref.resolvers); None picks it, the guide says how.")
    assert plain_help("plain text, `one` backtick") == "plain text, `one` backtick"


def _parsers(parser: argparse.ArgumentParser, path=("critic",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_help_shows_markup_and_fit_shows_no_reference(capsys):
    """The issue's cases: fit's help printed ``:class:`~critics...``` and offered a --reference fit does not
    take.  Every parser of every command (each critic's fit, each metric) is checked."""
    seen, reference = 0, {}
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert not MARKUP.search(text), (path, MARKUP.search(text).group())
        reference[path[1:]] = "a --reference file's is always detected" in " ".join(text.split())
        seen += 1
    assert seen > 30
    assert not any(on for path, on in reference.items() if path[:1] == ("fit",))
    assert reference[("compare",)] and reference[("report",)] and reference[("outliers",)]
    assert main(["list"]) == 0
    assert not MARKUP.search(capsys.readouterr().out)
