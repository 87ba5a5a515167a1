"""The threads benchmark's load: one spinning process per requested core while the block runs, none after.

Nothing here depends on how loaded the machine is: the test waits (up to a generous deadline) until each child has
been given CPU time, rather than asking for a share of the cores within a fixed second.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from experiments.benchmarks.threads import busy_load


def cpu_ticks(pid: int) -> int:
    """User + system clock ticks the process has run (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_the_load_spins_while_the_block_runs_and_stops_after():
    before = os.times()
    with busy_load(2) as procs:
        deadline = time.monotonic() + 300
        while any(cpu_ticks(p.pid) == 0 for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(procs) == 2 and all(p.poll() is None for p in procs)  # still spinning
        assert all(cpu_ticks(p.pid) > 0 for p in procs)  # each has run on a core
    after = os.times()
    assert all(p.returncode is not None for p in procs)  # ended and reaped
    assert (after.children_user + after.children_system) > (before.children_user + before.children_system)
