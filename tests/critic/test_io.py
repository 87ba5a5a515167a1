"""Atomic output (critic.io): modes that follow the umask, and temporaries of killed writers removed."""

from __future__ import annotations

import builtins
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import critic.io as critic_io
from critic.io import atomic_directory, atomic_open, atomic_write_text, current_umask, remove_stale_temporaries

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """``umask(mask)`` sets this process's umask for the test; the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_outputs_get_the_modes_plain_open_and_mkdir_give(tmp_path, umask, mask):
    umask(mask)
    assert current_umask() == mask
    with open(tmp_path / "plain", "w"):
        pass
    (tmp_path / "plain_dir").mkdir()
    atomic_write_text(tmp_path / "file", "x")
    with atomic_open(tmp_path / "streamed", "wb") as fh:
        fh.write(b"x")
    with atomic_directory(tmp_path / "folder") as tmp:
        atomic_write_text(tmp / "inside", "x")
    with atomic_directory(tmp_path / "folder") as tmp:  # a replacement too
        atomic_write_text(tmp / "inside", "y")
    assert mode(tmp_path / "plain") == 0o666 & ~mask and mode(tmp_path / "plain_dir") == 0o777 & ~mask
    for name in ("file", "streamed", "folder/inside"):
        assert mode(tmp_path / name) == mode(tmp_path / "plain"), name
    assert mode(tmp_path / "folder") == mode(tmp_path / "plain_dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder", "plain", "plain_dir", "streamed"]


def test_the_umask_without_proc_is_read_and_left_as_it_was(umask, monkeypatch):
    umask(0o027)
    real_open = builtins.open

    def no_proc(file, *args, **kwargs):
        if str(file).startswith("/proc/"):
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert current_umask() == 0o027
    assert os.umask(0o027) == 0o027


# a writer that stops half-way through its atomic write of argv[1] ("file" or "folder": argv[2]) and waits
WRITER = """
import sys, time
from critic.io import atomic_directory, atomic_open
target, kind = sys.argv[1], sys.argv[2]
if kind == "file":
    with atomic_open(target, "wb") as fh:
        fh.write(b"x" * (1 << 22))
        fh.flush()
        print("writing", flush=True)
        time.sleep(600)
else:
    with atomic_directory(target) as tmp:
        (tmp / "half.bin").write_bytes(b"x" * (1 << 22))
        print("writing", flush=True)
        time.sleep(600)
"""


def start_writer(target: Path, kind: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), kind], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    assert proc.stdout.readline() == "writing\n"
    return proc


def temporaries(folder: Path, pid: int) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(".out.") and f".{pid}." in p.name)


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_rerun_removes_what_a_writer_killed_9_left_and_keeps_a_live_writers(tmp_path, kind):
    target = tmp_path / "out"
    killed = start_writer(target, kind)
    live = start_writer(target, kind)
    try:
        killed.kill()  # SIGKILL: no cleanup runs in the writer
        # wait until it is dead but not yet reaped (a zombie): it can write nothing more and counts as gone
        os.waitid(os.P_PID, killed.pid, os.WEXITED | os.WNOWAIT)
        stale, = temporaries(tmp_path, killed.pid)
        assert stale.name.endswith(".tmp") and critic_io.is_temporary(stale.name)
        pending, = temporaries(tmp_path, live.pid)
        dead = Path(stale.name.replace(".tmp", ".old"))  # the previous version a swap had moved aside
        (tmp_path / dead).mkdir()
        (tmp_path / dead / "out").mkdir()
        lookalikes = [".out.tmp", ".out.abcdefgh.tmp", f".out.{killed.pid}.abcdefgh.tmp", ".out.old",
                      stale.name.replace(critic_io._HOST, "0" * 8),  # another host's: its PIDs mean nothing here
                      stale.name + "~", "out.tmp", stale.name.replace(".out.", ".out2.")]
        for name in lookalikes:
            (tmp_path / name).write_text("not ours to remove")

        if kind == "file":
            atomic_write_text(target, "complete")
        else:
            with atomic_directory(target) as tmp:
                atomic_write_text(tmp / "all.txt", "complete")

        assert not stale.exists() and not (tmp_path / dead).exists()
        assert pending.exists()  # the live writer's temporary is kept
        assert all((tmp_path / name).read_text() == "not ours to remove" for name in lookalikes)
        assert (target if kind == "file" else target / "all.txt").read_text() == "complete"
    finally:
        for proc in (killed, live):
            proc.kill()
            proc.wait()
            proc.stdout.close()
    assert remove_stale_temporaries(target) == [pending]  # once its writer is gone, it goes too
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", *lookalikes])


def test_only_the_targets_own_folder_is_looked_at(tmp_path):
    assert remove_stale_temporaries(tmp_path / "absent" / "out") == []
    (tmp_path / "file").write_text("")
    assert remove_stale_temporaries(tmp_path / "file" / "out") == []
