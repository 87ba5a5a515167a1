"""Section-text classifiers: the per-section factors ``P_c(z_m | x^m)`` of the paper's posterior.

Paper sec. 4 approximates the section posterior by independent factors,

    P_c(z | x) ~= prod_m P_c(z_m | x^m),

one classifier applied to each section's text ``x^m`` (app. E fine-tunes BERT).
A :class:`SectionClassifier` maps ``N`` texts to ``(N, C)`` float64 log-probabilities
over ``C`` section types.  Every classifier here is linear in some features
``phi(x)`` (TF-IDF n-grams, or a mean-pooled encoder state):

    s(x) = W phi(x) + b                   (C,) logits
    log P(z = c | x) = log softmax_c(s(x) / T)

with ``T > 0`` fitted after training by *temperature scaling* (Guo et al. 2017):
``T`` minimises the validation NLL ``(1/N) sum_n -log softmax(s(x_n)/T)[y_n]``.
The NLL is convex in ``1/T`` (a log-sum-exp of linear functions minus a linear
function), hence unimodal in ``log T``; a bounded Brent search over
``log T in [log 1e-2, log 1e2]`` finds it and ``T = 1`` is kept when it is no
worse, so the calibrated validation NLL never exceeds the uncalibrated one.
Temperature scaling leaves the argmax unchanged: ``valid_accuracy_`` is the
held-out accuracy of the classifier, with or without calibration.

A class with no training example gets ``W_c = 0, b_c = -inf`` (probability 0);
validation sections of such classes count as errors and are left out of the
temperature fit (their NLL is infinite for every ``T``).

Each distinct text of a call is classified once (duplicated boilerplate
sections are common: man-page LIBRARY sections, Wikipedia stubs).

Persistence has no pickle: ``classifier.json`` (kind, settings, fitted
numbers), ``tensors.safetensors`` (``W``, ``b`` and the TF-IDF ``idf``), the
TF-IDF vocabulary as a JSON list, and a fine-tuned encoder with its tokenizer
through ``save_pretrained`` in ``encoder/``.

scikit-learn and transformers are imported when a classifier is fitted or
loaded, never at import time.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from critic.io import atomic_write_text

__all__ = ["SectionClassifier", "TfidfClassifier", "EncoderClassifier", "CLASSIFIERS", "make_classifier",
           "load_classifier", "fit_temperature", "bf16_supported"]

FORMAT_VERSION = 1
TEMPERATURE_BOUNDS = (1e-2, 1e2)
_META = "classifier.json"
_TENSORS = "tensors.safetensors"


def fit_temperature(logits: torch.Tensor, labels: np.ndarray | torch.Tensor,
                    bounds: tuple[float, float] = TEMPERATURE_BOUNDS) -> tuple[float, float, float]:
    """``(T, NLL(T), NLL(1))``: the temperature minimising the mean NLL of ``labels`` under
    ``softmax(logits / T)``, ``logits (N, C)``, ``labels (N,)``.

    Rows whose label has logit ``-inf`` (a class the classifier cannot predict) are left out;
    ``T = 1`` is returned when no row is left or when the search finds nothing better.
    """
    from scipy.optimize import minimize_scalar

    logits = logits.to(torch.float64)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    keep = torch.isfinite(logits.gather(1, y.view(-1, 1)).squeeze(1)) if len(y) else y.bool()
    logits, y = logits[keep], y[keep]
    if not len(y):
        return 1.0, math.nan, math.nan

    def nll(log_t: float) -> float:
        lp = torch.log_softmax(logits / math.exp(log_t), dim=-1)
        return float(-lp.gather(1, y.view(-1, 1)).mean())

    at_one = nll(0.0)
    found = minimize_scalar(nll, bounds=(math.log(bounds[0]), math.log(bounds[1])), method="bounded",
                            options={"xatol": 1e-6})
    if not found.fun < at_one:
        return 1.0, at_one, at_one
    return float(math.exp(found.x)), float(found.fun), at_one


def _check_data(texts: Sequence[str], labels, num_classes: int, where: str) -> tuple[list[str], np.ndarray]:
    texts = list(texts)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if len(texts) != len(labels):
        raise ValueError(f"{where}: {len(texts)} texts but {len(labels)} labels")
    if not texts:
        raise ValueError(f"{where}: no texts (a classifier needs at least one labelled section)")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"{where}: labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    return texts, labels


def _fit_linear(features, labels: np.ndarray, num_classes: int, **options) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression on ``features (N, D)`` (dense or sparse):
    ``W (C, D)``, ``b (C,)`` float64 over all ``num_classes``, ``b_c = -inf`` for absent classes.

    One present class gives ``W = 0`` and ``b = 0`` for it; two give the binary model as
    ``W = [0, w]``, ``b = [0, b]`` (the same softmax).
    """
    present = np.unique(labels)
    weight = np.zeros((num_classes, features.shape[1]))
    bias = np.full(num_classes, -np.inf)
    if len(present) == 1:
        bias[present] = 0.0
        return weight, bias
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(**options).fit(features, labels)
    coef, intercept = model.coef_, model.intercept_
    if len(present) == 2:
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    weight[model.classes_] = coef
    bias[model.classes_] = intercept
    return weight, bias


