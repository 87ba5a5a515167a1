"""Benchmark: CTM posterior inference for new documents, Adam (the old default) against Newton with a stopping rule.

    python -m experiments.benchmarks.ctm_inference_speed [--topics 100] [--vocab 5000] [--docs 1000]
        [--single-docs 100] [--steps 300] [--lr 0.05] [--samples 4] [--tol 1e-4] [--draws 24]
        [--newton-tol 1e-5] [--iterations 100] [--batch-size 500] [--reference-docs 300]
        [--reference-draws 1024] [--reference-tol 1e-7] [--grid] [--threads 1] [--seed 0] [--quick]
        [--json out.json]

The globals of a known CTM (``--topics`` topics over ``--vocab`` word types, Dirichlet(0.05) topics,
a covariance with strong correlations) are drawn, ``--docs`` documents of 80-150 words sampled from
it, and on ``--threads`` threads the local posteriors ``q(z_d) = N(m_d, diag v_d)`` fitted with the
globals frozen (:func:`critics.topics.ctm.infer_local`), ``--batch-size`` documents per batch:

* **adam** (``method="adam"``, the critic's default until Newton met the 3x target): Adam with ``--lr``,
  ``--samples`` fresh draws per step, at most ``--steps`` steps, the windowed-ELBO test with ``--tol``;
  run twice, with seeds ``--seed`` and ``--seed + 1``: the two runs differ only by Monte Carlo noise;
* **newton** (``method="newton"``, the critic's default): Newton steps on the ELBO with ``--draws`` fixed
  draws, stopping a document when the next step's predicted gain is at most ``--newton-tol`` of its bound,
  at most ``--iterations`` iterations.

Both are timed in CPU time (``time.process_time``: the shared machine's load moves wall time) and wall
time; the ratio newton/adam of documents per CPU second is the figure against the 3x target.  It prints
the fraction of documents that converge and the steps (iterations) taken, and the agreement of each
document's Latent NLL ``T(x) = H(q, N(mu, Sigma))`` and posterior mean ``m`` between newton and adam and
between the two adam runs (max and median absolute difference, Pearson correlation over documents, over
documents x topics for ``m``): how far the critic's Latent NLLs move with the change of default.

**The agreement bar** (``--reference-docs N``, default 300; 0: skipped): the first ``N`` documents are fitted
once more, long: Newton on ``--reference-draws`` (1,024) fixed draws from another seed (``--seed + 1000``), to
``--reference-tol`` (1e-7), up to 300 iterations: the maximiser of a bound whose Monte Carlo error is small
(two such runs, 1,024 and 2,048 draws, differ by a median 0.02 nats).  Against it, per method, the median and
max ``|T - T_ref|`` and the median ``|m - m_ref|``; Newton meets the bar when its median Latent NLL error is at
most adam's.

``--grid``: Newton again over a grid of settings (draws 16/24/32, active topics 16/24/48 -- the topics that
keep the full curvature, ``critics.topics.ctm.infer._ACTIVE_TOPICS`` -- tolerance 1e-5/3e-5, and no first stage or one on 8 draws,
``critics.topics.ctm.infer._COARSE_DRAWS``; the module's constants are set for each run and restored), each timed and compared
with the reference.

It also fits the first ``--single-docs`` documents one at a time by Newton and checks they get the batched
``m, v`` (``max |dm| <= 1e-3``, ``max |dv|/v <= 1e-2``; documents that stopped at another iteration, by
rounding at the tolerance's edge, are counted and left out).  ``--quick`` is ``--topics 20 --vocab 1000
--docs 200 --single-docs 20 --steps 100 --reference-docs 50``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time

import numpy as np

from critic.io import atomic_write_text

__all__ = ["agreement", "main", "synthetic_globals", "GRID"]

M_TOL = 1e-3
V_REL_TOL = 1e-2
GRID = {"draws": (16, 24, 32), "active_topics": (16, 24, 48), "tol": (1e-5, 3e-5), "first_stage_draws": (0, 8)}
"""The settings ``--grid`` crosses."""


def synthetic_globals(num_topics: int, vocab: int, seed: int):
    """``(mu, Sigma, phi)`` of a known CTM: a 3-factor covariance with strong correlations (sd 1.5),
    Dirichlet(0.05) topics; float64 tensors (:func:`critics.topics.ctm.known_ctm`)."""
    from critics.topics.ctm import known_ctm

    return known_ctm(num_topics, vocab, seed, factors="random")


def agreement(t_a, t_b, m_a, m_b) -> dict:
    """Max and median ``|T_a - T_b|`` and ``|m_a - m_b|``, their Pearson correlations (``T`` over documents,
    ``m`` over documents x topics), and the mean shift ``mean(T_a - T_b)``."""
    dt, dm = np.abs(t_a - t_b), np.abs(m_a - m_b)
    return {"latent_nll": {"max_abs": float(dt.max()), "median_abs": float(np.median(dt)),
                           "corr": float(np.corrcoef(t_a, t_b)[0, 1]), "mean_shift": float(np.mean(t_a - t_b))},
            "m": {"max_abs": float(dm.max()), "median_abs": float(np.median(dm)),
                  "corr": float(np.corrcoef(m_a.ravel(), m_b.ravel())[0, 1])}}


def _to_reference(t, m, ref) -> dict:
    """Median and max ``|T - T_ref|``, its mean ``T - T_ref`` and the median ``|m - m_ref|`` over the
    reference's documents."""
    n = len(ref["t"])
    dt, dm = np.abs(t[:n] - ref["t"]), np.abs(m[:n] - ref["m"])
    return {"latent_nll_median_abs": float(np.median(dt)), "latent_nll_max_abs": float(dt.max()),
            "latent_nll_mean_shift": float(np.mean(t[:n] - ref["t"])), "m_median_abs": float(np.median(dm))}


