"""LDA code-mixing critic (paper app. C, table 10, fig. 7), on gensim's variational LDA.

Generative process: with ``M`` topics (default 3, one per language), a document draws topic weights

    z ~ P_c(z) = Dirichlet(alpha),     each word  x_n ~ sum_i z_i phi_{i, x_n},

where ``alpha`` is learned (gensim's ``alpha="auto"``: an asymmetric Dirichlet prior, initialised at
``1/M`` as in the paper) and the topic-word distributions ``phi`` are point estimates.  The paper fits
the model with MALLET's collapsed Gibbs sampler; here it is gensim's online variational Bayes, whose
per-document variational posterior has the same form as the paper's ``P(z | t, x) = Dirichlet(alpha')``:

    P_c(z|x) ~= q(z) = Dirichlet(gamma(x)),   gamma(x) = alpha + expected topic counts of x's words,

``gamma`` from ``LdaModel.inference``.  The Latent NLL is the exact Dirichlet-under-Dirichlet
cross-entropy (the core's registry)

    T_c(x) = H(Dir(gamma), Dir(alpha))
           = -log Gamma(sum alpha) + sum_k log Gamma(alpha_k)
             - sum_k (alpha_k - 1) (digamma(gamma_k) - digamma(sum gamma)).

**M(x) = 1**: the critic has one latent variable per document (its topic weights ``z``; app. C scores
that latent alone, the word topic assignments are marginalised out), so the Latent PPL of a set is
``exp(mean T)``.  With ``alpha_k < 1`` the prior's mass sits at the corners of the simplex (one
language), so a document whose posterior sits between corners -- a code-mixed one -- has a *higher* T(x).

Words are lowercase unicode word tokens (``\\w+``), with no stop-word removal: function words are what
tells the languages apart (table 10).  The dictionary keeps words in at least ``no_below`` training
documents and at most ``no_above`` (0.95) of them, at most ``keep_n``.  A word of a scored document that
is not in the dictionary is counted in ``Projection.unknown`` (occurrences); a document with no known
word cannot be projected and is a counted failure with its reason.

Start (``init``).  gensim starts the topic-word variational parameters ``lambda = eta + sstats`` from a random
draw (``sstats ~ Gamma(100, 1/100)`` per entry, so every topic is near-uniform and the seed decides which topic
becomes which) and each training document's ``gamma`` from another draw.  ``init="nmf"`` starts from the data
instead: ``sstats_k = t_k phi_k`` with ``phi (M, V)`` and ``t (M,)`` the topics and expected token counts of
KL-NMF of the training counts from NNDSVD (:func:`critics.topics.nmf.nmf_topics`: the counts the E-step would
collect if NMF's topic responsibilities were the posterior's), then ``sync_state()``; and every document's
``gamma`` starts from the same vector, ``1`` (the mean of gensim's draw), in training as in inference.  Nothing
is then random: fits with different seeds are identical.  ``init="random"`` is gensim's seeded start
(``random_state=seed``), as before.

Inference for a scored document starts ``gamma`` from a fixed vector too, the same for every document: ``1``
after ``init="nmf"``, else ``seed``'s first draw (gensim's first row of ``RandomState(seed)``), so a document's
posterior depends on its words only, not on its batch or its place in it -- identical to ``inference([bow])``
with that start (what the tests check).

Convergence report.  After each pass the per-word bound of the training corpus,
``b = ELBO(corpus) / tokens`` (gensim's ``log_perplexity``: the variational lower bound on
``log p(corpus)`` per token, documents inferred from the fixed start above, so the report does not draw from
the training's random stream), is kept in ``bound_trace_``; the fit has converged when the last pass changed
it by at most ``tol`` relative, ``|b_P - b_{P-1}| <= tol |b_P|``; otherwise ``fit_warnings`` says so.

Files (pickle-free; gensim's own ``save`` pickles): ``lda/expElogbeta.npy`` (what inference uses),
``lda/lambda.npy`` (the variational topic-word parameters, for :func:`top_words`), ``lda/alpha.npy``,
``lda/eta.npy`` (read with ``allow_pickle=False``) and ``lda/dictionary.json`` (tokens in id order with
their document frequencies).  :meth:`LdaCodeMixCritic.load` rebuilds an ``LdaModel`` from them whose
``inference`` gives bit-identical ``gamma``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence

import numpy as np
import torch
from torch.distributions import Dirichlet

from critic.config import Range
from critic.critic import Critic, Projection
from critic.document import Document
from critic.registry import register_critic

from .nmf import nmf_topics

__all__ = ["LdaCodeMixCritic", "tokenize", "topic_purity", "TopicPurity", "top_words", "topic_labels",
           "TOKEN_PATTERN"]

TOKEN_PATTERN = re.compile(r"\w+")
"""Unicode word tokens; the text is lowercased first."""

_FILES = ("expElogbeta", "lambda", "alpha", "eta")


def tokenize(text: str) -> list[str]:
    """Lowercase unicode word tokens of ``text`` (regex ``\\w+``), function words kept."""
    return TOKEN_PATTERN.findall(text.lower())


class _SameStart:
    """Stands in for ``LdaModel.random_state``: every document's ``gamma`` starts from the same row ``(1, M)``
    where gensim draws ``gamma(100, 1/100, (n, M))``, and the jitter gensim adds to ``alpha`` when it logs
    topics (``rand``) is 0.  ``init``: ``"nmf"`` starts from ``1`` (the draw's mean), ``"random"`` from the first
    row ``RandomState(seed)`` would give."""

    def __init__(self, init: str, seed: int, num_topics: int):
        self.row = (np.ones((1, num_topics)) if init == "nmf" else
                    np.random.RandomState(seed).gamma(100.0, 1.0 / 100.0, (1, num_topics)))

    def gamma(self, shape, scale, size):
        n, m = size
        if (shape, scale, m) != (100.0, 1.0 / 100.0, self.row.shape[1]):
            raise RuntimeError(f"unexpected draw gamma({shape}, {scale}, {size}) in gensim's inference; "
                               "this critic was written for gensim 4.x")
        return np.repeat(self.row, n, axis=0)

    def rand(self, n: int) -> np.ndarray:
        return np.zeros(n)


def _with_start(model, start: _SameStart, call):
    """``call()`` with ``model.random_state`` replaced by ``start`` (restored after)."""
    saved = model.random_state
    model.random_state = start
    try:
        return call()
    finally:
        model.random_state = saved


class _PassBound:
    """A gensim training callback metric: after each pass, the per-word bound of the training ``corpus``
    (``log_perplexity``) with every document's ``gamma`` started from ``start``; kept in ``values``."""

    logger = None  # gensim's Callback: neither shell nor visdom logging
    title = "per-word bound"

    def __init__(self, corpus, start: _SameStart):
        self.corpus, self.start, self.values = corpus, start, []

    def __str__(self) -> str:
        return self.title

    def get_value(self, model, **_) -> float:
        value = _per_word_bound(model, self.corpus, self.start)
        self.values.append(value)
        return value


def _per_word_bound(model, corpus, start: _SameStart) -> float:
    """gensim's ``log_perplexity`` of ``corpus`` (bags of words): ``ELBO / tokens``, every document's ``gamma``
    inferred from ``start``."""
    return float(_with_start(model, start, lambda: model.log_perplexity(corpus)))


@register_critic("lda")
class LdaCodeMixCritic(Critic):
    """Topic weights under a learned Dirichlet prior, by gensim LDA (see the module docstring).

    Settings: ``num_topics`` (3: the languages), ``passes`` / ``iterations`` / ``chunksize`` /
    ``decay`` / ``offset`` (gensim's online training; the defaults make the three topics follow
    English, Spanish and French Wikipedia summaries), ``eta`` (topic-word prior: ``None`` is gensim's
    symmetric ``1/num_topics``; the paper fixed 0.01 for MALLET, which with gensim's variational
    inference on 300 summaries per language flagged code-mixing worse: AUC 0.82-0.87 against 0.97-0.99),
    ``gamma_threshold`` (inference convergence),
    ``no_below`` / ``no_above`` / ``keep_n`` (the dictionary filter), ``seed``, ``init`` (``"nmf"``: topics from
    KL-NMF of the counts and fixed ``gamma`` starts, the same fit for every seed; ``"random"``: gensim's seeded
    random start), ``tol`` (the fit has converged when the last pass changed the per-word training bound by at
    most ``tol`` relative).

    Fitted state: ``model_``, ``dictionary_``, ``fit_init_``, ``bound_trace_`` (the per-word training bound after
    each pass), ``fit_passes_``, ``fit_converged_``, ``training_docs_`` / ``training_skipped_``.
    """

    batch_size = 512
    headline = "latent_nll"  # a continuous latent (topic weights on the simplex): M(x) = 1
    extra = "lda"  # pip install 'critic[lda]': what it needs beyond the core
    needs = "free text (bag of words; sections are joined)"
    calibration_folds = 0  # a fold's topics are not the full fit's: cross-fitted T(x) is off scale (docs/outliers.md)

    def __init__(self, *, num_topics: Annotated[int, Range(min=2)] = 3, passes: Annotated[int, Range(min=1)] = 10,
                 iterations: Annotated[int, Range(min=1)] = 100, chunksize: Annotated[int, Range(min=1)] = 2000,
                 decay: Annotated[float, Range(min=0.5, max=1)] = 0.5, offset: Annotated[float, Range(gt=0)] = 1.0,
                 eta: Annotated[float | None, Range(gt=0)] = None,
                 gamma_threshold: Annotated[float, Range(gt=0)] = 1e-4, no_below: Annotated[int, Range(min=1)] = 2,
                 no_above: Annotated[float, Range(gt=0, max=1)] = 0.95, keep_n: Annotated[int, Range(min=1)] = 100_000,
                 seed: Annotated[int, Range(min=0)] = 0, init: Literal["nmf", "random"] = "nmf",
                 tol: Annotated[float, Range(gt=0)] = 1e-4):
        self.num_topics = num_topics
        self.passes = passes
        self.iterations = iterations
        self.chunksize = chunksize
        self.decay = decay
        self.offset = offset
        self.eta = eta
        self.gamma_threshold = gamma_threshold
        self.no_below = no_below
        self.no_above = no_above
        self.keep_n = keep_n
        self.seed = seed
        self.init = init
        self.tol = tol

    # ------------------------------------------------------------------ words
    def bows(self, docs: Sequence[Document]) -> tuple[list[list[tuple[int, int]]], list[int], list[int]]:
        """``(bags of words, known token counts, unknown token counts)`` of ``docs`` under the dictionary."""
        self._require_fitted()
        bows, known, unknown = [], [], []
        for doc in docs:
            bow, missing = self.dictionary_.doc2bow(tokenize(doc.text), return_missing=True)
            bows.append(bow)
            known.append(int(sum(c for _, c in bow)))
            unknown.append(int(sum(missing.values())))
        return bows, known, unknown

    def gamma(self, bows: Sequence[Sequence[tuple[int, int]]]) -> np.ndarray:
        """Variational Dirichlet parameters ``(B, M)`` of non-empty bags of words, in one ``inference`` call;
        each document starts from the same draw (see the module docstring), so rows do not depend on the batch."""
        self._require_fitted()
        if not len(bows):
            return np.zeros((0, self.num_topics))
        if any(not len(b) for b in bows):
            raise ValueError("gamma() needs bags with at least one known word")
        start = _SameStart(self.fit_init_, self.seed, self.num_topics)
        gamma, _ = _with_start(self.model_, start, lambda: self.model_.inference(list(bows)))
        return np.asarray(gamma, dtype=np.float64)

    def per_word_bound(self, docs: Sequence[Document]) -> float:
        """The variational lower bound on ``log p(docs)`` per known token, ``ELBO / tokens`` (gensim's
        ``log_perplexity``, each document inferred from the fixed start of :meth:`gamma`): on held-out documents,
        the held-out log-likelihood per token of the fit.  Documents with no known word are left out."""
        bows = [b for b in self.bows(docs)[0] if b]
        if not bows:
            raise ValueError(f"none of the {len(docs)} documents has a word in the LDA dictionary")
        return _per_word_bound(self.model_, bows, _SameStart(self.fit_init_, self.seed, self.num_topics))

    def latent_components(self) -> np.ndarray:
        """The topics' word distributions ``(K, V)`` (:mod:`critic.seeds` matches fits on them)."""
        self._require_fitted()
        return np.asarray(self.model_.get_topics(), dtype=np.float64)

    @property
    def alpha_(self) -> np.ndarray:
        """The learned Dirichlet prior ``alpha`` (``M``,)."""
        return np.asarray(self.model_.alpha, dtype=np.float64)

    # ------------------------------------------------------------------ fit
    def fit(self, docs: Sequence[Document], *, validation: Sequence[Document] | None = None) -> "LdaCodeMixCritic":
        """Build the dictionary and train the LDA model on ``docs`` from the ``init`` start, keeping the per-word
        training bound after each pass (see the module docstring); documents left with no word after the
        dictionary filter are counted in ``training_skipped_``.  ``validation`` is not used."""
        from gensim.corpora import Dictionary
        from gensim.models import LdaModel

        self.check_params()
        texts = [tokenize(d.text) for d in docs]
        dictionary = Dictionary(texts)
        dictionary.filter_extremes(no_below=self.no_below, no_above=self.no_above, keep_n=self.keep_n)
        if not len(dictionary):
            raise ValueError(f"no word is left in the dictionary of {len(docs)} training documents "
                             f"(no_below={self.no_below}, no_above={self.no_above})")
        corpus, skipped = [], {}
        for doc, tokens in zip(docs, texts):
            bow = dictionary.doc2bow(tokens)
            if bow:
                corpus.append(bow)
            else:
                skipped[doc.id] = ("no word tokens" if not tokens else
                                   f"none of its {len(tokens)} tokens is in the dictionary")
        if not corpus:
            raise ValueError(f"no training document has a word in the dictionary ({len(skipped)} skipped)")
        start = _SameStart(self.init, self.seed, self.num_topics)
        bound = _PassBound(corpus, start)
        model = LdaModel(corpus=None, id2word=dictionary, num_topics=self.num_topics, alpha="auto",
                         eta=self.eta, passes=self.passes, iterations=self.iterations, chunksize=self.chunksize,
                         decay=self.decay, offset=self.offset, gamma_threshold=self.gamma_threshold,
                         update_every=1, eval_every=None, random_state=self.seed, dtype=np.float64,
                         callbacks=[bound])
        if self.init == "nmf":
            phi, tokens = nmf_topics(_count_matrix(corpus, len(dictionary)), self.num_topics)
            model.state.sstats[...] = tokens[:, None] * phi
            model.sync_state()
            model.random_state = start
        model.update(corpus)
        model.callbacks = None
        self.dictionary_ = dictionary
        self.model_ = model
        self.fit_init_ = self.init
        self.bound_trace_ = list(bound.values)
        self.fit_passes_ = len(self.bound_trace_)
        self.fit_converged_ = _converged(self.bound_trace_, self.tol)
        self.training_documents_ = len(corpus)
        self.training_tokens_ = int(sum(c for bow in corpus for _, c in bow))
        self.training_skipped_ = skipped
        self.training_docs_ = len(corpus)
        return self

    # ------------------------------------------------------------------ project
    def project(self, docs: Sequence[Document]) -> Projection:
        self._require_fitted()
        bows, known, unknown = self.bows(docs)
        ids, kept, failures, counts = [], [], {}, {}
        for doc, bow, k, u in zip(docs, bows, known, unknown):
            if k == 0:
                failures[doc.id] = ("no word tokens" if u == 0 else
                                    f"none of its {u} word tokens is in the LDA dictionary")
                continue
            ids.append(doc.id)
            kept.append(bow)
            counts[doc.id] = (k, u)
        gamma = torch.as_tensor(self.gamma(kept), dtype=torch.float64, device=self.device)
        weights = (gamma / gamma.sum(-1, keepdim=True)).cpu().tolist()
        return Projection(
            doc_ids=ids,
            posterior=Dirichlet(gamma, validate_args=bool(ids)),  # torch cannot validate an empty batch
            latent_steps=torch.ones(len(ids), dtype=torch.float64),
            failures=failures,
            extras={"topic_weights": weights, "gamma": gamma.cpu().tolist(),
                    "known_tokens": [counts[i][0] for i in ids], "unknown_tokens": [counts[i][1] for i in ids]},
            unknown={i: counts[i][1] for i in ids},
        )

    def prior(self) -> Dirichlet:
        self._require_fitted()
        return Dirichlet(torch.as_tensor(self.alpha_, dtype=torch.float64, device=self.device))

    reason_share: float = 0.1
    """:meth:`reasons` names the topics with at least this weight (at most three)."""

    def reasons(self, result, document: Document | None) -> list[str]:
        """The document's topic mix: its topics of weight ``>=`` :attr:`reason_share` in ``gamma / sum gamma`` (the
        extras' ``topic_weights``, else the document projected again), heaviest first, at most three, each with
        its three most probable words -- ``"mixes topic 0 (the, of, and) 0.55 and topic 1 (de, la, que) 0.45"``
        (one topic: ``"in topic 1 (...) 0.97"``) -- then the prior's mean weight of the same topics, ``alpha_k / sum
        alpha``.  With ``alpha_k < 1`` the prior favours one topic per document (one language): a mix is what
        raises ``T(x)``."""
        weights = (getattr(result, "extras", None) or {}).get("topic_weights")
        if weights is None:
            if document is None:
                raise ValueError(f"the result of {result.id!r} has no 'topic_weights' extra and no document was given")
            projection = self.project([document])
            if not len(projection):
                raise ValueError(f"document {document.id!r} cannot be projected: {projection.failures[document.id]}")
            weights = projection.extras["topic_weights"][0]
        weights = [float(w) for w in weights]
        if len(weights) != self.num_topics:
            raise ValueError(f"{len(weights)} topic weights for {self.num_topics} topics")
        heavy = sorted(range(len(weights)), key=lambda k: (-weights[k], k))
        shown = [k for k in heavy if weights[k] >= self.reason_share][:3] or heavy[:1]
        words = top_words(self, 3)
        parts = [f"topic {k} ({', '.join(words[k])}) {weights[k]:.2f}" for k in shown]
        alpha = self.alpha_
        prior = ", ".join(f"topic {k} {alpha[k] / alpha.sum():.2f}" for k in shown)
        return [("mixes " + ", ".join(parts[:-1]) + " and " + parts[-1]) if len(parts) > 1 else f"in {parts[0]}",
                f"prior mean weight: {prior} (alpha {', '.join(f'{alpha[k]:.3g}' for k in shown)})"]

    # ------------------------------------------------------------------ state
    def training_used(self) -> int | None:
        return self.training_docs_

    def _fit_words(self) -> str:
        if not self.bound_trace_:
            return f"gensim LDA from {self.fit_init_} init; no convergence report (saved before it was kept)"
        trace = self.bound_trace_
        change = (f", last pass changed it by {_relative_change(trace):.1e} relative" if len(trace) >= 2 else "")
        verdict = "converged" if self.fit_converged_ else f"NOT converged (tol {self.tol:g})"
        return (f"gensim LDA from {self.fit_init_} init, {self.fit_passes_} passes, per-word training bound "
                f"{trace[-1]:.4f}{change}, {verdict}")

    def fit_summary(self, n_documents: int) -> str:
        """The base class's summary and the fit: init, passes, final per-word bound, converged or not."""
        self._require_fitted()
        return f"{super().fit_summary(n_documents)}; fit: {self._fit_words()}"

    def fit_warnings(self) -> list[str]:
        """Warns when the per-word training bound still changed by more than ``tol`` relative over the last
        pass (or there was one pass only): the topics, ``alpha`` and so every Latent NLL may still move."""
        self._require_fitted()
        warnings = super().fit_warnings()
        if self.fit_converged_ is False:
            warnings.append(f"the LDA fit did not converge ({self._fit_words()}): the per-word training bound "
                            f"changed by more than tol={self.tol:g} relative over the last pass; raise passes or tol")
        return warnings

    def _get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        return {"training_documents": self.training_documents_, "training_tokens": self.training_tokens_,
                "training_skipped": self.training_skipped_, "training_docs": self.training_docs_,
                "vocabulary": len(self.dictionary_), "fit_init": self.fit_init_, "bound_trace": self.bound_trace_,
                "fit_converged": self.fit_converged_}, {}

    def _set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        self.check_params()
        self.training_documents_ = int(state["training_documents"])
        self.training_tokens_ = int(state["training_tokens"])
        self.training_skipped_ = dict(state["training_skipped"])
        self.training_docs_ = state.get("training_docs")  # None in saves from before it was kept
        self._vocabulary = int(state["vocabulary"])
        # saves from before the convergence report: gensim's random start, no report (converged unknown)
        self.fit_init_ = str(state.get("fit_init", "random"))
        if self.fit_init_ not in ("nmf", "random"):
            raise ValueError(f"fit_init must be 'nmf' or 'random', got {self.fit_init_!r}")
        self.bound_trace_ = [float(b) for b in state.get("bound_trace", [])]
        self.fit_passes_ = len(self.bound_trace_)
        converged = state.get("fit_converged")
        self.fit_converged_ = None if converged is None else bool(converged)

    def _save_files(self, directory: Path) -> None:
        folder = directory / "lda"
        folder.mkdir()
        model, d = self.model_, self.dictionary_
        arrays = {"expElogbeta": model.expElogbeta, "lambda": model.state.get_lambda(), "alpha": model.alpha,
                  "eta": model.eta}
        for name, array in arrays.items():
            np.save(folder / f"{name}.npy", np.ascontiguousarray(array, dtype=np.float64), allow_pickle=False)
        tokens = [d[i] for i in range(len(d))]
        info = {"tokens": tokens, "dfs": [int(d.dfs.get(i, 0)) for i in range(len(d))],
                "num_docs": int(d.num_docs), "num_pos": int(d.num_pos), "num_nnz": int(d.num_nnz)}
        (folder / "dictionary.json").write_text(json.dumps(info, ensure_ascii=False) + "\n", encoding="utf-8")

    def _load_files(self, directory: Path) -> None:
        from gensim.corpora import Dictionary
        from gensim.models import LdaModel

        folder = directory / "lda"
        arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in _FILES}
        info = json.loads((folder / "dictionary.json").read_text(encoding="utf-8"))
        tokens = info["tokens"]
        if not (isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)
                and len(set(tokens)) == len(tokens)):
            raise ValueError("dictionary.json: 'tokens' must be a list of distinct strings")
        m, v = self.num_topics, len(tokens)
        if v != getattr(self, "_vocabulary", v):
            raise ValueError(f"dictionary.json has {v} tokens, the saved state says {self._vocabulary}")
        expected = {"expElogbeta": (m, v), "lambda": (m, v), "alpha": (m,), "eta": (v,)}
        for name, shape in expected.items():
            if arrays[name].shape != shape or arrays[name].dtype != np.float64:
                raise ValueError(f"{name}.npy has shape {arrays[name].shape} ({arrays[name].dtype}), "
                                 f"expected {shape} float64")
            if not np.all(np.isfinite(arrays[name])) or np.any(arrays[name] <= 0):
                raise ValueError(f"{name}.npy has values that are not positive and finite")
        dictionary = Dictionary()
        dictionary.token2id = {t: i for i, t in enumerate(tokens)}
        dictionary.dfs = {i: int(f) for i, f in enumerate(info["dfs"])}
        dictionary.num_docs, dictionary.num_pos, dictionary.num_nnz = (int(info[k]) for k in
                                                                       ("num_docs", "num_pos", "num_nnz"))
        model = LdaModel(corpus=None, id2word=dictionary, num_topics=m, alpha=arrays["alpha"], eta=arrays["eta"],
                         iterations=self.iterations, chunksize=self.chunksize, decay=self.decay, offset=self.offset,
                         gamma_threshold=self.gamma_threshold, eval_every=None, random_state=self.seed,
                         dtype=np.float64)
        model.state.sstats[...] = arrays["lambda"] - arrays["eta"]
        model.expElogbeta = arrays["expElogbeta"]
        self.dictionary_ = dictionary
        self.model_ = model


