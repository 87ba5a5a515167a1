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
from torch.distributions import Distribution, constraints, kl_divergence

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

    The function takes ``(q, p)`` and returns a tensor of shape ``q.batch_shape``.
    Lookup picks the most specific registered pair along both MROs.
    """

    def decorator(fn):
        _CROSS_ENTROPY[(type_q, type_p)] = fn
        return fn

    return decorator


def _lookup(type_q: type, type_p: type):
    matches = [
        (tq, tp)
        for (tq, tp) in _CROSS_ENTROPY
        if issubclass(type_q, tq) and issubclass(type_p, tp)
    ]
    if not matches:
        return None
    best = min(matches, key=lambda m: (type_q.__mro__.index(m[0]), type_p.__mro__.index(m[1])))
    return _CROSS_ENTROPY[best]


def cross_entropy(q: Any, p: Prior) -> torch.Tensor:
    """Exact cross-entropy ``H(q, p) = -E_q log p`` with shape ``q.batch_shape``.

    Uses a registered formula for ``(type(q), type(p))``; else ``H(q) + KL(q||p)``
    where both are torch distributions and torch implements both terms; else
    raises :class:`NotImplementedError` (use :func:`monte_carlo_cross_entropy`).
    """
    fn = _lookup(type(q), type(p))
    if fn is not None:
        return fn(q, p)
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