def _linear_logits(features, weight: np.ndarray, bias: np.ndarray) -> torch.Tensor:
    """``(N, C)`` float64 logits ``phi W^T + b`` (``phi`` dense or scipy sparse)."""
    out = np.asarray(features @ weight.T, dtype=np.float64) + bias
    return torch.from_numpy(np.ascontiguousarray(out))


class SectionClassifier:
    """Base class: ``fit`` -> calibrated ``log_proba``; ``save`` / ``load`` without pickle.

    A subclass sets ``kind`` and implements ``_train(texts, labels, num_classes)`` and
    ``_logits(texts) -> (N, C) float64`` (uncalibrated), and ``_state`` / ``_restore``
    (and ``_save_extra`` / ``_load_extra``) for persistence.  ``__init__`` only stores settings.

    Fitted attributes: ``num_classes_``, ``temperature_``, ``valid_accuracy_``,
    ``valid_nll_`` (mean validation NLL at ``temperature_``), ``valid_nll_uncalibrated_``
    (at ``T = 1``), ``n_train_``, ``n_valid_``.
    """

    kind: ClassVar[str] = ""

    # ------------------------------------------------------------ to implement
    def _train(self, texts: list[str], labels: np.ndarray, num_classes: int) -> None:
        raise NotImplementedError

    def _logits(self, texts: list[str]) -> torch.Tensor:
        raise NotImplementedError

    def _state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        raise NotImplementedError

    def _restore(self, state: dict[str, Any], tensors: dict[str, torch.Tensor], directory: Path) -> None:
        raise NotImplementedError

    def _save_extra(self, directory: Path) -> None:
        """Files beyond the JSON and tensors (a fine-tuned encoder)."""

    def to(self, device: str | torch.device) -> "SectionClassifier":
        """Compute on ``device`` (only the encoder classifier uses it); returns self."""
        return self

    # ------------------------------------------------------------ fitting
    def fit(self, texts: Sequence[str], labels, num_classes: int, *, valid_texts: Sequence[str],
            valid_labels) -> "SectionClassifier":
        """Train on ``(texts, labels)``, labels in ``[0, num_classes)``; fit ``T`` and score on validation."""
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        texts, labels = _check_data(texts, labels, num_classes, "training data")
        valid_texts, valid_labels = _check_data(valid_texts, valid_labels, num_classes, "validation data")
        self._train(texts, labels, num_classes)
        self.num_classes_ = num_classes
        self.temperature_ = 1.0
        logits = self.logits(valid_texts)
        self.temperature_, self.valid_nll_, self.valid_nll_uncalibrated_ = fit_temperature(logits, valid_labels)
        self.valid_accuracy_ = float((logits.argmax(-1).numpy() == valid_labels).mean())
        self.n_train_, self.n_valid_ = len(texts), len(valid_texts)
        return self

    # ------------------------------------------------------------ prediction
    def logits(self, texts: Sequence[str]) -> torch.Tensor:
        """Uncalibrated ``(N, C)`` float64 logits; each distinct text computed once."""
        texts = list(texts)
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return torch.zeros((0, self.num_classes_), dtype=torch.float64)
        out = self._logits(distinct)
        if len(distinct) == len(texts):
            return out
        where = {t: i for i, t in enumerate(distinct)}
        return out[torch.tensor([where[t] for t in texts])]

    def log_proba(self, texts: Sequence[str]) -> torch.Tensor:
        """``(N, C)`` float64 calibrated ``log P(z | x) = log_softmax(logits / T)`` (rows sum to 1 in
        probability; ``-inf`` for classes without training examples)."""
        return torch.log_softmax(self.logits(texts) / self.temperature_, dim=-1)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """``(N,)`` MAP class of each text."""
        return self.logits(texts).argmax(-1).numpy()

    # ------------------------------------------------------------ persistence
    def get_params(self) -> dict[str, Any]:
        """Settings given to ``__init__`` (all but the runtime ``device``)."""
        names = inspect.signature(type(self).__init__).parameters
        return {k: getattr(self, k) for k in names if k not in ("self", "device")}

    def save(self, directory: str | Path) -> Path:
        """Write ``classifier.json``, ``tensors.safetensors`` and any files of the kind into ``directory``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state, tensors = self._state()
        fitted = {k: getattr(self, k) for k in ("num_classes_", "temperature_", "valid_accuracy_", "valid_nll_",
                                               "valid_nll_uncalibrated_", "n_train_", "n_valid_")}
        meta = {"format_version": FORMAT_VERSION, "kind": self.kind, "params": self.get_params(),
                "fitted": {k: _json_number(v) for k, v in fitted.items()}, "state": state}
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(directory / _TENSORS))
        self._save_extra(directory)
        atomic_write_text(directory / _META, json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, device: str | torch.device = "cpu") -> "SectionClassifier":
        """Read a classifier written by :meth:`save` (any kind when called on the base class)."""
        from safetensors.torch import load_file

        directory = Path(directory)
        meta_file = directory / _META
        if not meta_file.is_file():
            raise ValueError(f"{directory}: not a saved section classifier (no {_META})")
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{meta_file}: format version {meta.get('format_version')!r}, this code reads "
                             f"{FORMAT_VERSION}")
        klass = CLASSIFIERS.get(meta.get("kind"))
        if klass is None or not issubclass(klass, cls):
            raise ValueError(f"{meta_file}: holds a {meta.get('kind')!r} classifier, not a {cls.__name__}")
        clf = klass(**meta["params"])
        for k, v in meta["fitted"].items():
            setattr(clf, k, math.nan if v is None else v)
        clf._restore(meta["state"], load_file(str(directory / _TENSORS)), directory)
        return clf.to(device)


def _json_number(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


# ---------------------------------------------------------------------------------------- TF-IDF


class TfidfClassifier(SectionClassifier):
    """TF-IDF word n-grams + multinomial logistic regression: the fast default.

    ``phi(x)`` = L2-normalised TF-IDF of the word 1..2-grams of ``x[:max_chars]`` with sublinear
    tf ``1 + log tf`` and smoothed idf ``1 + log((1 + n) / (1 + df))``, over the n-grams in at
    least ``min_df`` training sections; ``W, b`` by L2-penalised (``C``) logistic regression
    (saga, seeded).  ``max_chars`` bounds the text looked at (the encoder's ``max_length``
    tokens are about as many characters); ``None`` keeps whole sections.
    """

    kind = "tfidf"

    def __init__(self, C: float = 10.0, ngram_range: tuple[int, int] = (1, 2), min_df: int = 2,
                 max_chars: int | None = 1000, max_iter: int = 1000, tol: float = 1e-3, seed: int = 0):
        self.C = C
        self.ngram_range = tuple(ngram_range)
        self.min_df = min_df
        self.max_chars = max_chars
        self.max_iter = max_iter
        self.tol = tol
        self.seed = seed

    def _cut(self, texts: list[str]) -> list[str]:
        return texts if self.max_chars is None else [t[:self.max_chars] for t in texts]

    def _vectorizer(self, vocabulary: list[str] | None = None):
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(ngram_range=self.ngram_range, sublinear_tf=True, min_df=self.min_df,
                               dtype=np.float64, vocabulary=vocabulary)

    def _train(self, texts, labels, num_classes):
        vec = self._vectorizer()
        try:
            features = vec.fit_transform(self._cut(texts))
        except ValueError as exc:  # empty vocabulary
            raise ValueError(f"TF-IDF classifier: no usable term in the {len(texts)} training sections "
                             f"(min_df={self.min_df}): {exc}") from None
        self.vectorizer_ = vec
        self.weight_, self.bias_ = _fit_linear(features, labels, num_classes, C=self.C, solver="saga",
                                               tol=self.tol, max_iter=self.max_iter, random_state=self.seed)

    def _logits(self, texts):
        return _linear_logits(self.vectorizer_.transform(self._cut(texts)), self.weight_, self.bias_)

    def _state(self):
        vocab = sorted(self.vectorizer_.vocabulary_, key=self.vectorizer_.vocabulary_.get)
        return ({"vocabulary": vocab},
                {"idf": torch.from_numpy(self.vectorizer_.idf_), "weight": torch.from_numpy(self.weight_),
                 "bias": torch.from_numpy(self.bias_)})

    def _restore(self, state, tensors, directory):
        vocab = list(state["vocabulary"])
        self.vectorizer_ = self._vectorizer(vocab)
        self.vectorizer_.idf_ = tensors["idf"].numpy()
        self.weight_, self.bias_ = tensors["weight"].numpy(), tensors["bias"].numpy()
        if self.weight_.shape != (self.num_classes_, len(vocab)):
            raise ValueError(f"weight has shape {self.weight_.shape}, expected ({self.num_classes_}, {len(vocab)})")


# ---------------------------------------------------------------------------------------- encoder


@functools.lru_cache(maxsize=4)
def bf16_supported(device: str = "cpu") -> bool:
    """Whether bf16 autocast works on ``device``, tried and verified on a small product.

    CPU: oneDNN must report bf16 support (AVX512-BF16 / AMX, or emulation it accepts); then a
    ``(64, 64)`` linear layer under autocast must return bf16 values within 2% of fp32.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        if check is not None and not check():
            return False
        gen = torch.Generator().manual_seed(0)
        layer = torch.nn.Linear(64, 64)
        x = torch.randn(8, 64, generator=gen)
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
            low = layer(x)
        high = layer(x)
        return low.dtype == torch.bfloat16 and bool(
            ((low.float() - high).norm() <= 0.02 * high.norm()).item())
    except (RuntimeError, NotImplementedError):
        return False


