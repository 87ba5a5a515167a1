"""Latent distributions and the cross-entropy registry.

The Latent NLL of a document is the cross-entropy of its posterior under the
prior (paper eq. 1)::

    T_c(x) = -E_{z ~ P_c(z|x)} log P_c(z) = H(P_c(z|x), P_c(z)).

:func:`cross_entropy` computes H(q, p) **exactly** where a formula is
registered for the pair of types (like :func:`torch.distributions.kl_divergence`),
falls back to ``H(q) + KL(q || p)`` where torch knows both terms, and otherwise
raises; :func:`monte_carlo_cross_entropy` estimates it from a stated number of
samples with its standard error.

Sequence-valued latents (section titles, HSMM states) are padded integer
tensors of shape ``(..., L)`` with :data:`PAD` (= -1) after each sequence's end.

A prior need not be a torch ``Distribution``: anything that follows the
:class:`Prior` protocol (``log_prob`` of a batch of latent values; ``sample``
optional, for Monte Carlo) works, e.g. a KenLM model over ragged string chains.
Point masses over such values are :class:`ValuePointMass`; their cross-entropy
under any prior is exact, ``-log p(z)``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch
from torch.distributions import (
    Dirichlet,
    Distribution,
    Independent,
    MultivariateNormal,
    Normal,
    constraints,
    kl_divergence,
)

__all__ = [
    "PAD",
    "Prior",
    "PointMass",
    "ValuePointMass",
    "SequencePointMass",
    "FactorisedCategorical",
    "MarkovChain",
    "register_cross_entropy",
    "cross_entropy",
    "diagonal_normal_mvn_cross_entropy",
    "mvn_cross_entropy",
    "dirichlet_cross_entropy",
    "monte_carlo_cross_entropy",
]

PAD = -1
"""Padding value of sequence latents after each sequence's end."""

_CROSS_ENTROPY: dict[tuple[type, type], Callable[[Any, Any], torch.Tensor]] = {}


@runtime_checkable
class Prior(Protocol):
    """What the core needs of a prior ``P_c(z)``.

    ``log_prob(values)`` takes a batch of latent values (a tensor whose leading
    dimensions are the batch, or a sequence of Python values) and returns
    ``log P_c(z)`` per value as a tensor of the batch's shape.  ``sample`` is
    optional and only needed by posteriors whose cross-entropy is estimated
    by Monte Carlo from samples of the *posterior* (it is the posterior that
    samples, not the prior).  Every torch ``Distribution`` is a ``Prior``.
    """

    def log_prob(self, value: Any) -> torch.Tensor: ...


def register_cross_entropy(type_q: type, type_p: type):
    """Decorator registering an exact ``H(q, p)`` for ``q: type_q`` under ``p: type_p``.

    The function takes ``(q, p)`` and returns a tensor of shape ``q.batch_shape``
    (broadcast with ``p.batch_shape`` where the prior is batched too).  Lookup
    picks the most specific registered pair along both MROs; the function may
    raise :class:`NotImplementedError` when the instances do not fit (then the
    next match, then the ``H(q) + KL(q||p)`` fallback, is tried).
    """

    def decorator(fn):
        _CROSS_ENTROPY[(type_q, type_p)] = fn
        return fn

    return decorator


def _candidates(type_q: type, type_p: type) -> list[Callable[[Any, Any], torch.Tensor]]:
    """Registered functions applicable to ``(type_q, type_p)``, most specific first."""
    matches = [
        (tq, tp)
        for (tq, tp) in _CROSS_ENTROPY
        if issubclass(type_q, tq) and issubclass(type_p, tp)
    ]
    matches.sort(key=lambda m: (type_q.__mro__.index(m[0]), type_p.__mro__.index(m[1])))
    return [_CROSS_ENTROPY[m] for m in matches]


def _lookup(type_q: type, type_p: type):
    """The most specific registered function for ``(type_q, type_p)``, or None."""
    found = _candidates(type_q, type_p)
    return found[0] if found else None


