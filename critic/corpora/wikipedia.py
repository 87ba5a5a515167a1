"""Adapter for Wikipedia dumps (``pages-articles.xml[.bz2]``), as in paper app. E.

Each article becomes a document whose first section is the introduction, titled
``"abstract"``, followed by its top-level (``== ... ==``) sections.  Redirects,
disambiguation pages, non-article namespaces and articles about years are skipped and
counted in the returned report; templates, files, images, tables, references and markup
are stripped with ``mwparserfromhell`` (``pip install mwparserfromhell``).  A file that is
not a well-formed dump (bad XML, a damaged ``.bz2``) is a :class:`DocumentError` naming the
file and, for XML, the line.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Iterator

from ..document import Document, DocumentError, Section

__all__ = ["wikitext_to_sections", "iter_wikipedia"]

_YEAR_TITLE = re.compile(r"^(\d{1,4}( BC| AD)?|\d{1,4}s( BC)?)$")
_DROP_PREFIXES = ("file:", "image:", "category:")
_DROP_TAGS = {"ref", "references", "gallery", "table", "math", "code", "syntaxhighlight", "source", "pre",
              "timeline", "imagemap", "score", "graph"}


def _plain(wikicode) -> str:
    import mwparserfromhell as mw

    for node in list(wikicode.nodes):
        drop_tag = isinstance(node, mw.nodes.Tag) and str(node.tag).strip().lower() in _DROP_TAGS
        if drop_tag or isinstance(node, (mw.nodes.Template, mw.nodes.Comment)):
            try:
                wikicode.remove(node)
            except ValueError:
                pass
        elif isinstance(node, mw.nodes.Wikilink) and str(node.title).lower().startswith(_DROP_PREFIXES):
            wikicode.remove(node)
    text = wikicode.strip_code(normalize=True, collapse=True)
    return " ".join(text.split())


def wikitext_to_sections(wikitext: str) -> list[Section]:
    """Introduction as ``"abstract"`` then each level-2 section (its subsections folded in)."""
    import mwparserfromhell as mw

    code = mw.parse(wikitext)
    sections: list[Section] = []
    for part in code.get_sections(levels=[2], include_lead=True, include_headings=True):
        headings = part.filter_headings(recursive=False)
        if headings and headings[0].level == 2:
            title = _plain(mw.parse(str(headings[0].title)))
            part.remove(headings[0])
        else:
            title = "abstract"
        text = _plain(part)
        if text:
            sections.append(Section(title=title, text=text))
    return sections


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_wikipedia(path: str | Path, report: Counter | None = None) -> Iterator[Document]:
    """Stream documents from a dump; ``report`` counts what was skipped and why."""
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    try:
        import mwparserfromhell  # noqa: F401  (needed by wikitext_to_sections)
    except ImportError:
        raise RuntimeError("reading Wikipedia dumps needs mwparserfromhell: pip install mwparserfromhell") from None
    opener = bz2.open if path.suffix == ".bz2" else open
    report = report if report is not None else Counter()
    try:
        with opener(path, "rb") as fh:
            yield from _pages(ET.iterparse(fh, events=("end",)), report)
    except ET.ParseError as exc:
        line, column = exc.position
        raise DocumentError(f"{path}:{line}: not a well-formed XML dump (column {column}: "
                            f"{str(exc).split(':')[0]})") from None
    except (OSError, EOFError) as exc:  # a damaged or truncated .bz2 stream
        raise DocumentError(f"{path}: cannot be read as {'bzip2-compressed ' if opener is bz2.open else ''}"
                            f"XML ({type(exc).__name__}: {exc})") from None


def _pages(events, report: Counter) -> Iterator[Document]:
    for _, elem in events:
        if _local(elem.tag) != "page":
            continue
        fields = {_local(c.tag): c for c in elem}
        title = (fields["title"].text or "").strip() if "title" in fields else ""
        ns = fields["ns"].text if "ns" in fields else "0"
        revision = fields.get("revision")
        text_el = next((c for c in revision if _local(c.tag) == "text"), None) if revision is not None else None
        wikitext = (text_el.text or "") if text_el is not None else ""
        if ns != "0":
            report["not an article (namespace)"] += 1
        elif not title:
            report["no title"] += 1
        elif "redirect" in fields or wikitext.lstrip().lower().startswith("#redirect"):
            report["redirect"] += 1
        elif re.search(r"\{\{\s*(disambiguation|disambig|dab)\b", wikitext, re.I) or title.endswith("(disambiguation)"):
            report["disambiguation"] += 1
        elif _YEAR_TITLE.match(title):
            report["article about a year"] += 1
        else:
            sections = wikitext_to_sections(wikitext)
            if sections:
                report["kept"] += 1
                yield Document(id=title, title=title, sections=tuple(sections), metadata={"source": "wikipedia"})
            else:
                report["no text"] += 1
        elem.clear()
