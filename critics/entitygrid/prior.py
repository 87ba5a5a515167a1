"""The entity grid's prior: a Markov chain over each entity's roles (Barzilay & Lapata 2008's role transition
probabilities, as a generative model), with salience classes.

For a grid of ``E`` entities in ``N`` sentences, ``r_e = (r_e1 .. r_eN)`` the role chain of entity ``e`` over the
four roles ``- X O S`` and ``c_e`` its salience class,

    P_c(z) = prod_e P(c_e) prod_{t=1}^{N} P(r_et | c_e, r_e,t-k .. r_e,t-1),

an order-``k`` chain (``k`` = ``order``) whose context before the first sentence is the start symbol ``^``, so
the first sentence's role is scored too.  The chains of the entities are independent given their classes; the
shape ``(E, N)`` is given (the prior scores role assignments of a grid, not how many entities or sentences it
has).  Salience (B&L): with ``salience = s > 1`` an entity mentioned in at least ``s`` sentences is *salient*
(class 1), the others not (class 0), each class with a chain of its own; with ``s = 1`` there is one class and
``P(c) = 1``.  The class is part of the latent: the posterior reads it off the grid, and ``P(c)`` is scored, so
``P_c`` is a distribution over (class, chain) pairs -- a deficient one, which also gives mass to a salient
chain with fewer than ``s`` mentions and to chains with none.

Both tables are counts with add-``alpha`` smoothing,

    P(c) = (n_c + alpha) / (n + C alpha),    P(r | c, h) = (n_{c,h,r} + alpha) / (n_{c,h} + 4 alpha),

``n_{c,h,r}`` the cells of class-``c`` entities with role ``r`` after the context ``h`` in the training grids.

Contexts are codes ``h = sum_{j=1}^{k} s_{t-j} 5^{j-1}`` over the five symbols ``- X O S ^`` (``^`` = 4), so the
role table is ``(C, 5^k, 4)`` (contexts that cannot occur, such as a role before ``^``, keep the uniform row of
the smoothing).  A grid becomes one flat index per cell into that table (:func:`cell_index`); scoring a batch is
one gather and one segment sum.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
import torch

from .grid import ABSENT, EntityGrid

__all__ = ["START", "SYMBOLS", "ROLES", "context_codes", "entity_classes", "cell_index", "count", "EntityGridPrior",
           "sentence_orders", "EXACT_ORDERS"]

ROLES = 4
"""Roles a cell can take: ``-``, ``X``, ``O``, ``S`` (:mod:`.grid`)."""
START = 4
"""The start symbol ``^`` of a context before the first sentence."""
SYMBOLS = 5
"""Symbols of a context: the roles and ``^``."""

EXACT_ORDERS = 720
"""A document with at most this many orders of its sentences (``N! <= 720``: up to 6 sentences) ranks its order among
all of them; a longer one among sampled orders."""


def context_codes(roles: np.ndarray, order: int) -> np.ndarray:
    """``(..., N)``: the code ``sum_{j=1}^{k} s_{t-j} 5^{j-1}`` of the ``k = order`` symbols before each cell of the
    role chains ``roles (..., N)`` (``^`` before the first sentence), in the smallest unsigned type that holds
    ``5^k - 1``."""
    dtype = np.min_scalar_type(SYMBOLS ** order - 1)
    codes = np.zeros(roles.shape, dtype=dtype)
    for j in range(order, 0, -1):  # Horner: the farthest symbol ends up with the highest power
        before = np.full(roles.shape, START, dtype=dtype)
        before[..., j:] = roles[..., :-j]
        codes = codes * dtype.type(SYMBOLS) + before
    return codes


def entity_classes(roles: np.ndarray, salience: int) -> np.ndarray:
    """``(...,)`` uint8 salience class of each chain of ``roles (..., N)``: 1 where mentioned in at least
    ``salience`` sentences (``salience > 1``), else 0; all 0 when ``salience == 1`` (one class)."""
    if salience == 1:
        return np.zeros(roles.shape[:-1], dtype=np.uint8)
    return ((roles != ABSENT).sum(-1) >= salience).astype(np.uint8)


def cell_index(roles: np.ndarray, classes: np.ndarray, order: int) -> np.ndarray:
    """``(..., N)`` index of each cell into the flattened ``(C, 5^k, 4)`` role table -- ``(class 5^k + context) 4 +
    role`` -- in the smallest unsigned type that holds the table's size (``uint8`` for ``k <= 2``)."""
    dtype = np.min_scalar_type(2 * SYMBOLS ** order * ROLES - 1)
    contexts = classes.astype(dtype)[..., None] * dtype.type(SYMBOLS ** order) + context_codes(roles, order)
    return contexts * dtype.type(ROLES) + roles.astype(dtype)


def count(grids: Sequence[EntityGrid], order: int, salience: int) -> tuple[np.ndarray, np.ndarray]:
    """``(class counts (C,), role counts (C, 5^k, 4))`` of the entities and cells of ``grids``, float64."""
    classes_n = 2 if salience > 1 else 1
    classes = [entity_classes(g.roles, salience) for g in grids]
    cells = [cell_index(g.roles, c, order).ravel().astype(np.int64) for g, c in zip(grids, classes)]
    size = classes_n * SYMBOLS ** order * ROLES
    role_counts = np.bincount(np.concatenate(cells) if cells else np.zeros(0, np.int64), minlength=size)
    class_counts = np.bincount(np.concatenate(classes).astype(np.int64) if classes else np.zeros(0, np.int64),
                               minlength=classes_n)
    return class_counts.astype(np.float64), role_counts.astype(np.float64).reshape(classes_n, SYMBOLS ** order, ROLES)