def _count_matrix(corpus: Sequence[Sequence[tuple[int, int]]], num_words: int):
    """The bags of words as a sparse document-word count matrix ``(N, V)`` (CSR)."""
    import scipy.sparse as sp

    indptr = np.cumsum([0] + [len(bow) for bow in corpus])
    ids = np.fromiter((w for bow in corpus for w, _ in bow), dtype=np.int64, count=int(indptr[-1]))
    counts = np.fromiter((c for bow in corpus for _, c in bow), dtype=np.float64, count=int(indptr[-1]))
    return sp.csr_matrix((counts, ids, indptr), shape=(len(corpus), num_words))


def _relative_change(trace: Sequence[float]) -> float:
    """``|b_P - b_{P-1}| / |b_P|`` of the last two passes."""
    return abs(trace[-1] - trace[-2]) / abs(trace[-1])


def _converged(trace: Sequence[float], tol: float) -> bool:
    """The relative-change rule: at least two passes and ``|b_P - b_{P-1}| <= tol |b_P|``."""
    return len(trace) >= 2 and _relative_change(trace) <= tol


# ---------------------------------------------------------------------- table 10 and purity


def top_words(critic: LdaCodeMixCritic, n: int = 20) -> list[list[str]]:
    """The ``n`` most probable words of each topic (paper table 10), most probable first."""
    critic._require_fitted()
    return [[w for w, _ in critic.model_.show_topic(k, topn=n)] for k in range(critic.num_topics)]


