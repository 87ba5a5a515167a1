"""The LDA code-mixing critic (paper app. C) on real Wikipedia summaries in English, Spanish and French."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from scipy.special import digamma, gammaln, logsumexp

from critic.critic import Critic
from critic.document import Document, Section
from critic.latent import cross_entropy
from critic.registry import get_critic
from critics.topics.codemix import code_mixed_set
from critics.topics.lda import LdaCodeMixCritic, tokenize, top_words, topic_labels, topic_purity
from critics.topics.lda_plots import CORNERS, code_mixing_figure, posterior_points, simplex_scatter, ternary

LANGUAGES = ("en", "es", "fr")
N_TRAIN, N_HELD, N_POOL = 300, 150, 150
FUNCTION_WORDS = {"en": {"the", "of", "and"}, "es": {"el", "los", "del"}, "fr": {"et", "le", "les"}}


@pytest.fixture(scope="module")
def data(wiki_wheel):
    """Per language: ``train`` / ``held`` (monolingual held-out) / ``pool`` (sources of mixed documents),
    disjoint, from a seeded shuffle; ids prefixed with the language (titles repeat across languages)."""
    from critic.corpora.wikisummaries import load_wiki_summaries

    out = {}
    for lang in LANGUAGES:
        docs = load_wiki_summaries(language=lang, wheel=wiki_wheel, install=False)
        docs = [d.replace_sections(d.sections, id=f"{lang}:{d.id}") for d in docs]
        random.Random(f"lda-{lang}").shuffle(docs)
        out[lang] = {"train": docs[:N_TRAIN], "held": docs[N_TRAIN:N_TRAIN + N_HELD],
                     "pool": docs[N_TRAIN + N_HELD:N_TRAIN + N_HELD + N_POOL]}
    return out


@pytest.fixture(scope="module")
def critic(data):
    return LdaCodeMixCritic().fit([d for lang in LANGUAGES for d in data[lang]["train"]])


@pytest.fixture(scope="module")
def mixed(data):
    """Code-mixed documents: 50 pairs for each of en+es, es+fr, fr+en, both kinds (word rate 0.3)."""
    out = []
    for a, b in (("en", "es"), ("es", "fr"), ("fr", "en")):
        out += code_mixed_set(data[a]["pool"], data[b]["pool"], n=50, rate=0.3, seed=7)
    return out


def auc(positive, negative) -> float:
    """P(T(mixed) > T(monolingual)) + 1/2 P(tie): the Mann-Whitney AUC, by all pairs."""
    pos, neg = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float((pos > neg).mean() + 0.5 * (pos == neg).mean())


def closed_form(gamma: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """H(Dir(gamma), Dir(alpha)) = -log B(alpha)^-1 - sum (alpha_k - 1) E log z_k, written out here."""
    e_log_z = digamma(gamma) - digamma(gamma.sum(-1, keepdims=True))
    return -gammaln(alpha.sum()) + gammaln(alpha).sum() - ((alpha - 1) * e_log_z).sum(-1)


def monte_carlo(gamma: np.ndarray, alpha: np.ndarray, samples: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """-E log Dir(z; alpha) from z ~ Dir(gamma) drawn in log space (Gamma(g) = Gamma(g + 1) U^(1/g)), so
    that components of tiny concentration do not underflow to 0; returns (estimate, standard error)."""
    g = gamma[:, None, :]
    log_x = np.log(rng.gamma(g + 1, size=(gamma.shape[0], samples, gamma.shape[1]))) \
        + np.log(rng.uniform(size=(gamma.shape[0], samples, gamma.shape[1]))) / g
    log_z = log_x - logsumexp(log_x, axis=-1, keepdims=True)
    log_p = gammaln(alpha.sum()) - gammaln(alpha).sum() + ((alpha - 1) * log_z).sum(-1)
    return -log_p.mean(1), log_p.std(1, ddof=1) / math.sqrt(samples)


def doc(id: str, text: str) -> Document:
    return Document(id=id, sections=(Section("abstract", text),))


# ------------------------------------------------------------------ the topics are the languages

def test_topics_follow_languages(critic, data):
    purity = topic_purity(critic, {lang: data[lang]["held"] for lang in LANGUAGES})
    assert purity.n == 3 * N_HELD and not purity.failures
    assert purity.purity >= 0.9, purity
    assert sorted(purity.topic_language) == sorted(LANGUAGES), purity  # one topic per language
    words = top_words(critic, n=20)  # table 10
    assert [len(w) for w in words] == [20, 20, 20]
    for k, lang in enumerate(purity.topic_language):
        assert FUNCTION_WORDS[lang] <= set(words[k]), (lang, words[k])
    assert [label.split(": ")[1].split() for label in topic_labels(critic)] == [w[:3] for w in words]
    alpha = critic.alpha_
    assert alpha.shape == (3,) and np.all(alpha > 0) and np.all(alpha < 1)  # mass at the corners: one language


def test_code_mixed_documents_are_flagged_by_latent_nll(critic, data, mixed):
    mono = critic.score([d for lang in LANGUAGES for d in data[lang]["held"]])
    scores = critic.score(mixed)
    assert not mono.skipped and not scores.skipped
    assert np.all(mono.latent_steps == 1) and np.all(scores.latent_steps == 1)  # M(x) = 1: one latent z
    overall = auc(scores.latent_nll, mono.latent_nll)
    assert overall >= 0.95, overall
    for kind in ("sentences", "words"):
        t = [v for i, v in zip(scores.doc_ids, scores.latent_nll) if i.endswith(f"#{kind}")]
        assert len(t) == 150
        assert auc(t, mono.latent_nll) >= 0.93, kind
    try:
        from sklearn.metrics import roc_auc_score
    except ImportError:
        return
    labels = np.r_[np.ones(scores.n), np.zeros(mono.n)]
    assert roc_auc_score(labels, np.r_[scores.latent_nll, mono.latent_nll]) == pytest.approx(overall, abs=1e-12)


def test_topic_weights_recover_the_known_mix(critic, data, mixed):
    """The posterior mean weight of the second document's language tracks the share of its words."""
    purity = topic_purity(critic, {lang: data[lang]["held"][:20] for lang in LANGUAGES})
    topic_of = {lang: purity.topic_language.index(lang) for lang in LANGUAGES}
    p = critic.project(mixed)
    got = [w[topic_of[d.metadata["code_mix"]["languages"][1]]] for d, w in zip(mixed, p.extras["topic_weights"])]
    want = [d.metadata["code_mix"]["fraction_b"] for d in mixed]
    assert np.corrcoef(got, want)[0, 1] > 0.8
    assert np.mean(np.abs(np.subtract(got, want))) < 0.12


