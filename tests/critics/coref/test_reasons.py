"""Why the coreference critic finds a document unlikely: the chain windows with the lowest log P, recomputed
here by the plain-Python smoothing on the plain-Python windows; a swapped pronoun is named first."""

from __future__ import annotations

import pytest

from critic.criticism import criticize
from critic.results import DocumentResult
from critics.coref.chains import build_chain
from critics.coref.corrupt import swap_gender
from critics.coref.critic import CorefChainCritic
from critics.coref.resolution import Resolution

from .reference import py_windows
from .test_critic import corpus
from .test_smoothing import BruteForce


def chain_of(doc) -> list[str]:
    return list(build_chain(Resolution.from_dict(doc.metadata["coref"], doc.text)).tokens)


@pytest.fixture(scope="module")
def fitted():
    train = corpus(300, 1)
    critic = CorefChainCritic(smoothing="authors", resolver="auto").fit(train)
    return critic, BruteForce([chain_of(d) for d in train], 5, unk_prob=critic.unk_prob)


@pytest.fixture(scope="module")
def swapped(fitted):
    """Documents with one pronoun's gender swapped, their results and the position of the swapped token."""
    critic, _ = fitted
    originals = {d.id: d for d in corpus(40, 5)}
    docs = [d for d in (swap_gender(x, 0) for x in originals.values()) if d is not None]
    result = criticize(critic, corpus(40, 2), {"swapped": docs}, n_bootstrap=10, n_permutations=10)
    out = []
    for r in result.candidates["swapped"].documents:
        doc = next(d for d in docs if d.id == r.id)
        before, after = chain_of(originals[r.id.split("#")[0]]), chain_of(doc)
        [position] = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        out.append((doc, r, position))
    assert len(out) >= 20
    return out


def by_hand(brute: BruteForce, chain: list[str], threshold: float, top: int = 3) -> list[str]:
    """The reasons from the plain-Python log P of every window: those below ``threshold`` lowest first (ties:
    earlier), at most ``top``, else the ``top`` lowest; then how many more are below."""
    logp = [brute.logprob(w) for w in py_windows(chain, 5)]
    order = sorted(range(len(chain)), key=lambda i: (logp[i], i))
    below = sum(lp < threshold for lp in logp)
    picked = order[:min(top, below)] if below else order[:top]
    lines = [" ".join((["(start)"] if i < 4 else []) + chain[max(0, i - 4):i])
             + f" -> {chain[i]} (token {i}): log P = {logp[i]:.2f}" for i in picked]
    return lines + ([f"{below - len(picked)} more chain token(s) with log P < {threshold:g}"]
                    if below > len(picked) else [])


@pytest.mark.parametrize("threshold", [-7.0, -1.0])
def test_reasons_are_the_lowest_windows_by_plain_python(fitted, swapped, threshold, monkeypatch):
    critic, brute = fitted
    monkeypatch.setattr(critic, "implausible_threshold", threshold)
    more = 0
    for doc, r, _ in swapped:
        got = critic.explain(r, doc)
        assert got == by_hand(brute, r.extras["chain"].split(), threshold)
        more += got[-1].endswith(f"with log P < {threshold:g}")
    assert (more > 0) == (threshold == -1.0)  # the count of the others shows when more are below than named


def test_the_swapped_pronoun_is_named_first(fitted, swapped):
    critic, brute = fitted
    named = 0
    for doc, r, position in swapped:
        chain = r.extras["chain"].split()
        first = critic.explain(r, doc)[0]
        logp = [brute.logprob(w) for w in py_windows(chain, 5)]
        if min(range(len(chain)), key=lambda i: (logp[i], i)) == position:  # the swap is the least likely window
            window = " ".join(chain[max(0, position - 4):position]) + f" -> {chain[position]} (token {position})"
            assert first.endswith(f"{window}: log P = {logp[position]:.2f}")
            named += 1
    assert named >= 0.8 * len(swapped)  # 21 of 23 here


def test_without_the_extras_the_chain_is_found_again_from_the_clusters(fitted, swapped):
    critic, _ = fitted
    doc, r, _ = swapped[0]
    bare = DocumentResult(r.id, r.latent_nll, r.latent_steps, r.latent_nll_per_step, r.outlier_p_value)
    assert critic.explain(bare, doc) == critic.explain(r, doc)
    with pytest.raises(ValueError, match="no 'chain' extra and no document"):
        critic.explain(bare)
    short = DocumentResult(r.id, r.latent_nll, r.latent_steps + 1, r.latent_nll_per_step, r.outlier_p_value,
                           extras=r.extras)
    with pytest.raises(ValueError, match="not the chain that was scored"):
        critic.explain(short, doc)
