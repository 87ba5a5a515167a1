"""The v2 contract: one projection per batch, failures during projection, untrusted numbers never reported."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from critic import Critic, Projection, criticize
from critic.document import Document, Section
from critic.latent import PointMass
from critic.panel import PanelResult
from critic.report import write_report


def doc(i, values):
    return Document(str(i), tuple(Section(None, str(v)) for v in values))


class MeanCritic(Critic):
    """z = the mean of a document's numbers; prior N(0, 1); point mass.  Projection fails on 'bad'."""

    batch_size = 3

    def __init__(self, lose: bool = False):
        self.lose = lose

    def fit(self, docs, *, validation=None):
        self.fitted_ = True
        self.calls_ = []
        return self

    def _get_state(self):
        return {"fitted": self.fitted_}, {}

    def prior(self):
        return Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64),
                      validate_args=False)

    def check(self, d):
        return "no numbers" if not d.sections else None

    def project(self, docs):
        self.calls_.append([d.id for d in docs])
        ok, failures = [], {}
        for d in docs:
            if any(s.text == "bad" for s in d.sections):
                failures[d.id] = "holds 'bad'"
            else:
                ok.append(d)
        if self.lose and ok:
            ok = ok[1:]
        z = torch.tensor([np.mean([float(s.text) for s in d.sections]) for d in ok], dtype=torch.float64)
        return Projection([d.id for d in ok], PointMass(z), torch.tensor([float(len(d.sections)) for d in ok]),
                          failures, extras={"z": z.tolist()})


def expected_nll(z):
    return 0.5 * math.log(2 * math.pi) + 0.5 * z * z


def test_one_projection_per_batch_failures_counted_extras_aligned():
    critic = MeanCritic().fit([])
    docs = [doc(0, [1, 2]), doc(1, []), doc(2, ["bad"]), doc(3, [3]), doc(4, [0.5, 0.5, 2]), doc(5, [-1])]
    scores = critic.score(docs)
    assert critic.calls_ == [["0", "2", "3"], ["4", "5"]]  # checked docs only, batch_size 3, once each
    assert scores.doc_ids == ["0", "3", "4", "5"]
    assert scores.skipped == {"1": "no numbers", "2": "holds 'bad'"}
    zs = [1.5, 3.0, 1.0, -1.0]
    np.testing.assert_allclose(scores.latent_nll, [expected_nll(z) for z in zs], rtol=1e-12)
    np.testing.assert_array_equal(scores.latent_steps, [2, 1, 3, 1])
    assert scores.extras == {"z": zs}


def test_a_projection_that_loses_a_document_is_a_bug_not_a_drop():
    critic = MeanCritic(lose=True).fit([])
    with pytest.raises(RuntimeError, match=r"MeanCritic.project must return every document.*lost: \['0'\], "
                                           r"not in the batch: \[\], given twice: \[\]\)"):
        critic.score([doc(0, [1]), doc(1, [2])])

    class Twice(MeanCritic):
        def project(self, docs):
            p = super().project(docs)
            p.failures[p.doc_ids[0]] = "also failed"
            return p

    with pytest.raises(RuntimeError, match=r"lost: \[\], not in the batch: \[\], given twice: \['0'\]\)"):
        Twice().fit([]).score([doc(0, [1]), doc(1, [2])])


def test_duplicate_ids_in_a_set_are_an_error():
    with pytest.raises(ValueError, match="document id '0' occurs more than once"):
        MeanCritic().fit([]).score([doc(0, [1]), doc(0, [2])])


class InfiniteCritic(MeanCritic):
    """A prior with no mass outside [-2, 2]: T(x) = inf there."""

    def prior(self):
        from torch.distributions import Uniform

        return Uniform(torch.tensor(-2.0, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64),
                       validate_args=False)


def test_non_finite_latent_nll_is_a_counted_skip_never_a_number():
    scores = InfiniteCritic().fit([]).score([doc(0, [1]), doc(1, [5]), doc(3, [-1])])
    assert scores.doc_ids == ["0", "3"]
    np.testing.assert_allclose(scores.latent_nll, [math.log(4)] * 2, rtol=1e-12)
    assert scores.skipped == {"1": "Latent NLL is infinite: the prior gives probability 0 to the projected latent"}
    scores = MeanCritic().fit([]).score([doc(0, [1]), doc(2, ["nan"])])
    assert scores.doc_ids == ["0"] and "Latent NLL is NaN" in scores.skipped["2"]


