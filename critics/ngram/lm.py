"""Estimate n-gram models with KenLM's ``lmplz`` and query them with the ``kenlm`` module.

Sentences are token lists (or strings, split on whitespace).  Tokens must not contain whitespace;
``<s>``, ``</s>`` and ``<unk>`` are KenLM's own.  Query results are natural-log probabilities.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from .build import find_kenlm_bin

__all__ = ["estimate_ngram", "NgramLM", "train_ngram"]

LN10 = math.log(10.0)
_RESERVED = {"<s>", "</s>", "<unk>"}


def _line(sentence) -> str:
    tokens = sentence.split() if isinstance(sentence, str) else list(sentence)
    for t in tokens:
        if not t or any(ch.isspace() for ch in t):
            raise ValueError(f"token {t!r} is empty or holds whitespace")
        if t in _RESERVED:
            raise ValueError(f"token {t!r} is reserved by KenLM")
    return " ".join(tokens)


def estimate_ngram(
    sentences: Iterable,
    order: int,
    out_path: str | os.PathLike,
    *,
    memory: str = "1G",
    discount_fallback: bool | str = "auto",
    prune: Sequence[int] | None = None,
    binary: bool = False,
    extra_args: Sequence[str] = (),
) -> Path:
    """Run ``lmplz -o ORDER -S MEMORY`` on the sentences; write an ARPA file (or KenLM binary).

    ``memory`` bounds lmplz's sorting memory (``-S``; without it lmplz plans for most of the RAM).
    ``discount_fallback``: True passes ``--discount_fallback`` (needed for small vocabularies, where
    Kneser-Ney discounts cannot be estimated); ``"auto"`` tries without and retries with it when
    lmplz reports a discount problem.  ``binary`` converts the ARPA file with ``build_binary``.
    """
    bin_dir = find_kenlm_bin()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(_line(s) for s in sentences) + "\n"
    if not text.strip():
        raise ValueError("no tokens to estimate from")

    def run(fallback: bool) -> subprocess.CompletedProcess:
        arpa = out_path.with_suffix(".arpa") if binary else out_path
        with tempfile.TemporaryDirectory(prefix="lmplz-") as tmp:
            cmd = [str(bin_dir / "lmplz"), "-o", str(order), "-S", memory, "-T", tmp, "--arpa", str(arpa)]
            if fallback:
                cmd.append("--discount_fallback")
            if prune:
                cmd += ["--prune", *map(str, prune)]
            cmd += list(extra_args)
            return subprocess.run(cmd, input=text, text=True, capture_output=True)

    fallback = discount_fallback is True
    proc = run(fallback)
    if proc.returncode != 0 and discount_fallback == "auto" and "discount" in proc.stderr.lower():
        proc = run(True)
    if proc.returncode != 0:
        raise RuntimeError(f"lmplz failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if binary:
        arpa = out_path.with_suffix(".arpa")
        done = subprocess.run([str(bin_dir / "build_binary"), str(arpa), str(out_path)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"build_binary failed:\n{done.stderr[-3000:]}")
        arpa.unlink()
    return out_path


class NgramLM:
    """A KenLM model (ARPA or binary) answering natural-log probabilities."""

    def __init__(self, path: str | os.PathLike):
        import kenlm

        self.path = str(path)
        self.model = kenlm.Model(self.path)
        self.order = self.model.order

    def token_logprobs(self, sentence, bos: bool = True, eos: bool = True) -> list[float]:
        """ln P(w_i | n-gram context) for each token (and ``</s>`` when ``eos``)."""
        return [lp * LN10 for lp, _, _ in self.model.full_scores(_line(sentence), bos=bos, eos=eos)]

    def oov(self, sentence) -> list[bool]:
        """Whether each token is out of the model's vocabulary."""
        return [t not in self.model for t in _line(sentence).split()]

    def logprob(self, sentence, bos: bool = True, eos: bool = True) -> float:
        """ln P(sentence) = sum of :meth:`token_logprobs`."""
        return self.model.score(_line(sentence), bos=bos, eos=eos) * LN10


def train_ngram(sentences: Iterable, order: int = 3, out_path: str | os.PathLike | None = None, **kwargs) -> NgramLM:
    """Estimate with :func:`estimate_ngram` and load; without ``out_path`` the ARPA file goes to a temp folder."""
    if out_path is None:
        out_path = Path(tempfile.mkdtemp(prefix="critic-ngram-")) / f"model.{order}gram.arpa"
    return NgramLM(estimate_ngram(sentences, order, out_path, **kwargs))
