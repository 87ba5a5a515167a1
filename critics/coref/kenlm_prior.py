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

Queries go through kenlm's state API (``NullContextWrite``, ``BaseScore``) on the distinct windows
only (``np.unique`` over packed keys), then are gathered back.  The state of every training-context
suffix is built once (at fit / load; prefixes shared through a trie); a window's context uses the
state of its longest suffix seen in training -- where KenLM's back-off lands anyway (the test
checks it against states fed the whole context) -- so a distinct window costs one ``BaseScore``
call; log10 is turned into ln.  A target outside V is scored as ``<unk>`` and flagged unknown.

Files (``save``): the KenLM model (binary by default: it loads by mmap, fast and small; ``binary=False``
keeps the ARPA text, which tests read), ``kenlm_prior.json`` (format, version, order, kinds,
vocabulary codes, L, P_1(u0), u0, model file) and ``normalisers.npz`` (Z per context suffix).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from itertools import repeat
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
    """``(key_base(order),)`` object array: the tagged KenLM word of every slot code at ``slot``
    (``<unk>`` for a code whose kind the table does not hold)."""
    words = np.full(key_base(order), UNK, dtype=object)
    for k, name in enumerate(table.kinds):
        words[k * (order + 1)] = tag(slot, name)
        for r in range(order):
            words[k * (order + 1) + r + 1] = tag(slot, f"{name}:{r}")
    return words