def topic_labels(critic: LdaCodeMixCritic, n: int = 3) -> list[str]:
    """A short label per topic: ``"topic k: w1 w2 w3"``."""
    return [f"topic {k}: " + " ".join(words) for k, words in enumerate(top_words(critic, n))]


@dataclass
class TopicPurity:
    """Documents of known languages assigned to their most probable topic (posterior mean).

    ``counts[k][language]``: documents of ``language`` whose largest topic weight is topic ``k``;
    ``topic_language[k]``: the language most of topic ``k``'s documents are in (``None`` if it has none);
    ``purity``: the share of documents in their topic's majority language; ``failures``: documents not
    projected, with why (left out of the counts).
    """

    purity: float
    topic_language: list[str | None]
    counts: list[dict[str, int]]
    n: int
    failures: dict[str, str] = field(default_factory=dict)

    def __float__(self) -> float:
        return self.purity


def topic_purity(critic: LdaCodeMixCritic, docs_by_language: Mapping[str, Sequence[Document]]) -> TopicPurity:
    """Purity of the critic's topics against known languages (see :class:`TopicPurity`)."""
    counts = [Counter() for _ in range(critic.num_topics)]
    failures: dict[str, str] = {}
    for language, docs in docs_by_language.items():
        for start in range(0, len(docs), critic.batch_size):
            p = critic.project(docs[start:start + critic.batch_size])
            failures.update(p.failures)
            for w in p.extras["topic_weights"]:
                counts[int(np.argmax(w))][language] += 1
    n = sum(sum(c.values()) for c in counts)
    majority = [c.most_common(1)[0] if c else (None, 0) for c in counts]
    return TopicPurity(purity=sum(m for _, m in majority) / n if n else float("nan"),
                       topic_language=[lang for lang, _ in majority],
                       counts=[{lang: c[lang] for lang in docs_by_language} for c in counts], n=n,
                       failures=failures)
