"""HSMM LM training: an interrupted run resumes to exactly the uninterrupted result."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from critics.hsmm.model import HSMMLM, Checkpointer, TrainConfig, evaluate, train_hsmm
from critics.hsmm.ngrams import build_vocab
from critics.hsmm import semimarkov as sm


def _data():
    rng = np.random.default_rng(0)
    words = [[0, 1, 3], [2, 2, 1, 3]]
    seqs = [sum((words[i] for i in rng.integers(0, 2, size=rng.integers(1, 4))), []) for _ in range(24)]
    lengths = np.array([len(s) for s in seqs])
    tokens = np.full((len(seqs), lengths.max()), -1)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    return tokens, lengths


def test_resume_equals_uninterrupted(tmp_path):
    tokens, lengths = _data()
    vocab = build_vocab(tokens, lengths, max_len=4, top_k=30, base=4, final_only=3)
    ids = vocab.lookup(tokens, lengths)
    cfg = TrainConfig(num_states=3, batch_size=6, pretrain_epochs=1, epochs=2, lr=0.1, eval_every=2, patience=2)
    quiet = dict(log=lambda s: None, seed=0)
    full = HSMMLM(vocab, 3, seed=0)
    train_hsmm(full, ids, lengths, ids[:6], lengths[:6], cfg, **quiet)
    # interrupted (killed) after phase 1 and one epoch of phase 2, then resumed
    ck = Checkpointer(tmp_path / "ck.pt")

    class Killed(Exception):
        pass

    def kill_after_first_train_epoch(msg):
        if msg.startswith("hsmm train epoch 1/"):
            raise Killed

    part = HSMMLM(vocab, 3, seed=0)
    with pytest.raises(Killed):
        train_hsmm(part, ids, lengths, ids[:6], lengths[:6], cfg, checkpoint=ck, seed=0, log=kill_after_first_train_epoch)
    resumed = HSMMLM(vocab, 3, seed=0)
    train_hsmm(resumed, ids, lengths, ids[:6], lengths[:6], cfg, checkpoint=ck, **quiet)
    for a, b in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    # training improved the likelihood over the initial model
    assert evaluate(full, ids, lengths, 8, "cpu") > evaluate(HSMMLM(vocab, 3, seed=0), ids, lengths, 8, "cpu")


def test_emissions_normalised_per_length_and_unknown_windows_impossible():
    tokens, lengths = _data()
    vocab = build_vocab(tokens, lengths, max_len=4, top_k=30, base=4)
    model = HSMMLM(vocab, 3, seed=1)
    le = model.log_emit().exp()
    for l in range(4):
        a, b = vocab.offsets[l], vocab.offsets[l + 1]
        assert torch.allclose(le[:, a:b].sum(1), torch.ones(3), atol=1e-5)
    ids = torch.as_tensor(vocab.lookup(tokens, lengths))
    scores = model.emission_scores(ids)
    assert (scores[ids < 0] == sm.NEG).all()