def sentence_orders(n: int, samples: int) -> np.ndarray:
    """``(P, n)`` orders of ``n`` sentences: all ``n!`` of them when there are at most :data:`EXACT_ORDERS` (the
    identity first), else ``samples`` uniform random ones (the generator seeded by ``n`` alone, so a document's
    orders depend on its length only)."""
    if math.factorial(n) <= EXACT_ORDERS:
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)
    rng = np.random.default_rng([0x5E7, n])
    return np.argsort(rng.random((samples, n)), axis=1)


class EntityGridPrior:
    """``P_c(z)`` over entity grids (module docstring): ``class_log_probs (C,)`` and ``role_log_probs (C, 5^k, 4)``
    float64 tensors (on the device they are given on), the chain's ``order`` ``k`` and the ``salience``
    threshold.  :meth:`log_prob` takes a sequence of :class:`~.grid.EntityGrid`."""

    def __init__(self, class_log_probs: torch.Tensor, role_log_probs: torch.Tensor, order: int, salience: int):
        classes = 2 if salience > 1 else 1
        if class_log_probs.shape != (classes,) or role_log_probs.shape != (classes, SYMBOLS ** order, ROLES):
            raise ValueError(f"tables of shapes {tuple(class_log_probs.shape)} and {tuple(role_log_probs.shape)} do "
                             f"not fit order {order} and salience {salience}: expected ({classes},) and "
                             f"({classes}, {SYMBOLS ** order}, {ROLES})")
        self.class_log_probs = class_log_probs.to(torch.float64)
        self.role_log_probs = role_log_probs.to(torch.float64)
        self.order = order
        self.salience = salience

    @classmethod
    def from_counts(cls, class_counts: np.ndarray, role_counts: np.ndarray, *, smoothing: float, order: int,
                    salience: int, device: torch.device | str = "cpu") -> "EntityGridPrior":
        """The add-``smoothing`` estimates of both tables from :func:`count`'s counts."""
        classes = (class_counts + smoothing) / (class_counts.sum() + smoothing * len(class_counts))
        roles = (role_counts + smoothing) / (role_counts.sum(-1, keepdims=True) + smoothing * ROLES)
        as_tensor = lambda a: torch.from_numpy(np.log(a)).to(device)  # noqa: E731
        return cls(as_tensor(classes), as_tensor(roles), order, salience)

    @property
    def device(self) -> torch.device:
        return self.role_log_probs.device

    def log_prob(self, grids: Sequence[EntityGrid]) -> torch.Tensor:
        """``(B,)`` float64: ``log P_c(z)`` of each grid, on the prior's device: every entity's class and every
        cell's role gathered from the tables at once and summed per grid."""
        classes = [entity_classes(g.roles, self.salience) for g in grids]
        cells = [cell_index(g.roles, c, self.order).ravel() for g, c in zip(grids, classes)]
        total = torch.zeros(len(grids), dtype=torch.float64, device=self.device)
        for table, parts in ((self.class_log_probs, classes), (self.role_log_probs.reshape(-1), cells)):
            index = torch.from_numpy(np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64))
            sizes = torch.tensor([len(part) for part in parts], dtype=torch.int64)
            owner = torch.repeat_interleave(torch.arange(len(parts)), sizes)
            total.index_add_(0, owner.to(self.device), table[index.to(self.device)])
        return total

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(log P(c) (C,), log P(r | c, h) flattened (C 5^k 4,))`` as numpy arrays on the CPU."""
        return self.class_log_probs.cpu().numpy(), self.role_log_probs.reshape(-1).cpu().numpy()

    def chain_nll(self, roles: np.ndarray) -> np.ndarray:
        """``(...)`` float64: ``-log P(c) - sum_t log P(r_t | c, h_t)`` of each chain of ``roles (..., N)``, on the
        CPU (numpy; the statistics and reasons, not ``T(x)``, read it).  The chains of a grid's entities sum to
        ``-log P_c(z)``."""
        class_table, role_table = self.tables()
        classes = entity_classes(roles, self.salience)
        return -(class_table[classes] + role_table[cell_index(roles, classes, self.order)].sum(-1))

    def order_nll(self, grid: EntityGrid, orders: np.ndarray, max_cells: int = 1 << 23) -> np.ndarray:
        """``(E, P)``: :meth:`chain_nll` of each entity with the sentences in each order ``orders (P, N)`` (position
        ``t`` reads sentence ``orders[p, t]``).  Entities with the same chain are scored once; orders are taken in
        groups of at most ``max_cells`` cells."""
        chains, inverse = np.unique(grid.roles, axis=0, return_inverse=True)
        step = max(1, max_cells // max(chains.size, 1))
        scores = np.concatenate([self.chain_nll(chains[:, orders[start:start + step]])
                                 for start in range(0, len(orders), step)], axis=1)
        return scores[inverse.reshape(-1)]
