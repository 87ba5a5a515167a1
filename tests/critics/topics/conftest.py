"""A small fitted CTM the topic critic's report tests share (4 topics on 150 synthetic documents)."""

from __future__ import annotations

import pytest
import torch

from critics.topics.ctm_critic import CorrelatedTopicCritic

from .test_ctm_critic import documents


@pytest.fixture(scope="module")
def ctm():
    torch.set_num_threads(1)
    return CorrelatedTopicCritic(num_topics=4, steps=100, train_batch_size=150, lr=0.1, infer_steps=100,
                                 seed=0).fit(documents(150, 1, "tr"))
