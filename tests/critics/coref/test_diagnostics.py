import math
from collections import Counter

import numpy as np
import pytest

from critics.coref.chains import build_chain
from critics.coref.diagnostics import (contribution_table, difference_tables, implausible_table, render_html,
                                       render_markdown)
from critics.coref.resolution import Resolution
from critics.coref.smoothing import AuthorsChainPrior

from .test_chains import FIG5, fig5_resolution
from .test_critic import corpus


def chains_of(docs):
    return [build_chain(Resolution.from_dict(d.metadata["coref"], d.text)).tokens for d in docs]


@pytest.fixture(scope="module")
def sets():
    train, ref, cand = chains_of(corpus(300, 1)), chains_of(corpus(80, 2)), chains_of(corpus(80, 3))
    cand = [tuple(t.replace("he:", "she:") for t in c) for c in cand]  # a candidate with its own habits
    return AuthorsChainPrior.fit(train, order=5), ref, cand


def per_token_nll(prior, chains):
    return -sum(lp.sum() for lp in prior.position_logprobs(chains)) / sum(map(len, chains))


def test_contributions_sum_to_the_latent_nll_difference(sets):
    prior, ref, cand = sets
    rows = contribution_table(prior, ref, cand, top=10**6)
    total = sum(r["contribution"] for r in rows)
    assert total == pytest.approx(per_token_nll(prior, cand) - per_token_nll(prior, ref), rel=1e-10)
    assert [r["contribution"] for r in rows] == sorted((r["contribution"] for r in rows), reverse=True)
    windows = [w for c in prior.windows(cand) for w in c]
    top = rows[0]
    assert top["p_cand"] == pytest.approx(Counter(windows)[top["window"]] / len(windows))


def test_implausible_rows_and_argmax_are_brute_force(sets):
    prior, _, cand = sets
    rows = implausible_table(prior, cand, threshold=-4.0, top=50)
    assert rows
    flat = [(w, lp) for ws, lps in zip(prior.windows(cand), prior.position_logprobs(cand)) for w, lp in zip(ws, lps)]
    below = {w for w, lp in flat if lp < -4.0}
    assert {r["window"] for r in rows} == below if len(below) <= 50 else len(rows) == 50
    vocab = prior.vocabulary
    for r in rows:
        # brute force: score the chain "context + v" for every target v; its last window is (context, v)
        ctx = [t for t in r["window"][:-1] if t != prior.pad]
        scores = [prior.position_logprobs([ctx + [v]])[0][-1] for v in vocab]
        assert r["argmax"] == vocab[int(np.argmax(scores))]
        assert r["argmax_log_prob"] == pytest.approx(max(scores), rel=1e-12)
        assert r["count"] == sum(1 for w, _ in flat if w == r["window"])


def test_difference_tables_against_separately_fitted_priors(sets):
    _, ref, cand = sets
    fit = lambda chains: AuthorsChainPrior.fit(chains, order=5)  # noqa: E731
    largest, smallest = difference_tables(fit, ref, cand, min_count=5, top=5)
    p_ref, p_cand = fit(ref), fit(cand)
    n_ref = Counter(w for c in p_ref.windows(ref) for w in c)
    n_cand = Counter(w for c in p_cand.windows(cand) for w in c)
    common = [w for w in n_cand if n_cand[w] >= 5 and n_ref[w] >= 5]
    lp_ref = dict(zip([w for c in p_ref.windows(ref) for w in c], np.concatenate(p_ref.position_logprobs(ref))))
    lp_cand = dict(zip([w for c in p_cand.windows(cand) for w in c], np.concatenate(p_cand.position_logprobs(cand))))
    diffs = sorted(lp_cand[w] - lp_ref[w] for w in common)
    assert [r["difference"] for r in largest] == pytest.approx(diffs[::-1][:5])
    assert [r["difference"] for r in smallest] == pytest.approx(diffs[:5])
    assert all(r["count_ref"] >= 5 and r["count_cand"] >= 5 for r in largest + smallest)
    assert largest[0]["p_cand"] == pytest.approx(math.exp(lp_cand[largest[0]["window"]]))


def test_rendering_marks_every_mention_and_flags_implausible_ones(sets):
    prior = sets[0]
    res = fig5_resolution()
    chain = build_chain(res)
    logp = prior.position_logprobs([chain.tokens])[0]
    md = render_markdown(prior, FIG5, chain.tokens, chain.spans, threshold=-7.0)
    for word, entity in [("Lisa", 0), ("him", 1), ("they", 2), ("Josh", 1), ("her", 0), ("he", 1), ("their", 2)]:
        assert f"[{word}]<sub>{entity}</sub>" in md
    n_bad = int(sum(lp < -7.0 for lp, s in zip(logp, chain.spans) if s is not None))
    assert n_bad >= 1 and md.count("**[") == n_bad and md.count("argmax") == n_bad
    html = render_html(prior, FIG5, chain.tokens, chain.spans, threshold=-7.0)
    assert html.count('class="mention implausible"') == n_bad and html.count('class="mention') == 8
    assert "Chain: . [F]<sub>0</sub> [him]<sub>1</sub>" in md
