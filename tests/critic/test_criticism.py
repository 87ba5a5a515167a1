"""criticize() end to end with the tutorial critic, every number against an independent computation."""

import importlib.util
import hashlib
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import poisson

from critic import Critic, criticize, stats
from critic.document import Document, Section
from critic.report import write_report
from critic.results import markdown_table, outliers_table

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "section_count_critic.py"


@pytest.fixture(scope="module")
def tutorial():
    spec = importlib.util.spec_from_file_location("section_count_critic", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs_with(counts, prefix):
    return [Document(f"{prefix}{i}", tuple(Section(f"s{k}", "text") for k in range(n))) for i, n in enumerate(counts)]


def test_tutorial_critic_is_short_and_scores_by_closed_form(tutorial, tmp_path):
    assert len(EXAMPLE.read_text().splitlines()) < 50
    train = docs_with([3, 4, 5, 4, 4, 2, 6], "t")
    critic = tutorial.SectionCountCritic().fit(train)
    assert critic.rate_ == pytest.approx(4.0)
    test = docs_with([1, 4, 9], "x")
    got = critic.score(test).latent_nll
    np.testing.assert_allclose(got, -poisson.logpmf([1, 4, 9], 4.0), rtol=1e-12)
    critic.save(tmp_path / "c")
    again = Critic.load(tmp_path / "c")
    assert type(again).__name__ == "SectionCountCritic"
    np.testing.assert_array_equal(again.score(test).latent_nll, got)


def tie_broken_p(reference: np.ndarray, value: float, doc_id: str, *, seed: int,
                 statistic: str = "latent_nll_per_step") -> float:
    """The right-tail p-value by hand: ``(1 + #{r > v} + floor(u (t + 1))) / (1 + n)``, ``t = #{r = v}``, the
    document's place among equal reference values chosen by ``u``: the first 8 bytes of SHA-256 of
    ``"seed:statistic:id"`` over 2^64."""
    u = int.from_bytes(hashlib.sha256(f"{seed}:{statistic}:{doc_id}".encode()).digest()[:8], "big") / 2 ** 64
    greater, equal = np.sum(reference > value + 1e-12), np.sum(np.abs(reference - value) <= 1e-12)
    return (1 + greater + math.floor(u * (equal + 1))) / (1 + len(reference))


def test_criticize_numbers(tutorial, tmp_path):
    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5, 4, 4, 2, 6], "t"))
    ref_counts = [3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5]
    cand_counts = [8, 9, 1, 10, 4, 12, 7]
    reference = docs_with(ref_counts, "r")
    candidate = docs_with(cand_counts, "c") + [Document("empty", ())]
    result = criticize(critic, reference, {"lm": candidate}, n_bootstrap=400, n_permutations=999, seed=3)

    t_ref = -poisson.logpmf(ref_counts, 4.0)
    t_cand = -poisson.logpmf(cand_counts, 4.0)
    ref, cand = result.reference, result.candidates["lm"]
    assert ref.n == 12 and cand.n == 7
    assert ref.latent_nll == pytest.approx(t_ref.mean(), rel=1e-12)
    assert cand.latent_ppl == pytest.approx(math.exp(t_cand.sum() / 7), rel=1e-12)
    assert cand.n_skipped == 1 and cand.skipped == {"empty": "document has no sections"}
    assert cand.comparison.difference == pytest.approx(t_cand.mean() - t_ref.mean(), rel=1e-12)
    assert cand.comparison.difference_ci[0] > 0          # the candidate set is clearly worse
    # the CI by explicit two-sample resampling (stream seed + 1: reference indices, then candidate indices)
    rng = np.random.default_rng(3 + 1)
    ia, ib = rng.integers(0, 12, size=(400, 12)), rng.integers(0, 7, size=(400, 7))
    boot = t_cand[ib].mean(1) - t_ref[ia].mean(1)
    assert cand.comparison.difference_ci == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), rel=1e-12)
    assert cand.p_value < 0.01
    # the p-value against the exact permutation distribution (all C(19, 7) splits)
    pooled = np.concatenate([t_ref, t_cand])
    in_cand = pooled[np.array(list(itertools.combinations(range(19), 7)))].sum(1)
    diffs = in_cand / 7 - (pooled.sum() - in_cand) / 12
    exact = np.mean(np.abs(diffs) >= abs(t_cand.mean() - t_ref.mean()) - 1e-12)
    expected = (1 + 999 * exact) / 1000  # E[(1 + #extreme) / (1 + n_permutations)]
    assert len(diffs) == math.comb(19, 7)
    assert abs(cand.p_value - expected) <= 4 * math.sqrt(exact * (1 - exact) / 999) + 1e-12
    assert ref.latent_nll_ci == pytest.approx(stats.bootstrap_cis(t_ref, [stats.MEAN], n_resamples=400, seed=3)[0])
    # outlier p-values: empirical p of T/M against the reference set, by brute force, ties broken
    for d, t in zip(cand.documents, t_cand):
        assert d.outlier_p_value == pytest.approx(tie_broken_p(t_ref, t, d.id, seed=3))
    top = result.outliers(top=3)
    assert [d.id for _, d in top] == ["c5", "c3", "c1"]  # 12, 10 and 9 sections are the least likely

    paths = write_report(result, tmp_path / "out", top=3)
    text = paths["report"].read_text()
    assert "| lm ⚠ | 7 |" in text and "only 7 documents (< 10)" in text and "`lm` / `empty`: document has no sections" in text
    assert paths["histogram"].stat().st_size > 1000
    table = markdown_table(result)  # the headline (a PPL) with its own comparison; two-sided: no arrows
    assert "| Latent PPL | 95% CI | Δ Latent PPL vs ref | 95% CI | p | Latent NLL | 95% CI |" in table
    assert "↓" not in table and "distance from the reference" in table


