"""The threads benchmark's load: one spinning process per requested core while the block runs, none after."""

from __future__ import annotations

import os
import time

from experiments.benchmarks.threads import busy_load


def test_the_load_spins_while_the_block_runs_and_stops_after():
    with busy_load(2) as procs:
        time.sleep(1.0)
        assert len(procs) == 2 and all(p.poll() is None for p in procs)  # spinning
        children = os.times()  # nothing waited for yet: children's CPU is counted once they are reaped
    after = os.times()
    assert all(p.returncode is not None for p in procs)  # ended and reaped
    spun = (after.children_user + after.children_system) - (children.children_user + children.children_system)
    assert spun > 0.5  # two processes spinning for about a second: at least half a core's worth
