"""How results show in a notebook: IPython's HTML formatter for :class:`~critic.results.CriticismResult` and
:class:`~critic.panel.PanelResult` (the report's summary table, :func:`critic.html.summary_html`).

The formatters are registered with the running IPython shell by the classes' module and name
(``for_type_by_name``), when :mod:`critic` is imported inside IPython (a notebook, a Jupyter console): the
result classes import no rendering, and nothing of it is imported until a result is shown.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["register", "result_html", "panel_html"]


def result_html(result: Any) -> str:
    """One critic's result: its rows of the summary table, labelled by the critic's name."""
    from .html import summary_html

    return summary_html({result.critic_name: result})


def panel_html(panel: Any) -> str:
    """Several critics' results: the report's summary table."""
    from .html import summary_html

    return summary_html(panel.results)


def register(shell: Any = None) -> bool:
    """Register the HTML formatters with ``shell`` (default: the running IPython shell); ``False`` when there is
    none (IPython not imported, or not running)."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    html = shell.display_formatter.formatters["text/html"]
    html.for_type_by_name("critic.results", "CriticismResult", result_html)
    html.for_type_by_name("critic.panel", "PanelResult", panel_html)
    return True
