"""Adapter for the arXiv / PubMed long-document JSON of Cohan et al. (2018).

Each line of their ``train.txt`` / ``val.txt`` / ``test.txt`` is one article::

    {"article_id": "...", "abstract_text": ["<S> ... </S>", ...], "article_text": [...],
     "section_names": ["introduction", ...], "sections": [["sentence", ...], ...]}

Each named section becomes a :class:`Section` whose text is its sentences joined by spaces;
the abstract goes to ``metadata["abstract"]``.  A line that does not have this shape --
``section_names`` and ``sections`` of different lengths, a section that is a string rather
than a list of sentences, a name that is not a string -- is an error naming the file, line
and article: nothing is guessed (a string is never read as a list of characters).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from ..document import Document, DocumentError, Section

__all__ = ["iter_cohan"]

_SENTENCE_TAGS = re.compile(r"</?S>")


def _clean(sentence: str) -> str:
    return " ".join(_SENTENCE_TAGS.sub(" ", sentence).split())


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _document(obj: Any, where: str) -> Document:
    if not isinstance(obj, dict):
        raise DocumentError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    article = obj.get("article_id")
    if isinstance(article, bool) or not isinstance(article, (str, int)) or str(article) == "":
        raise DocumentError(f"{where}: expected a non-empty string 'article_id', got {article!r}")
    article = str(article)
    names, bodies = obj.get("section_names"), obj.get("sections")
    if not _strings(names):
        raise DocumentError(f"{where}: article {article!r}: 'section_names' must be a list of strings")
    if not isinstance(bodies, list):
        raise DocumentError(f"{where}: article {article!r}: 'sections' must be a list of sections")
    if len(names) != len(bodies):
        raise DocumentError(f"{where}: article {article!r} has {len(names)} section names "
                            f"but {len(bodies)} sections")
    for k, body in enumerate(bodies):
        if not _strings(body):
            raise DocumentError(f"{where}: article {article!r}: section {k} ({names[k]!r}) must be a list "
                                f"of sentence strings, got {type(body).__name__}")
    abstract = obj.get("abstract_text")
    if abstract is not None and not _strings(abstract):
        raise DocumentError(f"{where}: article {article!r}: 'abstract_text' must be a list of strings")
    sections = tuple(Section(title=n, text=" ".join(_clean(s) for s in body)) for n, body in zip(names, bodies))
    return Document(id=article, sections=sections,
                    metadata={"abstract": " ".join(_clean(s) for s in abstract or []), "source": "cohan"})


def iter_cohan(path: str | Path) -> Iterator[Document]:
    """Yield one document per line of a Cohan et al. JSON-lines file (blank lines are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{where}: line is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            except json.JSONDecodeError as exc:
                raise DocumentError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            yield _document(obj, where)
