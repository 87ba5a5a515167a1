"""End to end: the study runner on the tiny preset (seconds), and its resume from checkpoints."""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from critic import stats
from critics.hsmm.model import TrainConfig
from critics.hsmm.ngrams import build_vocab
from experiments.synthetic.generator import make_dataset
from experiments.synthetic.run import data_config, main
from experiments.synthetic.transformer import TransformerConfig, TransformerLM

CONFIG = Path(__file__).parents[3] / "experiments" / "synthetic" / "tiny.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    config = tomllib.loads(CONFIG.read_text())
    return out, config, main(config, out=out, seed=0, device="cpu", log=lambda s: None)


def _logsumexp(a, axis=None):
    a = np.asarray(a, dtype=np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))
    return out.squeeze(axis) if axis is not None else out.item()


def _true_log_prob(process, seq):
    """log P(x) by an HMM forward pass over the segments of ``seq`` (plain Python / numpy).

    Independent of the library's lookup: segments are cut after each delimiter
    here, each state's emission is read from a dict built from the process's
    arrays, and the forward sum runs over *all* states (no point-mass shortcut).
    """
    Z, M, delim = process.num_states, process.config.num_segments, process.config.delimiter
    emit = {}  # subsequence tuple -> (Z,) P(subsequence | state)
    for s in range(len(process.subseq_lengths)):
        key = tuple(process.subseq_tokens[s, : process.subseq_lengths[s]].tolist())
        emit.setdefault(key, np.zeros(Z))[process.owner[s]] += math.exp(process.log_emit[s])
    segs, cur = [], []
    for tok in seq:
        cur.append(int(tok))
        if tok == delim:
            segs.append(tuple(cur))
            cur = []
    if cur or len(segs) != M:
        return -math.inf
    A = np.exp(process.log_trans)
    alpha, log_scale = A[Z] * emit.get(segs[0], np.zeros(Z)), 0.0
    for seg in segs[1:]:
        c = alpha.sum()
        if c == 0:
            return -math.inf
        alpha, log_scale = (alpha / c) @ A[:Z] * emit.get(seg, np.zeros(Z)), log_scale + math.log(c)
    return log_scale + math.log(alpha.sum()) if alpha.sum() > 0 else -math.inf


def _hsmm_log_prob(params, ngram_col, K, seq):
    """log P(x | |x|) under an HSMM by a plain semi-Markov forward over (end position, state).

    ``params``: numpy log init (C,), log trans (C, C), log dur (C, K), log emit (C, V);
    ``ngram_col``: n-gram tuple -> emission column; a segment not in it has probability 0.
    """
    log_init, log_trans, log_dur, log_emit = params
    C, T = len(log_init), len(seq)
    alpha = np.full((T + 1, C), -np.inf)  # alpha[t, c]: x[:t] covered, last segment in state c
    for t in range(1, T + 1):
        terms = []
        for k in range(1, min(K, t) + 1):
            col = ngram_col.get(tuple(seq[t - k: t]))
            if col is None:
                continue
            before = log_init if t == k else _logsumexp(alpha[t - k][:, None] + log_trans, axis=0)
            terms.append(before + log_dur[:, k - 1] + log_emit[:, col])
        if terms:
            alpha[t] = _logsumexp(np.stack(terms), axis=0)
    return _logsumexp(alpha[T])


def _log_softmax(x):
    """Row-wise (last axis) log-softmax of a numpy array."""
    return x - _logsumexp(x, axis=-1)[..., None]


