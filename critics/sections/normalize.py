"""Section-title normalisation and corpus filters of paper app. E.

Title normalisation (applied by the critic to every document it sees):

1. lower-case and split into words;
2. lemmatise each word (``simplemma``, offline; the paper used NLTK's WordNet lemmatiser);
3. remove numbers;
4. map words to a standard spelling ("acknowledgement" -> "acknowledgment").

Corpus filters (applied when a corpus is prepared, each counted with a reason):

- drop "see also / external link / reference / further reading / note / source" sections;
- keep documents with at least ``min_sections`` remaining sections;
- keep documents whose sections all have between ``min_section_tokens`` and
  ``max_section_tokens`` tokens (the paper: 30 and 2000 GPT-2 tokens; here
  whitespace tokens unless a tokenizer is given);
- remove documents with a title seen fewer than ``min_title_count`` times in training.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

from critic.document import Document, Section

__all__ = ["TitleNormalizer", "CorpusFilter", "FilterReport", "DEFAULT_DROP_TITLES", "STANDARD_SPELLINGS", "lemma"]

DEFAULT_DROP_TITLES = ("see also", "external link", "reference", "further reading", "note", "source")

STANDARD_SPELLINGS = {
    "acknowledgement": "acknowledgment",
    "acknowledgements": "acknowledgment",
    "behaviour": "behavior",
    "colour": "color",
    "favour": "favor",
    "honour": "honor",
    "analyse": "analyze",
    "organisation": "organization",
    "summarisation": "summarization",
    "characterisation": "characterization",
    "modelling": "modeling",
    "centre": "center",
    "licence": "license",
    "programme": "program",
}

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


@lru_cache(maxsize=65536)
def _lemma(word: str) -> str:
    """simplemma's English lemma of ``word``: imported, and its dictionary read (about 0.3 s), on the first call."""
    import simplemma

    return simplemma.lemmatize(word, lang="en")


def lemma(word: str) -> str:
    """The lemma :class:`TitleNormalizer` gives ``word`` (a lower-case word of a title, numbers removed)."""
    return _lemma(word)


@dataclass(frozen=True)
class TitleNormalizer:
    """Maps a raw section title to its canonical form (see module docstring).

    ``normalize("RETURN VALUES")`` -> ``"return value"``; ``"2.1 Results"`` -> ``"result"``.
    Returns ``""`` for a title with no words left.
    """

    lemmatize: bool = True
    remove_numbers: bool = True
    spellings: tuple[tuple[str, str], ...] = tuple(STANDARD_SPELLINGS.items())

    def __call__(self, title: str | None, lemma: Callable[[str], str] = lemma) -> str:
        """``title``'s canonical form; ``lemma``: the lemmatiser of its words (default simplemma's, :func:`lemma`;
        a critic passes one that looks its words up first)."""
        words = self.words(title)
        if self.lemmatize:
            words = [lemma(w) for w in words]
        table = dict(self.spellings)
        return " ".join(table.get(w, w) for w in words)

    def words(self, title: str | None) -> list[str]:
        """The words of ``title`` before lemmatisation: lower-cased, numbers removed (when ``remove_numbers``)."""
        if title is None:
            return []
        text = title.lower()
        if self.remove_numbers:
            text = _NUMBER.sub(" ", text)
        return _WORD.findall(text)

    def to_dict(self) -> dict:
        return {"lemmatize": self.lemmatize, "remove_numbers": self.remove_numbers,
                "spellings": [list(p) for p in self.spellings]}

    @classmethod
    def from_dict(cls, d: dict) -> "TitleNormalizer":
        return cls(lemmatize=d["lemmatize"], remove_numbers=d["remove_numbers"],
                   spellings=tuple(tuple(p) for p in d["spellings"]))


@dataclass
class FilterReport:
    """Documents removed by :class:`CorpusFilter`, with reasons, and sections dropped."""

    removed: dict[str, str] = field(default_factory=dict)
    sections_dropped: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"removed": self.removed, "n_removed": len(self.removed),
                "sections_dropped": dict(self.sections_dropped)}


def whitespace_tokens(text: str) -> int:
    return len(text.split())


@dataclass
class CorpusFilter:
    """App. E corpus preparation; every removal is recorded in a :class:`FilterReport`."""

    normalizer: TitleNormalizer = field(default_factory=TitleNormalizer)
    drop_titles: Sequence[str] = DEFAULT_DROP_TITLES
    min_sections: int = 3
    min_section_tokens: int = 1
    max_section_tokens: int | None = None
    min_title_count: int = 1
    count_tokens: Callable[[str], int] = whitespace_tokens
    max_document_tokens: int | None = None
    """Most tokens of a whole document (its kept sections): a study whose LM must generate whole documents keeps
    those it can finish within its sampling budget."""

    def normalize_document(self, doc: Document, report: FilterReport | None = None) -> Document:
        """Normalise titles and drop the app. E boilerplate sections."""
        drop = {self.normalizer(t) for t in self.drop_titles}
        kept = []
        for sec in doc.sections:
            title = self.normalizer(sec.title)
            if title in drop:
                if report is not None:
                    report.sections_dropped[title] += 1
                continue
            kept.append(Section(title=title, text=sec.text))
        return doc.replace_sections(kept)

    def _reason(self, doc: Document) -> str | None:
        if len(doc.sections) < self.min_sections:
            return f"{len(doc.sections)} sections after normalisation (< {self.min_sections})"
        for k, sec in enumerate(doc.sections):
            if not sec.title:
                return f"section {k} has no title after normalisation"
            n = self.count_tokens(sec.text)
            if n < self.min_section_tokens:
                return f"section {k} ({sec.title!r}) has {n} tokens (< {self.min_section_tokens})"
            if self.max_section_tokens is not None and n > self.max_section_tokens:
                return f"section {k} ({sec.title!r}) has {n} tokens (> {self.max_section_tokens})"
        if self.max_document_tokens is not None:
            n = sum(self.count_tokens(sec.text) for sec in doc.sections)
            if n > self.max_document_tokens:
                return f"{n} tokens in its sections (> {self.max_document_tokens})"
        return None

    def apply(self, splits: dict[str, Sequence[Document]], *, train: str = "train"
              ) -> tuple[dict[str, list[Document]], FilterReport]:
        """Filter every split; title frequencies are counted on the ``train`` split."""
        report = FilterReport()
        staged: dict[str, list[Document]] = {}
        for name, docs in splits.items():
            staged[name] = []
            for doc in docs:
                doc = self.normalize_document(doc, report)
                reason = self._reason(doc)
                if reason is None:
                    staged[name].append(doc)
                else:
                    report.removed[f"{name}/{doc.id}"] = reason
        counts = Counter(t for d in staged.get(train, []) for t in d.section_titles)
        out: dict[str, list[Document]] = {}
        for name, docs in staged.items():
            out[name] = []
            for doc in docs:
                rare = [t for t in doc.section_titles if counts[t] < self.min_title_count]
                if rare:
                    report.removed[f"{name}/{doc.id}"] = (
                        f"infrequent title {rare[0]!r} ({counts[rare[0]]} < {self.min_title_count} in {train})")
                else:
                    out[name].append(doc)
        return out, report
