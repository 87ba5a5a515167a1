"""Every CLI command on every class of bad input: exit status 2, one message naming the file
(and the line or document where there is one), never a traceback.

Most cases call ``critic.cli.main`` in-process; a few run the real command in a subprocess.
"""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from critic import registry
from critic.cli import main
from critic.document import DocumentError

ROOT = Path(__file__).resolve().parents[2]
DOC = {"id": "a", "sections": [{"title": "name", "text": "x"}, {"title": "synopsis", "text": "y"}]}

BAD_JSONL = {
    # class: (file bytes, message after the path)
    "missing": (None, ": no such file"),
    "empty": (b"", ": holds no documents (empty, or blank lines only)"),
    "invalid_json": (json.dumps(DOC).encode() + b'\n{"id": "b", "sections": [\n', ":2: invalid JSON"),
    "non_utf8": (b'{"id": "a", "sections": [{"title": "t", "text": "\xff"}]}\n', ":1: line is not valid UTF-8"),
    "sections_not_list": (b'{"id": "a", "sections": "name synopsis"}\n', ":1: document 'a' has no 'sections' list"),
    "title_a_number": (b'{"id": "a", "title": 7, "sections": []}\n', ":1: document 'a' has a non-string title"),
    "section_title_a_number": (b'{"id": "a", "sections": [{"title": 7, "text": "x"}]}\n',
                               ":1: document 'a' section 0 has a non-string title"),
    "text_a_list": (b'{"id": "a", "sections": [{"title": "t", "text": ["x", "y"]}]}\n',
                    ":1: document 'a' section 0 must have a string 'text', got a list"),
    "unknown_key": (b'{"id": "a", "sectons": []}\n', ":1: document 'a' has an unknown key 'sectons'"),
    "duplicate_ids": ((json.dumps(DOC) + "\n" + json.dumps(DOC) + "\n").encode(), ":2: duplicate document id 'a'"),
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, fixture_manpage_root):
    """A built corpus, a fitted critic and one file per bad-JSONL class."""
    root = tmp_path_factory.mktemp("bad")
    corpus = root / "corpus"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install",
                 "--out", str(corpus)]) == 0
    model = root / "model"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}']) == 0
    files = {}
    for name, (content, _) in BAD_JSONL.items():
        files[name] = root / f"{name}.jsonl"
        if content is not None:
            files[name].write_bytes(content)
    return {"root": root, "corpus": corpus, "good": corpus / "train.jsonl", "model": model, "files": files,
            "manroot": fixture_manpage_root}


