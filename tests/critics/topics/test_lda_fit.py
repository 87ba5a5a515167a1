"""The LDA critic's fit (issue 21): the NMF start gives one fit for every seed, it is gensim's update from the
NMF topics, the random start is gensim's seeded fit untouched by the report, and the convergence report (the
per-word training bound after each pass, the relative-change rule, the warning) is right and saved."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from scipy.special import digamma, gammaln, logsumexp

from critic.critic import Critic
from critics.topics.lda import LdaCodeMixCritic, tokenize
from critics.topics.nmf import nmf_topics

LANGUAGES = ("en", "es", "fr")


@pytest.fixture(scope="module")
def docs(wiki_wheel):
    """60 training and 20 held-out summaries per language, from a seeded shuffle."""
    from critic.corpora.wikisummaries import load_wiki_summaries

    train, held = [], []
    for lang in LANGUAGES:
        pool = load_wiki_summaries(language=lang, wheel=wiki_wheel, install=False)
        pool = [d.replace_sections(d.sections, id=f"{lang}:{d.id}") for d in pool]
        random.Random(f"lda-fit-{lang}").shuffle(pool)
        train += pool[:60]
        held += pool[60:80]
    return {"train": train, "held": held}


class FixedStart:
    """What the NMF-started fit puts where gensim draws: every document's gamma starts at 1, and the jitter
    gensim adds to alpha when it logs topics is 0."""

    def gamma(self, shape, scale, size):
        return np.ones(size)

    def rand(self, n):
        return np.zeros(n)


def corpus_of(critic, docs):
    bows = [critic.dictionary_.doc2bow(tokenize(d.text)) for d in docs]
    return [b for b in bows if b]


def gensim_model(critic, corpus, **kw):
    from gensim.models import LdaModel

    return LdaModel(corpus=corpus, id2word=critic.dictionary_, num_topics=critic.num_topics, alpha="auto",
                    eta=critic.eta, passes=critic.passes, iterations=critic.iterations, chunksize=critic.chunksize,
                    decay=critic.decay, offset=critic.offset, gamma_threshold=critic.gamma_threshold,
                    update_every=1, eval_every=None, dtype=np.float64, **kw)


def elbo_per_token(critic, corpus) -> float:
    """The LDA bound written out, word assignments maximised in closed form, per token:
    sum_dw n_dw log sum_k exp(Elog theta_dk + Elog beta_kw) + sum_d [(alpha - gamma_d) . Elog theta_d
    + sum_k (lgamma gamma_dk - lgamma alpha_k) + lgamma sum alpha - lgamma sum gamma_d]
    + sum_k [(eta - lambda_k) . Elog beta_k + sum_w (lgamma lambda_kw - lgamma eta_w) + lgamma sum eta
    - lgamma sum lambda_k], at the critic's gamma for each document."""
    lam, alpha, eta = critic.model_.state.get_lambda(), critic.alpha_, critic.model_.eta
    e_beta = digamma(lam) - digamma(lam.sum(1, keepdims=True))
    gamma = critic.gamma(corpus)
    e_theta = digamma(gamma) - digamma(gamma.sum(1, keepdims=True))
    total, tokens = 0.0, 0
    for d, bow in enumerate(corpus):
        for w, n in bow:
            total += n * logsumexp(e_theta[d] + e_beta[:, w])
            tokens += n
    total += np.sum((alpha - gamma) * e_theta) + np.sum(gammaln(gamma) - gammaln(alpha))
    total += len(corpus) * gammaln(alpha.sum()) - gammaln(gamma.sum(1)).sum()
    total += np.sum((eta - lam) * e_beta) + np.sum(gammaln(lam) - gammaln(eta))
    total += critic.num_topics * gammaln(eta.sum()) - gammaln(lam.sum(1)).sum()
    return total / tokens


def test_nmf_start_gives_the_same_fit_for_every_seed(docs):
    a, b = (LdaCodeMixCritic(num_topics=6, passes=3, seed=s).fit(docs["train"]) for s in (0, 7))
    assert a.init == "nmf" and a.fit_init_ == "nmf"                       # the default
    assert np.array_equal(a.model_.state.get_lambda(), b.model_.state.get_lambda())
    assert np.array_equal(a.model_.expElogbeta, b.model_.expElogbeta) and np.array_equal(a.alpha_, b.alpha_)
    assert a.bound_trace_ == b.bound_trace_
    assert np.array_equal(a.score(docs["held"]).latent_nll, b.score(docs["held"]).latent_nll)
    # gensim's random start: the seed changes the fit (what the NMF start removes)
    r0, r7 = (LdaCodeMixCritic(num_topics=6, passes=3, seed=s, init="random").fit(docs["train"]) for s in (0, 7))
    assert not np.allclose(r0.model_.state.get_lambda(), r7.model_.state.get_lambda(), rtol=0.01)


