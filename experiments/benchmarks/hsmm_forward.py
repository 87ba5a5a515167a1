"""Benchmark: semi-Markov log-partition (and marginals), ours vs the matrix-product floor and torch-struct.

    python -m experiments.benchmarks.hsmm_forward [--sizes 16,64,256,800] [--dtypes float64,float32] [--mem-gb 10]
    python -m experiments.benchmarks.hsmm_forward --floor-only   # ours/floor only (quick)
    python -m experiments.benchmarks.hsmm_forward --floor-only --semirings 16,64   # + entropy, k-best, samples

For ``B = 8, T = 400, K = 12`` (segment lengths 1..12) and each ``C``:

* times :func:`critics.hsmm.semimarkov.log_partition` forward (no autograd)
  and forward + backward (the backward *is* the marginals), with peak memory,
  in each dtype, and in the same process the *matrix-product floor*: ``T``
  products ``(B x C)(C x C)`` in the same dtype and threads, the work no linear
  forward pass can skip.  ``ours/floor`` is the ratio of the two.
* probes ``torch_struct.SemiMarkovCRF(edge, lengths).partition`` (torch-struct
  0.5's parallel-prefix scan, shipped for GPUs) on the same equal-length batch
  in float64, halving ``T`` (then ``B``) until its forward pass runs inside the
  memory limit, times ours at that size too and prints the speed ratio of the
  forward pass (and of forward + backward where torch-struct's fits) and the
  largest difference in ``log Z``.
* does the same for a *linear* scan over torch-struct's edge tensor
  (:func:`_edge_scan`, a per-position ``logsumexp`` over ``(k, c_prev)``; the
  fair CPU baseline, since torch-struct 0.5 comments its linear scan out).

``--floor-only`` skips the torch-struct and edge-scan probes.  ``--semirings 16,64``
times, at those ``C``, the programmes over torch-struct's semirings
(:func:`~critics.hsmm.semimarkov.entropy`, :func:`~critics.hsmm.semimarkov.kbest`
with ``k = 5``, :func:`~critics.hsmm.semimarkov.sample` of 16 draws) against our
``log Z``.  The last lines repeat ``ours/floor`` per ``C`` and dtype.

Every measurement runs in its own subprocess with ``RLIMIT_AS`` set to
``--mem-gb`` (and a time limit), so a size that wants terabytes fails with an
allocation error instead of taking the machine down.  Peak memory is the
subprocess's peak resident set minus its resident set before the measured
call (CPU), or ``torch.cuda.max_memory_allocated`` (CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

__all__ = ["main"]

RATIO_NOTES = (
    "ours/floor: our log Z time over the time of T (B x C)(C x C) matrix products alone "
    "(same dtype, same threads, same process); 1.0 would be a forward pass costing nothing but its products.",
    "torch-struct ratio: SemiMarkovCRF(edge).partition time over ours at the same (largest feasible) size; "
    "> 1 means ours is faster.",
    "edge-scan ratio: a linear logsumexp scan over torch-struct's edge tensor (B, T, K + 1, C, C) over ours "
    "at the same size; > 1 means the factorised recursion is faster.",
)


SEMIRING_PROGRAMMES = {  # the recursion over torch-struct's semirings; each returns a (B,) tensor
    "entropy": lambda sm, *f: sm.entropy(*f),
    "kbest5": lambda sm, *f: sm.kbest(5, *f)[0][-1],
    "sample16": lambda sm, *f: sm.sample(16, *f).sum((0, 2, 3, 4)),
}


def _edge_scan(edge):
    """``log Z`` by a linear scan over torch-struct's edge tensor ``(B, N - 1, K + 1, C, C)``.

    ``alpha_0 = 0``; ``alpha_m(c2) = logsumexp_{k = 1..K, c1} alpha_{m-k}(c1) + edge[m - k, k, c2, c1]``;
    ``log Z = logsumexp_c alpha_{N-1}(c)`` (all sequences of full length).
    """
    import torch

    B, N1, K1, C, _ = edge.shape
    alphas = [edge.new_zeros(B, C)]
    for m in range(1, N1 + 1):
        ks = range(1, min(K1 - 1, m) + 1)
        terms = torch.stack([edge[:, m - k, k] + alphas[m - k][:, None, :] for k in ks], 1)  # (B, k, c2, c1)
        alphas.append(terms.logsumexp((1, 3)))
    return alphas[-1].logsumexp(-1)


def _worker(impl: str, B: int, T: int, K: int, C: int, device: str, threads: int, repeats: int, dtype: str) -> dict:
    import warnings

    import torch

    torch.set_num_threads(threads)
    from critics.hsmm import semimarkov as sm

    dev = torch.device(device)
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    init = torch.randn(C, generator=g, dtype=torch.float64).log_softmax(-1).to(dev, dt)
    trans = torch.randn(C, C, generator=g, dtype=torch.float64).log_softmax(-1).to(dev, dt)
    dur = torch.randn(C, K, generator=g, dtype=torch.float64).log_softmax(-1).to(dev, dt)
    emit = (torch.randn(B, T, K, C, generator=g, dtype=torch.float64) - 3).to(dev, dt)
    if impl in ("torch_struct", "edge_scan"):
        import torch_struct

        edge = sm.edge_potentials(init, trans, dur, emit)  # (B, T, K + 1, C, C)
        del emit
        lengths = torch.full((B,), T + 1, device=dev)

        def run(backward: bool):
            if impl == "edge_scan":
                if backward:
                    raise RuntimeError("not measured")
                with torch.no_grad():
                    return _edge_scan(edge)
            e = edge.detach().clone()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z = torch_struct.SemiMarkovCRF(e, lengths=lengths).partition  # sets e.requires_grad_
            if backward:
                torch.autograd.grad(z.sum(), e)
            return z
    elif impl in SEMIRING_PROGRAMMES:
        def run(backward: bool):
            if backward:
                raise RuntimeError("not measured")
            with torch.no_grad():
                return SEMIRING_PROGRAMMES[impl](sm, init, trans, dur, emit)
    else:
        def run(backward: bool):
            e = emit.detach().requires_grad_(backward)
            with torch.set_grad_enabled(backward):
                z = sm.log_partition(init, trans, dur, e, dtype=dt)
            if backward:
                torch.autograd.grad(z.sum(), e)
            return z

    def rss_kb() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        return best

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = rss_kb()
    out = {}
    z = run(False).detach()
    out["forward_s"] = timed(lambda: run(False))
    try:  # the backward alone may not fit
        out["forward_backward_s"] = timed(lambda: run(True).detach())  # free the graph before the next repeat
    except (RuntimeError, MemoryError) as exc:
        out["forward_backward_s"], out["forward_backward_why"] = None, str(exc).splitlines()[0][:160]
    out["log_z"] = [float(v) for v in z.double().cpu()]
    if dev.type == "cuda":
        out["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_mem_gb"] = max(peak - base, 0) / 2**20
    if impl == "ours":  # the matrix-product floor, same dtype, threads and process
        a = torch.randn(B, C, generator=g, dtype=torch.float64).to(dev, dt)
        m = trans.exp()
        with torch.no_grad():
            out["floor_s"] = timed(lambda: [a @ m for _ in range(T)])
        out["ratio_floor"] = out["forward_s"] / out["floor_s"]
    return out


def _measure(impl, B, T, K, C, args, dtype="float64") -> dict:
    cmd = [sys.executable, "-m", "experiments.benchmarks.hsmm_forward", "--worker", impl,
           str(B), str(T), str(K), str(C), "--device", args.device, "--threads", str(args.threads),
           "--repeats", str(args.repeats), "--dtypes", dtype]
    limit = int(args.mem_gb * 2**30)

    def limits():
        if args.device == "cpu":  # CUDA drivers reserve large virtual ranges; limit only on CPU
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, preexec_fn=limits)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"over {args.timeout}s"}
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["killed"])[-1]
        return {"ok": False, "why": last[:160]}
    return {"ok": True, **json.loads(p.stdout.strip().splitlines()[-1])}


def _probe(impl, B, T, K, C, args, row) -> tuple[dict | None, int, int]:
    """Largest ``(B, T)`` at which ``impl`` runs: halve ``T`` at the full batch, then at ``B = 1``."""
    for b in dict.fromkeys((B, 1)):
        probes = [T >> i for i in range(T.bit_length()) if T >> i >= args.min_T]
        if probes[-1] != args.min_T:
            probes.append(args.min_T)  # halving may step over the smallest size
        for t in probes:
            res = _measure(impl, b, t, K, C, args)
            if res["ok"]:
                return res, b, t
            row.setdefault(f"{impl}_failures", []).append({"B": b, "T": t, "why": res["why"]})
    return None, B, T


def _compare(impl, label, B, T, K, C, args, row, ours) -> str:
    """Probe ``impl``, time ours at its size, record and describe the ratio."""
    res, b, t = _probe(impl, B, T, K, C, args, row)
    if res is None:
        return f"C={C:<4} {label}: does not run at T >= {args.min_T} within {args.mem_gb:g} GiB"
    same = ours if (b, t) == (B, T) else _measure("ours", b, t, K, C, args)
    diff = max(abs(x - y) for x, y in zip(same["log_z"], res["log_z"]))
    fb = res.get("forward_backward_s")
    row[impl] = {"B": b, "T": t, **res, "ours_same_size": same, "ratio": res["forward_s"] / same["forward_s"],
                 "ratio_forward_backward": None if fb is None else fb / same["forward_backward_s"],
                 "max_abs_log_z_diff": diff}
    text = (f"C={C:<4} {label} at B={b} T={t}: {res['forward_s']:.4f} s vs ours {same['forward_s']:.4f} s, "
            f"ratio {row[impl]['ratio']:.1f}x")
    if impl == "torch_struct":
        text += (", fwd+bwd: out of memory" if fb is None else
                 f", fwd+bwd {fb:.3f} s vs ours {same['forward_backward_s']:.4f} s, "
                 f"ratio {row[impl]['ratio_forward_backward']:.1f}x")
    return text + f"; max |dlogZ| {diff:.1e}"


def _print_ratios(rows: list[dict], dtypes: list[str]) -> None:
    """One line per ``C``: ``ours/floor`` in each dtype (the issue's targets: <= 2x at C = 800, <= 8x at C = 64)."""
    print("ours/floor: " + ", ".join(dtypes))
    for row in rows:
        ratios = [f"{o['ratio_floor']:.2f}x" if (o := row["ours"].get(dt, {})).get("ok") else "-" for dt in dtypes]
        print(f"  C={row['C']:<4} " + "  ".join(ratios))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=5, metavar=("IMPL", "B", "T", "K", "C"))
    ap.add_argument("--sizes", default="16,64,256,800", help="comma-separated C values")
    ap.add_argument("--dtypes", default="float64,float32", help="dtypes for our forward pass and its floor")
    ap.add_argument("-B", type=int, default=8)
    ap.add_argument("-T", type=int, default=400)
    ap.add_argument("-K", type=int, default=12, help="longest segment")
    ap.add_argument("--mem-gb", type=float, default=10.0, help="address-space limit per measurement (CPU)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-T", type=int, default=4, help="smallest T probed for torch-struct and the edge scan")
    ap.add_argument("--floor-only", action="store_true", help="only ours and the floor: skip torch-struct, edge scan")
    ap.add_argument("--semirings", default="", help="C values at which to time entropy, kbest(5) and "
                    "sample(16) over torch-struct's semirings (float64), e.g. 16,64")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.worker:
        impl, B, T, K, C = args.worker
        res = _worker(impl, int(B), int(T), int(K), int(C), args.device, args.threads, args.repeats, args.dtypes)
        print(json.dumps(res))
        return res
    rows = []
    B, T, K = args.B, args.T, args.K
    dtypes = args.dtypes.split(",")
    print(f"semi-Markov log Z (fwd) and + marginals (fwd+bwd), B={B}, T={T}, K={K}, device={args.device}, "
          f"threads={args.threads}, memory limit {args.mem_gb:g} GiB per run, best of {args.repeats}")
    for note in RATIO_NOTES:
        print("  " + note)
    for C in [int(c) for c in args.sizes.split(",")]:
        row = {"C": C, "B": B, "T": T, "K": K, "ours": {}}
        for dt in dtypes:
            o = row["ours"][dt] = _measure("ours", B, T, K, C, args, dt)
            if not o["ok"]:
                print(f"C={C:<4} {dt}: ours failed: {o['why']}", flush=True)
                continue
            fb = o["forward_backward_s"]
            print(f"C={C:<4} {dt}: ours log Z {o['forward_s']:.4f} s (+ marginals "
                  f"{'-' if fb is None else f'{fb:.3f}'} s, peak {o['peak_mem_gb']:.2f} GiB); "
                  f"floor {o['floor_s']:.4f} s; ours/floor {o['ratio_floor']:.2f}x", flush=True)
        ours = row["ours"].get("float64", {"ok": False})
        if ours["ok"] and not args.floor_only:
            print(_compare("torch_struct", "torch-struct partition (float64)", B, T, K, C, args, row, ours), flush=True)
            print(_compare("edge_scan", "linear edge scan (float64)", B, T, K, C, args, row, ours), flush=True)
        if ours["ok"] and str(C) in args.semirings.split(","):
            for impl in SEMIRING_PROGRAMMES:
                res = row[impl] = _measure(impl, B, T, K, C, args)
                print(f"C={C:<4} {impl} (torch-struct semiring, float64): " + (
                    f"{res['forward_s']:.3f} s, {res['forward_s'] / ours['forward_s']:.1f}x ours log Z, "
                    f"peak {res['peak_mem_gb']:.2f} GiB" if res["ok"] else f"failed: {res['why']}"), flush=True)
        rows.append(row)
    _print_ratios(rows, dtypes)
    result = {"B": B, "T": T, "K": K, "device": args.device, "threads": args.threads, "mem_gb": args.mem_gb, "rows": rows}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
