"""Reading the critics' report views back in tests: a table's rows and marked spans, unescaped."""

from __future__ import annotations

from html.parser import HTMLParser


class _Reader(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[str, list[dict]]] = []  # (table class, rows)
        self.spans: list[tuple[str, str, str]] = []  # (class, text, subscript) of each mention <span>
        self._sub = False
        self._row: dict | None = None
        self._cell: list[str] | None = None
        self._span: list | None = None
        self._in_body = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append((attrs.get("class") or "", []))
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._row = {"class": attrs.pop("class", None), "attrs": attrs, "cells": []}
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "span" and (attrs.get("class") or "").startswith("mention"):
            self._span = [attrs["class"], [], []]
        elif tag == "sub":
            self._sub = True

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif tag == "tr" and self._row is not None:
            self.tables[-1][1].append(self._row)
            self._row = None
        elif tag == "td" and self._cell is not None:
            self._row["cells"].append("".join(self._cell))
            self._cell = None
        elif tag == "span" and self._span is not None:
            self.spans.append((self._span[0], "".join(self._span[1]), "".join(self._span[2])))
            self._span = None
        elif tag == "sub":
            self._sub = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._span is not None:
            self._span[2 if self._sub else 1].append(data)


def rows(fragment: str, table_class: str) -> list[dict]:
    """The body rows of the (first) table of class ``table_class``: ``{"class", "attrs", "cells"}`` each,
    cell texts unescaped."""
    reader = _Reader()
    reader.feed(fragment)
    for cls, found in reader.tables:
        if cls == table_class:
            return found
    raise AssertionError(f"no table of class {table_class!r} in the view")


def mentions(fragment: str) -> list[tuple[str, str, str]]:
    """``(class, text, entity subscript)`` of every coreference mention span, in order."""
    reader = _Reader()
    reader.feed(fragment)
    return reader.spans