def test_two_candidate_sets_compare_as_a_candidate_with_the_reference(tutorial):
    from critic.criticism import compare_sets

    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5, 4, 4, 2, 6], "t"))
    a, b = docs_with([3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5], "a"), docs_with([8, 9, 1, 10, 4, 12, 7], "b")
    both = criticize(critic, a, {"a": a, "b": b}, reference_name="ref", n_bootstrap=300, n_permutations=499, seed=5)
    alone = criticize(critic, a, {"b": b}, n_bootstrap=300, n_permutations=499, seed=5)
    mean, ppl = compare_sets(both, "a", "b", n_bootstrap=300, n_permutations=499, seed=5)
    assert mean == alone.candidates["b"].comparison and ppl == alone.candidates["b"].ppl_comparison
    assert mean.difference == pytest.approx(-poisson.logpmf([8, 9, 1, 10, 4, 12, 7], 4.0).mean()
                                            + poisson.logpmf([3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5], 4.0).mean())
    back, _ = compare_sets(both, "b", "a", n_bootstrap=300, n_permutations=499, seed=5)
    assert back.difference == pytest.approx(-mean.difference)
    with pytest.raises(KeyError, match="no set 'c'"):
        compare_sets(both, "a", "c")


def test_monte_carlo_fallback_is_stated_and_agrees_with_closed_form(tutorial, tmp_path):
    """Uniform posterior under a Cauchy prior: no registered formula, so Monte Carlo, and the result says so.

    Closed form: with u = (z - m)/g, E_{z~U(a,b)}[-log Cauchy(z; m, g)] = log(pi g)
    + g/(b - a) [F(u)] between the ends, F(u) = u log(1 + u^2) - 2u + 2 arctan(u).
    The per-document standard error travels into Scores, the set result, results.json and the table.
    """
    import json

    import torch
    from torch.distributions import Cauchy, Uniform

    from critic import Projection

    class SoftCount(tutorial.SectionCountCritic):
        mc_samples = 4000

        def project(self, docs):
            n = torch.tensor([float(len(d.sections)) for d in docs], dtype=torch.float64)
            return Projection([d.id for d in docs], Uniform(n - 0.5, n + 0.5), torch.ones(len(docs)))

        def prior(self):
            return Cauchy(torch.tensor(self.rate_, dtype=torch.float64), 2.0)

    critic = SoftCount().fit(docs_with([3, 4, 5], "t"))
    docs = docs_with([2, 6, 4, 11], "x")
    scores = critic.score(docs)
    assert scores.estimator == "monte carlo (4000 samples)"
    F = lambda u: u * np.log1p(u**2) - 2 * u + 2 * np.arctan(u)  # noqa: E731
    n = np.array([2.0, 6.0, 4.0, 11.0])
    lo, hi = (n - 0.5 - 4.0) / 2.0, (n + 0.5 - 4.0) / 2.0
    closed = math.log(math.pi * 2.0) + 2.0 * (F(hi) - F(lo))
    se = scores.latent_nll_stderr
    assert se.shape == (4,) and np.all(se > 0)
    # the standard error against sqrt(Var[-log p(z)] / S), the variance by quadrature under U(n - 1/2, n + 1/2)
    nll = lambda z: math.log(math.pi * 2.0) + math.log1p(((z - 4.0) / 2.0) ** 2)  # noqa: E731
    for s_, c in zip(se, n):
        m1 = quad(nll, c - 0.5, c + 0.5)[0]
        m2 = quad(lambda z: nll(z) ** 2, c - 0.5, c + 0.5)[0]
        assert m1 == pytest.approx(closed[list(n).index(c)], rel=1e-10)  # the quadrature agrees with F(u)
        assert s_ == pytest.approx(math.sqrt((m2 - m1 ** 2) / 4000), rel=0.1)
    assert np.all(np.abs(scores.latent_nll - closed) <= 3 * se)

    result = criticize(critic, docs, {"more": docs_with([3, 5, 7], "y")}, n_bootstrap=50, min_documents=2)
    assert result.config["latent_nll_estimator"] == "monte carlo (4000 samples)"
    ref = result.reference
    assert ref.latent_nll_mc_stderr == pytest.approx(math.sqrt(float((se ** 2).sum())) / 4, rel=1e-12)
    assert [d.latent_nll_stderr for d in ref.documents] == pytest.approx(list(se), rel=1e-12)
    paths = write_report(result, tmp_path / "mc", plot=False)
    saved = json.loads(paths["results"].read_text())
    assert saved["reference"]["latent_nll_mc_stderr"] == pytest.approx(ref.latent_nll_mc_stderr)
    assert "MC s.e." in markdown_table(result) and f"{ref.latent_nll_mc_stderr:.4f}" in markdown_table(result)


