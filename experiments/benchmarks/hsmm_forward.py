"""Benchmark: semi-Markov log-partition (and marginals), ours vs torch-struct.

    python -m experiments.benchmarks.hsmm_forward [--sizes 16,64,256,800] [--mem-gb 10] [--device cpu]

For ``B = 8, T = 400, K = 12`` (segment lengths 1..12) and each ``C``, times
:func:`critics.hsmm.semimarkov.log_partition` forward and forward + backward
(the backward *is* the marginals) and records peak memory.  Then probes
``torch_struct.SemiMarkovCRF(edge, lengths).partition`` on the same equal-length
batch, halving ``T`` (then ``B``) until its forward pass runs inside the memory
limit, and times ours at that size too, printing the speed ratio of the
log-partition (forward), the ratio of log-partition + marginals where
torch-struct's backward fits too, and the largest difference in log Z.

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


def _worker(impl: str, B: int, T: int, K: int, C: int, device: str, threads: int, repeats: int) -> dict:
    import warnings

    import torch

    torch.set_num_threads(threads)
    from critics.hsmm import semimarkov as sm

    dev = torch.device(device)
    g = torch.Generator().manual_seed(0)
    init = torch.randn(C, generator=g).log_softmax(-1).to(dev)
    trans = torch.randn(C, C, generator=g).log_softmax(-1).to(dev)
    dur = torch.randn(C, K, generator=g).log_softmax(-1).to(dev)
    emit = (torch.randn(B, T, K, C, generator=g) - 3).to(dev)
    if impl == "torch_struct":
        import torch_struct

        edge = sm.edge_potentials(init, trans, dur, emit)  # (B, T, K + 1, C, C)
        del emit
        lengths = torch.full((B,), T + 1, device=dev)

        def run(backward: bool):
            e = edge.detach().clone()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z = torch_struct.SemiMarkovCRF(e, lengths=lengths).partition  # sets e.requires_grad_
            if backward:
                torch.autograd.grad(z.sum(), e)
            return z
    else:
        def run(backward: bool):
            e = emit.detach().requires_grad_(backward)
            z = sm.log_partition(init, trans, dur, e)
            if backward:
                torch.autograd.grad(z.sum(), e)
            return z

    def rss_kb() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = rss_kb()
    out = {}
    for name, backward in (("forward", False), ("forward_backward", True)):
        best = float("inf")
        try:
            for _ in range(repeats):
                t = time.perf_counter()
                result = run(backward).detach()  # free the graph before the next repeat
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            if not backward:
                z = result
        except (RuntimeError, MemoryError) as exc:  # the backward alone may not fit
            if not backward:
                raise
            out[f"{name}_why"] = str(exc).splitlines()[0][:160]
            best = None
        out[f"{name}_s"] = best
    out["log_z"] = [float(v) for v in z.detach().double().cpu()]
    if dev.type == "cuda":
        out["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_mem_gb"] = max(peak - base, 0) / 2**20
    return out


def _measure(impl, B, T, K, C, args) -> dict:
    cmd = [sys.executable, "-m", "experiments.benchmarks.hsmm_forward", "--worker", impl,
           str(B), str(T), str(K), str(C), "--device", args.device, "--threads", str(args.threads),
           "--repeats", str(args.repeats)]
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=5, metavar=("IMPL", "B", "T", "K", "C"))
    ap.add_argument("--sizes", default="16,64,256,800", help="comma-separated C values")
    ap.add_argument("-B", type=int, default=8)
    ap.add_argument("-T", type=int, default=400)
    ap.add_argument("-K", type=int, default=12, help="longest segment")
    ap.add_argument("--mem-gb", type=float, default=10.0, help="address-space limit per measurement (CPU)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--min-T", type=int, default=4, help="smallest T probed for torch-struct")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.worker:
        impl, B, T, K, C = args.worker
        res = _worker(impl, int(B), int(T), int(K), int(C), args.device, args.threads, args.repeats)
        print(json.dumps(res))
        return res
    rows = []
    B, T, K = args.B, args.T, args.K
    print(f"semi-Markov log-partition (fwd) and + marginals (fwd+bwd), B={B}, T={T}, K={K}, device={args.device}, "
          f"threads={args.threads}, memory limit {args.mem_gb:g} GiB per run")
    print(f"{'C':>5} {'ours fwd s':>11} {'ours fwd+bwd s':>15} {'ours peak GiB':>14} | "
          f"{'torch-struct largest':>22} {'ts fwd s':>9} {'ours fwd s':>11} {'fwd ratio':>10} "
          f"{'ts fwd+bwd s':>13} {'fwd+bwd ratio':>14} {'max |dlogZ|':>12}")
    for C in [int(c) for c in args.sizes.split(",")]:
        ours = _measure("ours", B, T, K, C, args)
        row = {"C": C, "B": B, "T": T, "K": K, "ours": ours}
        ts, ts_B, ts_T = None, B, T
        for ts_B in dict.fromkeys((B, 1)):  # halve T at the full batch, then at B = 1
            probes = [T >> i for i in range(T.bit_length()) if T >> i >= args.min_T]
            if probes[-1] != args.min_T:
                probes.append(args.min_T)  # halving may step over the smallest size
            for ts_T in probes:
                ts = _measure("torch_struct", ts_B, ts_T, K, C, args)
                if ts["ok"]:
                    break
                row.setdefault("torch_struct_failures", []).append({"B": ts_B, "T": ts_T, "why": ts["why"]})
            if ts is not None and ts["ok"]:
                break
        if ts is not None and ts["ok"]:
            same = ours if (ts_T, ts_B) == (T, B) else _measure("ours", ts_B, ts_T, K, C, args)
            diff = max(abs(a - b) for a, b in zip(same["log_z"], ts["log_z"]))
            fb = ts.get("forward_backward_s")
            row.update(torch_struct={"B": ts_B, "T": ts_T, **ts}, ours_same_size=same,
                       speedup=ts["forward_s"] / same["forward_s"],
                       speedup_forward_backward=None if fb is None else fb / same["forward_backward_s"],
                       max_abs_log_z_diff=diff)
            fb_cols = (f"{'out of memory':>13} {'-':>14}" if fb is None else
                       f"{fb:>13.3f} {row['speedup_forward_backward']:>13.1f}x")
            ts_cols = (f"{f'B={ts_B} T={ts_T}':>22} {ts['forward_s']:>9.3f} {same['forward_s']:>11.4f} "
                       f"{row['speedup']:>9.1f}x {fb_cols} {diff:>12.2e}")
        else:
            ts_cols = f"{'none (T >= ' + str(args.min_T) + ')':>22} {'-':>9} {'-':>11} {'-':>10} {'-':>13} {'-':>14} {'-':>12}"
        if ours["ok"]:
            o = f"{ours['forward_s']:>11.3f} {ours['forward_backward_s']:>15.3f} {ours['peak_mem_gb']:>14.2f}"
        else:
            o = f"{'failed: ' + ours['why'][:30]:>42}"
        print(f"{C:>5} {o} | {ts_cols}", flush=True)
        rows.append(row)
    result = {"B": B, "T": T, "K": K, "device": args.device, "threads": args.threads, "mem_gb": args.mem_gb, "rows": rows}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
