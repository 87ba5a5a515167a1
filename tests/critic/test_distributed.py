"""Streamed scoring on a real Dask cluster (a 2-process LocalCluster on loopback): the serial run's bytes, for
shards and resumed runs too, and a worker that loads another critic than the client's refuses."""

from __future__ import annotations

import json
import os

import pytest

from critic import Critic
from critic.cli import main
from critic.document import Document, write_jsonl
from critic.streaming import Chunk, merge_shards, progress_path, score_stream

distributed = pytest.importorskip("distributed")  # critic[dask]: installed by .ci/install.sh


@pytest.fixture(scope="module")
def cluster():
    from critic.distributed import local_cluster

    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def job(tmp_path_factory, fixture_manpage_root):
    """A saved section critic, 3.5 chunks' worth of documents (a chunk is one 8192-document batch; every 97th
    document has no section and is skipped) and the serial run's output."""
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl
    from critics.sections import SectionTransitionCritic

    tmp = tmp_path_factory.mktemp("dask")
    build_manpages(tmp / "data", root=fixture_manpage_root, install=False)
    pages = read_jsonl(tmp / "data" / "train.jsonl")
    SectionTransitionCritic(delta=0.1).fit(pages).save(tmp / "critic")
    critic = Critic.load(tmp / "critic")
    docs = [Document(f"{pages[i % len(pages)].id}#{i}", pages[i % len(pages)].sections if i % 97 else ())
            for i in range(int(3.5 * critic.batch_size))]
    path = write_jsonl(docs, tmp / "docs.jsonl")
    score_stream(critic, docs, tmp / "serial.jsonl", source=path)
    return tmp, critic, docs, path, (tmp / "serial.jsonl").read_bytes()


