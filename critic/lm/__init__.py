"""From a user's causal LM to generations that critics score (paper sec. 4, app. E).

* :mod:`.format`: documents <-> training text (W/ or W/O section titles, section marker, end token);
* :mod:`.model`: load SmolLM2 / any HF model / a saved folder, build a tiny GPT-2, add the tokens;
* :mod:`.windows`: the token stream and its fixed windows (truncated BPTT), summed NLL;
* :mod:`.finetune` (+ :mod:`.checkpoint`): resumable fine-tuning keeping the best-validation model;
* :mod:`.sampler` / :mod:`.sample` (+ :mod:`.generations`): batched, seeded, resumable sampling;
* :mod:`.ppl`: word-level perplexity;
* :mod:`.openings`: the share of samples that begin as the training documents begin;
* :mod:`.finite`, :mod:`.folder`, :mod:`.budget`: non-finite numbers, damaged model folders and runs
  that cannot fit in memory are errors naming what, where and why (never a NaN, a traceback or an OOM kill);
* :mod:`.offline`: the SmolLM2 GGUF (and other model files) that install offline as Python packages;
* :mod:`.cli`: ``critic lm finetune | sample | ppl``.

transformers is imported only when a model is loaded or built.
"""

from .finetune import FinetuneConfig, FinetuneResult, finetune
from .format import DocumentFormat, GenerationParseError
from .model import DEFAULT_LM, build_tiny_lm, load_lm, prepare_for_format, train_tokenizer
from .ppl import Perplexity, perplexity
from .sample import SampleReport, read_generations, sample

__all__ = ["DocumentFormat", "GenerationParseError", "DEFAULT_LM", "load_lm", "train_tokenizer", "build_tiny_lm",
           "prepare_for_format", "FinetuneConfig", "FinetuneResult", "finetune", "sample", "read_generations",
           "SampleReport", "perplexity", "Perplexity"]
