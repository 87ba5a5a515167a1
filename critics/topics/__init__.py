"""Topic critics (paper sec. 6, app. C, F).

- :mod:`.ctm` / :mod:`.ctm_critic`: the correlated topic model in Pyro (sec. 6, app. F): prior N(mu, Sigma)
  over topic weights, per-document diagonal Gaussian posteriors, the exact Gaussian cross-entropy;
  :mod:`.ctm_plots` draws fig. 6 and lists table 14's outliers;
- :mod:`.lda`: LDA code-mixing with gensim (app. C): topics are languages, the posterior of a document's
  language mix is gensim's variational Dirichlet, the prior the learned Dirichlet; :mod:`.codemix` builds
  code-mixed documents with known answers and :mod:`.lda_plots` draws fig. 7.

Importing this package registers the critics and their report views (:mod:`.view`).
"""

from critic.views import register_view

from .ctm_critic import CorrelatedTopicCritic
from .lda import LdaCodeMixCritic, top_words, topic_purity

register_view(CorrelatedTopicCritic, "critics.topics.view:CtmView")  # imported when a report shows one
register_view(LdaCodeMixCritic, "critics.topics.view:LdaView")

__all__ = ["CorrelatedTopicCritic", "LdaCodeMixCritic", "top_words", "topic_purity"]
