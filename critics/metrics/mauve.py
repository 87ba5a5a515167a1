"""MAUVE (Pillutla et al., 2021), the main paper's baseline, through the maintained ``mauve-text``
package, on sentence features from the offline encoder instead of GPT-2-large (not installable
offline here).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["mauve_score", "mauve_text"]


def mauve_score(p_features, q_features, *, num_buckets="auto", seed: int = 25, **kwargs) -> float:
    """MAUVE of two feature sets, (n_p, d) and (n_q, d), by ``mauve.compute_mauve``.

    ``num_buckets='auto'`` uses n / 10 k-means clusters as the package does; other keyword arguments
    pass through (e.g. ``mauve_scaling_factor``, ``kmeans_num_redo``).
    """
    import mauve

    p = np.asarray(p_features, dtype=np.float32)
    q = np.asarray(q_features, dtype=np.float32)
    out = mauve.compute_mauve(p_features=p, q_features=q, num_buckets=num_buckets, seed=seed, verbose=False, **kwargs)
    return float(out.mauve)


def mauve_text(p_texts: Sequence[str], q_texts: Sequence[str], encoder: str | None = None, **kwargs) -> float:
    """MAUVE of two text sets on mean-pooled sentence vectors of ``encoder`` (default offline MiniLM)."""
    from critic.lm.encoders import SentenceEncoder

    enc = SentenceEncoder(encoder)
    return mauve_score(enc.encode(list(p_texts)), enc.encode(list(q_texts)), **kwargs)
