"""Corpus builders and adapters: real sectioned documents from formats users bring."""