def test_set_statistics_are_written_beside_latent_ppl_with_reasons_for_nulls(tutorial, tmp_path):
    import json

    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5, 4], "t"))
    result = criticize(critic, docs_with([3, 4, 5] * 4, "r"), {"lm": docs_with([2, 6, 4] * 4, "c")},
                       reference_name="data", n_bootstrap=50, n_permutations=50, seed=1)
    with pytest.raises(ValueError, match="give the reason"):
        result.add_statistic("word_ppl", {"data": None})
    with pytest.raises(ValueError, match="clashes"):
        result.add_statistic("latent_ppl", {"lm": 1.0})
    with pytest.raises(KeyError, match="the sets are data, lm"):
        result.add_statistic("mauve", {"gpt2": 0.5})
    result.add_statistic("word_ppl", {"data": None, "lm": 12.5}, reasons={"data": "real text has no model"})
    result.add_statistic("mauve", {"data": 1.0, "lm": 0.25})
    saved = json.loads(write_report(result, tmp_path / "out")["results"].read_text())
    assert saved["candidates"]["lm"]["word_ppl"] == 12.5 and saved["reference"]["word_ppl"] is None
    assert saved["null_reasons"]["reference.word_ppl"] == "real text has no model"
    assert saved["candidates"]["lm"]["higher_is_better"]["mauve"] is True
    assert saved["candidates"]["lm"]["higher_is_better"]["word_ppl"] is False
    table = markdown_table(result)
    assert "| word PPL ↓ | MAUVE ↑ |" in table and "| 12.500 | 0.250 |" in table


