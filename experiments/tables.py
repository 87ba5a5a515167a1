"""Formatting shared by the studies' Markdown tables."""

from __future__ import annotations

import math
from dataclasses import asdict

__all__ = ["cell", "interval", "set_comparison", "comparison_line", "openings_line"]


def cell(value, fmt: str = ".2f") -> str:
    """``value`` formatted with ``fmt``, or ``—`` for a value a set does not have (``None``, NaN, inf)."""
    return "—" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)


def interval(bounds, fmt: str = ".2f") -> str:
    """``[lo, hi]`` formatted with ``fmt``, or ``—`` when either bound is missing or not finite (a CI from
    fewer than two documents is never printed as a finding)."""
    lo, hi = bounds
    if "—" in (cell(lo), cell(hi)):
        return "—"
    return f"[{format(lo, fmt)}, {format(hi, fmt)}]"


def set_comparison(result, reference: str, candidate: str, settings: dict, seed: int) -> dict:
    """Set ``candidate`` against set ``reference`` of one result (two LMs, say) on the Latent PPL and the mean
    Latent NLL: the difference (candidate minus reference), its bootstrap CI and permutation p-value
    (:func:`critic.criticism.compare_sets`) with ``[criticism]``'s resamples; JSON-ready (an undefined number,
    from a set of fewer than two documents, is ``null``)."""
    from critic.criticism import compare_sets
    from critic.results import json_ready

    mean, ppl = compare_sets(result, reference, candidate, n_bootstrap=settings["n_bootstrap"],
                             n_permutations=settings["n_permutations"], seed=seed)
    return json_ready({"reference": reference, "candidate": candidate,
                       "n": {n: result.set(n).n for n in (candidate, reference)},
                       "latent_ppl": asdict(ppl), "mean_latent_nll": asdict(mean)})


def comparison_line(label: str, comparison: dict) -> str:
    """One sentence of a :func:`set_comparison`: ``label`` (what minus what), the sets' sizes, the Latent PPL
    difference with its CI and p-value, the mean Latent NLL's."""
    ppl, mean, n = comparison["latent_ppl"], comparison["mean_latent_nll"], comparison["n"]
    return (f"{label} (n = {n[comparison['candidate']]} and {n[comparison['reference']]}): Latent PPL "
            f"{cell(ppl['difference'], '+.2f')} {interval(ppl['difference_ci'])}, permutation p = "
            f"{cell(ppl['p_value'], '.4f')}; mean Latent NLL {cell(mean['difference'], '+.3f')} "
            f"{interval(mean['difference_ci'], '.3f')}, p = {cell(mean['p_value'], '.4f')}.")


def openings_line(openings: dict[str, dict]) -> str:
    """One sentence of :meth:`experiments.lm_stages.LmStages.openings`: per LM, its generations that begin as
    documents, the data's share and the ratio."""
    parts = [f"`{name}` {o['samples'][0]}/{o['samples'][1]} (share {cell(o['share'], '.3f')}; the training "
             f"documents' {cell(o['data_share'], '.3f')}; ratio {cell(o['ratio'], '.3f')})"
             for name, o in openings.items()]
    return "Generations that begin as documents begin (critic.lm.openings): " + "; ".join(parts) + "."