# ------------------------------------------------------------------ T(x) is the exact cross-entropy

def test_latent_nll_is_the_closed_form_and_agrees_with_monte_carlo(critic, data, mixed):
    docs = data["en"]["held"][:4] + data["fr"]["held"][:4] + mixed[:8]
    scores = critic.score(docs)
    assert scores.estimator == "exact" and scores.latent_nll_stderr is None
    gamma, alpha = np.array(scores.extras["gamma"]), critic.alpha_
    np.testing.assert_allclose(scores.latent_nll, closed_form(gamma, alpha), rtol=1e-10, atol=1e-9)
    p = critic.project(docs)
    np.testing.assert_allclose(cross_entropy(p.posterior, critic.prior()).numpy(), closed_form(gamma, alpha),
                               rtol=1e-10, atol=1e-9)
    estimate, stderr = monte_carlo(gamma, alpha, 20_000, np.random.default_rng(0))
    assert np.all(np.abs(estimate - scores.latent_nll) < 3 * stderr), (estimate, scores.latent_nll, stderr)


class Ones:
    """Where gensim draws every document's starting gamma ``gamma(100, 1/100, (n, M))``: ones (the draw's mean),
    the NMF-started critic's start."""

    def gamma(self, shape, scale, size):
        return np.ones(size)