def test_word_ppl_of_every_model_against_an_independent_computation(run):
    """Word PPL ``exp(-sum_x log P(x) / sum_x |x|)`` on the test split, recomputed outside the library.

    * true process: an HMM forward pass over the delimiter-cut segments (:func:`_true_log_prob`);
    * HSMM: the saved weights through a plain semi-Markov forward over segment ends and states;
    * transformer: the saved weights, one unpadded prefix at a time, ``log P(x, EOS)``.
    """
    out, config, res = run
    dcfg = data_config(config["data"], 0)
    process, splits = make_dataset(dcfg)
    test = splits["test"]
    seqs = [row[:n].tolist() for row, n in zip(test.tokens, test.lengths)]
    n_tokens = sum(len(x) for x in seqs)
    saved = json.loads((out / "results.json").read_text())
    assert saved["word_ppl"] == res["word_ppl"]

    true_lp = [_true_log_prob(process, x) for x in seqs]
    assert all(np.isfinite(true_lp))
    assert res["word_ppl"]["true"] == pytest.approx(math.exp(-sum(true_lp) / n_tokens), rel=1e-12)

    # HSMM: rebuild the vocabulary from the train split (as the runner does) and read the checkpoint's logits
    hcfg = TrainConfig(**config["hsmm"])
    train = splits["train"]
    vocab = build_vocab(train.tokens, train.lengths, max_len=dcfg.max_len, top_k=hcfg.top_k_ngrams,
                        base=dcfg.vocab_size, final_only=dcfg.delimiter)
    weights = torch.load(out / "hsmm.ckpt.pt", weights_only=True)["model"]
    w = {k: v.double().numpy() for k, v in weights.items()}
    emit = np.concatenate([_log_softmax(w["emit_logits"][:, a:b])
                           for a, b in zip(vocab.offsets[:-1], vocab.offsets[1:]) if b > a], axis=1)
    params = (_log_softmax(w["init_logits"]), _log_softmax(w["trans_logits"]), _log_softmax(w["dur_logits"]), emit)
    ngram_col = {tuple(vocab.tokens[v, : vocab.lengths[v]].tolist()): v for v in range(vocab.size)}
    hsmm_lp = [_hsmm_log_prob(params, ngram_col, vocab.max_len, x) for x in seqs]
    assert res["word_ppl"]["hsmm"] == pytest.approx(math.exp(-sum(hsmm_lp) / n_tokens), rel=1e-6)

    # transformer: log P(x_t | BOS x_<t) from a forward pass over exactly that prefix, float64 log-softmax
    tcfg = TransformerConfig(**config["transformer"])
    tcfg.max_len = max(tcfg.max_len, dcfg.num_segments * dcfg.max_len)
    trans = TransformerLM(dcfg.vocab_size, tcfg)
    trans.load_state_dict(torch.load(out / "transformer.ckpt.pt", weights_only=True)["model"])
    trans.eval()
    trans_lp = 0.0
    with torch.no_grad():
        for x in seqs:
            inp = torch.tensor([[trans.bos] + x])
            for t, target in enumerate(x + [trans.eos]):
                logits = trans(inp[:, : t + 1])[0, -1].double()
                trans_lp += float(logits.log_softmax(-1)[target])
    assert res["word_ppl"]["transformer"] == pytest.approx(math.exp(-trans_lp / n_tokens), rel=1e-6)


def test_results_json_has_table_1(run):
    out, config, res = run
    saved = json.loads((out / "results.json").read_text())
    # the values themselves are checked against independent computations above; a model that learned
    # anything beats the uniform distribution over the vocabulary (the true process by far)
    for key in ("true", "transformer", "hsmm"):
        assert 1.0 <= saved["word_ppl"][key] < saved["config"]["data"]["num_letters"] + 1
    for key in ("data", "transformer", "hsmm"):
        lo, hi = saved["latent_ppl"][f"{key}_ci"]
        assert lo <= saved["latent_ppl"][key] <= hi
    # closed form against brute force: the entropy of z_1 .. z_M by enumerating all Z^M latent paths
    dcfg = data_config(config["data"], 0)
    process, _ = make_dataset(dcfg)
    Z, M = process.num_states, dcfg.num_segments
    assert Z ** M <= 5000  # the tiny preset keeps the enumeration cheap
    paths = np.array(list(itertools.product(range(Z), repeat=M)))
    prev = np.concatenate([np.full((len(paths), 1), Z), paths[:, :-1]], 1)
    lp = process.log_trans[prev, paths].sum(1)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12)
    h = -(np.exp(lp) * lp).sum()
    assert saved["data_latent_ppl_closed_form"] == pytest.approx(math.exp(h / M), rel=1e-10)
    assert (out / "table.md").read_text().startswith("| |")


def test_hsmm_latent_ppl_close_to_data(run):
    _, _, res = run
    lat = res["latent_ppl"]
    # Monte Carlo data estimate agrees with the closed form, and the fitted HSMM's samples are near it
    assert lat["data"] == pytest.approx(res["data_latent_ppl_closed_form"], rel=0.10)
    assert lat["hsmm"] == pytest.approx(lat["data"], rel=0.10)
    assert res["projection"]["hsmm"]["n_scored"] >= 0.5 * res["projection"]["hsmm"]["n"]
    # the true process has the best word-level perplexity
    assert res["word_ppl"]["true"] <= min(res["word_ppl"]["hsmm"], res["word_ppl"]["transformer"]) + 1e-9


