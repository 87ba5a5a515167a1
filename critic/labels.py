"""How the tables name and read the statistics: shared by the result objects and every rendering of them."""

from __future__ import annotations

__all__ = ["HIGHER_IS_BETTER", "STATISTICS", "HEADLINES", "TWO_SIDED_NOTE", "OUTLIER_SCORE_NOTES", "SIZE_MODEL_NOTES",
           "COMBINED_NOTE"]

HIGHER_IS_BETTER = {  # None: two-sided (results.json's "higher_is_better" per statistic)
    "latent_nll": None,    # two-sided: a distance from the reference in either direction is the finding
    "latent_ppl": None,    # (degenerate generations with few latent steps score *below* real text)
    "difference": None,    # candidate minus reference
    "p_value": True,       # permutation test of the compared statistic: small p = the candidate differs
    "outlier_p_value": True,
}

STATISTICS = {
    # name: (higher is better, Markdown column heading)
    "word_ppl": (False, "word PPL"),
    "mauve": (True, "MAUVE"),
    "pdd": (False, "PDD"),
}
"""Known set statistics beside Latent NLL; :meth:`CriticismResult.add_statistic` accepts others too."""

HEADLINES = {"latent_ppl": "Latent PPL", "latent_nll": "Latent NLL"}
"""The headline statistics a critic can have (:attr:`critic.Critic.headline`), as tables name them."""

TWO_SIDED_NOTE = ("Δ and p compare each set with the reference on the headline statistic (p: permutation test of "
                  "that statistic); a difference in either direction is a distance from the reference, not "
                  "better or worse.")

OUTLIER_SCORE_NOTES = {
    "length": "conformal right tail of T(x)/M(x) among real documents (the critic's calibration documents and the "
              "reference) of similar length (word count)",
    "plain": "conformal right tail of T(x)/M(x) among all real documents (the critic's calibration documents and the "
             "reference)",
}
"""What a result's outlier p-values are (its ``config["outlier_score"]``), in the tables' words."""

SIZE_MODEL_NOTES = {
    "bins": " (its length group)",
    "location-scale": " (the residual of a location-scale model of the statistic on log length)",
}
"""Appended to the ``"length"`` note: how the length is taken into account (``config["size_model"]``; results
written before the choice existed: bins)."""

COMBINED_NOTE = (", combined with the critic's statistics beside it by rank (the smallest of a document's ranks, itself "
                 "ranked among the real documents'): {}")
"""Appended to the note of a result whose critic has statistics beside ``T/M`` (``config["outlier_statistics"]``,
formatted with their names)."""
