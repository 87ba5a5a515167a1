"""The correlated-topic-model critic ``ctm`` (paper sec. 6, app. F).

Latent: a document's topic coefficients ``z in R^K`` (``K = num_topics``, 100 as in the paper);
prior ``P_c(z) = N(mu, Sigma)`` with ``Sigma = L L^T``; words drawn from ``softmax(z) @ phi`` with
topic assignments marginalised (:mod:`critics.topics.ctm`).  The posterior of a document is the
variational ``q(z|x) = N(m, diag v)`` fitted with the globals frozen, and

    T(x) = H(q, P_c) = 1/2 [K log 2pi + log|Sigma| + tr(Sigma^-1 diag v) + (m - mu)^T Sigma^-1 (m - mu)],

exact through :func:`critic.latent.cross_entropy`.  With ``mean_only=True`` the posterior is a
point mass at ``m`` and ``T(x) = -log N(m; mu, Sigma)``: what the authors scored (only the
variational mean).

``M(x) = 1`` per document: the paper reports the topic critic's Latent NLL only (table 9, fig. 6),
with no per-step normalisation (a document has one latent, ``z``); so the set's Latent PPL is
``exp(mean T(x))``, reported for uniformity and not comparable across ``K``.

Vocabulary (app. F): lowercased word tokens (letters only; LaTeX commands such as ``\\xmath``
removed first), English stop words (:data:`STOP_WORDS`) dropped, then word types that occur in
more than ``max_doc_freq`` (50%) of the training documents dropped, and, optionally, those with
fewer than ``min_count`` training tokens.  In new documents the tokens of deliberately dropped
types (stop words, too frequent) are ignored; tokens of types never kept (unseen in training, or
below ``min_count``) are counted per document in ``Projection.unknown`` and ignored.  A document
with no in-vocabulary token is a failure with the reason.

Words outside the vocabulary (issue 22).  ``T(x)`` sees only the in-vocabulary tokens: a document
whose words are mostly unknown (off-topic text) moves the posterior little from the prior, and its
``T(x)`` is *small*, so the paper's right tail of ``T(x)`` ranks such documents as typical.  The
critic therefore reports, beside ``T(x)``, the share of the words it models that it has never seen,

    u(x) = U(x) / (N(x) + U(x)),

``N(x)`` the in-vocabulary tokens (those the posterior is fitted to), ``U(x)`` the unknown ones (stop
words and too-frequent types are in neither), as the extra ``oov_share`` and as an outlier statistic
(:attr:`~critic.critic.Critic.outlier_statistics`): the outlier p-value combines ``u(x)``'s rank among real
documents with ``T(x)``'s (:class:`critic.outliers.OutlierPool`).  ``T(x)`` and ``M(x)`` are the
paper's, unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Any, Literal, Sequence

import torch

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document
from critic.latent import PointMass
from critic.registry import register_critic

from .ctm import BagOfWords, CTMGlobals, fit_ctm, infer_local

__all__ = ["CorrelatedTopicCritic", "STOP_WORDS", "tokenize"]

STOP_WORDS = frozenset("""
a about above across after afterwards again against all almost alone along already also although always am
among amongst an and another any anyhow anyone anything anyway anywhere are around as at be became because
become becomes becoming been before beforehand behind being below beside besides between beyond both but by
can cannot could did do does doing done down due during each either else elsewhere enough etc even ever every
everyone everything everywhere except few for former formerly from further had has have having he hence her
here hereafter hereby herein hers herself him himself his how however i if in indeed into is it its itself
just last latter latterly least less made many may me meanwhile might mine more moreover most mostly much must
my myself namely neither never nevertheless next no nobody none noone nor not nothing now nowhere of off often
on once one only onto or other others otherwise our ours ourselves out over own per perhaps please quite rather
re really same seem seemed seeming seems several she should since so some somehow someone something sometime
sometimes somewhere still such than that the their theirs them themselves then thence there thereafter thereby
therefore therein thereupon these they this those though through throughout thru thus to together too toward
towards under until up upon us very via was we well were what whatever when whence whenever where whereafter
whereas whereby wherein whereupon wherever whether which while whither who whoever whole whom whose why will
with within without would yet you your yours yourself yourselves s t d ll m o re ve y don doesn didn isn wasn
aren weren won wouldn shouldn couldn hasn haven hadn
""".split())
"""English function words dropped before the vocabulary is built (a list written for this module)."""

_LATEX = re.compile(r"\\[A-Za-z]+\*?")
_WORD = re.compile(r"[^\W\d_]+")


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens (runs of letters) of ``text``, LaTeX commands removed."""
    return _WORD.findall(_LATEX.sub(" ", text).lower())


