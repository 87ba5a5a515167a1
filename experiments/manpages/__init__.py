"""Main job on the embedded default data: section-transition criticism of the Linux man pages."""
