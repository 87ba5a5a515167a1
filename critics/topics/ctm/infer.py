"""Inference for new documents with the globals frozen (:func:`infer_local`): Adam on fresh draws, or Newton steps on
fixed antithetic, moment-matched draws; every batch from the same seed, so a document's result does not depend
on its batch; see :mod:`critics.topics.ctm`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .model import CTMGlobals, PriorTerms, _Windows, local_elbo
from .words import _LOG_2PI, _TINY, BagOfWords, WordBatch

__all__ = ["LocalResult", "infer_local"]


@dataclass
class LocalResult:
    """Posteriors of new documents: ``m, v (N, K)``, per document the step at which it stopped and
    whether it met the tolerance, and per batch the ELBO trace (mean per document, one value per step)."""

    m: torch.Tensor
    v: torch.Tensor
    steps: torch.Tensor
    converged: torch.Tensor
    elbo: torch.Tensor
    elbo_traces: list[list[float]] = field(default_factory=list)


_METHOD_DEFAULTS = {"adam": {"steps": 300, "tol": 1e-4}, "newton": {"steps": 100, "tol": 1e-5}}
"""Per method, the most steps (Adam steps, or Newton iterations) and the tolerance when none is given."""


def infer_local(globals_: CTMGlobals, bow: BagOfWords, *, method: str = "adam", steps: int | None = None,
                tol: float | None = None, lr: float = 0.05, num_samples: int = 4, num_draws: int = 24,
                batch_size: int = 32, window: int = 25, seed: int = 0, init_scale: float = 0.3,
                representation: str = "auto", warm_start: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> LocalResult:
    """Fit ``q(z_d) = N(m_d, diag v_d)`` to each document of ``bow`` with the globals frozen.

    Documents go ``batch_size`` at a time, those of similar width together (:meth:`BagOfWords.batches`: a batch
    padded to its widest document is mostly words; a document's result does not depend on its batch), ``m``
    started at ``mu`` and ``log s`` at ``log init_scale`` (or,
    ``method="newton"`` only, at ``warm_start = (m, v)``, each ``(n, K)``: a warm start from an earlier fit, as
    variational EM's E-steps take), each document stopping on its own.  ``method``:

    * ``"adam"`` (the default here; the critic's is ``"newton"``): stochastic optimisation with
      ``num_samples`` fresh draws per step, Adam with ``lr`` (:func:`_infer_batch`); a document stops once its
      mean ELBO over a ``window`` of steps changes by less than ``tol`` (default ``1e-4``; ``0``: exactly
      ``steps`` steps, default 300) relative to the window before.
    * ``"newton"``: maximise each document's ELBO (:func:`local_elbo`) on ``num_draws`` (24) fixed
      standard-normal draws (:func:`_newton_batch`), a deterministic bound, by Newton steps on ``m`` and
      fixed-point steps on ``v``; a document stops, converged, when the step's predicted gain is at most
      ``tol`` (default ``1e-5``) times its bound, or after ``steps`` iterations (default 100).

    Computes on the globals' device, in their dtype.
    """
    if method not in _METHOD_DEFAULTS:
        raise ValueError(f"method must be 'newton' or 'adam', got {method!r}")
    if warm_start is not None and (method != "newton"
                                   or tuple(warm_start[0].shape) != (len(bow), globals_.num_topics)):
        raise ValueError(f"warm_start must be (m, v) of shape ({len(bow)}, {globals_.num_topics}), for method 'newton'")
    steps = _METHOD_DEFAULTS[method]["steps"] if steps is None else int(steps)
    tol = _METHOD_DEFAULTS[method]["tol"] if tol is None else float(tol)
    g = globals_.detach()
    device, dtype = g.mu.device, g.mu.dtype
    k, n = g.num_topics, len(bow)
    phi = g.log_phi.exp()
    out_m = torch.empty(n, k, dtype=dtype, device=device)
    out_v = torch.empty(n, k, dtype=dtype, device=device)
    out_steps = torch.zeros(n, dtype=torch.long)
    out_conv = torch.zeros(n, dtype=torch.bool)
    out_elbo = torch.empty(n, dtype=torch.float64)
    traces = []
    for rows in bow.batches(batch_size):                           # documents of similar width together
        if method == "newton":                                     # the words present, their columns gathered
            batch = bow.batch(rows, "sparse").to(device).with_columns(phi)
            warm = (None if warm_start is None
                    else (warm_start[0][rows].to(device, dtype), warm_start[1][rows].to(device, dtype)))
            res = _newton_batch(g, batch, len(rows), steps=steps, num_draws=num_draws, tol=tol, seed=seed,
                                init_scale=init_scale, start=warm)
        else:
            batch = bow.batch(rows, representation).to(device).with_columns(phi)
            if batch.dense is not None:
                batch.dense = batch.dense.to(dtype)
            res = _infer_batch(g, phi, batch, len(rows), steps=steps, lr=lr, num_samples=num_samples, tol=tol,
                               window=window, seed=seed, init_scale=init_scale)
        at = torch.as_tensor(rows)
        out_m[at], out_v[at], out_steps[at], out_conv[at], out_elbo[at] = res[:5]
        traces.append(res[5])
    return LocalResult(out_m, out_v, out_steps, out_conv, out_elbo, traces)


def _infer_batch(g: CTMGlobals, phi: torch.Tensor, batch: WordBatch, b: int, *, steps: int, lr: float,
                 num_samples: int, tol: float, window: int, seed: int, init_scale: float):
    """One batch of :func:`infer_local`.  Documents that stop are taken out of the optimisation (their
    rows of ``m``, ``log s``, Adam's moments and the counts are dropped), so a batch costs the sum of
    its documents' steps, not ``B`` times the slowest one's."""
    device, dtype, k = g.mu.device, g.mu.dtype, g.num_topics
    gen = torch.Generator().manual_seed(int(seed))    # drawn on the CPU: the same draws on every device
    prior = PriorTerms(g.mu, g.scale_tril)
    out_m = g.mu.expand(b, k).clone()
    out_log_s = torch.full((b, k), math.log(init_scale), dtype=dtype, device=device)
    stop_step = torch.full((b,), int(steps), dtype=torch.long)
    converged = torch.zeros(b, dtype=torch.bool)
    last = torch.zeros(b, dtype=torch.float64)
    active = torch.arange(b)                                       # batch rows still being optimised
    m, log_s = out_m.clone().requires_grad_(), out_log_s.clone().requires_grad_()
    opt = torch.optim.Adam([m, log_s], lr=lr)
    windows = _Windows(window, tol)
    trace: list[float] = []
    values = torch.zeros(b, dtype=torch.float64)
    for step in range(1, int(steps) + 1):
        eps = torch.randn((num_samples, 1, k), generator=gen, dtype=dtype).to(device)
        opt.zero_grad(set_to_none=True)
        per_doc = local_elbo(m, log_s, eps, prior, phi, batch)
        (-per_doc.sum()).backward()
        opt.step()
        values = per_doc.detach().to(torch.float64).cpu()
        trace.append(float(values.mean()))                         # mean over the documents still running
        done = windows.add(values)
        if done is None or not bool(done.any()):
            continue
        rows, here = active[done].to(device), done.to(device)
        out_m[rows], out_log_s[rows] = m.detach()[here], log_s.detach()[here]
        rows = rows.cpu()
        last[rows], stop_step[rows], converged[rows] = values[done], step, True
        keep = ~done
        if not bool(keep.any()):
            break
        active, values, windows.previous = active[keep], values[keep], windows.previous[keep]
        m, log_s, opt = _keep_rows(opt, m, log_s, keep.to(device), lr)
        batch = batch.rows(keep.to(device))
    if len(active) and not bool(converged[active].all()):          # ran out of steps
        out_m[active.to(device)], out_log_s[active.to(device)] = m.detach(), log_s.detach()
        last[active] = values
    s = out_log_s.exp()
    return out_m, s * s, stop_step, converged, last, trace


def _keep_rows(opt: torch.optim.Adam, m: torch.Tensor, log_s: torch.Tensor, keep: torch.Tensor, lr: float):
    """New ``m``, ``log s`` and Adam holding only the rows ``keep``, with the kept rows' moments and step."""
    new = [p.detach()[keep].clone().requires_grad_() for p in (m, log_s)]
    new_opt = torch.optim.Adam(new, lr=lr)
    for old_p, new_p in zip((m, log_s), new):
        state = opt.state[old_p]
        new_opt.state[new_p] = {name: (value[keep].clone() if name != "step" else value.clone())
                                for name, value in state.items()}
    return new[0], new[1], new_opt


_HALVINGS = 6
"""A Newton step is halved at most this many times looking for a higher bound (then the document stops)."""
_MAX_LOG_S_STEP = 1.0
"""The fixed-point step moves ``log s`` by at most this much per iteration."""
_ACTIVE_TOPICS = 24
"""The Newton system on ``m`` keeps the likelihood's full (Gauss-Newton) curvature on this many topics per
document (those whose curvature is largest against the prior's, :func:`_likelihood_curvature`), its diagonal
on the others; all of them when ``K`` is at most this.  24 of K = 100 on the benchmark: 16 and 32 did as well
to within the timing noise, 48 was slower (docs/critics/topics.md)."""
_PCG_STEPS = 1
"""Conjugate-gradient steps that add the other topics' diagonal curvature to the Newton step on ``m``
(:func:`_newton_steps`)."""
_COARSE_DRAWS = 0
"""A first stage of the Newton path on this many of its draws (:func:`_newton_batch`); 0: none (with 24 draws
a first stage on 8 gained nothing on the benchmark)."""
_COARSE_TOL = 1e-4
"""... to this tolerance (relative predicted gain)."""


def _fixed_draws(num_draws: int, k: int, seed: int, device, dtype) -> torch.Tensor:
    """``num_draws`` standard-normal draws ``(S, K)`` from ``seed`` in antithetic pairs ``(e, -e)`` (``S``
    rounded up to even), moment-matched (:func:`_matched`): their mean is exactly 0, so the bound's gradient
    in ``m`` carries no first-order Monte Carlo error, and every coordinate's mean square exactly 1.  Drawn on
    the CPU and moved to ``device``, so a seed gives the same draws, and the same scores, on every device."""
    gen = torch.Generator().manual_seed(int(seed))
    half = torch.randn(((int(num_draws) + 1) // 2, k), generator=gen, dtype=dtype).to(device)
    return _matched(torch.cat([half, -half]))


def _matched(eps: torch.Tensor) -> torch.Tensor:
    """Draws ``eps (S, K)`` (antithetic pairs) with each coordinate rescaled to mean square exactly 1.

    With ``S`` draws a coordinate's mean square is ``chi^2_S / S`` (sd ``sqrt(2/S)``: 0.35 at 16 draws),
    and the fixed-draw bound's variance term ``~ 1/2 sum_k h_k v_k mean_S(eps_k^2)`` is then off by that
    factor per topic: maximising it fits ``v_k`` too large where the draws are narrow and too small where
    they are wide, a systematic error in ``tr(Sigma^-1 diag v)`` and so in the Latent NLL (measured on the
    benchmark: median 0.09 nats at 64 plain draws, 0.25 at 32).  Rescaling removes it; the mean stays 0."""
    return eps * eps.pow(2).mean(0, keepdim=True).clamp_min(_TINY).rsqrt()


class _Prior:
    """The prior's pieces the Newton path uses: :class:`PriorTerms`, ``Sigma`` and ``Sigma^-1`` ``(K, K)``."""

    def __init__(self, g: CTMGlobals):
        self.terms = PriorTerms(g.mu, g.scale_tril)
        self.mu, self.precision_diag = g.mu, self.terms.precision_diag
        self.precision = self.terms.inv_l.T @ self.terms.inv_l
        self.sigma = g.scale_tril @ g.scale_tril.T


def _bound(m: torch.Tensor, log_s: torch.Tensor, eps: torch.Tensor, prior: _Prior,
           batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each document's ELBO on the fixed draws ``eps (S, K)`` ``(B,)`` -- :func:`local_elbo` on a sparse batch
    with its columns gathered, to rounding -- and its gradients in ``m`` and ``log s`` ``(B, K)``, in closed
    form: with ``theta_s = softmax(m + s eps_s)``, ``p_sw = theta_s . c_w`` and ``a_s = sum_w (n_w / p_sw) c_w``,
    ``d log p(x | z_s) / d z_s = theta_s (a_s - theta_s . a_s)``.  Two batched products over the words present
    (``(B, S, K) x (B, K, L)`` and back) per call; no autograd graph."""
    cols, counts = batch.columns, batch.counts                     # (B, L, K), (B, L)
    s = log_s.exp()
    theta = torch.softmax(m.unsqueeze(1) + s.unsqueeze(1) * eps, -1)  # (B, S, K)
    p = torch.bmm(theta, cols.transpose(1, 2)).clamp_min(_TINY)    # (B, S, L)
    loglik = torch.bmm(p.log(), counts.unsqueeze(-1)).squeeze(-1).mean(1)
    a = torch.bmm(counts.unsqueeze(1) / p, cols)                   # (B, S, K)
    grad_z = theta * (a - (theta * a).sum(-1, keepdim=True))
    resid = m - prior.mu
    v = s * s
    value = loglik - prior.terms.cross_entropy(m, v) + 0.5 * m.shape[-1] * (_LOG_2PI + 1) + log_s.sum(-1)
    grad_m = grad_z.mean(1) - resid @ prior.precision
    grad_log_s = (grad_z * eps).mean(1) * s - v * prior.precision_diag + 1
    return value, grad_m, grad_log_s


def _likelihood_curvature(m: torch.Tensor, prior: _Prior, batch: WordBatch
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Curvature of ``-log p(x_d | z)`` at ``z = m (B, K)``: ``(idx (B, A), J (B, A, A), h (B, K) or None)``.

    On each document's ``A = min(K, _ACTIVE_TOPICS)`` active topics ``idx`` the Gauss-Newton matrix
    ``J = sum_w n_dw g_w g_w^T``, with ``g_w = grad_z log p_w = r_w - theta``, ``r_w = theta c_w / p_w`` the
    word's topic responsibilities, ``p_w = theta . c_w``, ``c_w`` the column of ``phi`` of word ``w`` (the
    words present only), positive semi-definite.  The active topics are those with the largest ``u_k /
    Sigma^-1_kk``, ``u_k = t_k (1 - 2 theta_k) + N theta_k^2 >= J_kk`` (``t_k = sum_w n_w r_wk`` the words
    drawn to topic ``k``, ``N`` the document's length): one product over the words to choose them.

    On the other topics (``h``, zero on ``idx``; ``None`` when ``K <= A``) the diagonal of the exact
    ``-Hessian``, ``N theta_k (1 - theta_k) - t_k + sum_w n_w r_wk^2``, without its last term (small where
    few words are drawn to ``k``; it cost 10% of the speed for no measured gain): ``h_k = N theta_k (1 -
    theta_k) - t_k``, floored at 0.  Gauss-Newton alone misses it: on a topic with few of the document's
    words ``J_kk ~ N theta_k^2`` while ``h_k ~ N theta_k``, and with only the prior's curvature there the
    Newton step overshot along the inactive topics (measured: 2x too long, the full step refused in 60% of
    late iterations); with ``h`` the step gains ~90% of what the exact Newton step on the bound does."""
    theta = torch.softmax(m, -1)
    cols, counts = batch.columns, batch.counts
    b, k = m.shape
    p = torch.bmm(cols, theta.unsqueeze(-1)).squeeze(-1).clamp_min(_TINY)   # (B, L)
    drawn = theta * torch.bmm((counts / p).unsqueeze(1), cols).squeeze(1)              # t (B, K)
    length = counts.sum(-1, keepdim=True)
    excess = length * theta - drawn                                                    # q = N theta - t
    h = None
    if k <= _ACTIVE_TOPICS:
        idx = torch.arange(k, device=m.device).expand(b, k)
    else:
        upper = drawn * (1 - 2 * theta) + length * theta * theta
        idx = (upper / prior.precision_diag).topk(_ACTIVE_TOPICS, -1).indices
        h = (excess - length * theta * theta).clamp_min(0).scatter_(1, idx, 0.0)       # N theta (1 - theta) - t
        cols = cols.gather(2, idx.unsqueeze(1).expand(-1, cols.shape[1], -1))
    theta, excess = theta.gather(1, idx), excess.gather(1, idx)
    g = theta.unsqueeze(1) * (cols / p.unsqueeze(-1) - 1) * counts.sqrt().unsqueeze(-1)   # (B, L, A)
    return idx, g.transpose(1, 2) @ g + torch.diag_embed((excess * (1 - 2 * theta)).clamp_min(0)), h


def _newton_steps(m: torch.Tensor, grad_m: torch.Tensor, grad_log_s: torch.Tensor, prior: _Prior,
                  batch: WordBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The proposed moves ``(dm, d log s)``, each ``(B, K)``.

    ``dm ~ C^-1 grad_m``, ``C = Sigma^-1 + E J E^T + diag(h)``: a Newton step on ``m`` with the bound's
    curvature taken at the mean, the likelihood's Gauss-Newton matrix on the active topics ``E`` and its
    diagonal elsewhere (:func:`_likelihood_curvature`).  No ``K x K`` matrix per document: ``M = Sigma^-1 +
    E J E^T`` is solved by Woodbury (with ``u = Sigma r``, ``a = E^T x`` solves ``(I + Sigma_AA J) a = u_A``,
    ``A x A``, non-singular as ``J`` is positive semi-definite, factored once, and ``x = u - Sigma E J a``),
    and ``C`` by ``_PCG_STEPS`` steps of conjugate gradients preconditioned by ``M`` from ``M^-1 grad_m``
    (``C p = M p + h p``, so a step costs one solve with ``M``; one step reaches ~98% of the exact solve's
    gain on the benchmark).  ``d log s``: the fixed point ``v_k = 1 / (Sigma^-1_kk - b_k)`` with ``b_k =
    mean_S[d_k log p(x|z) eps_k] / s_k`` (Stein's lemma: the draws' estimate of ``E_q[d^2_k log p(x|z)]``); as
    ``grad_log s_k = 1 - v_k (Sigma^-1_kk - b_k)`` it is ``-1/2 log(1 - grad_log s_k)``, moving ``log s`` by
    at most ``_MAX_LOG_S_STEP``."""
    idx, j, h = _likelihood_curvature(m, prior, batch)
    sigma_aa = prior.sigma[idx.unsqueeze(-1), idx.unsqueeze(1)]    # (B, A, A)
    eye = torch.eye(idx.shape[1], dtype=m.dtype, device=m.device)
    lu, pivots, info = torch.linalg.lu_factor_ex(eye + sigma_aa @ j)
    singular = (info > 0).unsqueeze(-1)

    def solve_m(r: torch.Tensor) -> torch.Tensor:                  # M^-1 r
        u = r @ prior.sigma
        a = torch.linalg.lu_solve(lu, pivots, u.gather(1, idx).unsqueeze(-1))
        ja = (j @ a).squeeze(-1)
        ja = torch.where(singular | ~torch.isfinite(ja), torch.zeros_like(ja), ja)  # rounding: prior only
        return u - torch.zeros_like(m).scatter_(1, idx, ja) @ prior.sigma

    dm = solve_m(grad_m)
    if h is not None and _PCG_STEPS > 0:                           # conjugate gradients on C, preconditioned by M
        r = -h * dm                                                # grad_m - C dm, as M dm = grad_m
        z = solve_m(r)
        p, mp, rz = z, r, (r * z).sum(-1, keepdim=True)
        for i in range(_PCG_STEPS):
            cp = mp + h * p
            pcp = (p * cp).sum(-1, keepdim=True)
            alpha = torch.where(pcp > 0, rz / pcp.clamp_min(_TINY), torch.zeros_like(pcp))
            dm = dm + alpha * p
            if i + 1 == _PCG_STEPS:
                break
            r = r - alpha * cp
            z = solve_m(r)
            rz_new = (r * z).sum(-1, keepdim=True)
            beta = torch.where(rz > 0, rz_new / rz.clamp_min(_TINY), torch.zeros_like(rz))
            p, mp, rz = z + beta * p, r + beta * mp, rz_new
    bound = math.exp(2 * _MAX_LOG_S_STEP)
    d_log_s = -0.5 * torch.log((1 - grad_log_s).clamp(1 / bound, bound))
    return dm, d_log_s


def _line_search(m, log_s, dm, d_log_s, value, eps, prior, batch, pending):
    """Per document of ``pending`` (a ``(B,)`` mask) the first of the steps ``1, 1/2, ..., 2^-_HALVINGS``
    along ``(dm, d log s)`` that does not lower its bound.  Returns the new ``m, log s``, bound and
    gradients (unchanged where no step was taken) and the mask ``moved`` (a step was taken)."""
    out_m, out_log_s, out_value = m.clone(), log_s.clone(), value.clone()
    out_gm, out_gs = torch.zeros_like(m), torch.zeros_like(m)
    moved = torch.zeros(len(m), dtype=torch.bool, device=m.device)
    pending = pending.clone()
    step = 1.0
    for _ in range(_HALVINGS + 1):
        if not bool(pending.any()):
            break
        sub = batch if bool(pending.all()) else batch.rows(pending)
        trial_m, trial_log_s = m[pending] + step * dm[pending], log_s[pending] + step * d_log_s[pending]
        trial, gm, gs = _bound(trial_m, trial_log_s, eps, prior, sub)
        ok = trial >= value[pending]                            # NaN compares False: never taken
        rows = pending.nonzero().squeeze(-1)[ok]
        out_m[rows], out_log_s[rows], out_value[rows] = trial_m[ok], trial_log_s[ok], trial[ok]
        out_gm[rows], out_gs[rows] = gm[ok], gs[ok]
        moved[rows], pending[rows] = True, False
        step /= 2
    return out_m, out_log_s, out_value, out_gm, out_gs, moved


def _newton_batch(g: CTMGlobals, batch: WordBatch, b: int, *, steps: int, num_draws: int, tol: float, seed: int,
                  init_scale: float, start: tuple[torch.Tensor, torch.Tensor] | None = None):
    """One batch of :func:`infer_local` by ``method="newton"``; ``batch`` sparse, its columns gathered.

    The objective is :func:`local_elbo` with its likelihood term on ``num_draws`` fixed draws
    (:func:`_fixed_draws`, the same for every document, iteration and batch): the same ELBO as the Adam
    path with its Monte Carlo draws frozen (common random numbers), so a deterministic function of
    ``m, log s`` whose change can be tested (:func:`_bound`).  :func:`_newton_stage` from ``m = mu``, ``log s =
    log init_scale`` on all ``num_draws`` to ``tol``.  With ``_COARSE_DRAWS`` set (by default 0: not), a first
    stage before it on that many of the draws (half of them antithetic to the others, moment-matched again), to
    tolerance ``_COARSE_TOL``, only to bring each document near its maximum (skipped when ``num_draws <=
    _COARSE_DRAWS``); the result maximises the ``num_draws`` bound either way.  Returns what
    :func:`_infer_batch` does; a document's steps are its iterations in both stages, its convergence the
    last stage's."""
    device, dtype, k = g.mu.device, g.mu.dtype, g.num_topics
    eps = _fixed_draws(num_draws, k, seed, device, dtype)
    prior = _Prior(g)
    if start is None:
        m = g.mu.expand(b, k).clone()
        log_s = torch.full((b, k), math.log(init_scale), dtype=dtype, device=device)
    else:  # a warm start (m, v)
        m, log_s = start[0].clone(), 0.5 * start[1].log()
    used = torch.zeros(b, dtype=torch.long)
    trace: list[float] = []
    if 2 <= _COARSE_DRAWS < len(eps):
        half, pairs = len(eps) // 2, _COARSE_DRAWS // 2
        coarse = _matched(torch.cat([eps[:pairs], eps[half:half + pairs]]))
        m, log_s, used, _, _, trace = _newton_stage(m, log_s, coarse, prior, batch, steps=steps,
                                                    tol=max(tol, _COARSE_TOL))
    m, log_s, stop_step, converged, last, fine = _newton_stage(m, log_s, eps, prior, batch, steps=steps, tol=tol)
    s = log_s.exp()
    return m, s * s, used + stop_step, converged, last, trace + fine


def _newton_stage(m: torch.Tensor, log_s: torch.Tensor, eps: torch.Tensor, prior: _Prior, batch: WordBatch, *,
                  steps: int, tol: float):
    """Maximise each document's bound on the draws ``eps`` from ``m, log s (B, K)``.  Each iteration proposes
    a Newton step on ``m`` and a fixed-point step on ``v`` (:func:`_newton_steps`) and backtracks until the
    bound does not fall (:func:`_line_search`).  A document stops, converged, before a step whose predicted
    gain (the Newton decrement of the quadratic model, ``1/2 g_m . dm`` plus ``1/4 |g_log s|^2`` for
    curvature ``-2`` in ``log s``) is at most ``tol |F|``; unconverged when no step raises its bound or
    after ``steps`` iterations.  Stopped documents leave the batch (converged ones before the line search, so
    that its first trial takes every row without copying the batch).  Returns ``m, log s``, per document
    the iteration at which it stopped, whether it converged and its bound, and the trace (mean bound of
    the documents still running, per iteration)."""
    b = len(m)
    out_m, out_log_s = m.clone(), log_s.clone()
    stop_step = torch.full((b,), int(steps), dtype=torch.long)
    converged = torch.zeros(b, dtype=torch.bool)
    last = torch.zeros(b, dtype=torch.float64)
    active = torch.arange(b)                                       # batch rows still being optimised
    device = m.device
    value, grad_m, grad_log_s = _bound(m, log_s, eps, prior, batch)
    trace: list[float] = []
    for step in range(1, int(steps) + 1):
        dm, d_log_s = _newton_steps(m, grad_m, grad_log_s, prior, batch)
        gain = 0.5 * (grad_m * dm).sum(-1) + 0.25 * grad_log_s.pow(2).sum(-1)
        done = gain <= tol * value.abs()
        running, total = len(m), float(value[done].double().sum())  # the trace: mean over the documents running
        if bool(done.any()):                                       # converged: they leave before the line search
            rows = active[done.cpu()]
            out_m[rows.to(device)], out_log_s[rows.to(device)] = m[done], log_s[done]
            last[rows], stop_step[rows], converged[rows] = value[done].double().cpu(), step, True
            keep = ~done
            if not bool(keep.any()):
                trace.append(total / running)
                break
            active, m, log_s, value, grad_m, grad_log_s, dm, d_log_s = (
                t[keep.to(t.device)] for t in (active, m, log_s, value, grad_m, grad_log_s, dm, d_log_s))
            batch = batch.rows(keep)
        everyone = torch.ones(len(m), dtype=torch.bool, device=device)
        m, log_s, value, grad_m, grad_log_s, moved = _line_search(m, log_s, dm, d_log_s, value, eps, prior, batch,
                                                                  everyone)
        trace.append((total + float(value.double().sum())) / running)
        stop = ~moved if step < steps else everyone
        if not bool(stop.any()):
            continue
        rows = active[stop.cpu()]
        out_m[rows.to(device)], out_log_s[rows.to(device)] = m[stop], log_s[stop]
        last[rows], stop_step[rows] = value[stop].double().cpu(), step
        keep = ~stop
        if not bool(keep.any()):
            break
        active, m, log_s, value, grad_m, grad_log_s = (t[keep.to(t.device)] for t in
                                                       (active, m, log_s, value, grad_m, grad_log_s))
        batch = batch.rows(keep)
    return out_m, out_log_s, stop_step, converged, last, trace


