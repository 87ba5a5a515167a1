"""criticize() end to end with the tutorial critic, every number against an independent computation."""

import hashlib
import itertools
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import poisson

from critic import Critic, criticize, stats
from critic.document import Document, Section
from critic.panel import PanelResult
from critic.report import write_report
from critic.results import markdown_table, outliers_table
from tests.critic.conftest import EXAMPLE


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


def _u(doc_id: str, seed: int, statistic: str) -> float:
    """A document's tie-break: the first 8 bytes of SHA-256 of ``"seed:statistic:id"`` over 2^64."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{statistic}:{doc_id}".encode()).digest()[:8], "big") / 2 ** 64


def tie_broken_p(reference: np.ndarray, reference_ids, value: float, doc_id: str, *, seed: int,
                 statistic: str = "latent_nll_per_step") -> float:
    """The right-tail p-value by hand: ``(1 + #{r > v} + #{r = v, u_r > u}) / (1 + n)``: among equal values the
    documents' tie-breaks ``u`` decide which is above."""
    u = _u(doc_id, seed, statistic)
    above = sum(r > value + 1e-12 or (abs(r - value) <= 1e-12 and _u(i, seed, statistic) > u)
                for r, i in zip(reference, reference_ids))
    return (1 + above) / (1 + len(reference))


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
    # the CI by explicit two-sample resampling of the documents in id order (stream seed + 1: reference
    # indices, then candidate indices)
    by_id_ref = t_ref[np.argsort([d.id for d in reference])]
    by_id_cand = t_cand[np.argsort([d.id for d in candidate[:7]])]
    rng = np.random.default_rng(3 + 1)
    ia, ib = rng.integers(0, 12, size=(400, 12)), rng.integers(0, 7, size=(400, 7))
    boot = by_id_cand[ib].mean(1) - by_id_ref[ia].mean(1)
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
    assert ref.latent_nll_ci == pytest.approx(stats.bootstrap_cis(by_id_ref, [stats.MEAN], n_resamples=400, seed=3)[0])
    # outlier p-values: empirical p of T/M against the reference set, by brute force, ties broken
    for d, t in zip(cand.documents, t_cand):
        assert d.outlier_p_value == pytest.approx(tie_broken_p(t_ref, [d.id for d in reference], t, d.id, seed=3))
    top = result.outliers(top=3)
    assert [d.id for _, d in top] == ["c5", "c3", "c1"]  # 12, 10 and 9 sections are the least likely
    assert repr(top) == str(top) == outliers_table(result, top=3)  # prints as the table, not a list of tuples
    assert str(top).splitlines()[4].startswith("| 1 | lm | c5 |")

    paths = write_report(PanelResult({result.critic_name: result}, top=3), tmp_path / "out")
    text = paths["report"].read_text()
    assert "| lm ⚠ | 7 |" in text and "only 7 documents (< 10)" in text and "- lm / empty: document has no sections" in text
    assert str(top) in text  # the least likely documents, as the result prints them
    table = markdown_table(result)  # the headline (a PPL) with its own comparison; two-sided: no arrows
    assert "| Latent PPL | 95% CI | Δ Latent PPL vs ref | 95% CI | p | Latent NLL | 95% CI |" in table
    assert "↓" not in table and "distance from the reference" in table
    name = result.critic_name  # a report of several names a critic by its label, its kind beside it
    assert table.splitlines()[0] == f"Critic: `{name}`" == markdown_table(result, name).splitlines()[0]
    assert markdown_table(result, "mine").splitlines()[0] == f"Critic: `mine` ({name})"


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


def test_the_same_documents_in_another_order_give_the_same_numbers(tutorial):
    critic = tutorial.SectionCountCritic().fit(docs_with([3, 4, 5, 4, 4, 2, 6], "t"))
    a, b = docs_with([3, 4, 5, 4, 4, 3, 5, 4, 2, 6, 4, 5], "a"), docs_with([8, 9, 1, 10, 4, 12, 7, 3, 2], "b")
    settings = dict(n_bootstrap=300, n_permutations=499, seed=5)
    one = criticize(critic, a, {"b": b}, **settings)
    other = criticize(critic, a[::-1], {"b": b[3:] + b[:3]}, **settings)
    for name in ("reference", "b"):
        x, y = one.set(name), other.set(name)
        assert (x.latent_nll, x.latent_nll_ci, x.latent_ppl, x.latent_ppl_ci) == \
            (y.latent_nll, y.latent_nll_ci, y.latent_ppl, y.latent_ppl_ci)
        assert ({d.id: d.outlier_p_value for d in x.documents} == {d.id: d.outlier_p_value for d in y.documents})
    assert one.candidates["b"].comparison == other.candidates["b"].comparison
    assert one.candidates["b"].ppl_comparison == other.candidates["b"].ppl_comparison


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
    paths = write_report(PanelResult({"mc": result}), tmp_path / "mc")
    saved = json.loads(paths["results"].read_text())["critics"]["mc"]
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
    saved = json.loads(write_report(PanelResult({"c": result}), tmp_path / "out")["results"].read_text())["critics"]["c"]
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
    ref_ids = np.array([d.id for d in reference])
    edges = np.quantile(ref_words, [0.25, 0.5, 0.75])  # 120 // 30 = 4 bins at the quartiles, [lo, hi)
    for d, doc in zip(result.candidates["lm"].documents, candidate):
        words = len(doc.text.split())
        same = np.sum(ref_words[:, None] >= edges, axis=1) == np.sum(words >= edges)
        assert d.words == words
        assert d.outlier_p_value == pytest.approx(tie_broken_p(ref_t[same], ref_ids[same], d.latent_nll_per_step,
                                                               d.id, seed=0))
        assert d.plain_p_value == pytest.approx(tie_broken_p(ref_t, ref_ids, d.latent_nll_per_step, d.id, seed=0))
    plain = criticize(critic, reference, {"lm": candidate}, n_bootstrap=20, n_permutations=20, outlier_score="plain")
    assert [d.outlier_p_value for d in plain.candidates["lm"].documents] == \
        [d.plain_p_value for d in result.candidates["lm"].documents]
    assert "among all real documents" in outliers_table(plain)
    assert "of similar length" in outliers_table(result)
    with pytest.raises(ValueError, match="outlier_score must be one of length, plain, got 'short'"):
        criticize(critic, reference, {"lm": candidate}, outlier_score="short")


def test_outlier_p_values_combine_the_statistics_by_rank_within_length_groups():
    """Each statistic's own p-value is the empirical one within the document's length group (by hand: three
    groups of 30 pool documents); the outlier p-value is the conformal one of the smallest rank (the definition,
    brute force); plain: the same against the whole pool; location-scale: on the pool-fitted residuals."""
    from critic.conformal import location_scale_residuals
    from critic.outliers import outlier_p_values
    from tests.critic.test_conformal import augmented_p

    rng = np.random.default_rng(0)
    pool, pool_words = rng.normal(size=(90, 2)), rng.integers(10, 100, 90)
    values, words = rng.normal(size=(25, 2)), rng.integers(10, 100, 25)
    got = outlier_p_values(pool, values, pool_words=pool_words, words=words, seed=4)
    pool_u = np.column_stack([stats.id_uniforms([f"pool:{k}" for k in range(90)], f"4:s{j}") for j in range(2)])
    doc_u = np.column_stack([stats.id_uniforms([f"doc:{i}" for i in range(25)], f"4:s{j}") for j in range(2)])
    v = stats.id_uniforms([f"doc:{i}" for i in range(25)], "4:outlier")
    edges = np.quantile(pool_words, [1 / 3, 2 / 3])  # 90 // 30 = 3 groups, [lo, hi)
    for i in range(25):
        same = np.sum(pool_words[:, None] >= edges, axis=1) == np.sum(words[i] >= edges)
        for j in range(2):
            assert got.components[i, j] == pytest.approx((1 + np.sum(pool[same, j] > values[i, j])) / (1 + same.sum()))
        assert got.p[i] == pytest.approx(augmented_p(pool[same], pool_u[same], values[i], doc_u[i], v[i]))
        assert got.plain[i] == pytest.approx(augmented_p(pool, pool_u, values[i], doc_u[i], v[i]))
    alone = outlier_p_values(pool[:, 0], values[:, 0], pool_words=pool_words, words=words, seed=4)
    assert np.array_equal(alone.p, got.components[:, 0]) and alone.components.shape == (25, 1)
    plain = outlier_p_values(pool, values, pool_words=pool_words, words=words, outlier_score="plain", seed=4)
    assert np.array_equal(plain.p, got.plain) and np.array_equal(plain.plain, got.plain)
    model = outlier_p_values(pool, values, pool_words=pool_words, words=words, size_model="location-scale", seed=4)
    pairs = [location_scale_residuals(pool[:, j], pool_words, values[:, j], words) for j in range(2)]
    z_pool, z = np.column_stack([a for a, _ in pairs]), np.column_stack([b for _, b in pairs])
    for i in range(25):  # the critic's size model: the same combination of the residuals against the whole pool
        assert model.p[i] == pytest.approx(augmented_p(z_pool, pool_u, z[i], doc_u[i], v[i]))
    assert np.array_equal(model.plain, got.plain)
    with pytest.raises(ValueError, match="size_model must be one of bins, location-scale"):
        outlier_p_values(pool, values, pool_words=pool_words, words=words, size_model="splines")


def test_length_matched_p_values_are_uniform_within_length_tertiles_where_plain_ones_are_not():
    """Real documents whose T/M grows with length: the plain p-values flag the long ones (not uniform within
    length tertiles: KS p < 1e-6), the length-matched ones are uniform in every tertile (KS p > 0.01)."""
    from scipy.stats import kstest

    from critic.outliers import outlier_p_values

    rng = np.random.default_rng(0)

    def real(n):
        words = rng.integers(20, 400, size=n)
        return words, 0.01 * words + rng.normal(size=n)

    ref_words, ref = real(3000)
    words, values = real(3000)
    got = outlier_p_values(ref, values, pool_words=ref_words, words=words)
    tertile = np.searchsorted(np.quantile(words, [1 / 3, 2 / 3]), words, side="right")
    for t in range(3):
        assert kstest(got.p[tertile == t], "uniform").pvalue > 0.01
    assert min(kstest(got.plain[tertile == t], "uniform").pvalue for t in range(3)) < 1e-6


def test_location_scale_p_values_are_uniform_at_every_length_where_groups_are_not():
    """Real documents whose statistic shifts and widens with length: against a pool of 300 (10 groups of 30) the
    grouped p-values of the shortest tertile are off (a trend inside the shortest group; KS p < 0.01 over the
    pooled 200 trials' shortest tertile), the location-scale residuals are uniform in every tertile (KS p > 0.01)
    and reach p-values below the groups' floor of 1/31."""
    from scipy.stats import kstest

    from critic.outliers import outlier_p_values

    rng = np.random.default_rng(1)

    def real(n):
        words = np.exp(rng.uniform(np.log(10), np.log(400), size=n))
        return words, 3.0 * np.log(words) + (0.5 + 0.2 * np.log(words)) * rng.normal(size=n)

    pooled = {"bins": [[], [], []], "location-scale": [[], [], []]}
    for trial in range(200):
        ref_words, ref = real(300)
        words, values = real(60)
        tertile = np.searchsorted(np.quantile(words, [1 / 3, 2 / 3]), words, side="right")
        for name in pooled:
            p = outlier_p_values(ref, values, pool_words=ref_words, words=words, size_model=name, seed=trial).p
            for t in range(3):
                pooled[name][t].extend(p[tertile == t])
    assert all(kstest(pooled["location-scale"][t], "uniform").pvalue > 0.01 for t in range(3))
    assert kstest(pooled["bins"][0], "uniform").pvalue < 0.01
    assert min(map(min, pooled["location-scale"])) < 1 / 31 <= min(map(min, pooled["bins"]))
