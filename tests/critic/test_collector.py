"""The cyclic collector's settings (critic.collector): frozen blocks nest (a command around a stream), and every
setting is put back however the block ends."""

from __future__ import annotations

import gc

import pytest

from critic import collector


def test_frozen_blocks_nest_and_the_outermost_puts_the_collector_back():
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with collector.frozen():
        outer = gc.get_freeze_count()
        assert outer > 0 and gc.get_threshold() == before
        with collector.frozen(collector.STREAM_THRESHOLD):
            made = [[] for _ in range(10)]
            assert gc.get_threshold()[0] == collector.STREAM_THRESHOLD
        assert gc.get_threshold() == before and gc.get_freeze_count() > 0  # the inner block leaves it frozen
        del made
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(KeyError):
        with collector.frozen(collector.STREAM_THRESHOLD):
            raise KeyError("x")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
