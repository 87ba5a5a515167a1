"""Posterior by gradient steps: length level z ~ N(mu, sigma^2), y_k = log(1 + words in section k) ~ N(z, tau^2).
q(z) = N(m, s^2) maximises (Rprop on m, log s; a batch at once) the ELBO -sum_k ((y_k - m)^2 + s^2) / 2tau^2
- ((m - mu)^2 + s^2) / 2sigma^2 + log s + c; conjugate, so q is the exact posterior.  T(x) = H(q) + KL(q || p)."""

import torch
from torch.distributions import Normal

from critic import Critic, Projection, register_critic


@register_critic("gaussian-length")
class GaussianLengthCritic(Critic):
    """Normal prior over a document's log section length; Normal posterior fitted per document."""

    def __init__(self, tau: float = 0.5, steps: int = 100):
        self.tau, self.steps = tau, steps

    def log_lengths(self, docs):
        """``y (sum_x K_x,)``: log(1 + words) of every section, document after document; ``k (B,)``: each K_x."""
        y = torch.tensor([len(s.text.split()) for d in docs for s in d.sections], dtype=torch.float64)
        return y.log1p().to(self.device), torch.tensor([len(d.sections) for d in docs], device=self.device)

    def fit(self, docs, *, validation=None):  # prior: MLE of a Normal over documents' mean log lengths
        y, k = self.log_lengths([d for d in docs if d.sections])
        means = torch.segment_reduce(y, "mean", lengths=k)
        self.mu_, self.sigma_ = float(means.mean()), float(means.std(unbiased=False))
        return self

    def prior(self):
        return Normal(*torch.tensor([self.mu_, self.sigma_], dtype=torch.float64, device=self.device))

    def project(self, docs):  # a document without sections keeps the prior as its posterior
        (y, k), mu, sigma = self.log_lengths(docs), self.prior().loc, self.prior().scale
        doc = torch.arange(len(docs), device=self.device).repeat_interleave(k)  # each section's document
        m, log_s = (t.repeat(len(docs)).requires_grad_() for t in (mu, sigma.log()))
        opt = torch.optim.Rprop([m, log_s], lr=0.1)  # deterministic full-batch gradients suit Rprop
        for _ in range(self.steps):
            s2 = (2 * log_s).exp()  # loss = -ELBO
            loss = (((y - m[doc]) ** 2 + s2[doc]).sum() / (2 * self.tau ** 2)
                    + ((m - mu) ** 2 + s2).sum() / (2 * sigma ** 2) - log_s.sum())
            m.grad, log_s.grad = torch.autograd.grad(loss, [m, log_s])
            opt.step()
        return Projection([d.id for d in docs], Normal(m.detach(), log_s.detach().exp()), torch.ones_like(m.detach()))

    def _get_state(self):
        return {"mu": self.mu_, "sigma": self.sigma_}, {}

    def _set_state(self, state, tensors):
        self.mu_, self.sigma_ = state["mu"], state["sigma"]
