"""A user's critic with a Monte Carlo Latent NLL, loaded as a plugin (``critic --plugin THIS_FILE ...``): section
counts under a Cauchy prior, each projected as Uniform(n - 1/2, n + 1/2), whose cross-entropy has no closed form,
so every batch's seed shows in its numbers."""

import torch
from torch.distributions import Cauchy, Uniform

from critic import Critic, Projection, register_critic


@register_critic("soft-count")
class SoftCountCritic(Critic):
    """Cauchy prior over the section count; uniform posterior around it (Monte Carlo cross-entropy)."""

    mc_samples = 16
    batch_size = 5

    def fit(self, docs, *, validation=None):
        self.location_ = float(sum(len(d.sections) for d in docs) / max(1, len(docs)))
        return self

    def check(self, doc):
        return None if doc.sections else "document has no sections"

    def prior(self):
        return Cauchy(torch.tensor(self.location_, dtype=torch.float64), 2.0)

    def project(self, docs):
        n = torch.tensor([float(len(d.sections)) for d in docs], dtype=torch.float64)
        return Projection([d.id for d in docs], Uniform(n - 0.5, n + 0.5), torch.ones(len(docs), dtype=torch.float64))

    def _get_state(self):
        return {"location": self.location_}, {}

    def _set_state(self, state, tensors):
        self.location_ = state["location"]