def fails(capsys, argv: list[str], *expected: str) -> str:
    """Run the CLI in-process; assert status 2, no traceback and every expected fragment in stderr."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    return err


# ------------------------------------------------------------------ documents (JSONL)
def _jsonl_commands(c, bad):
    good, model, out = c["good"], c["model"], c["root"] / "out"
    return {
        "fit --train": ["fit", "sections", "--train", bad, "--out", out / "m"],
        "fit --valid": ["fit", "sections", "--train", good, "--valid", bad, "--out", out / "m"],
        "score --input": ["score", model, "--input", bad],
        "compare --reference": ["compare", model, "--reference", bad, "--candidate", f"x={good}", "--out", out / "r"],
        "compare --candidate": ["compare", model, "--reference", good, "--candidate", f"x={bad}", "--out", out / "r"],
        "outliers --reference": ["outliers", model, "--reference", bad, "--input", good],
        "outliers --input": ["outliers", model, "--reference", good, "--input", bad],
    }


@pytest.mark.parametrize("kind", sorted(BAD_JSONL))
def test_bad_documents_in_every_command(ctx, capsys, kind):
    bad = ctx["files"][kind]
    for command, argv in _jsonl_commands(ctx, bad).items():
        err = fails(capsys, argv, f"{bad}{BAD_JSONL[kind][1]}")
        assert err.count("\n") == 1, f"{command}: {err!r}"
    assert not (ctx["root"] / "out").exists()  # nothing half-written


# ------------------------------------------------------------------ critic names and settings
@pytest.mark.parametrize("critic, params, expected", [
    ("sectoins", None, ["unknown critic 'sectoins' (did you mean 'sections'?); known: coref"]),
    ("sections", '{"delta": }', ["--params: invalid JSON"]),
    ("sections", "[0.1]", ["--params: expected a JSON object of settings"]),
    ("sections", '{"delta": "big"}',
     ["--params: critic 'sections' setting delta must be a number or null (>= 1e-12 and <= 1e+12), got string"]),
    ("sections", '{"delta": true}', ["setting delta must be a number or null (>= 1e-12 and <= 1e+12), got boolean"]),
    ("sections", '{"delta_grid": "0.1"}', ["setting delta_grid must be a list of numbers"]),
    ("sections", '{"detla": 0.1}', ["--params: critic 'sections' has no setting 'detla' (did you mean 'delta'?)"]),
    ("sections", '{"delta": -1}', ["--params: critic 'sections' setting delta must be >= 1e-12 and <= 1e+12, got "
                                   "integer -1"]),
    ("sections", '{"delta": 1e308}', ["setting delta must be >= 1e-12 and <= 1e+12, got number 1e+308"]),
    ("sections", '{"delta": 5e-324}', ["setting delta must be >= 1e-12 and <= 1e+12, got number 5e-324"]),
    ("sections-classifier", '{"delta": 1e308}', ["setting delta must be >= 1e-12 and <= 1e+12, got number 1e+308"]),
    ("coref", '{"order": 1}', ["--params: critic 'coref' setting order must be >= 2, got integer 1"]),
    ("coref", '{"unk_prob": 2}', ["setting unk_prob must be > 0 and < 1, got integer 2"]),
])
def test_bad_critic_name_or_params(ctx, capsys, critic, params, expected):
    argv = ["fit", critic, "--train", ctx["good"], "--out", ctx["root"] / "never"]
    fails(capsys, argv + (["--params", params] if params else []), *expected)
    assert not (ctx["root"] / "never").exists()


def test_fit_never_replaces_a_directory_that_is_not_a_critic(ctx, capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    fails(capsys, ["fit", "sections", "--train", ctx["good"], "--out", tmp_path],
          f"{tmp_path}: exists and is not a saved critic")
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ damaged saved critics
def _tamper(meta_key, value):
    def edit(model: Path):
        meta = json.loads((model / "critic.json").read_text())
        if isinstance(value, dict) and isinstance(meta[meta_key], dict):
            meta[meta_key].update(value)
        else:
            meta[meta_key] = value
        (model / "critic.json").write_text(json.dumps(meta))
    return edit


DAMAGE = {
    "truncated tensors.pt": (lambda m: (m / "tensors.pt").write_bytes((m / "tensors.pt").read_bytes()[:100]),
                             "tensors.pt: cannot be read"),
    "empty tensors.pt": (lambda m: (m / "tensors.pt").write_bytes(b""), "tensors.pt: cannot be read"),
    "missing tensors.pt": (lambda m: (m / "tensors.pt").unlink(), "tensors.pt: missing"),
    "bad critic.json": (lambda m: (m / "critic.json").write_text('{"critic": '), "critic.json: invalid JSON at line 1"),
    "wrong types in critic.json": (_tamper("params", ["delta"]), "critic.json: 'params' must be a dict"),
    "relabelled as another kind": (_tamper("critic", "hsmm"), "was changed after saving"),
    "tampered counts": (_tamper("state", {"delta": 0.5}), "was changed after saving"),
    "not a critic": (lambda m: shutil.rmtree(m), "not a saved critic (no such directory)"),
    "a file given as the critic": (lambda m: (shutil.rmtree(m), m.write_text("{}")),
                                   "not a saved critic (a file, not a folder)"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_saved_critic(ctx, capsys, tmp_path, damage):
    model = tmp_path / "model"
    shutil.copytree(ctx["model"], model)
    edit, message = DAMAGE[damage]
    edit(model)
    good = ctx["good"]
    for argv in (["score", model, "--input", good],
                 ["compare", model, "--reference", good, "--candidate", f"x={good}", "--out", tmp_path / "r"],
                 ["outliers", model, "--reference", good, "--input", good]):
        fails(capsys, argv, str(model), message)
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ devices and numbers
@pytest.mark.parametrize("device, message", [
    ("gpu", "device must be 'cpu' or 'cuda[:i]', got 'gpu'"),
    pytest.param("cuda", "device 'cuda' was asked for but CUDA is not available here",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_bad_device_in_every_command(ctx, capsys, tmp_path, device, message):
    good, model = ctx["good"], ctx["model"]
    config = _config(tmp_path, ctx["manroot"])
    for argv in (["fit", "sections", "--train", good, "--out", tmp_path / "m"],
                 ["score", model, "--input", good],
                 ["compare", model, "--reference", good, "--candidate", f"x={good}", "--out", tmp_path / "r"],
                 ["outliers", model, "--reference", good, "--input", good],
                 ["run", config, "--out", tmp_path / "run"]):
        fails(capsys, argv + ["--device", device], message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml"]


@pytest.mark.parametrize("argv, message", [
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x={good}", "--candidate", "x={good}",
      "--out", "{tmp}/r"], "--candidate x={good}: the name 'x' is already used for {good}"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "reference={good}", "--out", "{tmp}/r"],
     "'reference' is the reference set's name"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x={good}", "--top", "0", "--out", "{tmp}/r"],
     "argument --top: must be an integer >= 1, got 0"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x={good}", "--n-bootstrap", "0",
      "--out", "{tmp}/r"], "argument --n-bootstrap: must be an integer >= 1, got 0"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x", "--out", "{tmp}/r"],
     "expected NAME=FILE, got 'x'"),
    (["outliers", "{model}", "--reference", "{good}", "--input", "{good}", "--top", "-3"],
     "argument --top: must be an integer >= 1, got -3"),
    (["outliers", "{model}", "--reference", "{good}", "--input", "{good}", "--n-bootstrap", "many"],
     "argument --n-bootstrap: expected an integer >= 1, got 'many'"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x={good}", "--n-permutations", "0",
      "--out", "{tmp}/r"], "argument --n-permutations: must be an integer >= 1, got 0"),
    (["compare", "{model}", "--reference", "{good}", "--candidate", "x={good}", "--outlier-score", "lenght",
      "--out", "{tmp}/r"], "unknown --outlier-score 'lenght' (did you mean 'length'?); known: length, plain"),
    (["outliers", "{model}", "--reference", "{good}", "--input", "{good}", "--outlier-score", "short"],
     "unknown --outlier-score 'short'; known: length, plain"),
    (["score", "{model}", "--input", "{good}", "--threads", "0"], "argument --threads: must be an integer >= 1, got 0"),
])
def test_bad_names_and_numbers(ctx, capsys, tmp_path, argv, message):
    fill = {"model": ctx["model"], "good": ctx["good"], "tmp": tmp_path}
    fails(capsys, [a.format(**fill) for a in argv], message.format(**fill))
    assert not (tmp_path / "r").exists()


def test_score_output_that_is_a_directory(ctx, capsys, tmp_path):
    fails(capsys, ["score", ctx["model"], "--input", ctx["good"], "--out", tmp_path], f"{tmp_path}: is a directory")
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_compare_refuses_to_replace_a_directory_that_is_not_a_report(ctx, capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    fails(capsys, ["compare", ctx["model"], "--reference", ctx["good"], "--candidate", f"x={ctx['good']}",
                   "--out", tmp_path, "--n-bootstrap", "10"], f"{tmp_path}: exists and is not a report directory")
    assert (tmp_path / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------ critic run: configs
def _config(tmp_path: Path, manroot: Path, edit=lambda text: text, name: str = "job.toml") -> Path:
    text = (ROOT / "experiments" / "manpages" / "sections.toml").read_text()
    text = text.replace('root = "/usr/share/man"', f'root = "{manroot}"')
    path = tmp_path / name
    path.write_text(edit(text))
    return path


CONFIGS = {
    "unknown key": (lambda t: t.replace("min_title_count = 5", "min_title_cont = 5"),
                    ":{line}: [corpus] unknown key 'min_title_cont' (did you mean 'min_title_count'?)",
                    "min_title_cont"),
    "unknown table": (lambda t: t.replace("[criticism]", "[critcism]"),
                      ":{line}: unknown table [critcism] (did you mean [criticism]?)", "[critcism]"),
    "wrong type": (lambda t: t.replace("min_sections = 3", 'min_sections = "3"'),
                   ":{line}: [corpus] min_sections must be an integer, got string '3'", "min_sections ="),
    "wrong item type": (lambda t: t.replace("delta_grid = [", 'delta_grid = ["small", '),
                        ":{line}: [critic] delta_grid must be a list of numbers", "delta_grid ="),
    "out of range": (lambda t: t.replace("top = 10", "top = 0"),
                     ":{line}: [criticism] top must be >= 1, got 0", "top ="),
    "n_bootstrap 0": (lambda t: t.replace("n_bootstrap = 1000", "n_bootstrap = 0"),
                      ":{line}: [criticism] n_bootstrap must be >= 1, got 0", "n_bootstrap ="),
    "bad choice": (lambda t: t.replace('"dropped"]', '"shuffled"]'),
                   ":{line}: [criticism] corruptions: 'shuffled' is not one of", "corruptions ="),
    "duplicate candidate": (lambda t: t.replace('"dropped"]', '"permuted"]'),
                            ":{line}: [criticism] corruptions lists 'permuted' more than once", "corruptions ="),
    "table is a value": (lambda t: 'runner = "experiments.manpages.run:main"\ncriticism = 5\n',
                         ":{line}: criticism must be a table [criticism], got integer 5", "criticism = 5"),
    "bad TOML": (lambda t: t.replace("top = 10", "top = 10 ="), ":{line}: invalid TOML", "top = 10 ="),
    "no runner": (lambda t: t.replace('runner = "experiments.manpages.run:main"', ""),
                  ": needs a top-level key runner", None),
    "unknown runner": (lambda t: t.replace("experiments.manpages.run:main", "experiments.manpages.nope:main"),
                       ":{line}: runner 'experiments.manpages.nope:main': cannot import", "runner ="),
    "unregistered runner": (lambda t: t.replace("experiments.manpages.run:main", "json:loads"),
                            ":{line}: runner 'json:loads' is not registered", "runner ="),
    "empty": (lambda t: "", ": needs a top-level key runner", None),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_bad_config(ctx, capsys, tmp_path, case):
    edit, message, marker = CONFIGS[case]
    path = _config(tmp_path, ctx["manroot"], edit)
    line = next((k for k, text in enumerate(path.read_text().splitlines(), 1) if marker in text), None) \
        if marker else None
    fails(capsys, ["run", path, "--out", tmp_path / "run"], str(path) + message.format(line=line))
    assert not (tmp_path / "run").exists()


def test_config_files_that_cannot_be_read(ctx, capsys, tmp_path):
    fails(capsys, ["run", tmp_path / "nope.toml"], f"{tmp_path / 'nope.toml'}: no such file")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'runner = "experiments.manpages.run:main"\n# caf\xe9\n')
    fails(capsys, ["run", bad, "--out", tmp_path / "run"], f"{bad}:2: not UTF-8 text")
    fails(capsys, ["run", tmp_path, "--out", tmp_path / "run"], f"{tmp_path}: is a directory")


def test_run_with_a_missing_corpus_root(ctx, capsys, tmp_path):
    path = _config(tmp_path, tmp_path / "no-man-pages")
    fails(capsys, ["run", path, "--out", tmp_path / "run"], f"{tmp_path / 'no-man-pages'}: no such directory")


# ------------------------------------------------------------------ critic data build / convert
def test_data_build_bad_input(ctx, capsys, tmp_path):
    fails(capsys, ["data", "build", "manpage", "--out", tmp_path / "o"],
          "unknown corpus 'manpage' (did you mean 'manpages'?)")
    fails(capsys, ["data", "build", "manpages", "--root", tmp_path / "none", "--no-install", "--out", tmp_path / "o"],
          f"{tmp_path / 'none'}: no such directory")
    (tmp_path / "empty").mkdir()
    fails(capsys, ["data", "build", "manpages", "--root", tmp_path / "empty", "--no-install", "--out", tmp_path / "o"],
          f"{tmp_path / 'empty'}: no man page files found")
    damaged = tmp_path / "damaged"
    shutil.copytree(ctx["manroot"], damaged)
    page = sorted((damaged / "man1").glob("*.gz"))[0]
    page.write_bytes(page.read_bytes()[:20])
    fails(capsys, ["data", "build", "manpages", "--root", damaged, "--no-install", "--out", tmp_path / "o"],
          f"{page}: damaged gzip file")
    assert not (tmp_path / "o").exists()


def test_data_build_keeps_pages_with_the_same_name(ctx, capsys, tmp_path):
    root = tmp_path / "man"
    shutil.copytree(ctx["manroot"], root)
    page = sorted((root / "man1").glob("*.gz"))[0]
    (root / "man1" / page.name[:-3]).write_bytes(gzip.decompress(page.read_bytes()))  # x.1 beside x.1.gz
    capsys.readouterr()
    assert main(["data", "build", "manpages", "--root", str(root), "--no-install", "--out", str(tmp_path / "o")]) == 0
    counts = json.loads(capsys.readouterr().out)
    ids = [json.loads(line)["id"] for s in ("train", "valid", "test")
           for line in (tmp_path / "o" / f"{s}.jsonl").read_text().splitlines()]
    assert counts["renamed"] == 1 and len(ids) == len(set(ids))
    assert f"{page.name[:-3]}#2" in ids


COHAN = {"article_id": "A1", "abstract_text": ["<S> x . </S>"], "section_names": ["intro", "methods"],
         "sections": [["a ."], ["b ."]]}


@pytest.mark.parametrize("content, message", [
    (None, ": no such file"),
    (b"", ": no documents to convert"),
    (json.dumps(COHAN).encode() + b"\n{oops\n", ":2: invalid JSON"),
    (b'{"article_id": "\xff"}\n', ":1: line is not valid UTF-8"),
    (json.dumps({**COHAN, "sections": ["a .", "b ."]}).encode(),
     ":1: article 'A1': section 0 ('intro') must be a list of sentence strings, got str"),
    (json.dumps({**COHAN, "section_names": "intro"}).encode(), ":1: article 'A1': 'section_names' must be a list"),
    (json.dumps({**COHAN, "section_names": [1, 2]}).encode(), ":1: article 'A1': 'section_names' must be a list"),
    (json.dumps({**COHAN, "abstract_text": "x ."}).encode(), ":1: article 'A1': 'abstract_text' must be a list"),
    (json.dumps({**COHAN, "article_id": None}).encode(), ":1: expected a non-empty string 'article_id'"),
    (json.dumps({**COHAN, "sections": [["a ."]]}).encode(), ":1: article 'A1' has 2 section names but 1 sections"),
    (b"[1]\n", ":1: expected a JSON object"),
])
def test_convert_cohan_bad_input(capsys, tmp_path, content, message):
    src = tmp_path / "val.txt"
    if content is not None:
        src.write_bytes(content)
    fails(capsys, ["data", "convert", "cohan", src, "--out", tmp_path / "out.jsonl"], f"{src}{message}")
    assert not (tmp_path / "out.jsonl").exists()


def test_convert_renames_duplicate_ids_and_reports_them(capsys, tmp_path):
    src = tmp_path / "val.txt"
    src.write_text("\n".join(json.dumps(COHAN) for _ in range(3)) + "\n")
    capsys.readouterr()
    assert main(["data", "convert", "cohan", str(src), "--out", str(tmp_path / "o.jsonl")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"kept": 3, "renamed duplicate ids": 2}
    assert "repeated document id 'A1' written as 'A1#2'" in captured.err
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["A1", "A1#2", "A1#3"]
    assert rows[2]["metadata"]["original_id"] == "A1"


@pytest.mark.parametrize("name, content, message", [
    ("dump.xml", None, ": no such file"),
    ("dump.xml", b"", ":1: not a well-formed XML dump"),
    ("dump.xml", b"<mediawiki>\n<page><title>A</title>\n</mediawiki>\n", ":3: not a well-formed XML dump"),
    ("dump.xml", b"<mediawiki>\n<page><title>caf\xe9</title></page></mediawiki>", ":2: not a well-formed XML dump"),
    ("dump.xml.bz2", bz2.compress(b"<mediawiki></mediawiki>")[:-10], ": cannot be read as bzip2-compressed XML"),
    ("dump.xml.bz2", b"not bzip2 at all", ": cannot be read as bzip2-compressed XML"),
    ("dump.xml", b"<mediawiki></mediawiki>", ": no documents to convert"),
])
def test_convert_wikipedia_bad_input(capsys, tmp_path, name, content, message):
    src = tmp_path / name
    if content is not None:
        src.write_bytes(content)
    fails(capsys, ["data", "convert", "wikipedia", src, "--out", tmp_path / "out.jsonl"], f"{src}{message}")
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------ critic metric / setup
ORDERS = '{"pred": [1, 0, 2], "gold": [0, 1, 2]}\n'


@pytest.mark.parametrize("metric, flag, content, message", [
    ("kendall_tau", "--jsonl", None, ": no such file"),
    ("kendall_tau", "--jsonl", b"", ": file holds no records"),
    ("kendall_tau", "--jsonl", ORDERS.encode() + b'{"pred": [\n', ":2: invalid JSON"),
    ("pmr", "--jsonl", b'{"pred": [0], "gold": [0], "x": "\xff"}\n', ":1: line is not valid UTF-8"),
    ("pmr", "--jsonl", b'{"pred": "012", "gold": [0, 1, 2]}\n', ":1: 'pred' must be a list of integers"),
    ("pmr", "--jsonl", b'{"pred": [0, 1]}\n', ":1: 'gold' must be a list of integers, got nothing"),
    ("kendall_tau", "--jsonl", ORDERS.encode() + b'{"pred": [], "gold": []}\n', ":2: empty order"),
    ("pmr", "--jsonl", b'{"pred": [], "gold": []}\n', ":1: empty order"),
    ("wlcs_l", "--jsonl", b'{"pred": [0, 0], "gold": [0, 1]}\n',
     ":1: pred [0, 0] and gold [0, 1] must be permutations"),
    ("position_accuracy", "--jsonl", b"[1, 2]\n", ":1: expected a JSON object"),
    ("pdd", "--pred-jsonl", b'{"labels": "012"}\n', ":1: 'labels' must be a list of integers"),
    ("ordered_bertscore", "--pred-jsonl", b'{"sentences": "one. two."}\n', ":1: 'sentences' must be a list of strings"),
    ("coherence_lambda", "--jsonl", b'{"sections": [{"text": ["a"]}]}\n', ":1: 'sections' (objects with a string"),
    ("mauve", "--pred-jsonl", b'{"title": "no text"}\n', ":1: record has none of sentences/sections/text"),
])
def test_metric_bad_jsonl(capsys, tmp_path, metric, flag, content, message):
    src = tmp_path / "in.jsonl"
    if content is not None:
        src.write_bytes(content)
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"labels": [0, 1], "text": "a"}\n')
    argv = ["metric", metric, flag, src] + (["--gold-jsonl", gold] if flag == "--pred-jsonl" else [])
    fails(capsys, argv, f"{src}{message}")


@pytest.mark.parametrize("argv, message", [
    (["metric", "kendal_tau", "--pred", "0,1", "--gold", "0,1"],
     "unknown metric 'kendal_tau' (did you mean 'kendall_tau'?)"),
    (["metric", "kendall_tau", "--pred", "a,b", "--gold", "0,1"],
     "--pred: expected comma-separated integers, got 'a,b'"),
    (["metric", "kendall_tau", "--pred", "0,1"], "give --pred and --gold, or --jsonl"),
    (["metric", "correlations", "--values", "1,x", "--judgments", "1,2"], "--values: expected comma-separated numbers"),
    (["metric", "slor", "--train", "{tmp}/none.txt", "--sentences", "{tmp}/none.txt"], "{tmp}/none.txt: no such file"),
    (["setup", "kenlm", "--cache", "{tmp}/cache", "--sdist", "{tmp}/none.tar.gz"], "{tmp}/none.tar.gz: no such file"),
    (["setup", "kenlm", "--cache", "{tmp}/cache", "--sdist", "{tmp}/in.jsonl"], "{tmp}/in.jsonl: not a tar archive"),
])
def test_metric_and_setup_bad_arguments(capsys, tmp_path, argv, message):
    (tmp_path / "in.jsonl").write_text("{}\n")
    fails(capsys, [a.format(tmp=tmp_path) for a in argv], message.format(tmp=tmp_path))


def test_metric_sentences_not_utf8(capsys, tmp_path):
    bad = tmp_path / "s.txt"
    bad.write_bytes(b"caf\xe9\n")
    fails(capsys, ["metric", "perplexity", "--train", bad, "--sentences", bad], f"{bad}: not UTF-8 text")


# ------------------------------------------------------------------ plugins that fail to import
@pytest.fixture
def broken_plugin(monkeypatch):
    """A plugin listed in ``$CRITIC_PLUGINS`` that cannot be imported (as an entry point of an installed package
    whose module is gone would be): every process that loads the plugins, the catalogue's included, records it."""
    monkeypatch.setenv("CRITIC_PLUGINS", "critic_plugin_that_is_not_there")
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", {})
    return ("plugin 'critic_plugin_that_is_not_there' failed to import (critic_plugin_that_is_not_there: "
            "ModuleNotFoundError")


