"""The man-page corpus the benchmarks run on: built from a man-page root, filtered as the main job does."""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path

__all__ = ["filtered_manpages"]

CONFIG = Path(__file__).resolve().parents[1] / "manpages" / "sections.toml"


def filtered_manpages(root: str | Path) -> dict[str, list]:
    """Train/valid/test documents of the man pages under ``root``, after the ``[corpus]`` filters of
    ``experiments/manpages/sections.toml`` (built in a temporary directory, never installed)."""
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl
    from critics.sections import CorpusFilter

    corpus = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["corpus"]
    with tempfile.TemporaryDirectory() as tmp:
        build_manpages(tmp, root=Path(root), install=False)
        splits = {s: read_jsonl(Path(tmp) / f"{s}.jsonl") for s in ("train", "valid", "test")}
    filt = CorpusFilter(min_sections=corpus["min_sections"], min_section_tokens=corpus["min_section_tokens"],
                        max_section_tokens=corpus["max_section_tokens"], min_title_count=corpus["min_title_count"])
    return filt.apply(splits)[0]