def test_few_documents_warn_and_give_null_with_reasons_in_json(tmp_path):
    critic = MeanCritic().fit([])
    reference = [doc(i, [v]) for i, v in enumerate([0.1, -0.3, 0.2, 0.5, -0.1])]
    result = criticize(critic, reference, {"one": [doc("a", [2.0])], "none": [doc("b", ["bad"])]},
                       n_bootstrap=200, n_permutations=99)
    ref, one, none = result.reference, result.candidates["one"], result.candidates["none"]
    assert any("only 5 documents" in w for w in ref.warnings)
    assert one.latent_nll == pytest.approx(expected_nll(2.0), rel=1e-12)
    assert all(math.isnan(v) for v in (*one.latent_nll_ci, *one.latent_ppl_ci, one.comparison.p_value))
    assert none.n == 0 and none.n_skipped == 1 and math.isnan(none.latent_ppl)
    text = str(result)
    assert "| one ⚠ | 1 |" in text and "only 1 document: no confidence interval" in text
    paths = write_report(PanelResult({"mean": result}), tmp_path / "r")
    raw = paths["results"].read_text()
    assert "NaN" not in raw and "Infinity" not in raw
    saved = json.loads(raw)["critics"]["mean"]
    assert saved["candidates"]["one"]["latent_nll_ci"] == [None, None]
    assert "candidates.one.latent_nll_ci[0]" in saved["null_reasons"]
    assert "candidates.none.latent_ppl" in saved["null_reasons"]
    assert saved["candidates"]["one"]["warnings"] == ["only 1 document: no confidence interval"]


def test_results_json_provenance(tmp_path):
    from critic.document import documents_sha256, write_jsonl
    from critic.io import sha256_file

    critic = MeanCritic().fit([])
    reference = [doc(i, [v]) for i, v in enumerate(np.linspace(-1, 1, 12))]
    candidate = [doc(f"c{i}", [v]) for i, v in enumerate(np.linspace(0, 3, 12))]
    ref_file = write_jsonl(reference, tmp_path / "ref.jsonl")
    result = criticize(critic, reference, {"lm": candidate}, reference_name="real", paths={"real": ref_file})
    saved = json.loads(write_report(PanelResult({"mean": result}), tmp_path / "r")["results"].read_text())["critics"]["mean"]
    assert saved["schema_version"] == 1
    assert saved["critic"] == {"name": critic.name, "params": {"lose": False}, "state_sha256": critic.state_sha256(),
                               "headline": "latent_ppl"}
    assert saved["inputs"] == [
        {"name": "real", "path": str(ref_file), "sha256": sha256_file(ref_file), "n_documents": 12},
        {"name": "lm", "path": None, "sha256": documents_sha256(candidate), "n_documents": 12},
    ]
    assert saved["reference"]["higher_is_better"]["latent_ppl"] is None  # two-sided: a distance, not a ranking
    assert [d.extras for d in result.candidates["lm"].documents] == [{"z": float(v)} for v in np.linspace(0, 3, 12)]
    rows = [json.loads(line) for line in (tmp_path / "r" / "documents.jsonl").read_text().splitlines()]
    assert rows[0]["extras"] == {"z": -1.0} and rows[0]["set"] == "real" and rows[0]["critic"] == "mean"
    assert saved["candidates"]["lm"]["higher_is_better"]["p_value"] is True


@pytest.mark.parametrize("kwargs, message", [
    ({"n_bootstrap": 0}, "n_bootstrap must be an integer >= 1"),
    ({"n_permutations": 0}, "n_permutations must be an integer >= 1"),
    ({"level": 1.0}, "level must lie strictly between 0 and 1"),
    ({"reference_name": "lm"}, "clashes with the reference set"),
])
def test_criticize_rejects_settings_that_give_no_trustworthy_number(kwargs, message):
    critic = MeanCritic().fit([])
    with pytest.raises(ValueError, match=message):
        criticize(critic, [doc(0, [1]), doc(1, [2])], {"lm": [doc(2, [1])]}, **kwargs)


