"""The criticism settings, declared once: how sets are compared and documents flagged and listed.

:class:`CriticismSettings` holds each setting's type, bounds, default and help; the commands' options
(:func:`critic.cli_args.add_criticism_options`) and the configs' keys (:func:`criticism_keys`: a report config's
``[report]`` table, a study's ``[criticism]`` table) are derived from it, so a bound is checked the same way
before any work wherever the setting is given.  The flag rule follows Benjamini & Hochberg (1995): a document is
flagged when the q-value of its outlier p-value among its set's documents is at most ``fdr``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Sequence

from .config import ConfigError, Key, Range, check_call, settings_table

__all__ = ["FLAG_FDR", "FLAG_TOP", "CriticismSettings", "criticism_keys"]

FLAG_FDR = 0.1
"""Default false discovery rate of outlier flags: a document is flagged when its q-value is at most this."""
FLAG_TOP = 20
"""Default number of least likely documents per critic and set that a report lists (flagged or not)."""


@dataclass(frozen=True)
class CriticismSettings:
    """How sets are criticised and documents flagged: the resamples of the set statistics' CIs and tests, what a
    document's outlier p-value compares it with, the flag rule and how many documents a report lists.

    A flag is a Benjamini-Hochberg q-value at most ``fdr`` (Benjamini & Hochberg 1995, over each set's outlier
    p-values; default :data:`FLAG_FDR`), or, with ``flag_level`` instead, an outlier p-value at
    most that level, document by document.  Checked when made (:func:`critic.config.check_call`)."""

    top: Annotated[int, Range(min=1), "documents listed per critic and set, the least likely first (flagged ones "
                                      "with a page each); the report counts every flag"] = FLAG_TOP
    n_bootstrap: Annotated[int, Range(min=1), "bootstrap resamples of the CIs"] = 1000
    n_permutations: Annotated[int, Range(min=1), "permutations of the two-sample tests (exact when the two sets "
                                                 "have no more splits)"] = 2000
    outlier_score: Annotated[Literal["length", "plain"],
                             "what a document's outlier p-value compares it with: real documents (the critic's "
                             "calibration documents and the reference) of similar length (length: a document is not "
                             "flagged for being short or long) or all of them (plain)"] = "length"
    fdr: Annotated[float | None, Range(gt=0, max=1),
                   f"flag documents whose q-value (Benjamini-Hochberg over each set's outlier p-values) is at most "
                   f"this: at most this share of a set's flags are expected to be real documents (default "
                   f"{FLAG_FDR:g})"] = None
    flag_level: Annotated[float | None, Range(gt=0, max=1),
                          "instead of fdr: flag documents whose outlier p-value is at most this, document by "
                          "document (no multiplicity control)"] = None

    def __post_init__(self) -> None:
        check_call(type(self), dataclasses.asdict(self), where="criticism settings", owner="criticism")
        if self.fdr is not None and self.flag_level is not None:
            raise ConfigError(f"fdr = {self.fdr:g} and flag_level = {self.flag_level:g} are two flag rules (a "
                              "q-value, or a p-value document by document): give one of them")

    @property
    def flag_rule(self) -> dict[str, float | None]:
        """The rule as :class:`~critic.panel.PanelResult` takes it: ``level`` when given, else ``fdr`` (default
        :data:`FLAG_FDR`)."""
        if self.flag_level is not None:
            return {"fdr": None, "level": self.flag_level}
        return {"fdr": FLAG_FDR if self.fdr is None else self.fdr, "level": None}

    def resampling(self) -> dict[str, Any]:
        """The keywords of :func:`critic.criticism.criticize` these settings give."""
        return {"n_bootstrap": self.n_bootstrap, "n_permutations": self.n_permutations,
                "outlier_score": self.outlier_score}


def criticism_keys(*, keep: Sequence[str] | None = None, **defaults: Any) -> dict[str, Key]:
    """The config keys of :class:`CriticismSettings` (a ``[report]`` or ``[criticism]`` table), with an entry
    point's own ``defaults``; ``keep`` limits them to some settings."""
    return settings_table(CriticismSettings, keep=keep, defaults=defaults)