def test_a_failed_plugin_is_named_by_every_command_that_needs_it(ctx, capsys, tmp_path, broken_plugin):
    fails(capsys, ["fit", "brokencritic", "--train", ctx["good"], "--out", tmp_path / "m"],
          "unknown critic 'brokencritic'", broken_plugin)
    fails(capsys, ["data", "build", "brokencorpus", "--out", tmp_path / "o"], "unknown corpus", broken_plugin)
    fails(capsys, ["brokencommand"], "unknown command 'brokencommand'", "note: " + broken_plugin)
    assert main(["list"]) == 0
    assert ("plugin 'critic_plugin_that_is_not_there' could not be loaded: critic_plugin_that_is_not_there"
            in capsys.readouterr().err)


# ------------------------------------------------------------------ the real command, and --debug
def test_real_command_prints_one_line_and_no_traceback(tmp_path):
    missing = tmp_path / "missing.jsonl"
    out = subprocess.run([sys.executable, "-m", "critic.cli", "fit", "sections", "--train", str(missing),
                          "--out", str(tmp_path / "m")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr == f"critic: error: {missing}: no such file or folder\n"


def test_real_command_bad_config(ctx, tmp_path):
    path = _config(tmp_path, ctx["manroot"], CONFIGS["unknown table"][0])
    out = subprocess.run([sys.executable, "-m", "critic.cli", "run", str(path), "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.startswith(f"critic: error: {path}:") and "unknown table [critcism]" in out.stderr
    assert out.stderr.count("\n") == 1


def test_debug_shows_the_traceback(ctx, tmp_path):
    bad = tmp_path / "missing.jsonl"
    with pytest.raises(DocumentError, match="no such file"):
        main(["--debug", "fit", "sections", "--train", str(bad), "--out", str(tmp_path / "m")])


# ------------------------------------------------------------------ data build --option: typed, ranged, before any work
@pytest.mark.parametrize("corpus, options, expected", [
    ("manpages", ["valid_fraction=2"], "--option: corpus 'manpages' option valid_fraction must be >= 0 and <= 1, got integer 2"),
    ("manpages", ["test_fraction=-0.1"], "option test_fraction must be >= 0 and <= 1, got number -0.1"),
    ("manpages", ["valid_fraction=0.5", "test_fraction=0.6"], "valid_fraction + test_fraction = 1.1: the held-out"),
    ("manpages", ["vaild_fraction=0.2"], "has no option 'vaild_fraction' (did you mean 'valid_fraction'?)"),
    ("manpages", ["install=maybe"], "option install must be a boolean, got string 'maybe'"),
    ("wiki-summaries", ["film=maybe"], "corpus 'wiki-summaries' option film must be a boolean, got string 'maybe'"),
    ("linux-doc", ["valid_fraction=\"0.1\""], "option valid_fraction must be a number (>= 0 and <= 1), got string"),
    ("gettext-pairs", ["min_alpha=[1]"], "option min_alpha must be a number"),
])
def test_data_build_options_are_checked_before_any_work(capsys, tmp_path, monkeypatch, corpus, options, expected):
    from critic.corpora import manpages

    monkeypatch.setattr(manpages, "find_manpage_files", lambda *a, **k: pytest.fail("built before checking"))
    argv = ["data", "build", corpus, "--out", tmp_path / "o", "--no-install"]
    fails(capsys, argv + [x for o in options for x in ("--option", o)], expected)
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ fit of every critic: bad documents, bad settings
CRITICS = sorted(registry.list_critics())


@pytest.mark.parametrize("critic", CRITICS)
def test_fit_of_every_critic_names_a_bad_training_file_line(ctx, capsys, critic):
    out = ctx["root"] / f"never-{critic}"
    fails(capsys, ["fit", critic, "--train", ctx["files"]["invalid_json"], "--out", out],
          f"{ctx['files']['invalid_json']}:")
    fails(capsys, ["fit", critic, "--train", ctx["files"]["missing"], "--out", out],
          f"{ctx['files']['missing']}: no such file")
    assert not out.exists()


@pytest.mark.parametrize("critic", CRITICS)
def test_fit_of_every_critic_refuses_an_unknown_or_mistyped_setting(ctx, capsys, critic):
    out = ctx["root"] / f"never-{critic}"
    fails(capsys, ["fit", critic, "--train", ctx["good"], "--out", out, "--params", '{"no_such_setting": 1}'],
          f"--params: critic {critic!r} has no setting 'no_such_setting'")
    first = describe_first_typed_setting(critic)
    if first is not None:
        name, wrong = first
        fails(capsys, ["fit", critic, "--train", ctx["good"], "--out", out, "--params", f'{{"{name}": {wrong}}}'],
              f"--params: critic {critic!r} setting {name} must be")
    assert not out.exists()


def describe_first_typed_setting(critic: str):
    """A setting of ``critic`` annotated as a number or a boolean, and a JSON value of another type for it."""
    import inspect
    import typing

    cls = registry.get_critic(critic)
    hints = typing.get_type_hints(cls.__init__)
    for name in inspect.signature(cls.__init__).parameters:
        hint = hints.get(name)
        if hint in (int, float):
            return name, '"many"'
        if hint is bool:
            return name, '"maybe"'
    return None