def test_report_directory_is_complete_or_absent(tmp_path, monkeypatch):
    critic = MeanCritic().fit([])
    result = criticize(critic, [doc(i, [i / 10]) for i in range(12)], n_bootstrap=50)
    out = tmp_path / "r"
    first = write_report(PanelResult({"mean": result}), out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def crash(directory):
        (directory / "half.png").write_bytes(b"\x89PNG")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_report(PanelResult({"mean": result}), out, figures=crash)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert first["report"].read_text().startswith("# Criticism report")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a report directory"):
        write_report(PanelResult({"mean": result}), tmp_path / "notes")


class SpreadCritic(MeanCritic):
    """MeanCritic with a statistic beside T/M that its latent (the mean) cannot see: the spread of the numbers."""

    outlier_statistics = ("spread",)

    def project(self, docs):
        projection = super().project(docs)
        numbers = {d.id: [float(s.text) for s in d.sections] for d in docs}
        projection.extras["spread"] = [float(np.ptp(numbers[i])) for i in projection.doc_ids]
        return projection


def test_statistics_beside_t_are_combined_into_the_outlier_p_value_and_kept_beside_it(tmp_path):
    """A critic's outlier statistic gets T/M's p-value against the reference (by hand: one length group, 40
    reference documents), the outlier p-value is the conformal one of their smaller rank (the definition, brute
    force), the plain one likewise, and each one's own p-value is kept (``p_values``), through documents.jsonl and
    back; the tables say what ranks.  A document whose mean is typical but whose numbers spread widely is flagged
    only through the statistic: its spread is the most extreme (p 1/41), a rank it shares with the reference's most
    extreme T/M, so its outlier p-value is 1/41 or 2/41 as the tie-break decides (Sidak's bound: 0.049 always)."""
    from critic.results import DocumentResult, outliers_table
    from critic.stats import id_uniforms
    from tests.critic.test_conformal import augmented_p

    rng = np.random.default_rng(0)
    reference = [doc(f"r{i}", rng.normal(0.0, 0.3, 2)) for i in range(40)]
    candidate = [doc(f"c{i}", rng.normal(0.0, 0.3, 2)) for i in range(10)] + [doc("wide", [-3.0, 3.0])]
    result = criticize(SpreadCritic().fit([]), reference, {"lm": candidate}, n_bootstrap=20, n_permutations=20)
    assert result.config["outlier_statistics"] == ["spread"]
    ref_docs = result.reference.documents
    ref_t = np.array([d.latent_nll_per_step for d in ref_docs])
    ref_spread = np.array([d.extras["spread"] for d in ref_docs])
    ref_ids = [d.id for d in ref_docs]
    ref_u = np.column_stack([id_uniforms(ref_ids, f"0:{name}") for name in ("latent_nll_per_step", "spread")])
    for d in result.candidates["lm"].documents:
        own = {"latent_nll_per_step": (1 + np.sum(ref_t > d.latent_nll_per_step)) / 41,
               "spread": (1 + np.sum(ref_spread > d.extras["spread"])) / 41}
        assert d.p_values == pytest.approx(own)
        u = [id_uniforms([d.id], f"0:{name}")[0] for name in ("latent_nll_per_step", "spread")]
        assert d.outlier_p_value == pytest.approx(augmented_p(np.column_stack([ref_t, ref_spread]), ref_u,
                                                              [d.latent_nll_per_step, d.extras["spread"]], u,
                                                              id_uniforms([d.id], "0:outlier")[0]))
        assert d.plain_p_value == pytest.approx(d.outlier_p_value)  # 40 reference documents: one length group
    wide = next(d for d in result.candidates["lm"].documents if d.id == "wide")
    assert wide.p_values["latent_nll_per_step"] > 0.5 and wide.p_values["spread"] == pytest.approx(1 / 41)
    assert wide.outlier_p_value in (pytest.approx(1 / 41), pytest.approx(2 / 41))
    assert result.outliers("lm", top=1)[0][1].id == "wide"
    assert "combined with the critic's statistics beside it by rank" in outliers_table(result)
    assert "beside it by rank (the smallest of a document's ranks, itself ranked among the real documents'): spread" \
        in outliers_table(result)
    write_report(PanelResult({"spread": result}), tmp_path / "r")
    rows = [json.loads(line) for line in (tmp_path / "r" / "documents.jsonl").read_text().splitlines()]
    back = [DocumentResult.from_dict({k: v for k, v in row.items() if k not in ("set", "critic")})
            for row in rows if row["set"] == "lm"]
    assert back == result.candidates["lm"].documents
    plain = criticize(MeanCritic().fit([]), reference, {"lm": candidate}, n_bootstrap=20, n_permutations=20)
    assert plain.config["outlier_statistics"] == [] and all(d.p_values is None for d in plain.candidates["lm"].documents)
    assert "combined" not in outliers_table(plain)


@pytest.mark.parametrize("spread, shown", [(None, "none"), (float("nan"), "[nan]"), ("wide", "['wide']")])
def test_an_outlier_statistic_must_be_an_extra_of_finite_numbers(spread, shown):
    class Broken(SpreadCritic):
        def project(self, docs):
            projection = super().project(docs)
            if spread is None:
                del projection.extras["spread"]
            else:
                projection.extras["spread"] = [spread] * len(projection.doc_ids)
            return projection

    with pytest.raises(RuntimeError, match=rf"Broken.project: outlier statistic 'spread' must be an extra of finite "
                                           rf"numbers, got {re.escape(shown)}"):
        Broken().fit([]).score([doc(0, [1])])
