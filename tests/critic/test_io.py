"""Atomic output (critic.io): modes that follow the umask, and temporaries of killed writers removed."""

from __future__ import annotations

import builtins
import json
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


def test_a_folder_is_replaced_only_when_this_tool_wrote_it_as_that_kind_and_nothing_else(tmp_path):
    """The output-folder rule: absent, empty, or marked as this kind by the tool and holding only what it wrote;
    a folder of another tool with a file of the same name (lm-eval's results.json), one of another kind, a file,
    and a report where the user left notes are refused, naming the folder and what is in it, and left as they were."""
    from critic.io import OUTPUT_MARKER, atomic_directory, check_replaceable

    out = tmp_path / "report"
    check_replaceable(out, "report")  # absent
    out.mkdir()
    check_replaceable(out, "report")  # empty
    with atomic_directory(out, "report") as tmp:
        (tmp / "results.json").write_text("{}")
        (tmp / "pages").mkdir()
        (tmp / "pages" / "0.html").write_text("<p>")
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"kind": "report", "files": ["pages/0.html", "results.json"]}
    check_replaceable(out, "report")  # its own: replaceable
    with pytest.raises(ValueError, match=f"{out}: exists and is not a saved critic; refusing to replace it: it holds "
                                         rf"{OUTPUT_MARKER}, pages, results.json"):
        check_replaceable(out, "critic")
    (out / "pages" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=rf"{out}: is a report directory but also holds files this tool did not "
                                         r"write \(pages/notes.txt\); refusing to replace it, which would delete"):
        check_replaceable(out, "report")
    lm_eval = tmp_path / "lm-eval"
    lm_eval.mkdir()
    for name in ("results.json", "samples_gsm8k.jsonl"):
        (lm_eval / name).write_text("theirs")
    with pytest.raises(ValueError, match=rf"{lm_eval}: exists and is not a report directory; refusing to replace it: "
                                         r"it holds results.json, samples_gsm8k.jsonl, which this tool did not"):
        check_replaceable(lm_eval, "report")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file: exists and is not a report directory; refusing to replace it: it "
                                         "is not a folder"):
        check_replaceable(tmp_path / "file", "report")
    assert sorted(p.name for p in lm_eval.iterdir()) == ["results.json", "samples_gsm8k.jsonl"]
    assert (out / "pages" / "notes.txt").read_text() == "mine"


def test_an_output_lock_stops_a_second_run_and_leaves_nothing_behind(tmp_path):
    from critic.io import output_lock

    run = tmp_path / "run"
    with output_lock(run, inside=True):
        assert (run / ".lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(ValueError, match=rf"{run}: another run \(process {os.getpid()}\) is writing it"):
            with output_lock(run, inside=True):
                pass
    assert list(run.iterdir()) == []  # the lock file goes with its holder
    out = tmp_path / "scores.jsonl"
    with output_lock(out):
        assert (tmp_path / ".scores.jsonl.lock").is_file()
    with output_lock(out):  # released: the next run takes it
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_run_writes_only_into_a_folder_it_made_or_an_empty_one(tmp_path):
    """critic run --out: a folder of the user's (here one with a data/ of their own, which the data stage would
    have replaced) is refused before anything is written; an empty or absent one is made this tool's (marked); a run
    folder written before folders were marked (its stages/ markers) is recognised and marked."""
    from critic.io import OUTPUT_MARKER, claim_folder
    from critic.stages import is_run_folder

    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "train.jsonl").write_text("theirs")
    with pytest.raises(ValueError, match=f"{mine}: exists and is not a run folder; refusing to write into it: it "
                                         "holds data, which this tool did not write as one"):
        claim_folder(mine, "run", legacy=is_run_folder)
    assert sorted(p.name for p in mine.rglob("*")) == ["data", "train.jsonl"]
    fresh = claim_folder(tmp_path / "fresh", "run", legacy=is_run_folder)
    assert json.loads((fresh / OUTPUT_MARKER).read_text()) == {"kind": "run", "files": []}
    (fresh / "data").mkdir()
    assert claim_folder(fresh, "run") == fresh  # its own, with stages written since
    old = tmp_path / "old"
    (old / "stages").mkdir(parents=True)
    (old / "stages" / "data.json").write_text(json.dumps({"stage": "data", "key": "abc", "complete": True}))
    assert claim_folder(old, "run", legacy=is_run_folder) == old and (old / OUTPUT_MARKER).is_file()
    report = tmp_path / "report"
    report.mkdir()
    (report / OUTPUT_MARKER).write_text(json.dumps({"kind": "report", "files": []}))
    with pytest.raises(ValueError, match="exists and is not a run folder"):
        claim_folder(report, "run", legacy=is_run_folder)
