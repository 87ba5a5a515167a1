"""Benchmark: CTM posterior inference for new documents, today's stochastic path against Newton with a stopping rule.

    python -m experiments.benchmarks.ctm_inference_speed [--topics 100] [--vocab 5000] [--docs 1000]
        [--single-docs 100] [--steps 300] [--lr 0.05] [--samples 4] [--tol 1e-4] [--draws 64]
        [--newton-tol 1e-5] [--iterations 100] [--batch-size 500] [--threads 1] [--seed 0] [--quick]
        [--json out.json]

The globals of a known CTM (``--topics`` topics over ``--vocab`` word types, Dirichlet(0.05) topics,
a covariance with strong correlations) are drawn, ``--docs`` documents of 80-150 words sampled from
it, and on ``--threads`` threads the local posteriors ``q(z_d) = N(m_d, diag v_d)`` fitted with the
globals frozen (:func:`critics.topics.ctm.infer_local`), ``--batch-size`` documents per batch:

* **today** (``method="adam"``): Adam with ``--lr``, ``--samples`` fresh draws per step, at most
  ``--steps`` steps, the windowed-ELBO test with ``--tol``; run twice, with seeds ``--seed`` and
  ``--seed + 1``: the two runs differ only by Monte Carlo noise, the yardstick for agreement;
* **newton** (``method="newton"``, opt-in): Newton steps on the ELBO with ``--draws`` fixed draws,
  stopping a document when a full step changes its bound by at most ``--newton-tol`` relative, at most
  ``--iterations`` iterations.

It prints documents per second of both and their ratio (target: >= 3x), the fraction of documents
that converge and the steps (iterations) taken, and the agreement of each document's Latent NLL
``T(x) = H(q, N(mu, Sigma))`` and posterior mean ``m`` with today's path (max and median absolute
difference, Pearson correlation over documents, over documents x topics for ``m``) beside the same
figures for today's path against itself with another seed.  It also fits the first
``--single-docs`` documents one at a time by Newton and checks they get the batched ``m, v``
(``max |dm| <= 1e-3``, ``max |dv|/v <= 1e-2``; documents that stopped at another iteration, by
rounding at the tolerance's edge, are counted and left out).  ``--quick`` is ``--topics 20 --vocab
1000 --docs 200 --single-docs 20 --steps 100``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from critic.io import atomic_write_text

__all__ = ["agreement", "main", "synthetic_globals"]

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


def agreement(t_a, t_b, m_a, m_b) -> dict:
    """Max and median ``|T_a - T_b|`` and ``|m_a - m_b|``, and their Pearson correlations (``T`` over
    documents, ``m`` over documents x topics)."""
    dt, dm = np.abs(t_a - t_b), np.abs(m_a - m_b)
    return {"latent_nll": {"max_abs": float(dt.max()), "median_abs": float(np.median(dt)),
                           "corr": float(np.corrcoef(t_a, t_b)[0, 1])},
            "m": {"max_abs": float(dm.max()), "median_abs": float(np.median(dm)),
                  "corr": float(np.corrcoef(m_a.ravel(), m_b.ravel())[0, 1])}}


def _run(infer, g, bow, **settings) -> tuple[object, float]:
    start = time.perf_counter()
    local = infer(g, bow, **settings)
    return local, time.perf_counter() - start


def _summary(local, seconds: float, docs: int) -> dict:
    steps = local.steps.double().numpy()
    return {"seconds": seconds, "docs_per_s": docs / seconds, "converged": float(local.converged.double().mean()),
            "mean_steps": float(steps.mean()), "median_steps": float(np.median(steps)), "max_steps": int(steps.max())}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--docs", type=int, default=1000, help="documents inferred batched")
    ap.add_argument("--single-docs", type=int, default=100, help="of these, documents inferred one at a time")
    ap.add_argument("--steps", type=int, default=300, help="today: most Adam steps")
    ap.add_argument("--lr", type=float, default=0.05, help="today: Adam's learning rate")
    ap.add_argument("--samples", type=int, default=4, help="today: Monte-Carlo draws per step")
    ap.add_argument("--tol", type=float, default=1e-4, help="today: windowed-ELBO tolerance")
    ap.add_argument("--draws", type=int, default=64, help="newton: fixed draws of the bound")
    ap.add_argument("--newton-tol", type=float, default=1e-5, help="newton: relative change of the bound")
    ap.add_argument("--iterations", type=int, default=100, help="newton: most iterations")
    ap.add_argument("--batch-size", type=int, default=500)
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

    from critics.topics.ctm import CTMGlobals, PriorTerms, infer_local, sample_documents

    torch.set_num_threads(args.threads)
    mu, sigma, phi = synthetic_globals(args.topics, args.vocab, args.seed)
    bow, _ = sample_documents(mu, sigma, phi, args.docs, seed=args.seed + 1)
    g = CTMGlobals(mu.float(), torch.linalg.cholesky(sigma).float(), phi.log().float())
    today_settings = dict(method="adam", steps=args.steps, lr=args.lr, num_samples=args.samples, tol=args.tol,
                          batch_size=args.batch_size)
    newton_settings = dict(method="newton", steps=args.iterations, num_draws=args.draws, tol=args.newton_tol,
                           seed=args.seed)

    warm = bow.subset(np.arange(min(2, args.docs)))                # untimed warm-up of both paths
    infer_local(g, warm, **{**today_settings, "steps": 2})
    infer_local(g, warm, **{**newton_settings, "steps": 2})
    today, today_s = _run(infer_local, g, bow, seed=args.seed, **today_settings)
    other, _ = _run(infer_local, g, bow, seed=args.seed + 1, **today_settings)
    newton, newton_s = _run(infer_local, g, bow, batch_size=args.batch_size, **newton_settings)
    few = bow.subset(np.arange(args.single_docs))
    single, single_s = _run(infer_local, g, few, batch_size=1, **newton_settings)

    terms = PriorTerms(g.mu.double(), g.scale_tril.double())
    nll = (lambda local: terms.cross_entropy(local.m.double(), local.v.double()).numpy())
    means = (lambda local: local.m.double().numpy())
    n = args.single_docs
    same_stop = (newton.steps[:n] == single.steps).numpy()
    m_b, m_s = newton.m[:n].double().numpy(), single.m.double().numpy()
    v_b, v_s = newton.v[:n].double().numpy(), single.v.double().numpy()
    m_diff = float(np.abs(m_b - m_s)[same_stop].max(initial=0.0))
    v_diff = float((np.abs(v_b - v_s) / v_s)[same_stop].max(initial=0.0))
    result = {"topics": args.topics, "vocab": args.vocab, "docs": args.docs, "tokens": int(bow.num_tokens.sum()),
              "batch_size": args.batch_size, "threads": args.threads,
              "today": {"steps": args.steps, "lr": args.lr, "samples": args.samples, "tol": args.tol,
                        **_summary(today, today_s, args.docs)},
              "newton": {"iterations": args.iterations, "draws": args.draws, "tol": args.newton_tol,
                         **_summary(newton, newton_s, args.docs)},
              "newton_vs_today": agreement(nll(newton), nll(today), means(newton), means(today)),
              "today_vs_other_seed": agreement(nll(other), nll(today), means(other), means(today)),
              "single": {"docs": n, **_summary(single, single_s, n), "compared": int(same_stop.sum()),
                         "stopped_differently": int((~same_stop).sum()), "max_abs_m_diff": m_diff,
                         "max_rel_v_diff": v_diff, "tolerance": {"m_abs": M_TOL, "v_rel": V_REL_TOL},
                         "agree": bool(m_diff <= M_TOL and v_diff <= V_REL_TOL)}}
    result["ratio"] = result["newton"]["docs_per_s"] / result["today"]["docs_per_s"]
    _print(result)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def _print(r: dict) -> None:
    t, nw, s = r["today"], r["newton"], r["single"]
    print(f"CTM local inference, K={r['topics']}, V={r['vocab']}, {r['docs']} documents ({r['tokens']} tokens), "
          f"{r['batch_size']}/batch, {r['threads']} thread(s)")
    print(f"  today  (Adam, {t['samples']} draws/step, lr {t['lr']}, <= {t['steps']} steps, tol {t['tol']:g}): "
          f"{t['docs_per_s']:7.1f} docs/s, {100 * t['converged']:5.1f}% converged, steps mean {t['mean_steps']:.0f} "
          f"median {t['median_steps']:.0f} max {t['max_steps']}")
    print(f"  newton ({nw['draws']} fixed draws, <= {nw['iterations']} iterations, tol {nw['tol']:g}): "
          f"{nw['docs_per_s']:7.1f} docs/s, {100 * nw['converged']:5.1f}% converged, iterations mean "
          f"{nw['mean_steps']:.1f} median {nw['median_steps']:.0f} max {nw['max_steps']}")
    print(f"  ratio newton/today: {r['ratio']:.1f}x (target >= 3x)")
    for name, key in (("newton vs today", "newton_vs_today"), ("today vs today, other seed", "today_vs_other_seed")):
        a = r[key]
        print(f"  {name:27s} Latent NLL |dT| max {a['latent_nll']['max_abs']:.3f} median "
              f"{a['latent_nll']['median_abs']:.3f} corr {a['latent_nll']['corr']:.4f};  m |dm| max "
              f"{a['m']['max_abs']:.3f} median {a['m']['median_abs']:.4f} corr {a['m']['corr']:.5f}")
    print(f"  newton one document at a time: {s['docs_per_s']:.1f} docs/s; same m, v on {s['compared']} of "
          f"{s['docs']} documents ({s['stopped_differently']} stopped at another iteration): max |dm| "
          f"{s['max_abs_m_diff']:.2e} (tol {M_TOL:g}), max |dv|/v {s['max_rel_v_diff']:.2e} (tol {V_REL_TOL:g}): "
          f"{'agree' if s['agree'] else 'DISAGREE'}")


if __name__ == "__main__":
    main()
