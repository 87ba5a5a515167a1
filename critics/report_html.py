"""The small HTML pieces the critics' report views share (:meth:`critic.views.CriticView.document_view`).

A view is an HTML fragment placed in a flagged document's page.  Every value goes through
:func:`escape` unless it is :class:`Markup` (HTML these helpers built); nothing here links to a URL
or runs a script.  :func:`view` prefixes the fragment with one small ``<style>`` (row highlights,
bars), so a view needs nothing from the page it lands in.
"""

from __future__ import annotations

import html
import math
from typing import Any, Iterable, Mapping, Sequence

from critic.html import number

__all__ = ["Markup", "escape", "excerpt", "number", "bar", "table", "paragraph", "note", "view", "STYLE"]

STYLE = ("<style>.cv table{margin:.4rem 0}.cv td.w,.cv th.w{white-space:normal;text-align:left;min-width:16rem}"
         ".cv tr.unlikely td,.cv tr.far td{background:#fde2e1}.cv tr.dropped td{color:#6a737d}"
         ".cv .bar{display:inline-block;width:7rem;height:.7rem;background:#eef1f4;vertical-align:middle;"
         "margin-right:.4rem}.cv .bar span{display:block;height:100%;background:#3b5b92}"
         ".cv p{margin:.3rem 0}.cv .coref-document{white-space:pre-wrap}</style>")
"""The views' own CSS, scoped to ``.cv``."""


class Markup(str):
    """A string that is already HTML: :func:`escape` passes it through unchanged."""


def escape(value: Any) -> Markup:
    """``value`` as HTML text (``&``, ``<``, ``>`` and quotes escaped), or itself when :class:`Markup`."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def excerpt(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of ``text`` with runs of whitespace collapsed, ``…`` when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit].rstrip() + "…"


def bar(fraction: float, label: str | None = None) -> Markup:
    """A horizontal bar filled to ``fraction`` (clamped to [0, 1]) followed by ``label``."""
    f = min(max(float(fraction), 0.0), 1.0) if math.isfinite(fraction) else 0.0
    return Markup(f'<span class="bar"><span style="width:{100 * f:.1f}%"></span></span>'
                  + escape(number(fraction) if label is None else label))


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, align: str = "",
          row_classes: Sequence[str | None] | None = None,
          row_attrs: Sequence[Mapping[str, Any]] | None = None, css: str | None = None) -> Markup:
    """A ``<table>``: ``header`` cells, then ``rows`` (each value escaped unless :class:`Markup`).

    ``align``: one letter per column, ``l`` left, ``r`` right (the default), ``w`` left and wrapped
    (long text); ``row_classes`` / ``row_attrs``: a class and ``data-`` attributes per row.
    """
    kind = {"l": ' class="l"', "w": ' class="w"', "r": ""}

    def cls(k: int) -> str:
        return kind[align[k]] if k < len(align) else ""

    head = "".join(f"<th{cls(k)}>{escape(h)}</th>" for k, h in enumerate(header))
    body = []
    for n, row in enumerate(rows):
        row_class = row_classes[n] if row_classes is not None else None
        extra = row_attrs[n] if row_attrs is not None else {}
        attrs = "".join(f' {escape(k)}="{escape(v)}"' for k, v in extra.items())
        cells = "".join(f"<td{cls(k)}>{escape(v)}</td>" for k, v in enumerate(row))
        row_cls = f' class="{escape(row_class)}"' if row_class else ""
        body.append(f"<tr{row_cls}{attrs}>{cells}</tr>")
    table_class = f' class="{escape(css)}"' if css else ""
    return Markup(f"<table{table_class}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def paragraph(text: str) -> Markup:
    """A paragraph of (escaped) text."""
    return Markup(f"<p>{escape(text)}</p>")


def note(text: str) -> Markup:
    """A muted paragraph."""
    return Markup(f'<p class="muted">{escape(text)}</p>')


def view(*parts: str, kind: str = "") -> str:
    """The view's fragment: :data:`STYLE`, then ``parts`` (HTML) in a ``<div class="cv">``."""
    css = f"cv cv-{escape(kind)}" if kind else "cv"
    return f'{STYLE}<div class="{css}">' + "".join(parts) + "</div>"