def _run(infer, g, bow, **settings) -> tuple[object, float, float]:
    """``(result, wall seconds, CPU seconds)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    local = infer(g, bow, **settings)
    return local, time.perf_counter() - wall, time.process_time() - cpu


def _summary(local, wall: float, cpu: float, docs: int) -> dict:
    steps = local.steps.double().numpy()
    return {"seconds": wall, "cpu_seconds": cpu, "docs_per_s": docs / wall, "docs_per_cpu_s": docs / cpu,
            "converged": float(local.converged.double().mean()), "mean_steps": float(steps.mean()),
            "median_steps": float(np.median(steps)), "max_steps": int(steps.max())}


@contextlib.contextmanager
def _newton_constants(active_topics: int, first_stage_draws: int):
    """Newton's module constants ``_ACTIVE_TOPICS``, ``_COARSE_DRAWS`` set for a grid row, then restored."""
    from critics.topics.ctm import infer as ctm

    saved = ctm._ACTIVE_TOPICS, ctm._COARSE_DRAWS
    ctm._ACTIVE_TOPICS, ctm._COARSE_DRAWS = int(active_topics), int(first_stage_draws)
    try:
        yield
    finally:
        ctm._ACTIVE_TOPICS, ctm._COARSE_DRAWS = saved


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--docs", type=int, default=1000, help="documents inferred batched")
    ap.add_argument("--single-docs", type=int, default=100, help="of these, documents inferred one at a time")
    ap.add_argument("--steps", type=int, default=300, help="adam: most steps")
    ap.add_argument("--lr", type=float, default=0.05, help="adam: learning rate")
    ap.add_argument("--samples", type=int, default=4, help="adam: Monte-Carlo draws per step")
    ap.add_argument("--tol", type=float, default=1e-4, help="adam: windowed-ELBO tolerance")
    ap.add_argument("--draws", type=int, default=24, help="newton: fixed draws of the bound")
    ap.add_argument("--newton-tol", type=float, default=1e-5, help="newton: predicted gain relative to the bound")
    ap.add_argument("--iterations", type=int, default=100, help="newton: most iterations")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--reference-docs", type=int, default=300, help="documents fitted long, the agreement bar "
                    "(0: none)")
    ap.add_argument("--reference-draws", type=int, default=1024, help="reference: fixed draws")
    ap.add_argument("--reference-tol", type=float, default=1e-7, help="reference: Newton's tolerance")
    ap.add_argument("--grid", action="store_true", help="also time newton over a grid of settings")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="--topics 20 --vocab 1000 --docs 200 --single-docs 20 "
                    "--steps 100 --reference-docs 50")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.topics, args.vocab, args.docs, args.single_docs, args.steps = 20, 1000, 200, 20, 100
        args.reference_docs = min(args.reference_docs, 50)
    args.single_docs = min(args.single_docs, args.docs)
    args.reference_docs = min(args.reference_docs, args.docs)

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
    today, *today_t = _run(infer_local, g, bow, seed=args.seed, **today_settings)
    other, *other_t = _run(infer_local, g, bow, seed=args.seed + 1, **today_settings)
    newton, *newton_t = _run(infer_local, g, bow, batch_size=args.batch_size, **newton_settings)
    few = bow.subset(np.arange(args.single_docs))
    single, *single_t = _run(infer_local, g, few, batch_size=1, **newton_settings)

    terms = PriorTerms(g.mu.double(), g.scale_tril.double())
    nll = (lambda local: terms.cross_entropy(local.m.double(), local.v.double()).numpy())
    means = (lambda local: local.m.double().numpy())
    n = args.single_docs
    same_stop = (newton.steps[:n] == single.steps).numpy()
    m_b, m_s = newton.m[:n].double().numpy(), single.m.double().numpy()
    v_b, v_s = newton.v[:n].double().numpy(), single.v.double().numpy()
    m_diff = float(np.abs(m_b - m_s)[same_stop].max(initial=0.0))
    v_diff = float((np.abs(v_b - v_s) / v_s)[same_stop].max(initial=0.0))
    today_sum = _summary(today, *today_t, args.docs)
    result = {"topics": args.topics, "vocab": args.vocab, "docs": args.docs, "tokens": int(bow.num_tokens.sum()),
              "batch_size": args.batch_size, "threads": args.threads,
              "today": {"steps": args.steps, "lr": args.lr, "samples": args.samples, "tol": args.tol, **today_sum},
              "other_seed": _summary(other, *other_t, args.docs),
              "newton": {"iterations": args.iterations, "draws": args.draws, "tol": args.newton_tol,
                         **_summary(newton, *newton_t, args.docs)},
              "newton_vs_today": agreement(nll(newton), nll(today), means(newton), means(today)),
              "today_vs_other_seed": agreement(nll(other), nll(today), means(other), means(today)),
              "single": {"docs": n, **_summary(single, *single_t, n), "compared": int(same_stop.sum()),
                         "stopped_differently": int((~same_stop).sum()), "max_abs_m_diff": m_diff,
                         "max_rel_v_diff": v_diff, "tolerance": {"m_abs": M_TOL, "v_rel": V_REL_TOL},
                         "agree": bool(m_diff <= M_TOL and v_diff <= V_REL_TOL)}}
    result["ratio"] = result["newton"]["docs_per_cpu_s"] / today_sum["docs_per_cpu_s"]
    result["ratio_wall"] = result["newton"]["docs_per_s"] / today_sum["docs_per_s"]

    ref = None
    if args.reference_docs > 0:
        long, *long_t = _run(infer_local, g, bow.subset(np.arange(args.reference_docs)), method="newton",
                             steps=300, num_draws=args.reference_draws, tol=args.reference_tol,
                             seed=args.seed + 1000, batch_size=50)
        ref = {"t": nll(long), "m": means(long)}
        result["reference"] = {
            "docs": args.reference_docs, "draws": args.reference_draws, "tol": args.reference_tol,
            "seed": args.seed + 1000, **_summary(long, *long_t, args.reference_docs),
            "today": _to_reference(nll(today), means(today), ref),
            "other_seed": _to_reference(nll(other), means(other), ref),
            "newton": _to_reference(nll(newton), means(newton), ref)}
        bar = result["reference"]["today"]["latent_nll_median_abs"]
        result["reference"]["newton_meets_bar"] = bool(
            result["reference"]["newton"]["latent_nll_median_abs"] <= bar)

    if args.grid:
        rows = []
        for draws, active, tol, first in itertools.product(*GRID.values()):
            with _newton_constants(active, first):
                local, *t = _run(infer_local, g, bow, **{**newton_settings, "num_draws": draws, "tol": tol,
                                                         "batch_size": args.batch_size})
            row = {"draws": draws, "active_topics": active, "tol": tol, "first_stage_draws": first,
                   **_summary(local, *t, args.docs)}
            row["ratio"] = row["docs_per_cpu_s"] / today_sum["docs_per_cpu_s"]
            if ref is not None:
                row.update(_to_reference(nll(local), means(local), ref))
            rows.append(row)
        result["grid"] = rows

    _print(result)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def _print(r: dict) -> None:
    t, nw, s = r["today"], r["newton"], r["single"]
    print(f"CTM local inference, K={r['topics']}, V={r['vocab']}, {r['docs']} documents ({r['tokens']} tokens), "
          f"{r['batch_size']}/batch, {r['threads']} thread(s); documents/s in CPU time (wall time)")
    print(f"  adam   ({t['samples']} draws/step, lr {t['lr']}, <= {t['steps']} steps, tol {t['tol']:g}): "
          f"{t['docs_per_cpu_s']:7.1f} ({t['docs_per_s']:.1f}) docs/s, {100 * t['converged']:5.1f}% converged, "
          f"steps mean {t['mean_steps']:.0f} median {t['median_steps']:.0f} max {t['max_steps']}")
    print(f"  newton ({nw['draws']} fixed draws, <= {nw['iterations']} iterations, tol {nw['tol']:g}): "
          f"{nw['docs_per_cpu_s']:7.1f} ({nw['docs_per_s']:.1f}) docs/s, {100 * nw['converged']:5.1f}% converged, "
          f"iterations mean {nw['mean_steps']:.1f} median {nw['median_steps']:.0f} max {nw['max_steps']}")
    print(f"  ratio newton/adam: {r['ratio']:.2f}x CPU time ({r['ratio_wall']:.2f}x wall time; target >= 3x)")
    for name, key in (("newton vs adam", "newton_vs_today"), ("adam vs adam, other seed", "today_vs_other_seed")):
        a = r[key]
        print(f"  {name:25s} Latent NLL |dT| max {a['latent_nll']['max_abs']:.3f} median "
              f"{a['latent_nll']['median_abs']:.3f} corr {a['latent_nll']['corr']:.4f} mean shift "
              f"{a['latent_nll']['mean_shift']:+.3f};  m |dm| max "
              f"{a['m']['max_abs']:.3f} median {a['m']['median_abs']:.4f} corr {a['m']['corr']:.5f}")
    if "reference" in r:
        ref = r["reference"]
        print(f"  against a long reference ({ref['docs']} documents, newton on {ref['draws']} draws, tol "
              f"{ref['tol']:g}, {100 * ref['converged']:.1f}% converged, {ref['cpu_seconds']:.1f} CPU s):")
        for name in ("today", "other_seed", "newton"):
            a = ref[name]
            label = {"today": "adam", "other_seed": "adam, other seed", "newton": "newton"}[name]
            print(f"    {label:18s} |T - T_ref| median {a['latent_nll_median_abs']:.3f} max "
                  f"{a['latent_nll_max_abs']:.3f} mean shift {a['latent_nll_mean_shift']:+.3f};  |m - m_ref| "
                  f"median {a['m_median_abs']:.4f}")
        print(f"    newton's median Latent NLL error {'<=' if ref['newton_meets_bar'] else '>'} adam's: "
              f"{'meets' if ref['newton_meets_bar'] else 'MISSES'} the bar")
    print(f"  newton one document at a time: {s['docs_per_cpu_s']:.1f} docs/s; same m, v on {s['compared']} of "
          f"{s['docs']} documents ({s['stopped_differently']} stopped at another iteration): max |dm| "
          f"{s['max_abs_m_diff']:.2e} (tol {M_TOL:g}), max |dv|/v {s['max_rel_v_diff']:.2e} (tol {V_REL_TOL:g}): "
          f"{'agree' if s['agree'] else 'DISAGREE'}")
    if "grid" in r:
        print("  grid (newton; docs/s in CPU time, ratio to adam; against the reference: Latent NLL median / max, "
              "m median):")
        print("    draws active   tol  first  docs/s  ratio  conv%  iters   T med   T max   m med")
        for row in r["grid"]:
            against = (f"  {row['latent_nll_median_abs']:6.3f}  {row['latent_nll_max_abs']:6.3f}  "
                       f"{row['m_median_abs']:6.4f}" if "m_median_abs" in row else "")
            first = row["first_stage_draws"] or "-"
            print(f"    {row['draws']:5d} {row['active_topics']:6d} {row['tol']:5.0e} {first:>6} "
                  f"{row['docs_per_cpu_s']:7.1f} {row['ratio']:5.2f}x {100 * row['converged']:6.1f} "
                  f"{row['mean_steps']:6.1f}{against}")


if __name__ == "__main__":
    main()
