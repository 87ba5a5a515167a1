"""The "write your own critic" examples run, and every number they give matches an independent reference."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import poisson

from critic import Critic, criticize
from critic.document import Document, Section

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def load(name: str):
    """Import ``docs/examples/NAME.py`` as module ``NAME`` (the name its critic registers under)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs_with(words_per_section: list[list[int]], prefix: str) -> list[Document]:
    """Documents whose sections have the given numbers of words."""
    return [Document(f"{prefix}{i}", tuple(Section(f"s{k}", " ".join(["w"] * n)) for k, n in enumerate(doc)))
            for i, doc in enumerate(words_per_section)]


@pytest.mark.parametrize("name", ["section_count_critic", "gaussian_length_critic"])
def test_examples_are_short(name):
    assert len((EXAMPLES / f"{name}.py").read_text().splitlines()) < 50


# ------------------------------------------------------------------ Poisson: point mass under a Poisson prior


def test_section_count_critic_matches_scipy(tmp_path):
    module = load("section_count_critic")
    critic = module.SectionCountCritic().fit(docs_with([[1] * n for n in (3, 4, 5, 4, 4, 2, 6)], "t"))
    assert critic.rate_ == pytest.approx(4.0, rel=1e-12)
    test = docs_with([[1] * n for n in (1, 4, 9)] + [[]], "x")
    projection = critic.project(test[:3])
    assert projection.doc_ids == ["x0", "x1", "x2"] and projection.latent_steps.tolist() == [1.0] * 3
    scores = critic.score(test)
    assert scores.estimator == "exact" and scores.skipped == {"x3": "document has no sections"}
    np.testing.assert_allclose(scores.latent_nll, -poisson.logpmf([1, 4, 9], 4.0), rtol=1e-12)
    again = Critic.load(critic.save(tmp_path / "poisson"))
    assert type(again) is module.SectionCountCritic
    np.testing.assert_array_equal(again.score(test).latent_nll, scores.latent_nll)


# ------------------------------------------------------------------ Gaussian: posterior fitted by gradient steps


@pytest.fixture(scope="module")
def gaussian():
    rng = np.random.default_rng(0)
    sizes = lambda n: [rng.integers(2, 60, size=rng.integers(1, 12)).tolist() for _ in range(n)]  # noqa: E731
    module = load("gaussian_length_critic")
    train = docs_with(sizes(40) + [[]], "t")
    test = docs_with(sizes(25) + [[]] + [[400, 300, 500]], "x")
    return module, train, test, module.GaussianLengthCritic(tau=0.5).fit(train)


def conjugate_posterior(doc: Document, mu: float, sigma: float, tau: float) -> tuple[float, float]:
    """Closed form: 1/s^2 = 1/sigma^2 + K/tau^2, m = s^2 (mu/sigma^2 + sum_k y_k/tau^2)."""
    y = np.log1p([len(s.text.split()) for s in doc.sections])
    s2 = 1.0 / (1.0 / sigma ** 2 + y.size / tau ** 2)
    return s2 * (mu / sigma ** 2 + y.sum() / tau ** 2), math.sqrt(s2)


def test_gaussian_prior_is_the_normal_mle(gaussian):
    _, train, _, critic = gaussian
    means = [np.log1p([len(s.text.split()) for s in d.sections]).mean() for d in train if d.sections]
    assert critic.mu_ == pytest.approx(np.mean(means), rel=1e-12)
    assert critic.sigma_ == pytest.approx(np.std(means), rel=1e-12)


def test_gaussian_posterior_fitted_by_gradients_is_the_conjugate_posterior(gaussian):
    _, _, test, critic = gaussian
    projection = critic.project(test)
    assert projection.doc_ids == [d.id for d in test]
    want = np.array([conjugate_posterior(d, critic.mu_, critic.sigma_, critic.tau) for d in test])
    np.testing.assert_allclose(projection.posterior.loc.numpy(), want[:, 0], atol=1e-5)
    np.testing.assert_allclose(projection.posterior.scale.numpy(), want[:, 1], atol=1e-5)
    # no sections: the ELBO's optimum is the prior, where the fit starts and stays
    q = projection.posterior
    assert (float(q.loc[-2]), float(q.scale[-2])) == (critic.mu_, critic.sigma_)


