"""The :class:`Critic` base class: a prior ``P_c(z)`` and a posterior ``P_c(z|x)``.

A critic is fitted on real text, then projects and scores any text.  A
subclass implements :meth:`Critic.fit`, :meth:`Critic.posterior`,
:meth:`Critic.prior` and :meth:`Critic.latent_steps`; the Latent NLL

    T_c(x) = -E_{z ~ P_c(z|x)} log P_c(z) = H(P_c(z|x), P_c(z))

comes for free from :func:`critic.latent.cross_entropy` (exact where a formula
is registered, Monte Carlo with ``mc_samples`` samples otherwise).

Conventions follow scikit-learn: ``__init__`` only stores settings, ``fit``
returns ``self``, learned state ends in ``_``.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch.distributions import Distribution

from .document import Document
from .latent import cross_entropy, monte_carlo_cross_entropy

__all__ = ["Critic", "Scores", "NotFittedError", "resolve_device", "FORMAT_VERSION"]

FORMAT_VERSION = 1
"""Version of the on-disk format written by :meth:`Critic.save`."""


class NotFittedError(RuntimeError):
    """Raised when a critic is used before :meth:`Critic.fit`."""


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device named; CUDA only when asked, and an error, never a fallback, if absent."""
    dev = torch.device(device)
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise RuntimeError(f"device {device!r} was asked for but CUDA is not available here")
        if dev.index is not None and dev.index >= count:
            raise RuntimeError(f"device {device!r} was asked for but only {count} CUDA device(s) exist")
    return dev


@dataclass
class Scores:
    """Per-document Latent NLL ``T(x)`` and latent steps ``M(x)`` of one set.

    ``doc_ids``, ``latent_nll`` and ``latent_steps`` cover the projected
    documents, in input order.  ``skipped`` maps each document that could not
    be projected to the reason; ``unknown`` counts latent values outside the
    critic's known vocabulary per projected document (mapped to an explicit
    unknown state, never dropped).
    """

    doc_ids: list[str]
    latent_nll: np.ndarray
    latent_steps: np.ndarray
    skipped: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    estimator: str = "exact"

    @property
    def n(self) -> int:
        return len(self.doc_ids)

    @property
    def n_unknown(self) -> int:
        return int(sum(self.unknown.values()))


class Critic:
    """Base class of all critics.  See the module docstring for the contract.

    Class attributes a subclass sets: ``name`` (registry name) and, when its
    posterior/prior pair has no exact cross-entropy, ``mc_samples``.
    """

    name: str = "critic"
    mc_samples: int = 1000
    batch_size: int = 256

    # -------------------------------------------------------------- to implement
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "Critic":
        raise NotImplementedError

    def posterior(self, docs: Sequence[Document]) -> Distribution:
        """Batched ``P_c(z|x)`` for ``docs`` (batch shape ``(len(docs),)``)."""
        raise NotImplementedError

    def prior(self) -> Distribution:
        """``P_c(z)``."""
        raise NotImplementedError

    def latent_steps(self, docs: Sequence[Document]) -> torch.Tensor:
        """``M(x)`` per document, shape ``(B,)``: latent steps scored in the Latent PPL."""
        raise NotImplementedError

    def check(self, doc: Document) -> str | None:
        """Why ``doc`` cannot be projected (``None`` when it can).  Default: always can."""
        return None

    def unknown_count(self, doc: Document) -> int:
        """How many latent values of ``doc`` fall outside the known vocabulary (default 0)."""
        return 0

    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Learned state as (JSON-able dict, named tensors), for :meth:`save`."""
        raise NotImplementedError

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    # -------------------------------------------------------------- provided
    def latent_nll(self, docs: Sequence[Document]) -> torch.Tensor:
        """``T_c(x)`` per document, shape ``(B,)`` float64: ``H(P_c(z|x), P_c(z))``."""
        q, p = self.posterior(docs), self.prior()
        try:
            value = cross_entropy(q, p).to(torch.float64)
            self._estimator = "exact"
        except NotImplementedError:
            value, _ = monte_carlo_cross_entropy(q, p, num_samples=self.mc_samples)
            self._estimator = f"monte carlo ({self.mc_samples} samples)"
        return value

    @property
    def estimator(self) -> str:
        """How the last :meth:`latent_nll` was computed: ``"exact"`` or ``"monte carlo (S samples)"``.

        Subclasses that override :meth:`latent_nll` set ``self._estimator`` themselves.
        """
        return getattr(self, "_estimator", "exact")

    def score(self, docs: Sequence[Document], *, progress: bool = False) -> Scores:
        """Project every document it can; count and give the reason for the others."""
        self._require_fitted()
        kept: list[Document] = []
        skipped: dict[str, str] = {}
        for doc in docs:
            reason = self.check(doc)
            if reason is None:
                kept.append(doc)
            else:
                skipped[doc.id] = reason
        nll, steps = [], []
        batches = range(0, len(kept), self.batch_size)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"{self.name}: scoring", unit="batch")
        with torch.no_grad():
            for start in batches:
                chunk = kept[start:start + self.batch_size]
                nll.append(self.latent_nll(chunk).detach().cpu().numpy().astype(np.float64))
                steps.append(self.latent_steps(chunk).detach().cpu().numpy().astype(np.float64))
        unknown = {d.id: c for d in kept if (c := self.unknown_count(d))}
        return Scores(
            doc_ids=[d.id for d in kept],
            latent_nll=np.concatenate(nll) if nll else np.zeros(0),
            latent_steps=np.concatenate(steps) if steps else np.zeros(0),
            skipped=skipped,
            unknown=unknown,
            estimator=self.estimator,
        )

    def get_params(self) -> dict[str, Any]:
        """Settings given to ``__init__`` (scikit-learn style)."""
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self" and hasattr(self, k)}

    @property
    def is_fitted(self) -> bool:
        return any(k.endswith("_") and not k.startswith("_") for k in vars(self))

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() first")

    def save(self, path: str | Path) -> Path:
        """Write ``path/critic.json`` (settings, state, format version) and ``path/tensors.pt``.

        Tensors are stored as a plain ``name -> tensor`` mapping and read back
        with ``torch.load(weights_only=True)``: no pickled module paths.
        """
        self._require_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state, tensors = self._get_state()
        meta = {
            "format_version": FORMAT_VERSION,
            "critic": self.name,
            "params": self.get_params(),
            "state": state,
            "tensors": sorted(tensors),
        }
        torch.save({k: v.detach().cpu() for k, v in tensors.items()}, path / "tensors.pt")
        (path / "critic.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Critic":
        """Load a critic saved by :meth:`save`; dispatches on the registered name."""
        from .registry import get_critic

        path = Path(path)
        meta_file = path / "critic.json"
        if not meta_file.exists():
            raise FileNotFoundError(f"{path}: not a saved critic (no critic.json)")
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"{path}: critic format version {version!r}, this code reads {FORMAT_VERSION}")
        klass = get_critic(meta["critic"])
        if cls is not Critic and not issubclass(klass, cls):
            raise TypeError(f"{path} holds a {meta['critic']!r} critic, not a {cls.__name__}")
        tensors = torch.load(path / "tensors.pt", weights_only=True) if (path / "tensors.pt").exists() else {}
        critic = klass(**meta["params"])
        critic._set_state(meta["state"], tensors)
        return critic