def cross_entropy(q: Any, p: Prior) -> torch.Tensor:
    """Exact cross-entropy ``H(q, p) = -E_q log p`` with shape ``q.batch_shape``.

    Uses the most specific registered formula for ``(type(q), type(p))``; a
    registered function may raise :class:`NotImplementedError` to say the pair
    of *types* matches but these instances do not (e.g. an ``Independent``
    whose base is not ``Normal``), and the next registered match is tried.
    Failing those, ``H(q) + KL(q||p)`` where both are torch distributions and
    torch implements both terms; else raises :class:`NotImplementedError` (use
    :func:`monte_carlo_cross_entropy`).  Any other exception (a ``ValueError``
    for a posterior and prior of different event sizes) propagates.
    """
    for fn in _candidates(type(q), type(p)):
        try:
            return fn(q, p)
        except NotImplementedError:
            continue
    try:
        if not (isinstance(q, Distribution) and isinstance(p, Distribution)):
            raise NotImplementedError
        return q.entropy() + kl_divergence(q, p)
    except NotImplementedError:
        raise NotImplementedError(
            f"no exact cross-entropy for {type(q).__name__} under {type(p).__name__}; "
            "register one with critic.latent.register_cross_entropy or use "
            "monte_carlo_cross_entropy(q, p, num_samples=...)"
        ) from None