def test_gaussian_latent_nll_is_the_closed_form_cross_entropy(gaussian):
    _, _, test, critic = gaussian
    q = critic.project(test).posterior
    m, s = q.loc.numpy(), q.scale.numpy()
    mu, sigma = critic.mu_, critic.sigma_
    want = 0.5 * np.log(2 * np.pi * sigma ** 2) + (s ** 2 + (m - mu) ** 2) / (2 * sigma ** 2)
    scores = critic.score(test)
    assert scores.estimator == "exact" and scores.skipped == {}
    np.testing.assert_allclose(scores.latent_nll, want, rtol=1e-12)
    assert scores.latent_steps.tolist() == [1.0] * len(test)
    # the long-section document is far out in the prior's tail
    assert scores.latent_nll[-1] > scores.latent_nll[:-1].max() + 5


def test_gaussian_criticize_and_save_load_round_trip(gaussian, tmp_path):
    module, _, test, critic = gaussian
    result = criticize(critic, test[:20], {"long": test[20:]}, n_bootstrap=100, seed=0)
    t_ref = critic.score(test[:20]).latent_nll
    assert result.reference.latent_ppl == pytest.approx(math.exp(t_ref.sum() / 20), rel=1e-12)
    again = Critic.load(critic.save(tmp_path / "gaussian"))
    assert type(again) is module.GaussianLengthCritic and (again.mu_, again.sigma_) == (critic.mu_, critic.sigma_)
    np.testing.assert_array_equal(again.score(test).latent_nll, critic.score(test).latent_nll)


@pytest.mark.parametrize("name", ["section_count_critic", "gaussian_length_critic"])
def test_page_shows_the_examples_as_they_are(name):
    """The walk-through embeds each example's code (everything after its docstring) verbatim."""
    code = (EXAMPLES / f"{name}.py").read_text()
    page = (EXAMPLES.parent / "write-your-own-critic.md").read_text()
    assert f"```python\n{code[code.index('import torch'):].rstrip()}\n```" in page


# ------------------------------------------------------------------ "Add a study": the 60-line example study


def test_the_example_study_runs_from_the_command_line_and_its_table_is_right(tmp_path, fixture_manpage_root):
    """``critic --plugin docs/examples/shuffled_sections_study.py run``: Latent PPLs in its table equal
    exp(sum T / sum M) recomputed from the per-document results, and a rerun computes nothing."""
    import json

    from critic.cli import main as cli

    path = EXAMPLES / "shuffled_sections_study.py"
    assert len(path.read_text().splitlines()) <= 62
    config = tmp_path / "shuffled.toml"
    config.write_text(f'runner = "shuffled-sections"\n[corpus]\nroot = "{fixture_manpage_root}"\n'
                      "[criticism]\nn_bootstrap = 100\nn_permutations = 100\n")
    out = tmp_path / "run"
    assert cli(["--plugin", str(path), "run", str(config), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "report" / "documents.jsonl").read_text().splitlines()]
    table = (out / "table.md").read_text()
    for name in ("real", "shuffled"):
        docs = [r for r in rows if r["set"] == name and "skipped" not in r]
        ppl = math.exp(sum(r["latent_nll"] for r in docs) / sum(r["latent_steps"] for r in docs))
        assert f"| {name} | {len(docs)} | {ppl:.3f} [" in table
    stamp = {p: p.stat().st_mtime_ns for p in (out / "report").iterdir()}
    assert cli(["--plugin", str(path), "run", str(config), "--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "report").iterdir()} == stamp
