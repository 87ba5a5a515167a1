"""The default chain prior: modified Kneser-Ney by KenLM's ``lmplz`` over the relabelled windows.

Training text.  lmplz counts every n-gram of every line and adds ``<s>``/``</s>``, so a
relabelled window written as a plain line would add n-grams that no chain has.  Instead each
training position becomes one line, its relabelled n-window with explicit padding, each token
tagged with its slot ``j|`` (``j = 1..n``; ``|`` after a single digit, so any token text is safe)::

    1|<pad> 2|<pad> 3|. 4|F:0 5|him:1

Then every n-gram ending in an ``n|`` token is a genuine (suffix of a) relabelled window, a
context ending in ``(n-1)|`` is only ever followed by ``n|`` tokens, and the modified-KN
continuation counts of the lower orders are taken over the genuine windows.  (lmplz still
estimates each order's discounts from the counts-of-counts of *all* its n-grams, including the
context-internal ones such as ``<s> 1|.. 4|..``; the tagging cannot change that.)

Renormalisation.  KenLM's unigram level also gives mass to the ``1|`` .. ``(n-1)|`` tokens and
``</s>``.  The chain vocabulary is V = {the ``n|`` tokens seen in training} + {``<unk>``} and

    P_c(v | ctx) = P_kenlm(n|v | ctx) / Z(ctx),   Z(ctx) = sum_{v in V} P_kenlm(n|v | ctx).

Z depends on ctx only through its longest suffix present in the model (a back-off model: longer
suffixes that are absent have back-off weight 1), and the suffixes present are exactly the
suffixes of the training contexts.  So ``fit`` computes Z once per distinct training-context
suffix, **by brute force over V through the state API** (the same float32 numbers the query
returns, so rows sum to 1 to rounding), and scoring looks Z up by the longest suffix found.
The closed form ``Z = 1 - P_kenlm(u0|ctx) L / P_1(u0)`` (u0 = ``</s>``, never seen after an
``(n-1)|`` token; L = unigram mass of the non-V tokens) holds only to KenLM's float32 precision
(about 1e-7), so it is kept as a check (:meth:`KenLMChainPrior.closed_form_z`), not used.

Scoring.  A window's KenLM query lands on the state of its context's longest suffix seen in
training (a back-off model: longer suffixes are absent, with back-off weight 1 -- the test checks
it against states fed the whole context), and its target is either a training target (a word of
V) or not in the model at all (queried as ``<unk>``).  So ln P of *any* window is one cell of
the ``(S, |V| + 1)`` table ``log10 P_kenlm(n|v | suffix state) * ln 10 - ln Z(suffix)`` over the
S training-context suffixes -- and ``fit`` queries exactly these cells anyway, to sum Z by brute
force.  The raw log10 values (KenLM's float32 numbers, stored exactly as float32) are kept and
saved, and scoring is the table lookup of :class:`~critics.coref.prior.ChainPrior` (two numpy
index lookups and a gather per position, no KenLM call).  :meth:`KenLMChainPrior.kenlm_log10`
keeps the direct path -- one ``BaseScore`` per window from the suffix states (built once, shared
through a trie of prefixes) -- which the tests compare with the table bit for bit.

Files (``save``): the KenLM model (binary by default: it loads by mmap, fast and small; ``binary=False``
keeps the ARPA text, which tests read), ``kenlm_prior.json`` (format, version, order, kinds,
vocabulary codes, L, P_1(u0), u0, model file) and ``normalisers.npz`` (per context suffix: Z, its
number of training positions -- the lookup priority -- and the row of raw log10 scores over V and
``<unk>``, float32: 4 (|V| + 1) bytes a suffix).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from functools import cached_property
from itertools import chain, repeat
from pathlib import Path
from typing import Sequence

import numpy as np

from .prior import FORMAT_VERSION, ChainPrior
from .windows import KindTable, key_base

__all__ = ["KenLMChainPrior", "tag", "training_lines"]

_FORMAT = "critic.coref.kenlm_prior"
LN10 = math.log(10.0)
UNK, EOS = "<unk>", "</s>"


def tag(slot: int, token: str) -> str:
    """The KenLM word of ``token`` at window slot ``slot`` (1-based): ``"3|he:0"``."""
    return f"{slot}|{token}"


def _word_table(slot: int, order: int, table: KindTable) -> np.ndarray:
    """``(len(table) * (order + 1) + 1,)`` object array: the tagged KenLM word of every slot code of
    the table's kinds at ``slot``, then ``<unk>``, the word of every larger code (a kind the table
    does not hold): index it with :func:`_words_of`."""
    words = np.full(len(table.kinds) * (order + 1) + 1, UNK, dtype=object)
    for k, name in enumerate(table.kinds):
        words[k * (order + 1)] = tag(slot, name)
        for r in range(order):
            words[k * (order + 1) + r + 1] = tag(slot, f"{name}:{r}")
    return words


def _words_of(words: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The words of slot codes (``<unk>`` for codes past the table)."""
    return np.take(words, codes, mode="clip")