def monte_carlo_cross_entropy(
    q: Any, p: Prior, *, num_samples: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monte-Carlo ``H(q, p) ~= -(1/S) sum_s log p(z_s)``, ``z_s ~ q``.

    Returns ``(estimate, standard_error)``, each of shape ``q.batch_shape``,
    with ``standard_error = std_s(log p(z_s)) / sqrt(S)``; sampling is seeded
    and leaves the global RNG untouched.  ``q`` needs ``sample(sample_shape)``
    returning the samples stacked along a leading dimension.
    """
    if num_samples < 2:
        raise ValueError("num_samples must be at least 2 to give a standard error")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        z = q.sample((num_samples,))
    log_p = p.log_prob(z).to(torch.float64)
    estimate = -log_p.mean(0)
    stderr = log_p.std(0, unbiased=True) / math.sqrt(num_samples)
    return estimate, stderr


# --------------------------------------------------------------------------- point masses


class PointMass(Distribution):
    """A point mass (MAP / deterministic posterior) at ``value``.

    ``value`` has shape ``batch_shape + event_shape``; ``event_dim`` says how
    many trailing dimensions are the event.  ``H(PointMass(z), p) = -log p(z)``.
    """

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, value: torch.Tensor, event_dim: int = 0):
        self.value = value
        shape = value.shape
        cut = len(shape) - event_dim
        super().__init__(batch_shape=shape[:cut], event_shape=shape[cut:], validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        return self.value.expand(torch.Size(sample_shape) + self.value.shape).clone()

    def log_prob(self, value):
        event_dims = tuple(range(-len(self.event_shape), 0))
        equal = value == self.value
        if event_dims:
            equal = equal.all(dim=event_dims)
        zero = torch.zeros((), dtype=torch.float64)
        return torch.where(equal, zero, torch.tensor(-math.inf, dtype=torch.float64))

    def entropy(self):
        return torch.zeros(self.batch_shape, dtype=torch.float64)


class SequencePointMass(PointMass):
    """A point mass on padded integer sequences ``states (B, L)`` (:data:`PAD` after the end)."""

    def __init__(self, states: torch.Tensor):
        if states.dtype not in (torch.int64, torch.int32):
            raise TypeError("SequencePointMass needs integer states")
        super().__init__(states.long(), event_dim=1)

    @property
    def lengths(self) -> torch.Tensor:
        return (self.value != PAD).sum(-1)


class ValuePointMass:
    """Point masses at arbitrary latent values, one per document (batch shape ``(B,)``).

    For latents that are not tensors -- ragged sequences of strings such as
    coreference chains -- scored by a :class:`Prior` whose ``log_prob`` takes a
    sequence of such values.  ``H(ValuePointMass(z), p) = -log p(z)``, exactly.
    """

    def __init__(self, values: Sequence[Any]):
        self.values = list(values)

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size([len(self.values)])

    def __len__(self) -> int:
        return len(self.values)

    def entropy(self) -> torch.Tensor:
        return torch.zeros(len(self.values), dtype=torch.float64)


@register_cross_entropy(PointMass, object)
def _point_mass_cross_entropy(q: PointMass, p: Prior) -> torch.Tensor:
    return -torch.as_tensor(p.log_prob(q.value)).to(torch.float64)


@register_cross_entropy(ValuePointMass, object)
def _value_point_mass_cross_entropy(q: ValuePointMass, p: Prior) -> torch.Tensor:
    return -torch.as_tensor(p.log_prob(q.values)).to(torch.float64)


# --------------------------------------------------------------------------- factorised posteriors


class FactorisedCategorical(Distribution):
    """Independent categorical per step of a padded sequence: ``q(z) = prod_m q_m(z_m)``.

    ``probs`` has shape ``(B, L, K)``; ``lengths (B,)`` gives each sequence's
    number of steps (rows past it are ignored).  This is the paper's section
    posterior ``P(z|x) ~= prod_m P(z_m | x^m)`` (sec. 4).
    """

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, probs: torch.Tensor, lengths: torch.Tensor):
        if probs.dim() != 3:
            raise ValueError(f"probs must be (B, L, K), got shape {tuple(probs.shape)}")
        self.probs = probs
        self.lengths = lengths.long()
        super().__init__(batch_shape=probs.shape[:1], event_shape=probs.shape[1:2], validate_args=False)

    @property
    def mask(self) -> torch.Tensor:
        """``(B, L)`` boolean: True at real steps."""
        steps = torch.arange(self.probs.shape[1], device=self.probs.device)
        return steps.unsqueeze(0) < self.lengths.unsqueeze(1)

    def map(self) -> SequencePointMass:
        """The MAP sequence as a point mass (argmax per step), padded with :data:`PAD`."""
        states = self.probs.argmax(-1)
        return SequencePointMass(torch.where(self.mask, states, torch.full_like(states, PAD)))

    def sample(self, sample_shape=torch.Size()):
        b, l, k = self.probs.shape
        flat = self.probs.reshape(b * l, k)
        n = int(torch.Size(sample_shape).numel())
        draws = torch.multinomial(flat, n, replacement=True).T.reshape(*sample_shape, b, l)
        return torch.where(self.mask, draws, torch.full_like(draws, PAD))

    def entropy(self):
        logp = torch.log(self.probs.clamp_min(1e-300)).to(torch.float64)
        per_step = -(self.probs.to(torch.float64) * logp).sum(-1)
        return (per_step * self.mask).sum(-1)


# --------------------------------------------------------------------------- Markov-chain prior


class MarkovChain(Distribution):
    """First-order Markov chain over ``K`` states with start and end states.

    ``log P(z_1..z_M) = log pi[z_1] + sum_{m=2}^M log A[z_{m-1}, z_m] + log f[z_M]``

    with ``initial = log pi (K,)`` (from ``<bos>``), ``transition = log A (K, K)``
    and ``final = log f (K,)`` (to ``<eos>``).  Values are padded sequences
    ``(..., L)``.  Each sequence of M states scores M + 1 transitions.
    """

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, initial: torch.Tensor, transition: torch.Tensor, final: torch.Tensor):
        k = initial.shape[-1]
        if transition.shape != (k, k) or final.shape != (k,):
            raise ValueError("initial (K,), transition (K, K) and final (K,) shapes disagree")
        self.initial = initial.to(torch.float64)
        self.transition = transition.to(torch.float64)
        self.final = final.to(torch.float64)
        super().__init__(batch_shape=torch.Size(), validate_args=False)

    @property
    def num_states(self) -> int:
        return self.initial.shape[-1]

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``log P(z)`` for padded sequences ``value (..., L)``; shape ``value.shape[:-1]``."""
        mask = value != PAD
        lengths = mask.sum(-1)
        if (lengths == 0).any():
            raise ValueError("MarkovChain.log_prob got an empty sequence")
        z = value.clamp_min(0)
        first = self.initial[z[..., 0]]
        prev, nxt = z[..., :-1], z[..., 1:]
        # where, not multiply: a -inf log-probability at a padded step must not give -inf * 0 = NaN
        steps = torch.where(mask[..., 1:], self.transition[prev, nxt], torch.zeros((), dtype=torch.float64))
        last = z.gather(-1, (lengths - 1).unsqueeze(-1)).squeeze(-1)
        return first + steps.sum(-1) + self.final[last]

    def sample(self, sample_shape=torch.Size(), max_length: int = 256):
        """Ancestral samples, padded to the longest (truncated at ``max_length`` steps)."""
        n = int(torch.Size(sample_shape).numel())
        out = torch.full((n, max_length), PAD, dtype=torch.long)
        alive = torch.ones(n, dtype=torch.bool)
        # next-state distribution over K states + <eos> (index K)
        log_next = torch.cat([self.transition, self.final.unsqueeze(1)], dim=1)
        state = torch.multinomial(self.initial.exp(), n, replacement=True)
        for t in range(max_length):
            out[:, t] = torch.where(alive, state, torch.full_like(state, PAD))
            nxt = torch.multinomial(log_next[state].exp(), 1).squeeze(1)
            alive = alive & (nxt < self.num_states)
            if not alive.any():
                break
            state = nxt.clamp_max(self.num_states - 1)
        width = int((out != PAD).sum(1).max())
        return out[:, :width].reshape(*sample_shape, width)


@register_cross_entropy(FactorisedCategorical, MarkovChain)
def _factorised_markov_cross_entropy(q: FactorisedCategorical, p: MarkovChain) -> torch.Tensor:
    """Exact ``H(q, p)`` for a factorised categorical sequence under a Markov chain.

    ``-[sum_j q_1(j) log pi_j + sum_{m>=2} sum_{ij} q_{m-1}(i) q_m(j) log A_ij
    + sum_i q_M(i) log f_i]`` -- each term is linear in the per-step factors,
    which are independent under q.
    """
    probs = q.probs.to(torch.float64)
    mask = q.mask
    last = probs.gather(1, (q.lengths - 1).view(-1, 1, 1).expand(-1, 1, probs.shape[-1])).squeeze(1)

    def expected(log_table: torch.Tensor, contract) -> torch.Tensor:
        # 0 * log 0 = 0: impossible events count only where q puts mass on them (then H = inf)
        finite = torch.isfinite(log_table)
        value = contract(torch.where(finite, log_table, torch.zeros((), dtype=torch.float64)))
        mass_on_impossible = contract((~finite).to(torch.float64))
        return torch.where(mass_on_impossible > 0, torch.full_like(value, -math.inf), value)

    start = expected(p.initial, lambda t: probs[:, 0] @ t)
    pair = expected(p.transition, lambda t: torch.einsum("bli,ij,blj->bl", probs[:, :-1], t, probs[:, 1:]))
    steps = torch.where(mask[:, 1:], pair, torch.zeros((), dtype=torch.float64)).sum(-1)
    end = expected(p.final, lambda t: last @ t)
    return -(start + steps + end)


# --------------------------------------------------------------------------- continuous latents (topic critics)
#
# All three compute in float64 whatever the inputs' dtype (float32 parameters are
# widened first) and return float64, like every other formula in this registry;
# autograd flows through the widening.  The output's shape is the broadcast of
# q.batch_shape and p.batch_shape -- q.batch_shape for the usual single prior.

_LOG_2PI = math.log(2.0 * math.pi)


def _check_event_sizes(q: Distribution, p: Distribution) -> int:
    kq, kp = q.event_shape[-1], p.event_shape[-1]
    if kq != kp:
        raise ValueError(
            f"{type(q).__name__} posterior has event size {kq} but the {type(p).__name__} prior has "
            f"event size {kp}: they must describe the same latent space"
        )
    return kq


def _batch_shape(q: Distribution, p: Distribution) -> torch.Size:
    try:
        return torch.broadcast_shapes(q.batch_shape, p.batch_shape)
    except RuntimeError:
        raise ValueError(
            f"posterior batch shape {tuple(q.batch_shape)} does not broadcast with prior batch shape "
            f"{tuple(p.batch_shape)}"
        ) from None


def _solve_lower(L: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``L^-1 X`` for lower-triangular ``L (*pb, K, K)`` and ``X (*xb, K, N)``, batch dims broadcast.

    With one unbatched ``L`` (one prior shared by every document) the batch of
    right-hand sides is folded into columns: one triangular solve, no copies of ``L``.
    """
    if L.dim() == 2:
        k, n = X.shape[-2], X.shape[-1]
        batch = X.shape[:-2]
        count = batch.numel()  # explicit: -1 is ambiguous for an empty batch
        cols = X.reshape(count, k, n).permute(1, 0, 2).reshape(k, count * n)
        out = torch.linalg.solve_triangular(L, cols, upper=False)
        return out.reshape(k, count, n).permute(1, 0, 2).reshape(*batch, k, n)
    return torch.linalg.solve_triangular(L, X, upper=False)


def _scale_tril(d: MultivariateNormal) -> torch.Tensor:
    # the factor before broadcasting to batch_shape (what torch's own KL uses): a prior
    # shared by all documents stays (K, K) and is factorised once, at construction
    return getattr(d, "_unbroadcasted_scale_tril", d.scale_tril).to(torch.float64)


def _gaussian_terms(p: MultivariateNormal, loc_q: torch.Tensor):
    """``(L_p, (1/2)(K log 2 pi + log|Sigma_p|), |L_p^-1 (m - mu)|^2)`` in float64."""
    L = _scale_tril(p)
    k = L.shape[-1]
    diff = loc_q.to(torch.float64) - p.loc.to(torch.float64)
    maha = _solve_lower(L, diff.unsqueeze(-1)).squeeze(-1).pow(2).sum(-1)
    half_log_det = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
    return L, 0.5 * k * _LOG_2PI + half_log_det, maha


@register_cross_entropy(Independent, MultivariateNormal)
def diagonal_normal_mvn_cross_entropy(q: Independent, p: MultivariateNormal) -> torch.Tensor:
    """Exact ``H(q, p)`` of a diagonal Gaussian under a full-covariance Gaussian (the CTM critic).

    ``q = Independent(Normal(m, s), 1)``, ``p = MultivariateNormal(mu, Sigma)``, ``v = s^2``::

        H = 1/2 [K log 2 pi + log|Sigma| + tr(Sigma^-1 diag v) + (m - mu)^T Sigma^-1 (m - mu)].

    Uses ``p``'s Cholesky factor ``L``: ``log|Sigma| = 2 sum log L_kk``, the quadratic
    form is ``|L^-1 (m - mu)|^2`` (a triangular solve), and ``tr(Sigma^-1 diag v) =
    sum_k v_k [Sigma^-1]_kk`` with ``[Sigma^-1]_kk`` the squared column norms of
    ``L^-1`` -- sums of non-negative terms, no explicit inverse of ``Sigma``, nothing
    that cancels.  Raises :class:`NotImplementedError` for any other ``Independent``
    (base not ``Normal``, or ``reinterpreted_batch_ndims != 1``), so that
    :func:`cross_entropy` falls back; :class:`ValueError` for mismatched event sizes.
    """
    base = q.base_dist
    if not isinstance(base, Normal) or q.reinterpreted_batch_ndims != 1:
        raise NotImplementedError("only Independent(Normal(loc, scale), 1) has a closed form here")
    _check_event_sizes(q, p)
    shape = _batch_shape(q, p)
    L, const, maha = _gaussian_terms(p, base.loc)
    eye = torch.eye(L.shape[-1], dtype=torch.float64, device=L.device)
    precision_diag = torch.linalg.solve_triangular(L, eye, upper=False).pow(2).sum(-2)  # diag(Sigma^-1)
    trace = (precision_diag * base.scale.to(torch.float64).pow(2)).sum(-1)
    return (const + 0.5 * (trace + maha)).expand(shape)


@register_cross_entropy(MultivariateNormal, MultivariateNormal)
def mvn_cross_entropy(q: MultivariateNormal, p: MultivariateNormal) -> torch.Tensor:
    """Exact ``H(q, p)`` of two full-covariance Gaussians, directly from both Cholesky factors.

    ``H = 1/2 [K log 2 pi + log|Sigma_p| + |L_p^-1 L_q|_F^2 + |L_p^-1 (m_q - m_p)|^2]``.
    Unlike ``H(q) + KL(q||p)`` it never forms ``log|Sigma_q|`` (which the two terms add
    and subtract), so a concentrated posterior loses no digits.
    """
    _check_event_sizes(q, p)
    shape = _batch_shape(q, p)
    L, const, maha = _gaussian_terms(p, q.loc)
    trace = _solve_lower(L, _scale_tril(q)).pow(2).sum((-2, -1))
    return (const + 0.5 * (trace + maha)).expand(shape)


@register_cross_entropy(Dirichlet, Dirichlet)
def dirichlet_cross_entropy(q: Dirichlet, p: Dirichlet) -> torch.Tensor:
    """Exact ``H(Dir(g), Dir(a))`` (LDA code-mixing: gensim's gamma under the prior alpha).

    ``H = -log Gamma(sum a) + sum_k log Gamma(a_k) - sum_k (a_k - 1)(psi(g_k) - psi(sum g))``,
    from ``E_q log z_k = psi(g_k) - psi(sum g)``.  Unlike ``H(q) + KL(q||p)`` it never
    forms ``log B(g)``, which for a long document's concentrated posterior is large
    and would cancel between the two terms.
    """
    _check_event_sizes(q, p)
    shape = _batch_shape(q, p)
    g = q.concentration.to(torch.float64)
    a = p.concentration.to(torch.float64)
    log_beta = torch.lgamma(a).sum(-1) - torch.lgamma(a.sum(-1))
    expected_log_z = torch.digamma(g) - torch.digamma(g.sum(-1, keepdim=True))
    return (log_beta - ((a - 1.0) * expected_log_z).sum(-1)).expand(shape)