def test_the_ppl_comparison_tests_the_set_level_ppl_not_the_mean():
    """Δ Latent PPL, its CI and p-value by brute force (every split of the pooled documents), and a case where
    the per-document mean and the set-level PPL disagree: the p-value beside a PPL must test the PPL."""
    from critic.critic import Scores
    from critic.criticism import compare

    t_ref, m_ref = np.array([2.0, 5.0, 3.0, 9.0, 4.0, 6.0, 2.5, 7.0]), np.array([1.0, 3.0, 2.0, 4.0, 2.0, 3.0, 1.0, 5.0])
    t_cand, m_cand = np.array([9.0, 12.0, 4.0, 15.0, 8.0]), np.array([2.0, 3.0, 1.0, 4.0, 2.0])
    ref = Scores([f"r{i}" for i in range(8)], t_ref, m_ref)
    cand = Scores([f"c{i}" for i in range(5)], t_cand, m_cand)
    mean_cmp, ppl_cmp = compare(ref, cand, n_bootstrap=300, n_permutations=999, level=0.9, seed=5)
    assert ppl_cmp.statistic == "latent_ppl" and mean_cmp.statistic == "mean_latent_nll"
    ppl = lambda t, m: math.exp(t.sum() / m.sum())
    assert ppl_cmp.difference == pytest.approx(ppl(t_cand, m_cand) - ppl(t_ref, m_ref), rel=1e-12)
    rng = np.random.default_rng(5 + 1)  # the CI: each set resampled on its own, T and M together
    ia, ib = rng.integers(0, 8, size=(300, 8)), rng.integers(0, 5, size=(300, 5))
    boot = np.exp(t_cand[ib].sum(1) / m_cand[ib].sum(1)) - np.exp(t_ref[ia].sum(1) / m_ref[ia].sum(1))
    assert ppl_cmp.difference_ci == pytest.approx(tuple(np.quantile(boot, [0.05, 0.95])), rel=1e-12)
    t, m = np.concatenate([t_ref, t_cand]), np.concatenate([m_ref, m_cand])
    splits = np.array(list(itertools.combinations(range(13), 5)))
    rest = np.array([[i for i in range(13) if i not in set(c)] for c in splits])
    log_diffs = t[splits].sum(1) / m[splits].sum(1) - t[rest].sum(1) / m[rest].sum(1)
    observed = t_cand.sum() / m_cand.sum() - t_ref.sum() / m_ref.sum()
    exact = np.mean(np.abs(log_diffs) >= abs(observed) - 1e-12)
    assert abs(ppl_cmp.p_value - (1 + 999 * exact) / 1000) <= 4 * math.sqrt(exact * (1 - exact) / 999) + 1e-9
    assert not ppl_cmp.p_value_exact
    # allowed all C(13, 5) = 1,287 splits, the test enumerates them: the exact share, and it says so
    _, ppl_exact = compare(ref, cand, n_bootstrap=300, n_permutations=1287, level=0.9, seed=5)
    assert ppl_exact.p_value_exact and ppl_exact.p_value == pytest.approx(exact, rel=1e-12)

    # the same rate per latent step, longer documents: the mean Latent NLL moves, the Latent PPL does not
    m_long = np.array([10.0, 12.0, 11.0, 13.0, 12.0, 14.0])
    same_rate = Scores([f"l{i}" for i in range(6)], 2 * m_long, m_long)
    ref_rate = Scores([f"r{i}" for i in range(8)], 2 * m_ref, m_ref)
    mean_cmp, ppl_cmp = compare(ref_rate, same_rate, n_bootstrap=200, n_permutations=999, level=0.95, seed=0)
    assert mean_cmp.p_value < 0.01 and ppl_cmp.difference == pytest.approx(0.0, abs=1e-12) and ppl_cmp.p_value == 1.0