@register_critic("ctm")
class CorrelatedTopicCritic(Critic):
    """Correlated topic model critic (see the module docstring).

    Settings: ``num_topics`` (K); fitting (:func:`~critics.topics.ctm.fit_ctm`): ``fit_method`` (``"em"``,
    the default: variational EM, at most ``em_iterations`` iterations, each a Newton E-step on every training
    document and closed-form M-steps; ``"svi"``: ``steps`` SVI steps of ``train_batch_size`` documents with
    ``lr`` and ``num_particles``, the default before issue 21, whose fits disagree by seed), ``init``
    (``"nmf"``, the default: topics from KL-NMF of the counts from NNDSVD, the same for every seed;
    ``"random"``: a few seeded random documents), ``covariance_prior_weight`` and ``covariance_prior_scale``
    (``w``, ``s_0``: ``Sigma``'s closed-form step is the inverse-Wishart MAP ``(S + w N s_0 I) / (N + w N)``,
    ``S`` the posteriors' scatter; ``w = 0``: maximum likelihood, which does not settle; see
    docs/critics/topics.md), ``prior_step`` (SVI only: ``"gradient"``, Adam on ``mu, L``; ``"closed-form"``:
    once per pass), ``tol`` (relative change of the windowed objective: the stopping rule), ``topic_concentration``
    (a symmetric Dirichlet on each topic's word distribution, ``None``: none); inference for new
    documents: ``infer_method`` (``"newton"``, the default: Newton steps on the ELBO with ``infer_draws``
    (24) fixed draws; ``"adam"``, the default until the Newton path was 3x faster: Adam with ``infer_lr`` and
    ``infer_samples`` fresh draws per step; see :func:`~critics.topics.ctm.infer_local`), ``infer_steps``
    (most iterations or steps), ``infer_batch_size``, ``infer_tol`` (``infer_steps``, ``infer_tol``:
    ``None``, the method's default);
    ``seed``; ``mean_only`` (score the variational mean only, as the authors did); vocabulary:
    ``max_doc_freq``, ``min_count``, ``stop_words``.

    Fitted attributes: ``vocab_`` (word types, in id order), ``frequent_`` (types dropped for
    occurring in more than ``max_doc_freq`` of the training documents), ``globals_``
    (:class:`~critics.topics.ctm.CTMGlobals`), ``elbo_trace_`` (per-document ELBO per SVI step),
    ``fit_steps_``, ``fit_converged_``, ``fit_method_``, ``fit_init_`` (how it was fitted), ``training_docs_``,
    ``training_skipped_`` (id -> why),
    ``validation_elbo_per_token_`` (held-out ELBO per token, when ``validation`` was given).
    """

    batch_size = 4096  # documents per project(): inference runs them in infer_batch_size chunks
    chunk_documents = 4096  # a streamed chunk: one batch, about ten seconds of inference
    headline = "latent_nll"  # a continuous latent: M(x) = 1, a "PPL" would be exp of a density
    outlier_statistics = ("oov_share",)  # u(x): what T(x) cannot see (module docstring)
    size_model = "location-scale"  # T(x) is continuous: its law given the length shifts and scales (docs/outliers.md)
    calibration_folds = 0  # a fit takes about 35 s on 1,000 summaries: --valid only; --calibration-folds 5 cross-fits
    extra = "ctm"  # pip install 'critic[ctm]': what it needs beyond the core
    needs = "free text (bag of words; sections are joined)"

    def __init__(self, *, num_topics: Annotated[int, Range(min=2)] = 100, steps: Annotated[int, Range(min=1)] = 3000,
                 train_batch_size: Annotated[int, Range(min=1)] = 256, lr: Annotated[float, Range(gt=0, max=1)] = 0.05,
                 num_particles: Annotated[int, Range(min=1)] = 1, tol: Annotated[float, Range(min=0)] = 1e-5,
                 topic_concentration: Annotated[float | None, Range(gt=0)] = None,
                 fit_method: Literal["em", "svi"] = "em", init: Literal["nmf", "random"] = "nmf",
                 prior_step: Literal["gradient", "closed-form"] = "gradient",
                 em_iterations: Annotated[int, Range(min=1)] = 200,
                 covariance_prior_weight: Annotated[float, Range(min=0)] = 0.5,
                 covariance_prior_scale: Annotated[float, Range(gt=0)] = 1.0,
                 infer_steps: Annotated[int | None, Range(min=1)] = None,
                 infer_batch_size: Annotated[int, Range(min=1)] = 32,
                 infer_lr: Annotated[float, Range(gt=0, max=1)] = 0.05, infer_samples: Annotated[int, Range(min=1)] = 4,
                 infer_tol: Annotated[float | None, Range(gt=0)] = None,
                 infer_method: Literal["newton", "adam"] = "newton", infer_draws: Annotated[int, Range(min=1)] = 24,
                 seed: Annotated[int, Range(min=0)] = 0, mean_only: bool = False,
                 max_doc_freq: Annotated[float, Range(gt=0, max=1)] = 0.5, min_count: Annotated[int, Range(min=1)] = 1,
                 stop_words: bool = True):
        self.num_topics = num_topics
        self.steps = steps
        self.fit_method = fit_method
        self.init = init
        self.prior_step = prior_step
        self.em_iterations = em_iterations
        self.covariance_prior_weight = covariance_prior_weight
        self.covariance_prior_scale = covariance_prior_scale
        self.train_batch_size = train_batch_size
        self.lr = lr
        self.num_particles = num_particles
        self.tol = tol
        self.topic_concentration = topic_concentration
        self.infer_steps = infer_steps
        self.infer_batch_size = infer_batch_size
        self.infer_lr = infer_lr
        self.infer_samples = infer_samples
        self.infer_tol = infer_tol
        self.infer_method = infer_method
        self.infer_draws = infer_draws
        self.seed = seed
        self.mean_only = mean_only
        self.max_doc_freq = max_doc_freq
        self.min_count = min_count
        self.stop_words = stop_words

    # ------------------------------------------------------------------ vocabulary
    def _tokens(self, doc: Document) -> list[str]:
        tokens = tokenize(doc.text)
        return [t for t in tokens if t not in STOP_WORDS] if self.stop_words else tokens

    def _build_vocab(self, token_lists: list[list[str]]) -> None:
        df = Counter(w for tokens in token_lists for w in set(tokens))
        tf = Counter(w for tokens in token_lists for w in tokens)
        limit = self.max_doc_freq * len(token_lists)
        self.frequent_ = sorted(w for w, c in df.items() if c > limit)
        kept = [w for w in df if df[w] <= limit and tf[w] >= self.min_count]
        self.vocab_ = sorted(kept)
        self._index = {w: i for i, w in enumerate(self.vocab_)}
        self._ignored = set(self.frequent_)

    def bag_of_words(self, docs: Sequence[Document]) -> tuple[BagOfWords, list[str], dict[str, str], dict[str, int]]:
        """``(counts of the projectable documents, their ids, failures id -> why, unknown tokens per id)``."""
        index, ignored = self._index, self._ignored
        ids, rows, failures, unknown = [], [], {}, {}
        for doc in docs:
            tokens = self._tokens(doc)
            known = [index[t] for t in tokens if t in index]
            n_unknown = sum(1 for t in tokens if t not in index and t not in ignored)
            if not known:
                failures[doc.id] = (
                    "no word tokens" if not tokens else
                    f"none of its {len(tokens)} word tokens (after stop words) is in the vocabulary "
                    f"({n_unknown} unknown, {len(tokens) - n_unknown} too frequent in training)")
                continue
            ids.append(doc.id)
            rows.append(known)
            unknown[doc.id] = n_unknown
        return BagOfWords.from_ids(rows, len(self.vocab_)), ids, failures, unknown

    # ------------------------------------------------------------------ fit / project / prior
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None
            ) -> "CorrelatedTopicCritic":
        """Build the vocabulary and fit the CTM (``fit_method``) on ``docs``; with ``validation``, also record the
        held-out ELBO per token (``validation_elbo_per_token_``)."""
        self.check_params()
        self._build_vocab([self._tokens(d) for d in docs])
        if not self.vocab_:
            raise ValueError(f"no word type survives the vocabulary filters on {len(docs)} training documents")
        bow, ids, failures, _ = self.bag_of_words(docs)
        if not ids:
            raise ValueError("no training document has an in-vocabulary word")
        em = self.fit_method == "em"
        result = fit_ctm(bow, self.num_topics, steps=self.em_iterations if em else self.steps,
                         batch_size=self.train_batch_size, lr=self.lr, num_particles=self.num_particles, tol=self.tol,
                         seed=self.seed, topic_concentration=self.topic_concentration, device=self.device,
                         method=self.fit_method, init=self.init, prior_step=self.prior_step,
                         covariance_prior_weight=float(self.covariance_prior_weight),
                         covariance_prior_scale=float(self.covariance_prior_scale))
        self.globals_ = result.globals
        self.elbo_trace_ = list(result.elbo_trace)
        self.fit_steps_ = int(result.steps)
        self.fit_converged_ = bool(result.converged)
        self.fit_method_, self.fit_init_ = self.fit_method, self.init
        self.training_docs_ = len(ids)
        self.training_skipped_ = dict(failures)
        self.validation_elbo_per_token_ = None
        if validation:
            vbow, vids, _, _ = self.bag_of_words(validation)
            if vids:
                local = self._infer(vbow)
                self.validation_elbo_per_token_ = float(local.elbo.sum() / float(vbow.num_tokens.sum()))
        return self

    def _infer(self, bow: BagOfWords):
        """The local posteriors, in float64: in float32 a Newton path's rounding depends on the shapes of its batch
        and its stopping step with it (T(x) moved by up to 0.27 nats on man pages); in float64 a document's
        result is the same alone or in any batch (to 1e-10)."""
        return infer_local(self.globals_.to(dtype=torch.float64), bow, method=self.infer_method, steps=self.infer_steps, tol=self.infer_tol,
                           lr=self.infer_lr, num_samples=self.infer_samples, num_draws=self.infer_draws,
                           batch_size=self.infer_batch_size, seed=self.seed)

    def project(self, docs: Sequence[Document]) -> Projection:
        """Fit ``q(z|x) = N(m, diag v)`` to every document with an in-vocabulary word (globals frozen).

        Extras: ``tokens`` (in-vocabulary tokens, ``N(x)``), ``oov_share`` (``u(x) = U(x) / (N(x) + U(x))``,
        ``U(x)`` the unknown tokens: an outlier statistic beside ``T(x)``), ``top_topics`` (the 5 heaviest
        topics of ``softmax(m)`` as ``[topic, weight]``), ``top_topic_z`` (their :meth:`prior_z_scores`),
        ``inference_steps``, ``converged``."""
        self._require_fitted()
        bow, ids, failures, unknown = self.bag_of_words(docs)
        k = self.num_topics
        if not ids:
            empty = torch.zeros(0, k, dtype=torch.float64)
            return Projection(doc_ids=[], posterior=self._posterior(empty, empty + 1.0),
                              latent_steps=torch.zeros(0, dtype=torch.float64), failures=failures,
                              extras={"tokens": [], "oov_share": [], "top_topics": [], "top_topic_z": [],
                                      "inference_steps": [], "converged": []})
        local = self._infer(bow)
        m, v = local.m.to(torch.float64), local.v.to(torch.float64)
        posterior = self._posterior(m, v)
        weights = torch.softmax(m, -1).cpu()
        top = torch.topk(weights, min(5, k), dim=-1)
        top_z = torch.gather(self.prior_z_scores(m).cpu(), 1, top.indices)
        return Projection(
            doc_ids=ids,
            posterior=posterior,
            latent_steps=torch.ones(len(ids), dtype=torch.float64),
            failures=failures,
            extras={"tokens": [int(t) for t in bow.num_tokens],
                    "oov_share": [unknown[i] / (unknown[i] + int(t)) for i, t in zip(ids, bow.num_tokens)],
                    "top_topics": [[[int(i), round(float(w), 6)] for i, w in zip(ti, tw)]
                                   for ti, tw in zip(top.indices.tolist(), top.values.tolist())],
                    "top_topic_z": [[round(float(v), 6) for v in row] for row in top_z.tolist()],
                    "inference_steps": local.steps.tolist(),
                    "converged": local.converged.tolist()},
            unknown=unknown,
        )

    def _posterior(self, m: torch.Tensor, v: torch.Tensor):
        if self.mean_only:
            return PointMass(m, event_dim=1)
        return torch.distributions.Independent(torch.distributions.Normal(m, v.sqrt()), 1)

    def prior(self) -> torch.distributions.MultivariateNormal:
        self._require_fitted()
        g = self.globals_
        return torch.distributions.MultivariateNormal(g.mu.to(torch.float64), scale_tril=g.scale_tril.to(torch.float64))

    # ------------------------------------------------------------------ helpers for plots and reports
    def prior_z_scores(self, m: torch.Tensor) -> torch.Tensor:
        """``(m_k - mu_k) / sqrt(Sigma_kk)``: each topic coefficient of ``m (..., K)`` as a z-score under the
        prior's marginal ``N(mu_k, Sigma_kk)`` (float64)."""
        self._require_fitted()
        g = self.globals_
        mu = g.mu.to(device=m.device, dtype=torch.float64)
        sd = g.scale_tril.to(device=m.device, dtype=torch.float64).pow(2).sum(-1).sqrt()
        return (m.to(torch.float64) - mu) / sd

    def latent_components(self):
        """The topics' word distributions ``phi (K, V)`` (:mod:`critic.seeds` matches fits on them)."""
        self._require_fitted()
        return self.globals_.phi.double().cpu().numpy()

    def topic_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of every topic."""
        self._require_fitted()
        top = torch.topk(self.globals_.log_phi.cpu(), min(n, len(self.vocab_)), dim=-1).indices
        return [[self.vocab_[i] for i in row] for row in top.tolist()]

    # ------------------------------------------------------------------ report
    far_z: float = 2.0
    """The report marks a topic whose coefficient is more than this many prior standard deviations from
    the prior mean (:meth:`prior_z_scores`)."""

    reason_topics: int = 3
    """The most topics :meth:`reasons` names."""

    def reasons(self, result, document: Document | None) -> list[str]:
        """Why the document is unlikely, from its extras (else the document projected again):

        - when the share of unknown words ``u(x) > 0`` ranks it (its p-value in ``result.p_values`` is at most
          ``T/M``'s): ``"62% of the words it models are outside the vocabulary (u = 0.62, p = 0.004): its topic
          posterior cannot see them"``;
        - its heaviest topics (``top_topics``) farthest from the prior, ``|z| >`` :attr:`far_z` with ``z_k = (m_k -
          mu_k) / sqrt(Sigma_kk)`` (``top_topic_z``, :meth:`prior_z_scores`), largest ``|z|`` first, at most
          :attr:`reason_topics`, each ``"topic 3 (w1, w2, w3): weight 0.91, z = +3.40 under the prior"`` with its
          three most probable words; when none is that far and ``u(x)`` did not rank it, the farthest one."""
        names = ("top_topics", "top_topic_z", "oov_share")
        extras = getattr(result, "extras", None) or {}
        if not all(k in extras for k in names):
            if document is None:
                raise ValueError(f"the result of {result.id!r} lacks the extras {names} and no document was given")
            projection = self.project([document])
            if not len(projection):
                raise ValueError(f"document {document.id!r} cannot be projected: {projection.failures[document.id]}")
            extras = {k: projection.extras[k][0] for k in names}
        out = []
        p = getattr(result, "p_values", None) or {}
        u = float(extras["oov_share"])
        if u > 0 and "oov_share" in p and p["oov_share"] <= p.get("latent_nll_per_step", float("inf")):
            out.append(f"{u:.0%} of the words it models are outside the vocabulary (u = {u:.2f}, "
                       f"p = {p['oov_share']:.3g}): its topic posterior cannot see them")
        topics = sorted(zip(extras["top_topics"], extras["top_topic_z"]), key=lambda t: -abs(float(t[1])))
        far = [t for t in topics if abs(float(t[1])) > self.far_z] or ([] if out else topics[:1])
        words = self.topic_words(3)
        out += [f"topic {int(k)} ({', '.join(words[int(k)])}): weight {float(w):.2f}, z = {float(z):+.2f} under the "
                "prior" for (k, w), z in far[:self.reason_topics]]
        return out

    # ------------------------------------------------------------------ state
    def training_used(self) -> int:
        return self.training_docs_

    def _fit_words(self) -> str:
        unit = "EM iterations" if self.fit_method_ == "em" else "SVI steps"
        final = f"{self.elbo_trace_[-1]:.3f}" if self.elbo_trace_ else "none"
        objective = "objective (ELBO + Sigma's log prior)" if self.fit_method_ == "em" else "ELBO"
        return (f"{self.fit_method_} from {self.fit_init_} init, {self.fit_steps_} {unit}, final {objective} {final} "
                "per document, "
                + ("converged" if self.fit_converged_ else f"NOT converged (tol {self.tol:g})"))

    def fit_summary(self, n_documents: int) -> str:
        """The base class's summary and the fit: method, steps, final ELBO per document, converged or not."""
        self._require_fitted()
        return f"{super().fit_summary(n_documents)}; fit: {self._fit_words()}"

    def fit_warnings(self) -> list[str]:
        """Warns when the fit stopped on its step limit before the ELBO met the stopping rule: its globals (and
        so every document's Latent NLL) may still move with more steps or another seed."""
        self._require_fitted()
        warnings = super().fit_warnings()
        if not self.fit_converged_:
            limit = "em_iterations" if self.fit_method_ == "em" else "steps"
            warnings.append(f"the CTM fit did not converge ({self._fit_words()}): the windowed ELBO still changed by "
                            f"more than tol={self.tol:g} relative; raise {limit} or tol")
        return warnings

    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        state = {"vocab": self.vocab_, "frequent": self.frequent_, "fit_steps": self.fit_steps_,
                 "fit_method": self.fit_method_, "fit_init": self.fit_init_,
                 "fit_converged": self.fit_converged_, "training_docs": self.training_docs_,
                 "training_skipped": self.training_skipped_,
                 "validation_elbo_per_token": self.validation_elbo_per_token_}
        g = self.globals_
        tensors = {"mu": g.mu, "scale_tril": g.scale_tril, "log_phi": g.log_phi,
                   "elbo_trace": torch.tensor(self.elbo_trace_, dtype=torch.float64)}
        return state, tensors

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        self.check_params()
        vocab = [str(w) for w in state["vocab"]]
        k = self.num_topics
        mu, tril, log_phi = tensors["mu"], tensors["scale_tril"], tensors["log_phi"]
        if mu.shape != (k,) or tril.shape != (k, k) or log_phi.shape != (k, len(vocab)):
            raise ValueError(f"tensor shapes {tuple(mu.shape)}, {tuple(tril.shape)}, {tuple(log_phi.shape)} do not "
                             f"fit K={k} topics over {len(vocab)} word types")
        if not bool((torch.diagonal(tril) > 0).all()):
            raise ValueError("scale_tril has a non-positive diagonal")
        self.vocab_ = vocab
        self._index = {w: i for i, w in enumerate(vocab)}
        self.frequent_ = [str(w) for w in state["frequent"]]
        self._ignored = set(self.frequent_)
        self.globals_ = CTMGlobals(mu, tril, log_phi).to(self.device)
        self.elbo_trace_ = tensors["elbo_trace"].tolist()
        self.fit_steps_ = int(state["fit_steps"])
        self.fit_method_ = str(state.get("fit_method", "svi"))        # critics saved before issue 21: SVI
        self.fit_init_ = str(state.get("fit_init", "random"))
        self.fit_converged_ = bool(state["fit_converged"])
        self.training_docs_ = int(state["training_docs"])
        self.training_skipped_ = dict(state["training_skipped"])
        value = state.get("validation_elbo_per_token")
        self.validation_elbo_per_token_ = None if value is None else float(value)

    def _move(self, device: torch.device) -> None:
        self.globals_ = self.globals_.to(device)