def test_nmf_start_is_gensims_update_from_the_nmf_topics(docs):
    """By hand: sstats = tokens_k phi_k of KL-NMF of the dense counts, sync_state, gamma starts at 1."""
    critic = LdaCodeMixCritic(num_topics=6, passes=2, seed=3).fit(docs["train"])
    corpus = corpus_of(critic, docs["train"])
    counts = np.zeros((len(corpus), len(critic.dictionary_)))
    for d, bow in enumerate(corpus):
        for w, n in bow:
            counts[d, w] = n
    phi, tokens = nmf_topics(counts, 6)
    model = gensim_model(critic, None, random_state=12345)
    model.state.sstats[...] = tokens[:, None] * phi
    model.sync_state()
    model.random_state = FixedStart()
    model.update(corpus)
    np.testing.assert_allclose(critic.model_.state.get_lambda(), model.state.get_lambda(), rtol=1e-10)
    np.testing.assert_allclose(critic.alpha_, model.alpha, rtol=1e-10)


def test_random_start_is_gensims_seeded_fit_and_the_report_draws_nothing_from_it(docs):
    critic = LdaCodeMixCritic(num_topics=6, passes=3, seed=5, init="random").fit(docs["train"])
    model = gensim_model(critic, corpus_of(critic, docs["train"]), random_state=5)
    assert np.array_equal(critic.model_.expElogbeta, model.expElogbeta)
    assert np.array_equal(critic.alpha_, model.alpha)
    assert len(critic.bound_trace_) == 3


def test_bound_trace_is_the_per_word_bound_after_each_pass(docs):
    long = LdaCodeMixCritic(passes=3).fit(docs["train"])
    assert long.fit_passes_ == len(long.bound_trace_) == 3
    assert long.bound_trace_[-1] == pytest.approx(elbo_per_token(long, corpus_of(long, docs["train"])), rel=1e-10)
    for passes in (1, 2):
        short = LdaCodeMixCritic(passes=passes).fit(docs["train"])
        assert short.bound_trace_ == long.bound_trace_[:passes]
        assert short.per_word_bound(docs["train"]) == pytest.approx(long.bound_trace_[passes - 1], rel=1e-12)
    held = long.per_word_bound(docs["held"])
    assert held == pytest.approx(elbo_per_token(long, corpus_of(long, docs["held"])), rel=1e-10)
    assert held < long.bound_trace_[-1] < 0                              # held-out words are less likely


def test_convergence_is_the_relative_change_rule(docs):
    fit = LdaCodeMixCritic(passes=4, tol=1e-9).fit(docs["train"])
    b = fit.bound_trace_
    change = abs(b[-1] - b[-2]) / abs(b[-1])
    assert change > 1e-9 and fit.fit_converged_ is False
    assert "NOT converged (tol 1e-09)" in fit.fit_summary(len(docs["train"]))
    [warning] = fit.fit_warnings()
    assert "did not converge" in warning and "raise passes" in warning
    # the same fit (tol does not change training) judged at tolerances either side of its last change
    loose = LdaCodeMixCritic(passes=4, tol=change * 1.001).fit(docs["train"])
    assert loose.bound_trace_ == b and loose.fit_converged_ is True and loose.fit_warnings() == []
    assert f"last pass changed it by {change:.1e} relative, converged" in loose.fit_summary(len(docs["train"]))
    tight = LdaCodeMixCritic(passes=4, tol=change * 0.999).fit(docs["train"])
    assert tight.fit_converged_ is False
    one = LdaCodeMixCritic(passes=1, tol=0.5).fit(docs["train"])          # one pass: no change to judge
    assert one.fit_converged_ is False and len(one.fit_warnings()) == 1


def test_saved_critic_keeps_the_setting_and_the_report(docs, tmp_path):
    critic = LdaCodeMixCritic(passes=2, tol=0.5, seed=4).fit(docs["train"])
    critic.save(tmp_path / "lda")
    meta = json.loads((tmp_path / "lda" / "critic.json").read_text())
    assert meta["params"]["init"] == "nmf" and meta["params"]["tol"] == 0.5
    assert meta["state"]["fit_init"] == "nmf" and meta["state"]["bound_trace"] == critic.bound_trace_
    loaded = Critic.load(tmp_path / "lda")
    assert (loaded.init, loaded.tol, loaded.fit_init_) == ("nmf", 0.5, "nmf")
    assert loaded.bound_trace_ == critic.bound_trace_ and loaded.fit_passes_ == 2
    assert loaded.fit_converged_ is critic.fit_converged_ is True
    assert loaded.fit_summary(180) == critic.fit_summary(180)
    bows = loaded.bows(docs["held"])[0]
    assert np.array_equal(loaded.gamma(bows), critic.gamma(bows))
    loaded.fit_init_ = "random"                       # a lost start would move every document's gamma
    assert not np.array_equal(loaded.gamma(bows), critic.gamma(bows))


def test_a_critic_saved_before_the_report_loads_as_random_start_without_one(docs):
    critic = LdaCodeMixCritic(passes=2, init="random").fit(docs["train"])
    state, tensors = critic._get_state()
    for key in ("fit_init", "bound_trace", "fit_converged"):
        del state[key]
    old = LdaCodeMixCritic()
    old._set_state(state, tensors)
    old.model_, old.dictionary_ = critic.model_, critic.dictionary_
    assert (old.fit_init_, old.bound_trace_, old.fit_converged_) == ("random", [], None)
    assert old.fit_warnings() == [] and "no convergence report" in old.fit_summary(180)
    bows = old.bows(docs["held"])[0]
    assert np.array_equal(old.gamma(bows), critic.gamma(bows))         # the seed's start, as before
