"""Topic critics (paper sec. 6, app. C, F).

- :mod:`.lda`: LDA code-mixing with gensim (app. C): topics are languages, the posterior of a document's
  language mix is gensim's variational Dirichlet, the prior the learned Dirichlet; :mod:`.codemix` builds
  code-mixed documents with known answers and :mod:`.lda_plots` draws fig. 7.

Importing this package registers the critics.
"""

from .lda import LdaCodeMixCritic, top_words, topic_purity

__all__ = ["LdaCodeMixCritic", "top_words", "topic_purity"]