def test_tiny_sets_report_an_exact_p_value_in_the_table_and_results(tutorial):
    from critic.results import CriticismResult

    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5, 4], "t"))
    result = criticize(critic, docs_with([3, 4, 5], "r"), {"lm": docs_with([8, 9, 1], "c")}, n_bootstrap=50)
    cand = result.candidates["lm"]
    t_ref, t_cand = -poisson.logpmf([3, 4, 5], 4.0), -poisson.logpmf([8, 9, 1], 4.0)
    pooled = np.concatenate([t_ref, t_cand])  # C(6, 3) = 20 splits, all enumerated
    diffs = [pooled[list(c)].mean() - np.delete(pooled, list(c)).mean() for c in itertools.combinations(range(6), 3)]
    assert cand.comparison.p_value_exact and cand.comparison.p_value == pytest.approx(
        np.mean(np.abs(diffs) >= abs(t_cand.mean() - t_ref.mean()) - 1e-9), rel=1e-12)
    assert f"{cand.ppl_comparison.p_value:.4f} (exact)" in markdown_table(result)
    again = CriticismResult.from_dict(result.to_dict())
    assert again.candidates["lm"].ppl_comparison.p_value_exact


def test_resampling_that_cannot_fit_in_memory_is_refused_before_scoring(tutorial, capsys):
    from critic.resources import ResourceError, memory_available

    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5], "t"))
    reference, candidate = docs_with([3, 4, 5, 4], "r"), docs_with([2, 6], "c")
    scored = []
    critic.project = lambda docs: scored.append(docs) or pytest.fail("scored before refusing")
    # resampling runs in bounded blocks; what grows is 64 bytes a resample: 10^10 of them need 596 GiB
    assert 64 * 10**10 > memory_available()
    with pytest.raises(ResourceError, match=r"10000000000 bootstrap resamples and 2000 permutations of 6 documents "
                                            r"needs about 596 GiB of memory; this machine has .* GiB available: "
                                            r"lower --n-bootstrap"):
        criticize(critic, reference, {"lm": candidate}, n_bootstrap=10**10)
    assert not scored