@pytest.fixture(scope="module")
def random_start_critic(data):
    return LdaCodeMixCritic(init="random", passes=3).fit([d for lang in LANGUAGES for d in data[lang]["train"]])


@pytest.mark.parametrize("which", ["critic", "random_start_critic"])
def test_gamma_is_gensims_inference(which, data, mixed, request):
    """Every document starts from the same gamma: ones after the NMF start, else the first draw of gensim's
    ``RandomState(seed)``."""
    critic = request.getfixturevalue(which)
    start = Ones if critic.fit_init_ == "nmf" else (lambda: np.random.RandomState(critic.seed))
    docs = data["es"]["held"][:10] + mixed[:10]
    bows, known, unknown = critic.bows(docs)
    p = critic.project(docs)
    gamma = p.posterior.concentration.numpy()
    alone = []
    saved = critic.model_.random_state
    for bow in bows:  # gensim's own inference, one document, started as the critic's
        critic.model_.random_state = start()
        alone.append(critic.model_.inference([bow])[0][0])
    assert np.array_equal(gamma, np.array(alone))
    critic.model_.random_state = start()
    batched, _ = critic.model_.inference(bows)  # plain batched call: the first row starts from the same draw
    critic.model_.random_state = saved
    assert np.array_equal(gamma[0], batched[0])
    np.testing.assert_allclose(gamma.sum(1), critic.alpha_.sum() + np.array(known), rtol=1e-6)  # gamma includes alpha
    reverse = critic.project(docs[::-1])  # a document's posterior does not depend on its batch
    assert np.array_equal(reverse.posterior.concentration.numpy()[::-1], gamma)
    assert torch.equal(critic.prior().concentration, torch.as_tensor(critic.model_.alpha, dtype=torch.float64))


# ------------------------------------------------------------------ unknown words and failures

def test_unknown_words_are_counted(critic):
    p = critic.project([doc("d", "The history of the zzqxv and the zzqxv qqwwrt.")])
    assert p.unknown == {"d": 3}
    assert p.extras["known_tokens"] == [6] and p.extras["unknown_tokens"] == [3]
    assert tokenize("L'Été, the ÉCOLE_1!") == ["l", "été", "the", "école_1"]


def test_a_document_with_no_known_word_is_a_counted_failure(critic, data):
    docs = [data["en"]["held"][0], doc("unknown", "zzqxv qqwwrt zzqxv"), doc("empty", " ... !? "),
            data["fr"]["held"][0]]
    scores = critic.score(docs)
    assert scores.doc_ids == [docs[0].id, docs[3].id]
    assert scores.skipped == {"unknown": "none of its 3 word tokens is in the LDA dictionary",
                              "empty": "no word tokens"}
    p = critic.project(docs[1:3])
    assert len(p) == 0 and set(p.failures) == {"unknown", "empty"}


# ------------------------------------------------------------------ persistence and determinism

def test_save_load_roundtrip_is_identical_and_pickle_free(critic, data, mixed, tmp_path):
    docs = data["en"]["held"][:20] + mixed[:20]
    before = critic.score(docs)
    critic.save(tmp_path / "lda")
    files = sorted(p.relative_to(tmp_path / "lda").as_posix() for p in (tmp_path / "lda").rglob("*") if p.is_file())
    assert files == [".critic-output.json", "critic.json", "lda/alpha.npy", "lda/dictionary.json", "lda/eta.npy",
                     "lda/expElogbeta.npy", "lda/lambda.npy", "tensors.pt"]
    for name in ("alpha", "eta", "expElogbeta", "lambda"):
        np.load(tmp_path / "lda" / "lda" / f"{name}.npy", allow_pickle=False)
    meta = json.loads((tmp_path / "lda" / "critic.json").read_text())
    assert meta["critic"] == "lda" and meta["state"]["vocabulary"] == len(critic.dictionary_)
    loaded = Critic.load(tmp_path / "lda")
    assert isinstance(loaded, LdaCodeMixCritic) and get_critic("lda") is LdaCodeMixCritic
    after = loaded.score(docs)
    assert after.doc_ids == before.doc_ids
    assert np.array_equal(after.latent_nll, before.latent_nll)
    assert after.extras["gamma"] == before.extras["gamma"]
    assert top_words(loaded) == top_words(critic)
    assert loaded.dictionary_.token2id == critic.dictionary_.token2id
    assert loaded.state_sha256() == critic.state_sha256() == meta["state_sha256"]


