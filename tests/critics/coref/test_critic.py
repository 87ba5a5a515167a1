import math

import numpy as np
import pytest

from critic.critic import Critic
from critic.criticism import criticize
from critic.document import Document, Section
from critics.coref.chains import build_chain
from critics.coref.corrupt import corrupt_resolved
from critics.coref.critic import CorefChainCritic
from critics.coref.resolution import from_clusters

from .test_chains import FIG5, fig5_resolution

PEOPLE = [("Ann", "F"), ("Bob", "M"), ("Carl", "M"), ("Dora", "F"), ("Eve", "F"), ("Finn", "M")]
SUBJ = {"M": "he", "F": "she"}
OBJ = {"M": "him", "F": "her"}
POSS = {"M": "his", "F": "her"}


def story(rng: np.random.Generator, doc_id: str) -> Document:
    """A short resolved text: 2-5 sentences about 1-3 people, each named first, then mostly pronouns."""
    cast = [PEOPLE[i] for i in rng.choice(len(PEOPLE), size=int(rng.integers(1, 4)), replace=False)]
    text, clusters, named = "", [[] for _ in cast], set()
    for _ in range(int(rng.integers(2, 6))):
        k = int(rng.integers(len(cast)))
        name, g = cast[k]
        if text:
            text += " "
        subj = name if k not in named or rng.random() < 0.2 else SUBJ[g]
        start = len(text)
        text += subj[0].upper() + subj[1:]
        clusters[k].append([start, len(text)])
        named.add(k)
        if len(cast) > 1 and rng.random() < 0.6:
            j = int((k + 1 + rng.integers(len(cast) - 1)) % len(cast))
            other, og = cast[j]
            word = other if j not in named else OBJ[og]
            text += " met "
            clusters[j].append([len(text), len(text) + len(word)])
            text += word
            named.add(j)
        else:
            text += " smiled at "
            clusters[k].append([len(text), len(text) + len(POSS[g])])
            text += POSS[g] + " friend"
        text += "."
    res = from_clusters(text, [c for c in clusters if c])
    return Document(doc_id, (Section("abstract", text),), metadata={"coref": res.to_dict()})


def corpus(n: int, seed: int) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [story(rng, f"s{seed}-{i}") for i in range(n)]


@pytest.fixture(scope="module")
def train():
    return corpus(300, 1)


@pytest.fixture(scope="module")
def test_docs():
    return corpus(60, 2)


@pytest.mark.parametrize("smoothing", ["authors", "kenlm"])
def test_latent_nll_is_the_chain_log_prob(smoothing, train, test_docs):
    critic = CorefChainCritic(smoothing=smoothing, resolver="metadata").fit(train)
    assert critic.training_chains_ == 300 and critic.training_skipped_ == {}
    scores = critic.score(test_docs)
    chains = [build_chain(from_clusters_of(d)).tokens for d in test_docs]
    expected = -np.array([lp.sum() for lp in critic.prior_.position_logprobs(chains)])
    np.testing.assert_allclose(scores.latent_nll, expected, rtol=1e-12)
    np.testing.assert_array_equal(scores.latent_steps, [len(c) for c in chains])
    result = criticize(critic, test_docs, n_bootstrap=50, n_permutations=50)
    assert result.reference.latent_ppl == pytest.approx(math.exp(expected.sum() / sum(map(len, chains))), rel=1e-12)


def from_clusters_of(doc: Document):
    from critics.coref.resolution import Resolution

    return Resolution.from_dict(doc.metadata["coref"], doc.text)


@pytest.mark.parametrize("smoothing", ["authors", "kenlm"])
def test_save_load_roundtrip(smoothing, train, test_docs, tmp_path):
    critic = CorefChainCritic(smoothing=smoothing, resolver="metadata").fit(train)
    critic.save(tmp_path / "c")
    again = Critic.load(tmp_path / "c")
    assert isinstance(again, CorefChainCritic) and again.smoothing == smoothing
    np.testing.assert_array_equal(again.score(test_docs).latent_nll, critic.score(test_docs).latent_nll)
    assert again.state_sha256() == critic.state_sha256()


def test_failures_and_unknowns_are_counted(train):
    critic = CorefChainCritic(smoothing="authors", resolver="metadata").fit(train)
    fig5 = Document("fig5", (Section(None, FIG5),), metadata={"coref": fig5_resolution().to_dict()})
    empty = Document("empty", (Section(None, "  "),))
    bare = Document("bare", (Section(None, "Ann smiled."),))
    broken = Document("broken", (Section(None, "Ann smiled."),), metadata={"coref": {"mentions": [{"start": 0}]}})
    scores = critic.score([fig5, empty, bare, broken])
    assert scores.doc_ids == ["fig5"]
    assert scores.skipped["empty"] == "empty text"
    assert scores.skipped["bare"] == "no coreference resolution in metadata['coref']"
    assert scores.skipped["broken"].startswith("bad coreference resolution: document 'broken': metadata.coref: ")
    # "they", "their" and lower-case "he" never occur in the training stories: unknown targets, counted
    assert scores.unknown == {"fig5": 3}
    targets = [w[-1] for w in critic.prior_.windows([build_chain(fig5_resolution()).tokens])[0]]
    assert [t for t in targets if t not in critic.prior_.vocabulary] == ["they:2", "he:1", "their:2"]


def test_corruptions_raise_the_latent_nll(train, test_docs):
    critic = CorefChainCritic(smoothing="kenlm", resolver="metadata").fit(train)
    base = dict(zip(critic.score(test_docs).doc_ids, critic.score(test_docs).latent_nll))
    for name in ("gender", "number"):
        bad, counts = corrupt_resolved(test_docs, name, seed=0)
        assert counts["corrupted"] >= 20
        scored = critic.score(bad)
        worse = [t > base[i.split("#")[0]] for i, t in zip(scored.doc_ids, scored.latent_nll)]
        assert np.mean(worse) > 0.9, name


def test_bad_settings():
    with pytest.raises(ValueError, match="setting smoothing must be one of 'kenlm', 'authors', got string 'kneser'"):
        CorefChainCritic(smoothing="kneser").fit(corpus(3, 0))
    with pytest.raises(ValueError, match="setting resolver must be one of 'auto', 'metadata', 'neuralcoref'"):
        CorefChainCritic(resolver="spacy").fit(corpus(3, 0))
    with pytest.raises(ValueError, match="setting order must be >= 2, got integer 1"):  # as --params says it
        CorefChainCritic(order=1).fit(corpus(3, 0))
    with pytest.raises(ValueError, match="no training document gave a coreference chain"):
        CorefChainCritic(resolver="metadata").fit([Document("x", (Section(None, "Hi."),))])
