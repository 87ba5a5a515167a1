"""Benchmark: do the topic critics' fits reproduce across seeds (issue 21)?

    python -m experiments.benchmarks.topic_seeds [--docs 1000] [--heldout 400] [--topics 10] [--seeds 3]
        [--configs before,default] [--lda-configs before,default] [--no-lda] [--corpus wiki|synthetic] [--threads 1]
        [--json out.json]

Fits each configuration of the CTM critic (:class:`critics.topics.CorrelatedTopicCritic`, the vocabulary of
app. F: its default vocabulary settings) with ``--seeds`` seeds (0, 1, ...) on the first ``--docs`` English
Wikipedia People summaries (``--corpus wiki``; ``synthetic``: documents drawn from a known CTM with
pseudo-words, for the tests), scores the next ``--heldout`` ones with each fit, and prints, over every pair
of seeds (the mean and the worst pair):

* the Pearson correlation of the held-out documents' Latent NLLs, exact (``T(x) = H(q, N(mu, Sigma))``) and
  mean-only (``-log N(m; mu, Sigma)``, as the authors scored);
* how many of the 20 documents with the highest exact T(x) (the flagged outliers) both fits flag;
* the median cosine of the topics matched one to one by the Hungarian algorithm on cosine
  (``scipy.optimize.linear_sum_assignment``);

and per fit the held-out log-likelihood per token (the held-out ELBO per token: a lower bound), the steps
it took, whether it converged, and its seconds.  Configurations (``--configs``, comma-separated):

* ``before``: the settings before issue 21: SVI, 3,000 steps, random init (``fit_method="svi",
  init="random"``);
* ``default``: the critic's defaults: variational EM from the NMF init with the inverse-Wishart MAP for
  ``Sigma`` (``fit_method="em", init="nmf", covariance_prior_weight=0.5, covariance_prior_scale=1``);
* ``em-ml``: the same with the maximum-likelihood ``Sigma`` (``covariance_prior_weight=0``);
* ``em-random``: variational EM from the random init (what EM alone does for reproducibility);
* ``svi-nmf``: SVI from the NMF init with closed-form ``mu, Sigma`` once per pass.

Then the same for the LDA critic (:class:`critics.topics.LdaCodeMixCritic`, gensim, ``--topics`` topics, its
other settings the defaults), unless ``--no-lda``, per configuration of ``--lda-configs``:

* ``before``: gensim's random start (``init="random"``), the default before issue 21;
* ``default``: the critic's defaults: the deterministic start, topics from KL-NMF of the counts (``init="nmf"``);
* ``before-long``: the random start with 40 passes instead of 10 (what more passes alone do).

For the LDA the mean-only score is ``-log Dir(E[z]; alpha)``, the held-out log-likelihood per token is the
critic's :meth:`~critics.topics.LdaCodeMixCritic.per_word_bound` (gensim's ``log_perplexity``, its bound) and the
steps are the passes, converged by the critic's relative-change rule on the per-word training bound.  Give
``--configs ""`` to fit only the LDA.  Threads: ``--threads`` (1) for torch.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from critic.io import atomic_write_text
from critic.seeds import TOP, seed_agreement

__all__ = ["CONFIGS", "LDA_CONFIGS", "agreement", "main", "synthetic_documents"]

CONFIGS = {
    "before": {"fit_method": "svi", "init": "random"},
    "default": {},
    "em-ml": {"covariance_prior_weight": 0.0},
    "em-random": {"init": "random"},
    "svi-nmf": {"fit_method": "svi", "init": "nmf", "prior_step": "closed-form"},
}
"""CTM critic settings per configuration (on top of ``num_topics`` and ``seed``)."""

LDA_CONFIGS = {
    "before": {"init": "random"},
    "default": {},
    "before-long": {"init": "random", "passes": 40},
}
"""LDA critic settings per configuration (on top of ``num_topics`` and ``seed``)."""


def synthetic_documents(num_docs: int, *, topics: int = 6, vocab: int = 200, seed: int = 0):
    """``num_docs`` :class:`~critic.document.Document` drawn from a known CTM (two blocks of correlated
    topics, Dirichlet(0.05) topics over ``vocab`` pseudo-words made of letters, 30-60 words each)."""
    from critic.document import Document, Section
    from critics.topics.ctm import known_ctm, sample_documents

    mu, sigma, phi = known_ctm(topics, vocab, seed)
    bow, _ = sample_documents(mu, sigma, phi, num_docs, min_words=30, max_words=60, seed=seed + 1)
    letters = "bcdfghjklmnpqrstvwxz"
    names = ["q" + letters[i // 20 % 20] + letters[i % 20] + "x" * (i // 400) for i in range(vocab)]
    docs = []
    for i in range(num_docs):
        lo, hi = bow.indptr[i], bow.indptr[i + 1]
        words = [names[w] for w, c in zip(bow.indices[lo:hi], bow.counts[lo:hi]) for _ in range(int(c))]
        docs.append(Document(f"s{i}", (Section(None, " ".join(words)),)))
    return docs


def agreement(fits: list[dict], top: int = TOP) -> dict:
    """Over every pair of fits (each ``{"exact", "mean_only"}`` Latent NLLs over the same documents and
    ``topics (K, V)``): the correlations, the top-``top`` overlap (by the exact score) and the matched-topic
    cosine median (:func:`critic.seeds.seed_agreement`), as ``{name: {"mean", "min", "pairs"}}``."""
    exact = seed_agreement([f["exact"] for f in fits], [f["topics"] for f in fits], top=top)
    mean_only = seed_agreement([f["mean_only"] for f in fits], top=top)
    return {"corr_exact": exact["corr"], "corr_mean_only": mean_only["corr"], "top_overlap": exact["top_overlap"],
            "topic_cosine": exact["component_cosine"]}


def _ctm_fit(train, heldout, topics: int, seed: int, settings: dict) -> dict:
    import torch

    from critics.topics import CorrelatedTopicCritic
    from critics.topics.ctm import PriorTerms

    start = time.perf_counter()
    critic = CorrelatedTopicCritic(num_topics=topics, seed=seed, **settings).fit(train, validation=heldout)
    seconds = time.perf_counter() - start
    proj = critic.project(heldout)
    if proj.failures:
        raise RuntimeError(f"held-out documents failed: {dict(list(proj.failures.items())[:3])}")
    m, v = proj.posterior.mean.double(), proj.posterior.variance.double()
    g = critic.globals_
    terms = PriorTerms(g.mu.double().cpu(), g.scale_tril.double().cpu())
    return {"exact": terms.cross_entropy(m, v).numpy(), "mean_only": terms.cross_entropy(m, torch.zeros_like(v)).numpy(),
            "topics": critic.latent_components(), "heldout_ll_per_token": critic.validation_elbo_per_token_,
            "steps": critic.fit_steps_, "converged": critic.fit_converged_, "seconds": seconds,
            "final_elbo": critic.elbo_trace_[-1], "sigma_trace": float(torch.trace(g.sigma.double()))}


def _lda_fit(train, heldout, topics: int, seed: int, settings: dict) -> dict:
    import torch

    from critics.topics import LdaCodeMixCritic

    start = time.perf_counter()
    critic = LdaCodeMixCritic(num_topics=topics, seed=seed, **settings).fit(train)
    seconds = time.perf_counter() - start
    proj = critic.project(heldout)
    if proj.failures:
        raise RuntimeError(f"held-out documents failed: {dict(list(proj.failures.items())[:3])}")
    gamma = proj.posterior.concentration.double()
    alpha = torch.tensor(critic.alpha_, dtype=torch.float64)
    prior = torch.distributions.Dirichlet(alpha)
    exact = (-torch.lgamma(alpha.sum()) + torch.lgamma(alpha).sum()
             - ((alpha - 1) * (torch.digamma(gamma) - torch.digamma(gamma.sum(-1, keepdim=True)))).sum(-1))
    mean = gamma / gamma.sum(-1, keepdim=True)
    return {"exact": exact.numpy(), "mean_only": (-prior.log_prob(mean)).numpy(),
            "topics": critic.latent_components(),
            "heldout_ll_per_token": critic.per_word_bound(heldout), "steps": critic.fit_passes_,
            "converged": critic.fit_converged_, "seconds": seconds, "final_bound": critic.bound_trace_[-1]}


def _print_block(label: str, fits: list[dict], agree: dict) -> None:
    print(f"{label}:")
    for seed, f in enumerate(fits):
        extra = (f", trace(Sigma) {f['sigma_trace']:.2f}" if "sigma_trace" in f else
                 f", per-word training bound {f['final_bound']:.4f}" if "final_bound" in f else "")
        print(f"  seed {seed}: {f['seconds']:.1f} s, {f['steps']} steps, converged {f['converged']}, "
              f"held-out log-lik/token {f['heldout_ll_per_token']:.4f}{extra}")
    lls = [f["heldout_ll_per_token"] for f in fits]
    print(f"  held-out log-lik/token mean {np.mean(lls):.4f}")
    for name, words in (("corr_exact", "Latent NLL corr (exact)"), ("corr_mean_only", "Latent NLL corr (mean-only)"),
                        ("top_overlap", f"top-{TOP} outlier overlap"), ("topic_cosine", "matched-topic cosine median")):
        a = agree[name]
        print(f"  {words:32s} mean {a['mean']:.3f}  worst pair {a['min']:.3f}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1000, help="training documents")
    ap.add_argument("--heldout", type=int, default=400, help="held-out documents scored")
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--configs", default="before,default", help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--lda-configs", default="before,default", help=f"comma-separated, of {', '.join(LDA_CONFIGS)}")
    ap.add_argument("--no-lda", action="store_true", help="skip the LDA critic")
    ap.add_argument("--corpus", choices=("wiki", "synthetic"), default="wiki")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a CTM critic setting for every configuration (JSON value), e.g. em_iterations=50")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    lda_configs = [] if args.no_lda else [c for c in args.lda_configs.split(",") if c]
    for names, known in ((configs, CONFIGS), (lda_configs, LDA_CONFIGS)):
        unknown = [c for c in names if c not in known]
        if unknown:
            ap.error(f"unknown configuration(s) {unknown}; choose from {list(known)}")
    extra = {}
    for item in args.set:
        name, _, value = item.partition("=")
        extra[name] = json.loads(value)
    if args.corpus == "wiki":
        from critic.corpora.wikisummaries import load_wiki_summaries

        docs = list(load_wiki_summaries(language="en", topic="People", install=False))
    else:
        docs = synthetic_documents(args.docs + args.heldout)
    if len(docs) < args.docs + args.heldout:
        raise SystemExit(f"{len(docs)} documents, fewer than --docs {args.docs} + --heldout {args.heldout}")
    train, heldout = docs[:args.docs], docs[args.docs:args.docs + args.heldout]
    print(f"topic_seeds: {args.corpus}, {len(train)} training and {len(heldout)} held-out documents, "
          f"K = {args.topics}, seeds 0..{args.seeds - 1}, {args.threads} thread(s)")
    out = {"corpus": args.corpus, "docs": len(train), "heldout": len(heldout), "topics": args.topics,
           "seeds": args.seeds, "settings": extra, "ctm": {}, "lda": {}}
    for name in configs:
        fits = [_ctm_fit(train, heldout, args.topics, seed, {**CONFIGS[name], **extra}) for seed in range(args.seeds)]
        agree = agreement(fits)
        _print_block(f"ctm {name} {CONFIGS[name] or '(critic defaults)'}", fits, agree)
        out["ctm"][name] = {"agreement": agree, "fits": [{k: v for k, v in f.items() if k not in
                                                          ("exact", "mean_only", "topics")} for f in fits]}
    for name in lda_configs:
        fits = [_lda_fit(train, heldout, args.topics, seed, LDA_CONFIGS[name]) for seed in range(args.seeds)]
        agree = agreement(fits)
        _print_block(f"lda {name} {LDA_CONFIGS[name] or '(critic defaults)'}", fits, agree)
        out["lda"][name] = {"agreement": agree, "fits": [{k: v for k, v in f.items() if k not in
                                                          ("exact", "mean_only", "topics")} for f in fits]}
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
