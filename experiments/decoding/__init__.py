"""The decoding study: loops and entity coherence of ancestral, nucleus and greedy decoding (issue 42)."""
