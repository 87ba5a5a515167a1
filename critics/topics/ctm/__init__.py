"""The correlated topic model (Blei and Lafferty, 2006) in Pyro, as the paper's topic critic uses it (sec. 6, app. F).

Generative process for a document ``d`` with ``K`` topics over ``V`` word types::

    z_d ~ N(mu, Sigma),   Sigma = L L^T (L a learned Cholesky factor)
    theta_d = softmax(z_d)
    w_dn ~ Categorical(theta_d @ phi)       (topic assignments marginalised)
    phi_k = softmax(eta_k)                  (eta: learned logits, one row per topic)

so that a document's log-likelihood is the bag-of-words sum

    log p(x_d | z_d) = sum_w n_dw log (theta_d @ phi)_w

(the multinomial coefficient, constant in every parameter, is left out).  The
globals ``mu``, ``L`` and ``phi`` are point estimates.  ``phi`` has no prior by
default (maximum likelihood on the logits); ``topic_concentration=beta`` adds a
symmetric ``Dirichlet(beta)`` log-density on every ``phi_k`` (MAP; ``beta > 1``
smooths).

The package, a module a job: :mod:`.words` (the bag of words), :mod:`.model` (globals, likelihood, prior terms),
:mod:`.fit` (EM and SVI), :mod:`.infer` (new documents) and :mod:`.simulate` (known models, sampled documents).

Fitting (:func:`fit_ctm`), two methods.  Variational EM (``method="em"``, the critic's default): from topics
that KL-NMF of the counts gives (no randomness), each iteration fits every document's ``q(z_d) = N(m_d, diag
v_d)`` with the globals frozen (the Newton path below, warm-started), then sets ``mu, Sigma`` in closed form
(the inverse-Wishart MAP of :func:`closed_form_prior`: the maximum-likelihood ``Sigma`` grows without
settling) and the topics by a minorise-maximise step; it stops when the objective per document changes by at
most ``tol`` (relative).  Stochastic variational inference (``method="svi"``) with Pyro's ``Trace_ELBO`` (its
``differentiable_loss``, on our own tensors: nothing goes into Pyro's global parameter store), the same
diagonal Gaussian guide, documents subsampled by ``pyro.plate(..., subsample=idx)`` (the ELBO is scaled by
``N / B``); the per-document parameters are rows of ``(N, K)`` tables read through a sparse embedding lookup
and updated by ``SparseAdam`` (lazy Adam: only the rows of the minibatch move), the globals by ``Adam``; it
stops after ``steps`` steps or when the mean ELBO of the last ``window`` steps changes by less than ``tol``
(relative) from the window before.

Inference for new documents (:func:`infer_local`): the globals are frozen and
only ``m, log s`` of a batch of documents are fitted, many documents at once, to

    ELBO_d = E_q[log p(x_d | z)] - H(q_d, N(mu, Sigma)) + H(q_d)

with the two Gaussian terms in closed form and the likelihood term by Monte Carlo over
standard-normal draws shared by all documents (common random numbers); every batch starts from the
same seed, so a document's ``m, v`` do not depend on which other documents share its batch: fitting
documents one at a time gives the same numbers (the benchmark checks it) -- in float64, which the critic's
inference uses: in float32 the rounding of the batched products depends on the batch's shape, and a Newton
path's line searches and stopping step with it (man pages' T(x) moved by up to 0.79 nats).  Each document stops
on its own and leaves the batch, and batches group documents of similar width (:meth:`BagOfWords.batches`).  Two methods:

* ``adam`` (this function's default): ``num_samples`` fresh draws per step and Adam, up to 300 steps, a
  document stopped when its mean ELBO over a window of steps changes by less than ``tol`` relative; the
  noisy estimates often fail the test, and the iterate keeps Adam's jitter.
* ``newton`` (the critic's default): the draws are ``num_draws`` (24) fixed ones in antithetic pairs,
  moment-matched (every coordinate's mean square exactly 1), the same at every iteration, so the ELBO is a
  deterministic function of ``m, log s`` (the same estimator with its draws frozen).  An iteration takes a
  Newton step on ``m`` with the curvature ``Sigma^-1 + J(m)`` (``J`` the likelihood's Gauss-Newton matrix at
  the mean on the 24 topics where it is largest against the prior's, the diagonal of its exact Hessian on the
  others; solved without a ``K x K`` matrix per document) and a fixed-point step ``v_k = 1 / (Sigma^-1_kk -
  E[d^2_k log p])`` (Stein's lemma on the draws), halved until the bound does not fall.  Bound and gradients
  are computed in closed form over the words present only.  A document has converged when the step's
  predicted gain (Newton decrement ``1/2 g_m^T dm + 1/4 |g_log s|^2``) is at most ``tol`` (1e-5) times its
  bound; it then stops within about ``tol |bound|`` of the maximum.

Fixing the draws changes which bound is maximised, not the model.  Against a long reference (1,024 draws,
tol 1e-7) on the benchmark, the 24-draw Newton result's Latent NLLs are off by a median 0.074 nats (max
0.43), Adam's by 0.24 (max 0.99), at 3.3-4.7x Adam's documents per CPU second (docs/critics/topics.md).

Counts are kept as a CSR bag of words (:class:`BagOfWords`); a batch becomes a
dense ``(B, V)`` count matrix when ``V`` is at most four times its largest
number of distinct words per document (the product ``theta @ phi`` is then one
matrix multiplication), otherwise padded ``(B, L)`` word ids and counts (only the
``L`` columns of ``phi`` a document uses are gathered).  Topic-word probabilities enter products floored at
1e-30 (float32 denormals below ~1e-38 made the batched product 3x slower).

Softmax is invariant to adding a constant to all of ``z``: the model only sees
``z`` up to a shift along ``1``, so ``mu`` and ``Sigma`` are identified only
after centring, ``C z`` with ``C = I - 11^T / K`` (compare ``C Sigma C``, not
``Sigma``).  The prior keeps its full ``K`` dimensions (as the paper's ``z in R^M``).
"""

from __future__ import annotations

from .fit import FitResult, closed_form_prior, covariance_log_prior, fit_ctm, gauge_fixed_prior
from .infer import LocalResult, infer_local
from .model import CTMGlobals, PriorTerms, centre, local_elbo, log_likelihood
from .simulate import known_ctm, sample_documents
from .words import BagOfWords, WordBatch

__all__ = ["BagOfWords", "WordBatch", "CTMGlobals", "FitResult", "LocalResult", "fit_ctm", "infer_local",
           "log_likelihood", "local_elbo", "PriorTerms", "sample_documents", "known_ctm", "centre",
           "closed_form_prior", "covariance_log_prior", "gauge_fixed_prior"]