def training_lines(keys: np.ndarray, order: int, table: KindTable):
    """The lmplz lines of packed training windows ``keys (P,)``: ``(distinct lines, counts)``."""
    uniq, counts = np.unique(keys, return_counts=True)
    base = key_base(order)
    words = [_words_of(_word_table(j, order, table), (uniq // base ** (order - j)) % base)
             for j in range(1, order + 1)]
    lines = [" ".join(ws) for ws in zip(*words)]
    return lines, counts


class KenLMChainPrior(ChainPrior):
    """Chain prior on a KenLM modified-Kneser-Ney model of the tagged relabelled windows.

    ``vocabulary``: the relabelled targets seen in training, then ``<unk>`` (the columns of
    :meth:`next_logprobs`, whose rows sum to 1 over all of them).  ``suffixes[k]`` are the sorted
    packed context suffixes of k slots seen in training, ``counts[k]`` their training positions
    (``None`` for a save without them), ``log_z[k]`` their ln Z, ``log10`` the
    ``(S, |V| + 1)`` float32 raw KenLM scores of every suffix (rows, k then key) and column
    (``vocabulary``); the score table is ``log10 * ln 10 - ln Z``.  The kenlm state of each suffix
    (``_suffix_states``, built on first use) serves the direct path :meth:`kenlm_log10`.
    """

    def __init__(self, order: int, table: KindTable, model_path: Path, targets: np.ndarray,
                 suffixes: dict[int, np.ndarray], log_z: dict[int, np.ndarray] | None, meta: dict, tmp=None,
                 log10: np.ndarray | None = None, counts: dict[int, np.ndarray] | None = None):
        import kenlm

        self.order, self._table = order, table
        self.model_path = Path(model_path)
        self.model = kenlm.Model(str(self.model_path))
        if self.model.order != order:
            raise ValueError(f"{model_path} is a {self.model.order}-gram model, expected {order}")
        self.targets = np.asarray(targets, dtype=np.int64)  # sorted slot codes of V (without <unk>)
        self.suffixes = {k: np.asarray(suffixes[k], dtype=np.int64) for k in range(order)}
        self.counts = None if counts is None else {k: np.asarray(counts[k], dtype=np.int64) for k in range(order)}
        self.meta = meta
        self._tmp = tmp  # keeps a fitted model's temporary folder alive
        self.vocabulary = self._decode_targets(self.targets) + [UNK]
        self._words = {j: _word_table(j, order, table) for j in range(1, order + 1)}
        self._target_words = list(_words_of(self._words[order], self.targets)) + [UNK]
        # suffixes flat (k, then key): suffix i of k slots is row _offsets[k] + i
        self._offsets = np.cumsum([0] + [len(self.suffixes[k]) for k in range(order)])
        if log10 is None:  # fit (or a save without the table): KenLM's score of every (suffix, column)
            log10 = self._brute_force_log10(self._suffix_states)
        self.log10 = np.asarray(log10, dtype=np.float32).reshape(self._offsets[-1], len(self.vocabulary))
        if log_z is None:
            log_z = self._log_z(self.log10)
        self.log_z = {k: np.asarray(log_z[k], dtype=np.float64) for k in range(order)}
        self._flat_log_z = np.concatenate([self.log_z[k] for k in range(order)])
        self._set_score_table(self.suffixes, self.targets,
                              self.log10.astype(np.float64) * LN10 - self._flat_log_z[:, None], self.counts)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, chains: Sequence[Sequence[str]], order: int = 5, *, memory: str = "1G",
            binary: bool = True) -> "KenLMChainPrior":
        """Estimate with ``lmplz -o order -S memory --discount_fallback`` on one tagged line per
        training position; compute the normalisers Z."""
        from critics.ngram import estimate_ngram

        if order < 2 or order > 9:
            raise ValueError(f"order must be 2..9 (slot tags are one digit), got {order}")
        self, keys = cls._start_fit(chains, order)
        table = self._table
        lines, counts = training_lines(keys, order, table)
        tmp = tempfile.TemporaryDirectory(prefix="critic-coref-kenlm-")
        path = Path(tmp.name) / ("model.klm" if binary else "model.arpa")

        def repeated():
            for line, c in zip(lines, counts.tolist()):
                for _ in range(c):
                    yield line

        estimate_ngram(repeated(), order, path, memory=memory, discount_fallback=True, binary=binary)
        base = key_base(order)
        contexts = keys // base
        suffixes, counts = {}, {}
        for k in range(order):  # the suffixes of k slots of the training contexts, and their positions
            suffixes[k], counts[k] = np.unique(contexts % base**k, return_counts=True)
        meta = {"binary": binary, "memory": memory, "positions": int(len(keys))}
        prior = cls(order, table, path, np.unique(keys % base), suffixes, None, meta, tmp, counts=counts)
        prior.meta.update(prior._closed_form_constants())
        return prior

    # ------------------------------------------------------------------ KenLM states
    @cached_property
    def _suffix_states(self) -> list:
        """The kenlm state of every suffix, flat (row order of ``log10``)."""
        return [st for k in range(self.order) for st in self._states(self.suffixes[k], k)]

    def _states(self, contexts: np.ndarray, width: int | None = None) -> list:
        """kenlm states after the tagged tokens of packed contexts ``(C,)`` (the last ``width``
        slots before the target, default order - 1), fed from the null context and shared
        through a trie of prefixes."""
        import kenlm

        n, base = self.order, self.base
        width = n - 1 if width is None else width
        null = kenlm.State()
        self.model.NullContextWrite(null)
        if width == 0:
            return [null] * len(contexts)
        score = self.model.BaseScore
        level, previous, inverse = [null], None, None
        for j in range(1, width + 1):  # the word at slot n - width - 1 + j
            prefixes, inverse = np.unique(contexts // base ** (width - j), return_inverse=True)
            parent_of = np.zeros(len(prefixes), dtype=np.int64) if previous is None \
                else np.searchsorted(previous, prefixes // base)
            words = _words_of(self._words[n - width - 1 + j], prefixes % base)
            new = [kenlm.State() for _ in range(len(prefixes))]
            for p, w, out in zip(parent_of.tolist(), words.tolist(), new):
                score(level[p], w, out)
            level, previous = new, prefixes
        return [level[i] for i in inverse.tolist()]

    def _brute_force_log10(self, states: list) -> np.ndarray:
        """``(S, |V| + 1)`` float32: ``log10 P_kenlm(n|v | state)`` of every state and column, by the
        state API (KenLM's numbers are C floats: float32 holds them exactly)."""
        import kenlm

        out, words = kenlm.State(), self._target_words
        cells = len(states) * len(words)
        flat = np.fromiter(map(self.model.BaseScore, chain.from_iterable(map(repeat, states, repeat(len(words)))),
                               chain.from_iterable(repeat(words, len(states))), repeat(out, cells)),
                           dtype=np.float64, count=cells)
        log10 = flat.astype(np.float32)
        if not np.array_equal(log10, flat):
            raise AssertionError("KenLM returned a score that is not a float32")
        return log10.reshape(len(states), len(words))

    def _log_z(self, log10: np.ndarray) -> dict[int, np.ndarray]:
        """``{k: ln Z}`` of the suffixes: ln sum_{v in V} P_kenlm(n|v | suffix), summed exactly (fsum)."""
        z = np.log(np.array([math.fsum([10.0 ** x for x in row]) for row in log10.tolist()]))
        return {k: z[self._offsets[k]:self._offsets[k + 1]] for k in range(self.order)}

    def _closed_form_constants(self) -> dict:
        """``L`` (unigram mass of the tokens outside V) and ``P_1(u0)`` for u0 = ``</s>``."""
        import kenlm

        null, out = self._suffix_states[0], kenlm.State()
        others = [EOS]  # not <s>: KenLM stores it with log10 P = 0, a placeholder never predicted
        for j in range(1, self.order):
            others += self._words[j].tolist()
        seen = [w for w in dict.fromkeys(others) if w != UNK and (w == EOS or w in self.model)]
        unigram = {w: 10.0 ** self.model.BaseScore(null, w, out) for w in seen}
        return {"u0": EOS, "p1_u0": unigram[EOS], "L": math.fsum(unigram.values()),
                "non_vocabulary_tokens": len(seen)}

    def closed_form_z(self, contexts: np.ndarray, width: int | None = None) -> np.ndarray:
        """``Z = 1 - P_kenlm(u0|ctx) * L / P_1(u0)`` for packed contexts (a check on the normalisers)."""
        import kenlm

        out, u0 = kenlm.State(), self.meta["u0"]
        p = np.array([10.0 ** self.model.BaseScore(s, u0, out) for s in self._states(contexts, width)])
        return 1.0 - p * self.meta["L"] / self.meta["p1_u0"]

    def context_log_z(self, contexts: np.ndarray) -> np.ndarray:
        """ln Z of packed full contexts ``(C,)``."""
        return self._flat_log_z[self._context_slots(contexts)]

    # ------------------------------------------------------------------ scoring
    def _unknown_unique(self, keys: np.ndarray) -> np.ndarray:
        target = keys % self.base
        idx = np.minimum(np.searchsorted(self.targets, target), len(self.targets) - 1)
        return self.targets[idx] != target

    def _window_slots(self, keys: np.ndarray) -> np.ndarray:
        """:meth:`_context_slots` of the contexts of packed windows, computed once per context."""
        contexts = keys // self.base
        if len(keys) > 1 and np.all(contexts[1:] >= contexts[:-1]):  # sorted (np.unique output)
            first = np.concatenate([[True], contexts[1:] != contexts[:-1]])
            return self._context_slots(contexts[first])[np.cumsum(first) - 1]
        uniq, inverse = np.unique(contexts, return_inverse=True)
        return self._context_slots(uniq)[inverse]

    def kenlm_log10(self, keys: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
        """Raw ``log10 P_kenlm(n|v | ctx)`` of packed windows ``(U,)``, one ``BaseScore`` each from the
        suffix states (the direct path; scoring reads the same numbers in ``log10``)."""
        import kenlm

        slots = self._window_slots(keys) if slots is None else slots
        words = _words_of(self._words[self.order], keys % self.base).tolist()
        out, score, states = kenlm.State(), self.model.BaseScore, self._suffix_states
        return np.fromiter(map(score, map(states.__getitem__, slots.tolist()), words, repeat(out, len(words))),
                           dtype=np.float64, count=len(words))

    def direct_log_probs(self, keys: np.ndarray) -> np.ndarray:
        """ln P of packed windows by KenLM queries (:meth:`kenlm_log10`), not the table: a check."""
        slots = self._window_slots(keys)
        return self.kenlm_log10(keys, slots) * LN10 - self._flat_log_z[slots]

    def _score_unique(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._score_positions(keys // self.base, keys % self.base)

    def _next_unique(self, contexts: np.ndarray) -> np.ndarray:
        """Rows over V = the seen targets and ``<unk>``."""
        return self._score_table[self._context_rows(contexts)]

    # ------------------------------------------------------------------ persistence
    def save(self, directory) -> None:
        """The model file, ``kenlm_prior.json`` and ``normalisers.npz`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        name = self.model_path.name
        if self.model_path.resolve() != (directory / name).resolve():
            shutil.copyfile(self.model_path, directory / name)
        arrays = {"log10": self.log10}
        for k in range(self.order):
            arrays[f"suffixes_{k}"], arrays[f"log_z_{k}"] = self.suffixes[k], self.log_z[k]
            if self.counts is not None:
                arrays[f"counts_{k}"] = self.counts[k]
        np.savez(directory / "normalisers.npz", **arrays)
        self._write_json(directory / "kenlm_prior.json", {
            "format": _FORMAT, "version": FORMAT_VERSION, "order": self.order, "model": name,
            "kinds": self._table.kinds[1:], "targets": self.targets.tolist(), "vocabulary": self.vocabulary,
            **self.meta})

    @classmethod
    def load(cls, directory) -> "KenLMChainPrior":
        directory = Path(directory)
        meta = cls._read_json(directory / "kenlm_prior.json", _FORMAT)
        order = int(meta["order"])
        with np.load(directory / "normalisers.npz") as z:
            suffixes = {k: z[f"suffixes_{k}"] for k in range(order)}
            log_z = {k: z[f"log_z_{k}"] for k in range(order)}
            log10 = z["log10"] if "log10" in z.files else None  # absent: recomputed from the model
            counts = {k: z[f"counts_{k}"] for k in range(order)} if "counts_0" in z.files else None
        keep = {k: v for k, v in meta.items() if k not in ("format", "version", "order", "model", "kinds",
                                                            "targets", "vocabulary")}
        prior = cls(order, KindTable(meta["kinds"]), directory / meta["model"], np.array(meta["targets"]),
                    suffixes, log_z, keep, log10=log10, counts=counts)
        if prior.vocabulary != meta["vocabulary"]:
            raise ValueError(f"{directory}: the vocabulary does not match the kinds and targets saved")
        return prior