def test_data_latent_ppl_from_criticize_matches_true_states(run):
    """Independent reference: T(x) from the states the test split was drawn with, z_0 = start state."""
    _, config, res = run
    process, splits = make_dataset(data_config(config["data"], 0))
    states = splits["test"].states
    prev = np.concatenate([np.full((len(states), 1), process.num_states), states[:, :-1]], 1)
    t = -process.log_trans[prev, states].sum(1)
    m = np.full(len(states), states.shape[1], dtype=float)
    assert res["latent_ppl"]["data"] == pytest.approx(np.exp(t.sum() / m.sum()), rel=1e-12)
    by_id = np.argsort([f"test-{i}" for i in range(len(states))])  # documents are resampled in id order
    [ci] = stats.bootstrap_cis(stats.document_rows(t[by_id], m[by_id]), [stats.LATENT_PPL],
                               n_resamples=config["criticism"]["n_bootstrap"], seed=0)
    assert res["latent_ppl"]["data_ci"] == pytest.approx(list(ci), rel=1e-12)
    crit = res["criticism"]
    assert crit["reference"]["name"] == "data" and sorted(crit["candidates"]) == ["hsmm", "transformer"]
    for name in ("hsmm", "transformer"):
        assert crit["candidates"][name]["latent_ppl"] == res["latent_ppl"][name]
        proj = res["projection"][name]
        failed = proj["reasons"]["unknown_subsequence"] + proj["reasons"]["no_final_delimiter"]
        assert proj["n"] == proj["n_scored"] + failed == crit["candidates"][name]["n"] + crit["candidates"][name]["n_skipped"]


def _project_by_hand(process, seq):
    """(failure reason or "", the owning state of each segment), cutting ``seq`` after each delimiter."""
    owner = {tuple(process.subseq_tokens[s, : process.subseq_lengths[s]].tolist()): int(process.owner[s])
             for s in range(len(process.subseq_lengths))}
    segs, cur = [], []
    for tok in seq:
        cur.append(int(tok))
        if tok == process.config.delimiter:
            segs.append(tuple(cur))
            cur = []
    if cur or not seq:
        return "no_final_delimiter", []
    if any(sg not in owner for sg in segs):
        return "unknown_subsequence", []
    return "", [owner[sg] for sg in segs]


def test_model_sample_projections_and_latent_ppl_by_hand(run):
    """Each LM's saved samples projected and scored here: counts by reason and the Latent PPL
    ``exp(sum T / sum M)``, ``T = -sum_m log A[z_{m-1}, z_m]`` from the start state."""
    out, config, res = run
    dcfg = data_config(config["data"], 0)
    process, _ = make_dataset(dcfg)
    Z = process.num_states
    for name in ("hsmm", "transformer"):
        z = np.load(out / f"samples_{name}.npz")
        reasons = {"unknown_subsequence": 0, "no_final_delimiter": 0, "wrong_segment_count": 0}
        t_sum = m_sum = 0.0
        n_scored = 0
        for row, n in zip(z["tokens"], z["lengths"]):
            why, states = _project_by_hand(process, row[:n].tolist())
            if why:
                reasons[why] += 1
                continue
            n_scored += 1
            reasons["wrong_segment_count"] += len(states) != dcfg.num_segments
            t_sum -= sum(process.log_trans[a, b] for a, b in zip([Z] + states[:-1], states))
            m_sum += len(states)
        assert res["projection"][name] == {"n": len(z["lengths"]), "n_scored": n_scored, "reasons": reasons}
        assert res["latent_ppl"][name] == pytest.approx(math.exp(t_sum / m_sum), rel=1e-12)


def test_rerun_resumes_from_checkpoints(run):
    out, config, res = run
    again = main(config, out=out, seed=0, device="cpu", log=lambda s: None)
    assert again["word_ppl"] == res["word_ppl"]
    assert again["latent_ppl"] == res["latent_ppl"]
    assert again["training"] == res["training"]  # nothing retrained
