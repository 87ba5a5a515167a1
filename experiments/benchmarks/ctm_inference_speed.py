"""Benchmark: CTM posterior inference for new documents, batched against one document at a time.

    python -m experiments.benchmarks.ctm_inference_speed [--topics 100] [--vocab 5000] [--docs 1000]
        [--single-docs 100] [--steps 300] [--lr 0.05] [--samples 4] [--batch-size 500] [--tol 1e-4]
        [--threads 1] [--seed 0] [--quick] [--json out.json]

The globals of a known CTM (``--topics`` topics over ``--vocab`` word types, Dirichlet(0.05) topics,
a covariance with strong correlations) are drawn, ``--docs`` documents of 80-150 words sampled from
it, and on ``--threads`` threads the local posteriors ``q(z_d) = N(m_d, diag v_d)`` fitted with the
globals frozen (:func:`critics.topics.ctm.infer_local`) in two ways, with the same optimiser (Adam),
steps, learning rate, samples and tolerance:

* **batched**: ``--batch-size`` documents per optimisation (the critic's way), all ``--docs``;
* **single**: one document per optimisation, the first ``--single-docs`` documents (timing every
  document one at a time takes minutes; docs/s is per document either way).

It prints documents per second of both and the ratio batched/single (target: >= 10x), and checks
that the two give the same ``m, v`` on the documents both fitted.  The standard-normal draws of a
step are shared across a batch and every batch starts from the same seed, and each document stops
on its own, so the two compute the same thing and differ only by float32 rounding (the order of
sums in a batched product) carried through the steps: the tolerance is ``max |m_b - m_s| <= 1e-3``
and ``max |v_b - v_s| / v_s <= 1e-2`` (posterior standard deviations are ~0.1-1, so this is far
below the posterior's own spread).  A document whose windowed-ELBO test falls the other way in
the two runs (rounding at the tolerance's edge) stops at another step; such documents are counted
and left out of the comparison.  ``--quick`` is ``--topics 20 --vocab 1000 --docs 200
--single-docs 20 --steps 100``.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from critic.io import atomic_write_text

__all__ = ["main", "synthetic_globals"]

M_TOL = 1e-3
V_REL_TOL = 1e-2


def synthetic_globals(num_topics: int, vocab: int, seed: int):
    """``(mu, Sigma, phi)`` of a known CTM: a 3-factor covariance with strong correlations (sd 1.5),
    Dirichlet(0.05) topics; float64 tensors."""
    import torch

    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 1.0, (num_topics, 3))
    r = w @ w.T + 0.3 * np.eye(num_topics)
    d = np.sqrt(np.diag(r))
    sigma = r / np.outer(d, d) * 1.5 ** 2
    mu = rng.normal(0.0, 0.5, num_topics)
    phi = rng.dirichlet(np.full(vocab, 0.05), size=num_topics)
    return torch.tensor(mu), torch.tensor(sigma), torch.tensor(phi)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--docs", type=int, default=1000, help="documents inferred batched")
    ap.add_argument("--single-docs", type=int, default=100, help="of these, documents inferred one at a time")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--samples", type=int, default=4, help="Monte-Carlo draws per step")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--tol", type=float, default=1e-4, help="per-document windowed-ELBO tolerance (0: fixed steps)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="--topics 20 --vocab 1000 --docs 200 --single-docs 20 "
                    "--steps 100")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.topics, args.vocab, args.docs, args.single_docs, args.steps = 20, 1000, 200, 20, 100
    args.single_docs = min(args.single_docs, args.docs)

    import torch

    from critics.topics.ctm import CTMGlobals, infer_local, sample_documents

    torch.set_num_threads(args.threads)
    mu, sigma, phi = synthetic_globals(args.topics, args.vocab, args.seed)
    bow, _ = sample_documents(mu, sigma, phi, args.docs, seed=args.seed + 1)
    g = CTMGlobals(mu.float(), torch.linalg.cholesky(sigma).float(), phi.log().float())
    settings = dict(steps=args.steps, lr=args.lr, num_samples=args.samples, tol=args.tol, seed=args.seed)

    infer_local(g, bow.subset(np.arange(min(2, args.docs))), **{**settings, "steps": 2})  # warm-up, untimed
    start = time.perf_counter()
    batched = infer_local(g, bow, batch_size=args.batch_size, **settings)
    batched_s = time.perf_counter() - start
    few = bow.subset(np.arange(args.single_docs))
    start = time.perf_counter()
    single = infer_local(g, few, batch_size=1, **settings)
    single_s = time.perf_counter() - start

    n = args.single_docs
    same_stop = (batched.steps[:n] == single.steps).numpy()
    m_b, m_s = batched.m[:n].double().numpy(), single.m.double().numpy()
    v_b, v_s = batched.v[:n].double().numpy(), single.v.double().numpy()
    m_diff = float(np.abs(m_b - m_s)[same_stop].max(initial=0.0))
    v_diff = float((np.abs(v_b - v_s) / v_s)[same_stop].max(initial=0.0))
    batched_rate, single_rate = args.docs / batched_s, n / single_s
    result = {"topics": args.topics, "vocab": args.vocab, "docs": args.docs, "single_docs": n,
              "tokens": int(bow.num_tokens.sum()), "steps": args.steps, "lr": args.lr, "samples": args.samples,
              "batch_size": args.batch_size, "tol": args.tol, "threads": args.threads,
              "batched": {"seconds": batched_s, "docs_per_s": batched_rate,
                          "mean_steps": float(batched.steps.double().mean()),
                          "converged": float(batched.converged.double().mean())},
              "single": {"seconds": single_s, "docs_per_s": single_rate,
                         "mean_steps": float(single.steps.double().mean()),
                         "converged": float(single.converged.double().mean())},
              "ratio": batched_rate / single_rate if single_rate > 0 else math.inf,
              "compared": int(same_stop.sum()), "stopped_differently": int((~same_stop).sum()),
              "max_abs_m_diff": m_diff, "max_rel_v_diff": v_diff,
              "tolerance": {"m_abs": M_TOL, "v_rel": V_REL_TOL},
              "agree": bool(m_diff <= M_TOL and v_diff <= V_REL_TOL)}
    print(f"CTM local inference, K={args.topics}, V={args.vocab}, {args.steps} steps max, lr {args.lr}, "
          f"{args.samples} draws/step, tol {args.tol}, {args.threads} thread(s)")
    print(f"  batched ({args.batch_size}/batch) {args.docs:6d} docs {batched_s:8.2f} s  {batched_rate:9.1f} docs/s  "
          f"(mean {result['batched']['mean_steps']:.0f} steps)")
    print(f"  single  (1/batch)   {n:6d} docs {single_s:8.2f} s  {single_rate:9.1f} docs/s  "
          f"(mean {result['single']['mean_steps']:.0f} steps)")
    print(f"  ratio batched/single: {result['ratio']:.1f}x (target >= 10x)")
    print(f"  same m, v on {result['compared']} documents ({result['stopped_differently']} stopped at another step): "
          f"max |dm| {m_diff:.2e} (tol {M_TOL:g}), max |dv|/v {v_diff:.2e} (tol {V_REL_TOL:g}): "
          f"{'agree' if result['agree'] else 'DISAGREE'}")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


if __name__ == "__main__":
    main()
