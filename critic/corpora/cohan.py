"""Adapter for the arXiv / PubMed long-document JSON of Cohan et al. (2018).

Each line of their ``train.txt`` / ``val.txt`` / ``test.txt`` is one article::

    {"article_id": "...", "abstract_text": ["<S> ... </S>", ...], "article_text": [...],
     "section_names": ["introduction", ...], "sections": [["sentence", ...], ...]}

Each named section becomes a :class:`Section` whose text is its sentences joined by spaces;
the abstract goes to ``metadata["abstract"]``.  A line whose ``section_names`` and
``sections`` disagree in length is an error naming the file, line and article.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

from ..document import Document, DocumentError, Section

__all__ = ["iter_cohan"]

_SENTENCE_TAGS = re.compile(r"</?S>")


def _clean(sentence: str) -> str:
    return " ".join(_SENTENCE_TAGS.sub(" ", sentence).split())


def iter_cohan(path: str | Path) -> Iterator[Document]:
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise DocumentError(f"{where}: line is not valid UTF-8") from None
            except json.JSONDecodeError as exc:
                raise DocumentError(f"{where}: invalid JSON ({exc.msg})") from None
            article = obj.get("article_id")
            names, bodies = obj.get("section_names"), obj.get("sections")
            if article is None or not isinstance(names, list) or not isinstance(bodies, list):
                raise DocumentError(f"{where}: expected article_id, section_names and sections")
            if len(names) != len(bodies):
                raise DocumentError(f"{where}: article {article!r} has {len(names)} section names "
                                    f"but {len(bodies)} sections")
            sections = tuple(Section(title=str(n), text=" ".join(_clean(s) for s in body))
                             for n, body in zip(names, bodies))
            abstract = " ".join(_clean(s) for s in obj.get("abstract_text") or [])
            yield Document(id=str(article), sections=sections, metadata={"abstract": abstract, "source": "cohan"})