def test_outlier_p_values_compare_with_reference_documents_of_similar_length(tutorial):
    """Default: each document's outlier p-value is against the reference documents in its word-count bin (by
    hand here, four bins of about 30); the plain p-value stays beside it; outlier_score="plain" ranks by the plain one,
    and the results say which."""
    rng = np.random.default_rng(1)

    def docs(prefix, n):
        out = []
        for i in range(n):
            k, words = int(rng.integers(1, 9)), int(rng.integers(5, 200))
            out.append(Document(f"{prefix}{i}", tuple(Section(f"s{j}", " ".join(["w"] * (words // k + 1)))
                                                      for j in range(k))))
        return out

    critic = tutorial.SectionCountCritic().fit(docs("t", 50))
    reference, candidate = docs("r", 120), docs("c", 30)
    result = criticize(critic, reference, {"lm": candidate}, n_bootstrap=20, n_permutations=20)
    assert result.outlier_score == "length" and result.config["outlier_score"] == "length"
    ref_words = np.array([len(d.text.split()) for d in reference])
    ref_t = np.array([d.latent_nll_per_step for d in result.reference.documents])
    edges = np.quantile(ref_words, [0.25, 0.5, 0.75])  # 120 // 30 = 4 bins at the quartiles, [lo, hi)
    for d, doc in zip(result.candidates["lm"].documents, candidate):
        words = len(doc.text.split())
        same = ref_t[np.sum(ref_words[:, None] >= edges, axis=1) == np.sum(words >= edges)]
        assert d.words == words
        assert d.outlier_p_value == pytest.approx(tie_broken_p(same, d.latent_nll_per_step, d.id, seed=0))
        assert d.plain_p_value == pytest.approx(tie_broken_p(ref_t, d.latent_nll_per_step, d.id, seed=0))
    plain = criticize(critic, reference, {"lm": candidate}, n_bootstrap=20, n_permutations=20, outlier_score="plain")
    assert [d.outlier_p_value for d in plain.candidates["lm"].documents] == \
        [d.plain_p_value for d in result.candidates["lm"].documents]
    assert "against the whole reference set" in outliers_table(plain)
    assert "of similar length" in outliers_table(result)
    with pytest.raises(ValueError, match="outlier_score must be one of length, plain, got 'short'"):
        criticize(critic, reference, {"lm": candidate}, outlier_score="short")


def test_outlier_p_values_combine_the_statistics_beside_t_by_sidak():
    """Each column gets T/M's p-value (by hand: three length bins of 30 reference documents, or the whole
    reference); the outlier p-value is 1 - (1 - min_j p_j)^J, and with one column the column's own p-value."""
    from critic.criticism import outlier_p_values

    rng = np.random.default_rng(0)
    ref, ref_words = rng.normal(size=(90, 2)), rng.integers(10, 100, 90)
    values, words = rng.normal(size=(25, 2)), rng.integers(10, 100, 25)
    p, plain, each = outlier_p_values(ref, values, reference_words=ref_words, words=words)
    edges = np.quantile(ref_words, [1 / 3, 2 / 3])  # 90 // 30 = 3 bins, [lo, hi)
    for i in range(25):
        same = np.sum(ref_words[:, None] >= edges, axis=1) == np.sum(words[i] >= edges)
        for j in range(2):
            assert each[i, j] == pytest.approx((1 + np.sum(ref[same, j] >= values[i, j])) / (1 + same.sum()))
        assert p[i] == pytest.approx(1 - (1 - each[i].min()) ** 2)
        whole = [(1 + np.sum(ref[:, j] >= values[i, j])) / 91 for j in range(2)]
        assert plain[i] == pytest.approx(1 - (1 - min(whole)) ** 2)
    alone = outlier_p_values(ref[:, 0], values[:, 0], reference_words=ref_words, words=words)
    assert np.array_equal(alone[0], each[:, 0]) and alone[2].shape == (25, 1)
    assert np.array_equal(alone[1], stats.empirical_p_values(ref[:, 0], values[:, 0]))
    same_plain = outlier_p_values(ref, values, reference_words=ref_words, words=words, outlier_score="plain")
    assert np.array_equal(same_plain[0], plain) and np.array_equal(same_plain[1], plain)
    model = outlier_p_values(ref, values, reference_words=ref_words, words=words, size_model="location-scale")
    for j in range(2):  # the critic's size model: each column's residual p-value, combined the same way
        assert np.array_equal(model[2][:, j], stats.size_model_p_values(ref[:, j], ref_words, values[:, j], words))
    assert np.allclose(model[0], 1 - (1 - model[2].min(axis=1)) ** 2) and np.array_equal(model[1], plain)
    with pytest.raises(ValueError, match="size_model must be one of bins, location-scale"):
        outlier_p_values(ref, values, reference_words=ref_words, words=words, size_model="splines")


@pytest.mark.parametrize("dependence, expected", [
    ("independent", lambda a: a),                         # Sidak is exact: uniform
    ("identical", lambda a: 1 - math.sqrt(1 - a)),        # one statistic counted twice: conservative
    ("opposed", lambda a: 2 * (1 - math.sqrt(1 - a))),    # p_2 = 1 - p_1: the worst case, below -log(1 - a)
])
def test_the_sidak_combination_s_level_follows_closed_forms(dependence, expected):
    """P(p <= a) for two statistics on real (exchangeable) documents, against a reference of 200,000: a under
    independence, 1 - sqrt(1 - a) for identical statistics, 2 (1 - sqrt(1 - a)) for opposed ones, which stays
    within the documented bound -log(1 - a)."""
    from critic.criticism import outlier_p_values

    rng = np.random.default_rng(1)

    def draw(n):
        first = rng.random(n)
        second = {"independent": rng.random(n), "identical": first, "opposed": -first}[dependence]
        return np.column_stack([first, second])

    p = outlier_p_values(draw(200_000), draw(100_000), outlier_score="plain")[0]
    for a in (0.01, 0.05, 0.2):
        assert np.mean(p <= a) == pytest.approx(expected(a), abs=4 * math.sqrt(expected(a) / 100_000) + 2e-5)
        assert np.mean(p <= a) <= -math.log(1 - a) + 4 * math.sqrt(a / 100_000)