def training_lines(keys: np.ndarray, order: int, table: KindTable):
    """The lmplz lines of packed training windows ``keys (P,)``: ``(distinct lines, counts)``."""
    uniq, counts = np.unique(keys, return_counts=True)
    base = key_base(order)
    words = [_word_table(j, order, table)[(uniq // base ** (order - j)) % base] for j in range(1, order + 1)]
    lines = [" ".join(ws) for ws in zip(*words)]
    return lines, counts


class KenLMChainPrior(ChainPrior):
    """Chain prior on a KenLM modified-Kneser-Ney model of the tagged relabelled windows.

    ``vocabulary``: the relabelled targets seen in training, then ``<unk>`` (the columns of
    :meth:`next_logprobs`, whose rows sum to 1 over all of them).  ``suffixes[k]`` are the sorted
    packed context suffixes of k slots seen in training, ``log_z[k]`` their ln Z; the kenlm state
    of each is kept (``_suffix_states``), so that scoring a window is one ``BaseScore`` call.
    """

    def __init__(self, order: int, table: KindTable, model_path: Path, targets: np.ndarray,
                 suffixes: dict[int, np.ndarray], log_z: dict[int, np.ndarray] | None, meta: dict, tmp=None):
        import kenlm

        self.order, self._table = order, table
        self.model_path = Path(model_path)
        self.model = kenlm.Model(str(self.model_path))
        if self.model.order != order:
            raise ValueError(f"{model_path} is a {self.model.order}-gram model, expected {order}")
        self.targets = np.asarray(targets, dtype=np.int64)  # sorted slot codes of V (without <unk>)
        self.suffixes = {k: np.asarray(suffixes[k], dtype=np.int64) for k in range(order)}
        self.meta = meta
        self._tmp = tmp  # keeps a fitted model's temporary folder alive
        self.vocabulary = self._decode_targets(self.targets) + [UNK]
        self._words = {j: _word_table(j, order, table) for j in range(1, order + 1)}
        self._target_words = list(self._words[order][self.targets]) + [UNK]
        # the states of all suffixes, flat: suffix i of k slots is _suffix_states[_offsets[k] + i]
        self._offsets = np.cumsum([0] + [len(self.suffixes[k]) for k in range(order)])
        self._suffix_states = [st for k in range(order) for st in self._states(self.suffixes[k], k)]
        if log_z is None:
            log_z = self._brute_force_log_z(self._suffix_states)
        self.log_z = {k: np.asarray(log_z[k], dtype=np.float64) for k in range(order)}
        self._flat_log_z = np.concatenate([self.log_z[k] for k in range(order)])

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, chains: Sequence[Sequence[str]], order: int = 5, *, memory: str = "1G",
            binary: bool = True) -> "KenLMChainPrior":
        """Estimate with ``lmplz -o order -S memory --discount_fallback`` on one tagged line per
        training position; compute the normalisers Z."""
        from critics.ngram import estimate_ngram

        if order < 2 or order > 9:
            raise ValueError(f"order must be 2..9 (slot tags are one digit), got {order}")
        table = KindTable()
        self = cls.__new__(cls)
        self.order = order
        keys, _, _ = self._windows(chains, table)
        if len(keys) == 0:
            raise ValueError("no chain positions to fit on")
        lines, counts = training_lines(keys, order, table)
        tmp = tempfile.TemporaryDirectory(prefix="critic-coref-kenlm-")
        path = Path(tmp.name) / ("model.klm" if binary else "model.arpa")

        def repeated():
            for line, c in zip(lines, counts.tolist()):
                for _ in range(c):
                    yield line

        estimate_ngram(repeated(), order, path, memory=memory, discount_fallback=True, binary=binary)
        base = key_base(order)
        contexts = np.unique(keys // base)
        suffixes = {k: np.unique(contexts % base**k) for k in range(order)}
        meta = {"binary": binary, "memory": memory, "positions": int(len(keys))}
        prior = cls(order, table, path, np.unique(keys % base), suffixes, None, meta, tmp)
        prior.meta.update(prior._closed_form_constants())
        return prior

    # ------------------------------------------------------------------ KenLM states
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
            words = self._words[n - width - 1 + j][prefixes % base]
            new = [kenlm.State() for _ in range(len(prefixes))]
            for p, w, out in zip(parent_of.tolist(), words.tolist(), new):
                score(level[p], w, out)
            level, previous = new, prefixes
        return [level[i] for i in inverse.tolist()]

    def _brute_force_log_z(self, states: list) -> dict[int, np.ndarray]:
        """``{k: ln Z}`` of the suffix states: ln sum_{v in V} P_kenlm(n|v | state), by the state API."""
        import kenlm

        out, score, words = kenlm.State(), self.model.BaseScore, self._target_words
        z = np.log(np.array([math.fsum(10.0 ** score(s, w, out) for w in words) for s in states]))
        return {k: z[self._offsets[k]:self._offsets[k + 1]] for k in range(self.order)}

    def _context_slots(self, contexts: np.ndarray) -> np.ndarray:
        """Index into the flat suffix tables (states, ln Z) of the longest suffix of each packed full
        context seen in training -- where KenLM's back-off lands: longer suffixes are not in the model."""
        base = self.base
        found_at = np.zeros(len(contexts), dtype=np.int64)  # the empty suffix (k = 0) always is
        for k in range(1, self.order):
            table = self.suffixes[k]
            if not len(table):
                continue
            suffix = contexts % base**k
            idx = np.minimum(np.searchsorted(table, suffix), len(table) - 1)
            found_at = np.where(table[idx] == suffix, self._offsets[k] + idx, found_at)
        return found_at

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
        """Raw ``log10 P_kenlm(n|v | ctx)`` of packed windows ``(U,)``, one ``BaseScore`` each."""
        import kenlm

        slots = self._window_slots(keys) if slots is None else slots
        words = self._words[self.order][keys % self.base].tolist()
        out, score, states = kenlm.State(), self.model.BaseScore, self._suffix_states
        return np.fromiter(map(score, map(states.__getitem__, slots.tolist()), words, repeat(out, len(words))),
                           dtype=np.float64, count=len(words))

    def _score_unique(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slots = self._window_slots(keys)
        return self.kenlm_log10(keys, slots) * LN10 - self._flat_log_z[slots], self._unknown_unique(keys)

    def _next_unique(self, contexts: np.ndarray) -> np.ndarray:
        """Rows over V = the seen targets and ``<unk>``."""
        import kenlm

        slots = self._context_slots(contexts)
        out, score, words = kenlm.State(), self.model.BaseScore, self._target_words
        rows = np.array([[score(self._suffix_states[s], w, out) for w in words] for s in slots.tolist()],
                        dtype=np.float64).reshape(len(contexts), len(words))
        return rows * LN10 - self._flat_log_z[slots][:, None]

    # ------------------------------------------------------------------ persistence
    def save(self, directory) -> None:
        """The model file, ``kenlm_prior.json`` and ``normalisers.npz`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        name = self.model_path.name
        if self.model_path.resolve() != (directory / name).resolve():
            shutil.copyfile(self.model_path, directory / name)
        arrays = {}
        for k in range(self.order):
            arrays[f"suffixes_{k}"], arrays[f"log_z_{k}"] = self.suffixes[k], self.log_z[k]
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
        keep = {k: v for k, v in meta.items() if k not in ("format", "version", "order", "model", "kinds",
                                                            "targets", "vocabulary")}
        prior = cls(order, KindTable(meta["kinds"]), directory / meta["model"], np.array(meta["targets"]),
                    suffixes, log_z, keep)
        if prior.vocabulary != meta["vocabulary"]:
            raise ValueError(f"{directory}: the vocabulary does not match the kinds and targets saved")
        return prior
