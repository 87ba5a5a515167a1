"""Why a topic critic finds a document unlikely: the CTM names a strongly off-prior topic (its z-score under the
prior recomputed here from the posterior mean) or, when that ranks the document, its share of unknown words
(counted here); LDA names the topics a code-mixed document mixes, with their weights and top words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from critic.criticism import criticize
from critic.document import Document, Section
from critic.results import DocumentResult
from critics.topics.ctm_critic import STOP_WORDS, tokenize
from critics.topics.lda import LdaCodeMixCritic

from .test_ctm_critic import documents

# ---------------------------------------------------------------------------------------------- CTM


@pytest.fixture(scope="module")
def ctm_case(ctm):
    """A document of one topic's top words only (off the prior), one mostly of words never seen, and typical ones."""
    words = ctm.topic_words(10)
    one = Document("one-topic", (Section(None, " ".join(words[2] * 30)),))
    typical = documents(3, 3, "typ")
    foreign = Document("foreign", (Section(None, typical[0].text + " " + " ".join(
        f"zzunseen{k} xxforeign{k}" for k in range(120))),))
    docs = [one, foreign, *typical]
    result = criticize(ctm, documents(40, 2, "ref"), {"test": docs}, n_bootstrap=10, n_permutations=10)
    return {d.id: d for d in docs}, {r.id: r for r in result.candidates["test"].documents}


def z_scores(ctm, doc: Document) -> np.ndarray:
    """``(m - mu) / sqrt(diag(L L^T))`` of the document's posterior mean, in numpy."""
    m = ctm.project([doc]).posterior.mean.numpy()[0]
    g = ctm.globals_
    tril = g.scale_tril.double().numpy()
    return (m - g.mu.double().numpy()) / np.sqrt(np.diag(tril @ tril.T))


def test_ctm_names_the_off_prior_topic_with_its_z_under_the_prior(ctm, ctm_case):
    docs, results = ctm_case
    r = results["one-topic"]
    assert r.p_values["latent_nll_per_step"] < r.p_values["oov_share"]  # T ranks it, not unknown words
    z = z_scores(ctm, docs["one-topic"])
    weights = torch.softmax(ctm.project([docs["one-topic"]]).posterior.mean[0], -1).numpy()
    assert int(np.argmax(np.abs(z))) == 2 and abs(z[2]) > ctm.far_z
    got = ctm.explain(r, docs["one-topic"])
    words = ", ".join(ctm.topic_words(3)[2])
    assert got[0] == f"topic 2 ({words}): weight {weights[2]:.2f}, z = {z[2]:+.2f} under the prior"
    far = sorted((k for k, _ in r.extras["top_topics"] if abs(z[k]) > ctm.far_z), key=lambda k: -abs(z[k]))
    assert [line.split(" (")[0] for line in got] == [f"topic {k}" for k in far][:ctm.reason_topics]
    assert not any("vocabulary" in line for line in got)


def test_ctm_names_the_share_of_unknown_words_when_that_ranks_the_document(ctm, ctm_case):
    docs, results = ctm_case
    r = results["foreign"]
    assert r.p_values["oov_share"] < r.p_values["latent_nll_per_step"]
    tokens = [t for t in tokenize(docs["foreign"].text) if t not in STOP_WORDS]
    known = sum(t in set(ctm.vocab_) for t in tokens)
    unknown = sum(t not in set(ctm.vocab_) and t not in set(ctm.frequent_) for t in tokens)
    u = unknown / (known + unknown)
    assert u > 0.5
    got = ctm.explain(r, docs["foreign"])
    assert got[0] == (f"{u:.0%} of the words it models are outside the vocabulary (u = {u:.2f}, "
                      f"p = {r.p_values['oov_share']:.3g}): its topic posterior cannot see them")
    z = z_scores(ctm, docs["foreign"])
    assert len(got) == 1 + sum(abs(z[k]) > ctm.far_z for k, _ in r.extras["top_topics"][:ctm.reason_topics])


def test_ctm_without_the_extras_projects_again(ctm, ctm_case):
    docs, results = ctm_case
    r = results["typ0"]
    bare = DocumentResult(r.id, r.latent_nll, r.latent_steps, r.latent_nll_per_step, r.outlier_p_value,
                          p_values=r.p_values)
    assert ctm.explain(bare, docs["typ0"]) == ctm.explain(r, docs["typ0"])
    assert len(ctm.explain(r, docs["typ0"])) >= 1  # a typical document: the farthest topic, for what it is worth
    with pytest.raises(ValueError, match="lacks the extras"):
        ctm.explain(bare)


# ---------------------------------------------------------------------------------------------- LDA


def language(prefix: str, n: int, seed: int, words: int = 60) -> list[Document]:
    """Documents of a made-up language: words ``prefix0 .. prefix39``, Zipf-like frequencies."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 41)
    p /= p.sum()
    return [Document(f"{prefix}{seed}-{i}", (Section(None, " ".join(f"{prefix}{k}" for k in rng.choice(40, words, p=p))),))
            for i in range(n)]


@pytest.fixture(scope="module")
def lda():
    train = language("en", 100, 0) + language("es", 100, 1)
    return LdaCodeMixCritic(num_topics=2, passes=5).fit(train)


def test_lda_names_the_topics_a_code_mixed_document_mixes(lda):
    a, b = language("en", 1, 7, words=40)[0], language("es", 1, 8, words=40)[0]
    mixed = Document("mixed", (Section(None, a.text + " " + b.text),))
    reference = language("en", 20, 2) + language("es", 20, 3)
    result = criticize(lda, reference, {"test": [mixed, language("es", 1, 9)[0]]}, n_bootstrap=10, n_permutations=10)
    r, mono = result.candidates["test"].documents
    lam = lda.model_.state.get_lambda()
    words = [[lda.dictionary_[int(j)] for j in np.argsort(-row, kind="stable")[:3]] for row in lam]
    assert {w[0][:2] for w in words} == {"en", "es"} and all(len({x[:2] for x in w}) == 1 for w in words)  # a language each
    gamma = np.asarray(r.extras["gamma"])
    weights = gamma / gamma.sum()
    order = np.argsort(-weights, kind="stable")
    assert 0.3 < weights.min()  # half and half
    alpha = lda.alpha_
    got = lda.explain(r, mixed)
    assert got == [f"mixes topic {order[0]} ({', '.join(words[order[0]])}) {weights[order[0]]:.2f} and topic {order[1]} "
                   f"({', '.join(words[order[1]])}) {weights[order[1]]:.2f}",
                   f"prior mean weight: topic {order[0]} {alpha[order[0]] / alpha.sum():.2f}, topic {order[1]} "
                   f"{alpha[order[1]] / alpha.sum():.2f} (alpha {alpha[order[0]]:.3g}, {alpha[order[1]]:.3g})"]
    spanish = int(np.argmax(mono.extras["topic_weights"]))
    assert words[spanish][0].startswith("es") and lda.explain(mono)[0].startswith(f"in topic {spanish} (es")
    bare = DocumentResult(r.id, r.latent_nll, r.latent_steps, r.latent_nll_per_step, r.outlier_p_value)
    assert lda.explain(bare, mixed) == got