def test_a_cluster_writes_the_serial_run_s_bytes_shards_too(cluster, job):
    from critic.distributed import dask_scorer

    tmp, critic, docs, path, serial = job
    scorer = dask_scorer(cluster, tmp / "critic", critic, seed=0, window=2)
    state = score_stream(critic, docs, tmp / "dask.jsonl", source=path, scorer=scorer)
    assert state["chunks_total"] == 4 and len(state["chunks"]) == 4
    assert (tmp / "dask.jsonl").read_bytes() == serial
    pids = set(cluster.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes of their own
    for i in (1, 2):
        score_stream(critic, docs, tmp / f"p{i}.jsonl", source=path, shard=(i, 2), scorer=scorer)
    merge_shards([tmp / "p1.jsonl", tmp / "p2.jsonl"], tmp / "merged.jsonl")
    assert (tmp / "merged.jsonl").read_bytes() == serial


def test_workers_that_read_their_own_spans_write_the_serial_run_s_bytes(cluster, job):
    """The input as a LineInput: the client sends each worker a span of lines (no documents) and gets back its
    rows, what its read counted and its ids: the bytes and the report of the serial run, shards too."""
    from critic.distributed import dask_scorer
    from critic.inputs import ReadReport, iter_documents, line_input

    tmp, critic, docs, path, serial = job
    lines = line_input(path)
    scorer = dask_scorer(cluster, tmp / "critic", critic, seed=0, lines=lines, window=2)
    report = lines.report()
    state = score_stream(critic, lines, tmp / "spans.jsonl", source=path, scorer=scorer, report=report)
    assert (tmp / "spans.jsonl").read_bytes() == serial and state["read"] == len(docs) and len(state["chunks"]) == 4
    whole = ReadReport()
    list(iter_documents(path, report=whole))
    assert report.to_dict() == whole.to_dict()
    for i in (1, 2):
        score_stream(critic, lines, tmp / f"s{i}.jsonl", source=path, shard=(i, 2), scorer=scorer)
    merge_shards([tmp / "s1.jsonl", tmp / "s2.jsonl"], tmp / "s.jsonl")
    assert (tmp / "s.jsonl").read_bytes() == serial


def test_a_run_stopped_on_the_cluster_resumes_to_the_same_bytes(cluster, job):
    from critic.distributed import dask_scorer

    tmp, critic, docs, path, serial = job
    out = tmp / "resumed.jsonl"

    def stopping():
        for k, doc in enumerate(docs):
            if k == 2 * critic.batch_size + 300:
                raise KeyboardInterrupt
            yield doc

    scorer = dask_scorer(cluster, tmp / "critic", critic, seed=0, window=1)
    with pytest.raises(KeyboardInterrupt):
        score_stream(critic, stopping(), out, source=path, scorer=scorer)
    assert 1 <= len(json.loads(progress_path(out).read_text())["chunks"]) < 4
    score_stream(critic, docs, out, source=path, scorer=scorer)
    assert out.read_bytes() == serial


def test_a_worker_that_loads_another_critic_refuses(cluster, job):
    from critic.distributed import dask_scorer
    from critics.sections import SectionTransitionCritic

    tmp, critic, docs, path, _ = job
    other = SectionTransitionCritic(delta=0.5).fit([d for d in docs[:200] if d.sections])
    assert other.state_sha256() != critic.state_sha256()
    scorer = dask_scorer(cluster, tmp / "critic", other, seed=0)
    with pytest.raises(Exception, match=r"the critic a worker loads .* is not the client's"):
        list(scorer([Chunk(0, 3, 0, True, docs[:3])]))


def test_the_command_runs_on_an_embedded_cluster(job, tmp_path, capsys):
    tmp, _, _, path, serial = job
    assert main(["score", str(tmp / "critic"), "--input", str(path), "--workers", "2",
                 "--out", str(tmp_path / "w.jsonl")]) == 0
    assert (tmp_path / "w.jsonl").read_bytes() == serial
    capsys.readouterr()
    assert main(["score", str(tmp / "critic"), "--input", str(path), "--workers", "2"]) == 2
    assert "--workers / --scheduler write chunks as they finish: give --out FILE" in capsys.readouterr().err


def test_the_command_s_client_plans_without_torch_and_each_worker_loads_on_the_device(job, tmp_path, capsys):
    """critic score --workers 2 in a fresh interpreter: the serial bytes, and the client never imports torch (it
    plans with the saved critic's card: issue 40's start-up); --device reaches the workers, so a GPU asked for
    where there is none fails by name instead of scoring on the CPU."""
    import subprocess
    import sys
    from pathlib import Path

    tmp, _, _, path, serial = job
    code = ("import json, sys\nfrom critic.cli import main\nstatus = main(sys.argv[1:])\n"
            "print(json.dumps([status, 'torch' in sys.modules]))")
    out = tmp_path / "client.jsonl"
    done = subprocess.run([sys.executable, "-c", code, "score", str(tmp / "critic"), "--input", str(path),
                           "--workers", "2", "--out", str(out)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert json.loads(done.stdout.splitlines()[-1]) == [0, False], done.stderr[-2000:]
    assert out.read_bytes() == serial
    import torch

    if not torch.cuda.is_available():
        capsys.readouterr()
        assert main(["score", str(tmp / "critic"), "--input", str(path), "--workers", "2", "--device", "cuda",
                     "--out", str(tmp_path / "gpu.jsonl")]) == 2
        assert "device 'cuda' was asked for but CUDA is not available here" in capsys.readouterr().err
        assert not (tmp_path / "gpu.jsonl").exists()


def test_a_worker_refuses_a_critic_whose_batches_are_not_the_planned_ones(job):
    """A chunk's Monte Carlo seeds follow from its batches: a worker whose critic batches otherwise than the client
    planned (another version of the package there) refuses by name."""
    from critic.distributed import _worker_critic
    from critic.saved import CriticLoadError

    tmp, critic, *_ = job
    with pytest.raises(CriticLoadError, match=rf"scores batches of {critic.batch_size} documents, the client "
                                              rf"planned {critic.batch_size // 2}"):
        _worker_critic(str(tmp / "critic"), critic.state_sha256(), "cpu", critic.batch_size // 2)
    assert _worker_critic(str(tmp / "critic"), critic.state_sha256(), "cpu", critic.batch_size).batch_size == \
        critic.batch_size


@pytest.mark.parametrize("reader", ["documents", "lines"])
def test_a_worker_killed_mid_chunk_is_retried_and_nothing_is_lost_or_doubled(cluster, job, reader):
    """SIGKILL the worker process that is scoring a chunk (its documents sent to it, or its span read there): the
    nanny restarts it, the task is retried, and the output is still the serial run's bytes (every document
    once)."""
    import signal
    import threading
    import time

    from critic.distributed import dask_scorer

    from critic.inputs import line_input

    tmp, critic, docs, path, serial = job
    out, errors = tmp / f"killed-{reader}.jsonl", []
    lines = line_input(path) if reader == "lines" else None

    def run():
        try:
            score_stream(critic, lines or docs, out, source=path,
                         scorer=dask_scorer(cluster, tmp / "critic", critic, seed=0, lines=lines, window=1))
        except Exception as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    killed, deadline = None, time.monotonic() + 60
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        busy = [addr for addr, tasks in cluster.processing().items()
                if any(str(task).startswith("_score_on_worker") for task in tasks)]  # a chunk, not the first load
        if busy:
            pid = cluster.run(os.getpid, workers=busy[:1])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            killed = pid
        time.sleep(0.01)
    thread.join(timeout=300)
    assert killed is not None and not thread.is_alive() and not errors
    assert out.read_bytes() == serial
    cluster.wait_for_workers(2, timeout=60)
    assert killed not in set(cluster.run(os.getpid).values())  # a new process took its place


def test_a_user_s_monte_carlo_critic_from_a_plugin_file_scores_the_serial_bytes_on_dask(job, tmp_path, monkeypatch):
    """critic --plugin FILE: the command and the Dask workers it starts load the user's critic; its Monte Carlo
    seeds follow the chunk's index, so 2 workers write what one process writes (and another seed differs)."""
    from pathlib import Path

    from critic.registry import PLUGINS_ENV

    monkeypatch.setenv(PLUGINS_ENV, "")  # restored after the test
    plugin = str(Path(__file__).parent / "plugins" / "soft_count_critic.py")
    tmp, _, docs, path, _ = job
    model = tmp_path / "soft"
    assert main(["--plugin", plugin, "fit", "soft-count", "--train", str(path), "--out", str(model)]) == 0
    outputs = {}
    for name, extra in (("serial", []), ("dask", ["--workers", "2"]), ("seed 1", ["--seed", "1"])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["--plugin", plugin, "score", str(model), "--input", str(path), "--chunk-batches", "100",
                     "--out", str(out), *extra]) == 0
        outputs[name] = out.read_bytes()
    rows = [json.loads(line) for line in outputs["serial"].decode().splitlines()]
    assert len(rows) == len(docs) and all(r["estimator"] == "monte carlo (16 samples)" for r in rows if "latent_nll" in r)
    assert outputs["dask"] == outputs["serial"] != outputs["seed 1"]


def test_a_plugin_that_is_not_there_is_named(capsys, monkeypatch):
    from critic.registry import PLUGINS_ENV

    monkeypatch.setenv(PLUGINS_ENV, "")
    assert main(["--plugin", "no_such_critics.py", "list"]) == 2
    assert "--plugin no_such_critics.py: no such file" in capsys.readouterr().err
    assert main(["--plugin", "no_such_module_of_critics", "list"]) == 2
    assert "cannot import no_such_module_of_critics: ModuleNotFoundError" in capsys.readouterr().err


def test_more_workers_than_the_machine_holds_stop_before_any_process_starts(job, tmp_path, capsys, monkeypatch):
    """The issue's case: --workers 10000 was thousands of "too many open files" tracebacks and a hang; now one line
    naming the bound (cores x 4 here, the open-file limit where it is lower) and no cluster."""
    import resource

    from critic import distributed

    tmp, _, _, source, _ = job
    critic_dir = tmp / "critic"
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    started = []
    monkeypatch.setattr(distributed, "local_cluster", lambda n: started.append(n))
    capsys.readouterr()
    assert main(["score", str(critic_dir), "--input", str(source), "--out", str(tmp_path / "s.jsonl"),
                 "--workers", "10000"]) == 2
    err = capsys.readouterr().err
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    bound = min(8, files // 64)
    assert f"--workers 10000: this machine runs at most {bound} worker processes (2 cores, 4 a core; an open-file " \
           f"limit of {files}, 64 a worker); for more, give --scheduler ADDRESS" in err
    assert started == [] and not (tmp_path / "s.jsonl").exists() and "Traceback" not in err
    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, 256))  # a low open-file limit bounds it first
    with pytest.raises(ValueError, match="at most 4 worker processes"):
        distributed.check_workers(5)
    distributed.check_workers(4)


@pytest.fixture
def fake_server():
    """A loopback TCP server that either never answers (``"silent"``) or answers anything with an HTTP error
    (``"http"``); yields a function from the mode to its address."""
    import socket
    import threading

    servers = []

    def start(mode: str) -> str:
        server = socket.create_server(("127.0.0.1", 0))
        servers.append(server)

        def serve():
            held = []
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                held.append(conn)  # kept open: a silent server never closes either
                if mode == "http":
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=serve, daemon=True).start()
        return f"tcp://127.0.0.1:{server.getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


def test_a_scheduler_address_is_checked_before_a_client_is_made(cluster, job, fake_server, tmp_path, capsys):
    """The issue's cases: a server that accepts and never answers hung past the client's timeout; one that
    answers HTTP ended in a traceback after asking for 3 EiB.  Both, and a closed port, are named errors before
    anything is written; a real scheduler scores the serial bytes."""
    import socket

    from critic.distributed import check_scheduler

    tmp, _, _, path, serial = job
    args = ["score", str(tmp / "critic"), "--input", str(path), "--out", str(tmp_path / "s.jsonl")]
    assert main([*args, "--scheduler", cluster.scheduler.address]) == 0
    assert (tmp_path / "s.jsonl").read_bytes() == serial
    http = fake_server("http")
    capsys.readouterr()
    assert main([*args[:-1], str(tmp_path / "h.jsonl"), "--scheduler", http]) == 2
    err = capsys.readouterr().err
    assert f"critic: error: --scheduler {http}: what answers there is not a Dask scheduler" in err
    assert "Traceback" not in err and not (tmp_path / "h.jsonl").exists()
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    with pytest.raises(ValueError, match=rf"--scheduler tcp://127.0.0.1:{port}: cannot connect"):
        check_scheduler(f"tcp://127.0.0.1:{port}", timeout=5)
    silent = fake_server("silent")
    with pytest.raises(ValueError, match=rf"--scheduler {silent}: no answer within 1 s"):
        check_scheduler(silent, timeout=1)


@pytest.mark.parametrize("name", ["repetition", "entity-grid"])
def test_the_critics_beyond_the_paper_stream_and_score_on_dask_as_in_one_call(cluster, fixture_manpages, tmp_path,
                                                                              name):
    """The repetition and entity-grid critics streamed in chunks here and on the cluster's workers (each reading
    its span of the input): the same bytes, and each row's T(x) that of one ``score`` call over every document."""
    from critic.distributed import dask_scorer
    from critic.inputs import line_input
    from critic.registry import get_critic

    pages = fixture_manpages["train"]
    get_critic(name)().fit(pages).save(tmp_path / "critic")
    critic = Critic.load(tmp_path / "critic")
    docs = [Document(f"{pages[i % len(pages)].id}#{i}", pages[i % len(pages)].sections)
            for i in range(int(2.5 * critic.batch_size))]
    path = write_jsonl(docs, tmp_path / "docs.jsonl")
    score_stream(critic, docs, tmp_path / "serial.jsonl", source=path, batches_per_chunk=1)
    lines = line_input(path)
    scorer = dask_scorer(cluster, tmp_path / "critic", critic, seed=0, lines=lines, window=2)
    state = score_stream(critic, lines, tmp_path / "dask.jsonl", source=path, scorer=scorer, report=lines.report(),
                         batches_per_chunk=1)
    assert len(state["chunks"]) == 3
    assert (tmp_path / "dask.jsonl").read_bytes() == (tmp_path / "serial.jsonl").read_bytes()
    rows = [json.loads(line) for line in (tmp_path / "dask.jsonl").read_text().splitlines()]
    scores = critic.score(docs)
    by_id = dict(zip(scores.doc_ids, scores.latent_nll.tolist()))
    assert len(by_id) == len(docs) and all(row["latent_nll"] == pytest.approx(by_id[row["id"]], rel=1e-12)
                                           for row in rows)