def _mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B, D)`` mean of ``hidden (B, T, D)`` over the positions where ``mask (B, T)`` is 1."""
    weight = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weight).sum(1) / weight.sum(1).clamp_min(1e-9)


class EncoderClassifier(SectionClassifier):
    """A transformers encoder, mean-pooled, with a linear softmax head.

    ``phi(x)`` = mean over the (at most ``max_length``) tokens of the encoder's last hidden
    states ``(D,)``.  Frozen encoder (default): ``W, b`` by L2-penalised (``C``) logistic
    regression on ``phi`` of the training sections, on CPU.  ``finetune=True``: encoder and head
    trained jointly on cross-entropy as in app. E (Adam, batch 32, learning rate ``lr`` = 2e-5,
    3 ``epochs``, seeded), in fp32; the encoder and its tokenizer are saved in ``encoder/``.

    ``model``: a Hugging Face name or folder (``None``: the bundled all-MiniLM-L6-v2, see
    :func:`critic.lm.encoders.resolve_encoder`).  ``precision``: ``"bf16"`` runs inference
    under bf16 autocast (one context over all batches, so each weight is cast once per call),
    ``"fp32"`` without, ``"auto"`` bf16 where :func:`bf16_supported` says it works.  Texts are
    sorted by token count and cut into batches of ``batch_size``, so a batch pads little.
    ``device`` is a runtime choice (not saved).
    """

    kind = "encoder"

    def __init__(self, model: str | None = None, finetune: bool = False, batch_size: int = 32,
                 max_length: int = 256, precision: str = "auto", C: float = 10.0, epochs: int = 3,
                 lr: float = 2e-5, seed: int = 0, device: str = "cpu"):
        self.model = model
        self.finetune = finetune
        self.batch_size = batch_size
        self.max_length = max_length
        self.precision = precision
        self.C = C
        self.epochs = epochs
        self.lr = lr
        self.seed = seed
        self.device = str(device)

    # ------------------------------------------------------------ encoder
    def _use_bf16(self) -> bool:
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision must be 'auto', 'bf16' or 'fp32', got {self.precision!r}")
        if self.precision == "fp32":
            return False
        ok = bf16_supported(self.device)
        if self.precision == "bf16" and not ok:
            raise RuntimeError(f"precision='bf16' was asked for but bf16 autocast does not work on {self.device}")
        return ok

    def _network(self):
        """(tokenizer, encoder): the fine-tuned one, else the shared frozen one of ``model``."""
        if getattr(self, "encoder_", None) is not None:
            return self.tokenizer_, self.encoder_
        from critic.lm.encoders import load_encoder, resolve_encoder

        return load_encoder(resolve_encoder(self.model), self.device)

    def _pooled(self, net, ids: list[list[int]], rows: list[int], pad: int) -> torch.Tensor:
        """``(len(rows), D)`` mean-pooled states of the texts ``rows``, padded to the longest, on ``device``."""
        width = max(len(ids[r]) for r in rows)
        x = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            x[i, :len(ids[r])] = torch.tensor(ids[r])
            mask[i, :len(ids[r])] = 1
        x, mask = x.to(self.device), mask.to(self.device)
        return _mean_pool(net(input_ids=x, attention_mask=mask).last_hidden_state, mask)

    def _token_ids(self, tok, texts: list[str]) -> list[list[int]]:
        return tok(texts, truncation=True, max_length=self.max_length)["input_ids"]

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """``(N, D)`` float32 mean-pooled encoder states on CPU, in input order (no gradients)."""
        tok, net = self._network()
        ids = self._token_ids(tok, list(texts))
        order = sorted(range(len(ids)), key=lambda k: len(ids[k]))
        out = torch.zeros((len(ids), net.config.hidden_size))
        autocast = (torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16) if self._use_bf16()
                    else contextlib.nullcontext())
        was_training = net.training
        net.eval()
        with torch.inference_mode(), autocast:
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                out[rows] = self._pooled(net, ids, rows, tok.pad_token_id).float().cpu()
        net.train(was_training)
        return out

    # ------------------------------------------------------------ fitting
    def _train(self, texts, labels, num_classes):
        self.encoder_ = self.tokenizer_ = None
        if not self.finetune:
            features = self.embed(texts).double().numpy()
            self.weight_, self.bias_ = _fit_linear(features, labels, num_classes, C=self.C, max_iter=2000)
            return
        self._finetune(texts, labels, num_classes)

    def _finetune(self, texts, labels, num_classes):
        """App. E: Adam on encoder + linear head, cross-entropy, ``epochs`` passes in shuffled batches."""
        from transformers import AutoModel, AutoTokenizer

        from critic.lm.encoders import resolve_encoder

        path = resolve_encoder(self.model)
        tok = AutoTokenizer.from_pretrained(path)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = AutoModel.from_pretrained(path).to(self.device)
            head = torch.nn.Linear(net.config.hidden_size, num_classes).to(self.device)
            gen = torch.Generator().manual_seed(self.seed)
            ids = self._token_ids(tok, texts)
            y = torch.as_tensor(labels, dtype=torch.long)
            opt = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=self.lr)
            net.train()
            for _ in range(self.epochs):
                perm = torch.randperm(len(ids), generator=gen).tolist()
                for start in range(0, len(perm), self.batch_size):
                    rows = perm[start:start + self.batch_size]
                    logits = head(self._pooled(net, ids, rows, tok.pad_token_id))
                    loss = torch.nn.functional.cross_entropy(logits, y[rows].to(self.device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        net.eval()
        self.encoder_, self.tokenizer_ = net, tok
        self.weight_ = head.weight.detach().double().cpu().numpy()
        self.bias_ = head.bias.detach().double().cpu().numpy()

    def _logits(self, texts):
        return _linear_logits(self.embed(texts).double().numpy(), self.weight_, self.bias_)

    def to(self, device):
        self.device = str(device)
        if getattr(self, "encoder_", None) is not None:
            self.encoder_.to(self.device)
        return self

    # ------------------------------------------------------------ persistence
    def _state(self):
        return ({"finetuned": self.encoder_ is not None},
                {"weight": torch.from_numpy(self.weight_), "bias": torch.from_numpy(self.bias_)})

    def _save_extra(self, directory):
        if self.encoder_ is not None:
            self.encoder_.save_pretrained(directory / "encoder", safe_serialization=True)
            self.tokenizer_.save_pretrained(directory / "encoder")

    def _restore(self, state, tensors, directory):
        self.weight_, self.bias_ = tensors["weight"].numpy(), tensors["bias"].numpy()
        self.encoder_ = self.tokenizer_ = None
        if state["finetuned"]:
            from transformers import AutoModel, AutoTokenizer

            self.tokenizer_ = AutoTokenizer.from_pretrained(directory / "encoder")
            self.encoder_ = AutoModel.from_pretrained(directory / "encoder").eval()


CLASSIFIERS: dict[str, type[SectionClassifier]] = {"tfidf": TfidfClassifier, "encoder": EncoderClassifier}
"""Classifier kinds by name (the ``classifier=`` setting of the classifier section critic)."""


def make_classifier(name: str, **settings) -> SectionClassifier:
    """A new classifier of kind ``name`` (``"tfidf"`` or ``"encoder"``) with ``settings``."""
    if name not in CLASSIFIERS:
        raise ValueError(f"classifier must be one of {sorted(CLASSIFIERS)}, got {name!r}")
    return CLASSIFIERS[name](**settings)


def load_classifier(directory: str | Path, *, device: str | torch.device = "cpu") -> SectionClassifier:
    """The classifier saved in ``directory``, whatever its kind."""
    return SectionClassifier.load(directory, device=device)