def test_fit_is_seeded_and_deterministic(data):
    """gensim's random start is seeded (the NMF start does not depend on the seed: test_lda_fit.py)."""
    train = [d for lang in LANGUAGES for d in data[lang]["train"][:60]]
    one, two = (LdaCodeMixCritic(passes=2, init="random").fit(train) for _ in range(2))
    assert np.array_equal(one.model_.expElogbeta, two.model_.expElogbeta)
    assert np.array_equal(one.alpha_, two.alpha_)
    assert one.state_sha256() == two.state_sha256()
    other = LdaCodeMixCritic(passes=2, seed=1, init="random").fit(train)
    assert not np.array_equal(one.model_.expElogbeta, other.model_.expElogbeta)


@pytest.mark.parametrize("bad", [dict(num_topics=1), dict(no_above=0.0), dict(passes=0), dict(eta=-1.0),
                                 dict(decay=0.2), dict(init="spectral"), dict(tol=0.0), dict(tol="1e-4")])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        LdaCodeMixCritic(**bad).fit([doc("a", "the cat")])


# ------------------------------------------------------------------ fig. 7

def test_simplex_figure(critic, data, mixed, tmp_path):
    mono = [d for lang in LANGUAGES for d in data[lang]["held"][:30]]
    points, failures = posterior_points(critic, mono + [doc("x", "zzqxv")], samples=2, seed=3)
    assert points.shape == (180, 3) and failures == {"x": "none of its 1 word tokens is in the LDA dictionary"}
    np.testing.assert_allclose(points.sum(1), 1, rtol=1e-9)
    again, _ = posterior_points(critic, mono, samples=2, seed=3)
    assert np.array_equal(points, again)
    means, _ = posterior_points(critic, mono, mean=True)
    assert np.allclose(means, critic.project(mono).extras["topic_weights"])
    assert np.allclose(ternary(np.eye(3)), CORNERS)
    # monolingual posteriors sit near a corner, code-mixed ones away from every corner
    mixed_means, _ = posterior_points(critic, mixed, mean=True)
    assert np.median(means.max(1)) > 0.9 > np.median(mixed_means.max(1))
    out = tmp_path / "fig7.png"
    failed = code_mixing_figure(critic, {"real": mono, "code-mixed": mixed[:90]}, out)
    assert failed == {"real": {}, "code-mixed": {}}
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = simplex_scatter({"a": np.eye(3)}, labels=["en", "es", "fr"])
    assert len(fig.axes) == 1
    with pytest.raises(ValueError):
        simplex_scatter({"a": np.ones((2, 4))})


@pytest.mark.parametrize("name, value, why", [
    ("offset", -1, "must be > 0, got integer -1"),            # was gensim's AssertionError
    ("decay", 0.2, "must be >= 0.5 and <= 1, got number 0.2"),
    ("num_topics", 1, "must be >= 2, got integer 1"),
    ("init", "kmeans", "must be one of 'nmf', 'random', got string 'kmeans'"),
    ("tol", float("nan"), "must be a finite number > 0, got"),
])
def test_settings_out_of_their_declared_bounds_are_refused_before_any_work(name, value, why):
    from critic.config import ConfigError

    with pytest.raises(ConfigError, match=f"LdaCodeMixCritic: critic 'lda' setting {name} {why}"):
        LdaCodeMixCritic(**{name: value}).fit([])
