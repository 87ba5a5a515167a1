"""A complete critic in under 50 lines: how many sections does a document have?

Generative process: z = number of sections ~ Poisson(rate); the text given z is
not modelled.  Posterior: a point mass on the observed count.  So
T(x) = -log Poisson(n_sections(x); rate), one latent step per document.
"""

import torch
from torch.distributions import Poisson

from critic import Critic, Projection, register_critic
from critic.latent import PointMass


@register_critic("section-count")
class SectionCountCritic(Critic):
    """Poisson prior over the number of sections; point-mass posterior."""

    def __init__(self, min_rate: float = 1e-3):
        self.min_rate = min_rate  # settings only in __init__

    def fit(self, docs, *, validation=None):
        counts = torch.tensor([len(d.sections) for d in docs], dtype=torch.float64)
        self.rate_ = max(float(counts.mean()), self.min_rate)  # MLE of the Poisson rate
        return self

    def check(self, doc):
        return None if doc.sections else "document has no sections"

    def prior(self):
        return Poisson(torch.tensor(self.rate_, dtype=torch.float64, device=self.device))

    def project(self, docs):
        counts = torch.tensor([len(d.sections) for d in docs], dtype=torch.float64, device=self.device)
        return Projection(doc_ids=[d.id for d in docs], posterior=PointMass(counts),
                          latent_steps=torch.ones(len(docs), dtype=torch.float64))

    def _get_state(self):
        return {"rate": self.rate_}, {}

    def _set_state(self, state, tensors):
        self.rate_ = state["rate"]
