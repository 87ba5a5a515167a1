"""The command line, end to end on the shipped man-page fixture."""

import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from critic.cli import main
from critic.document import read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "critic.cli", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("list", "fit", "score", "compare", "outliers", "run", "data"):
        assert cmd in out.stdout


HEAVY = ("torch", "numpy", "scipy", "transformers", "pyro", "gensim", "sklearn", "pandas", "matplotlib")


def _imported_by(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``critic ARGV`` in a fresh interpreter (no user plugins): its status and the heavy modules it imported."""
    import os

    code = ("import json, sys\nfrom critic.cli import main\nstatus = main(sys.argv[1:])\n"
            f"print(json.dumps([status, [m for m in {HEAVY!r} if m in sys.modules]]))")
    env = {k: v for k, v in os.environ.items() if k != "CRITIC_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, env=env,
                         cwd=ROOT)
    status, heavy = json.loads(out.stdout.splitlines()[-1])
    return status, heavy


def test_help_imports_no_heavy_module():
    """critic --help, a usage error, critic list and critic fit NAME --help are fast: neither torch nor numpy nor
    any model library is imported (critic.catalogue); the check can fail: a command whose options are the plugins'
    functions imports torch."""
    assert _imported_by(["--help"]) == (0, [])
    assert _imported_by([]) == (2, [])
    assert _imported_by(["list"]) == _imported_by(["fit", "lda", "--help"]) == (0, [])  # the plugins' catalogue
    status, heavy = _imported_by(["metric", "--help"])  # the metrics' options are their functions' parameters
    assert status == 0 and "torch" in heavy


def _sub_commands(parser):
    import argparse

    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def test_every_option_and_sub_command_has_help():
    """Walks the whole command tree (every plugin's commands, metric, tool and format included)."""
    import argparse

    from critic.cli import build_parser

    missing, seen = [], 0

    def walk(parser):
        nonlocal seen
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing.extend(f"{parser.prog} {a.dest}" for a in action._choices_actions if not a.help)
            elif not isinstance(action, argparse._HelpAction):
                seen += 1
                if not action.help or action.help == argparse.SUPPRESS:
                    missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
        for sub in _sub_commands(parser).values():
            walk(sub)

    parser = build_parser()
    walk(parser)
    assert missing == [] and seen > 300
    assert {"lm", "metric", "setup", "coref"} <= set(_sub_commands(parser))
    assert {"kenlm", "neuralcoref"} <= set(_sub_commands(_sub_commands(parser)["setup"]))


def test_a_plugin_registers_commands_the_way_the_core_does(tmp_path, monkeypatch, capsys, request):
    """A plugin's command, tool and format join through the registry, like the core's (critic --plugin FILE)."""
    from critic import registry

    request.addfinalizer(lambda: [sys.modules.pop(k) for k in list(sys.modules) if k.startswith("critic_plugin_greet")])

    plugin = tmp_path / "greetings.py"
    plugin.write_text('''
from pathlib import Path
from typing import Annotated

from critic.config import Range
from critic.document import Document, Section
from critic.registry import register_command, register_converter, register_setup


def add_parser(parser):
    parser.add_argument("--name", required=True, help="who to greet")
    parser.set_defaults(func=lambda args: print(f"hello {args.name}"))


def build(*, times: Annotated[int, Range(min=1), "how many greetings"] = 1) -> str:
    return "built " * times


def lines(path: Path, report, *, prefix: Annotated[str, "id prefix"] = "line") -> list:
    for i, text in enumerate(path.read_text().splitlines()):
        report["kept"] += 1
        yield Document(f"{prefix}{i}", (Section(None, text),))


register_command("greet", add_parser, "say hello")
register_setup("greeter", build, "build a greeter")
register_converter("lines", lines, "one document per line")
''')
    monkeypatch.setenv("CRITIC_PLUGINS", "")
    for table in ("_COMMANDS", "_SETUPS", "_CONVERTERS", "_PLUGINS"):
        original = getattr(registry, table)
        monkeypatch.setattr(registry, table, original.copy() if isinstance(original, registry.Registry) else dict(original))
    capsys.readouterr()
    assert main(["--plugin", str(plugin), "greet", "--name", "you"]) == 0
    assert capsys.readouterr().out == "hello you\n"
    assert main(["--plugin", str(plugin), "setup", "greeter", "--times", "2"]) == 0
    assert capsys.readouterr().out == "built built \n"
    (tmp_path / "in.txt").write_text("a\nb\n")
    assert main(["--plugin", str(plugin), "data", "convert", "lines", str(tmp_path / "in.txt"), "--prefix", "x",
                 "--out", str(tmp_path / "o.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out) == {"kept": 2}
    assert [d.id for d in read_jsonl(tmp_path / "o.jsonl")] == ["x0", "x1"]
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  greet " in out.split("Commands")[1] and "  greeter " in out.split("Tools")[1]


def test_list_shows_the_section_critic(capsys):
    from critics.sections import SectionTransitionCritic

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  sections " in out and f"needs: {SectionTransitionCritic.needs}" in out


def test_fit_help_gives_what_a_critic_needs_and_each_setting_with_its_default(capsys):
    import inspect

    from critics.sections import SectionTransitionCritic

    assert main(["fit", "sections", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"Needs: {SectionTransitionCritic.needs}" in out
    params = [p for p in inspect.signature(SectionTransitionCritic.__init__).parameters.values() if p.name != "self"]
    assert params and all(f"{p.name}: " in out for p in params)
    assert "delta: a number or null (>= 1e-12 and <= 1e+12) (default null)" in out and "normalize_titles: a boolean (default true)" in out


def sections_by_hand(doc):
    """The section titles the section critic sees: app. E normalisation, boilerplate titles dropped."""
    from critics.sections.normalize import DEFAULT_DROP_TITLES, TitleNormalizer

    norm = TitleNormalizer()
    drop = {norm(t) for t in DEFAULT_DROP_TITLES}
    return [t for t in (norm(s.title) for s in doc.sections) if t not in drop]


def sections_nll_by_hand(train, docs, delta):
    """``-log P(z)`` of each document's title chain under the add-delta bigram chain of ``train``
    (``<bos>`` -> K types; each type -> K types and ``<eos>``; unseen titles as ``<unk>``), in plain Python."""
    chains = [sections_by_hand(d) for d in train]
    vocab = {t for c in chains for t in c} | {"<unk>"}
    K = len(vocab)
    pairs = Counter((a, b) for c in chains for a, b in zip(["<bos>"] + c, c + ["<eos>"]))
    out_of = Counter(a for (a, _b) in pairs.elements())

    def logp(a, b):
        targets = K if a == "<bos>" else K + 1
        return math.log((pairs[a, b] + delta) / (out_of[a] + delta * targets))

    out = {}
    for d in docs:
        c = [t if t in vocab else "<unk>" for t in sections_by_hand(d)]
        out[d.id] = -sum(logp(a, b) for a, b in zip(["<bos>"] + c, c + ["<eos>"]))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, fixture_manpage_root):
    out = tmp_path_factory.mktemp("corpus")
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install",
                 "--out", str(out)]) == 0
    return out


def test_fit_score_compare_outliers(corpus, tmp_path, capsys):
    model = tmp_path / "model"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}']) == 0
    scored = tmp_path / "scores.jsonl"
    assert main(["score", str(model), "--input", str(corpus / "train.jsonl"), "--out", str(scored)]) == 0
    rows = [json.loads(line) for line in scored.read_text().splitlines()]
    train = read_jsonl(corpus / "train.jsonl")
    want = sections_nll_by_hand(train, train, 0.1)
    assert len(want) == len(train) > 10  # every training page is usable
    assert {r["id"]: r["latent_nll"] for r in rows if "latent_nll" in r} == pytest.approx(want, rel=1e-10)

    report = tmp_path / "report"
    assert main(["compare", str(model), "--reference", str(corpus / "train.jsonl"),
                 "--candidate", f"same={corpus / 'train.jsonl'}", "--out", str(report), "--n-bootstrap", "100", "--n-permutations", "99"]) == 0
    saved = json.loads((report / "results.json").read_text())
    results = saved["critics"]["sections"]
    assert (results["config"]["n_bootstrap"], results["config"]["n_permutations"]) == (100, 99)
    same = results["candidates"]["same"]
    for key in ("n", "latent_nll", "latent_nll_ci", "latent_ppl", "latent_ppl_ci", "comparison"):
        assert key in same
    assert same["latent_nll"] == pytest.approx(results["reference"]["latent_nll"])  # identical sets
    assert same["latent_nll"] == pytest.approx(np.mean(list(want.values())), rel=1e-10)
    steps = sum(len(sections_by_hand(d)) + 1 for d in train)  # M(x) = sections + 1 (transitions scored)
    assert same["latent_ppl"] == pytest.approx(math.exp(sum(want.values()) / steps), rel=1e-10)
    assert same["comparison"]["p_value"] == 1.0
    assert [i["path"] for i in results["inputs"]] == [str(corpus / "train.jsonl")] * 2
    assert saved["environment"]["packages"]["torch"]
    assert {p.name for p in report.iterdir()} >= {"results.json", "documents.jsonl", "report.md", "index.html"}

    capsys.readouterr()
    assert main(["outliers", str(model), "--reference", str(corpus / "train.jsonl"),
                 "--input", str(corpus / "train.jsonl"), "--top", "3"]) == 0
    assert capsys.readouterr().out.count("| input |") == 3


def test_bad_input_gives_clear_error(corpus, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "sections": [}\n')
    assert main(["fit", "sections", "--train", str(bad), "--out", str(tmp_path / "m")]) == 2
    assert f"{bad}:1: invalid JSON" in capsys.readouterr().err


def test_device_is_never_a_silent_fallback(corpus, tmp_path, capsys):
    import torch

    count = torch.cuda.device_count()
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(tmp_path / "m"),
                 "--device", f"cuda:{count}"]) == 2
    err = capsys.readouterr().err
    assert f"device 'cuda:{count}' was asked for" in err
    assert not (tmp_path / "m").exists()


def test_fit_runs_on_the_device_asked_for(corpus, tmp_path, capsys):
    model = tmp_path / "m"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--valid", str(corpus / "valid.jsonl"),
                 "--out", str(model), "--device", "cpu"]) == 0
    saved = json.loads((model / "critic.json").read_text())
    assert "device" not in saved["params"]


def test_score_writes_its_output_atomically(corpus, tmp_path):
    model = tmp_path / "m"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}']) == 0
    out = tmp_path / "scores.jsonl"
    out.write_text("old\n")
    assert main(["score", str(model), "--input", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert out.read_text() == "old\n"  # a failed command leaves the previous file as it was
    # a file that is not a streamed output is never overwritten
    assert main(["score", str(model), "--input", str(corpus / "valid.jsonl"), "--out", str(out)]) == 2
    assert out.read_text() == "old\n"
    out.unlink()
    assert main(["score", str(model), "--input", str(corpus / "valid.jsonl"), "--out", str(out)]) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "scores.jsonl", "scores.jsonl.progress.json"]


def test_list_shows_corpora(capsys):
    assert main(["list"]) == 0
    assert "manpages" in capsys.readouterr().out.split("Corpora")[1]


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    assert "--debug" in capsys.readouterr().out


def test_registry_names_are_taken_once():
    from critic import registry
    from critics.sections import SectionTransitionCritic

    with pytest.raises(ValueError, match="critic name 'sections' is already taken"):
        registry.register_critic("sections")(type("Other", (), {}))
    with pytest.raises(ValueError, match="corpus name 'manpages' is already taken"):
        registry.register_corpus("manpages", lambda out, **kw: None)
    assert registry.get_critic("sections") is SectionTransitionCritic
    assert registry.register_critic("sections")(SectionTransitionCritic) is SectionTransitionCritic


def test_runners_are_found_by_name_or_module_path():
    from critic import registry
    from experiments.manpages import run

    assert registry.get_runner("experiments.manpages.run:main").schema is run.SCHEMA
    assert registry.get_runner("manpages").fn is run.main
    with pytest.raises(KeyError, match="unknown runner 'manpage' \\(did you mean 'manpages'\\?\\)"):
        registry.get_runner("manpage")


def test_fit_says_how_many_training_documents_it_used_and_skipped(corpus, tmp_path, capsys):
    """Documents a critic cannot train on are counted by reason (LDA: no word tokens), never folded into 'N'."""
    from critic import Critic
    from critic.document import Document, Section, write_jsonl

    train = read_jsonl(corpus / "train.jsonl")
    blank = [Document(f"blank{i}", (Section("name", "... !!! --"),)) for i in range(3)]
    path = write_jsonl(train + blank, tmp_path / "train.jsonl")
    capsys.readouterr()
    assert main(["fit", "lda", "--train", str(path), "--out", str(tmp_path / "m"),
                 "--params", '{"passes": 1, "num_topics": 2}']) == 0
    out = capsys.readouterr().out
    assert (f"fitted lda: used {len(train)} of {len(train) + 3} training documents; skipped 3: no word tokens "
            "(3, e.g. 'blank0')") in out
    assert Critic.load(tmp_path / "m").training_skipped_ == {f"blank{i}": "no word tokens" for i in range(3)}


def test_a_fit_that_skips_most_of_its_input_warns_in_fit_and_in_every_result(corpus, tmp_path, capsys):
    from critic.document import Document, Section, write_jsonl

    train = read_jsonl(corpus / "train.jsonl")[:5]
    blank = [Document(f"blank{i}", (Section("name", "... !!! --"),)) for i in range(8)]
    path = write_jsonl(train + blank, tmp_path / "train.jsonl")
    capsys.readouterr()
    assert main(["fit", "lda", "--train", str(path), "--out", str(tmp_path / "m"),
                 "--params", '{"passes": 1, "num_topics": 2}']) == 0
    want = ("fitted on 5 of 13 training documents: 8 were skipped (e.g. 'blank0': no word tokens), so the prior "
            "describes a minority of the text it was given")
    assert f"critic: warning: {want}" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "m"), "--reference", str(corpus / "test.jsonl"), "--candidate",
                 f"same={corpus / 'test.jsonl'}", "--n-bootstrap", "20", "--out", str(tmp_path / "r")]) == 0
    saved = json.loads((tmp_path / "r" / "results.json").read_text())["critics"]["lda"]
    assert want in saved["critic"]["warnings"] and f"⚠ critic: {want}" in (tmp_path / "r" / "report.md").read_text()


def test_threads_are_set_and_recorded_and_do_not_change_the_numbers(corpus, tmp_path):
    import torch

    model = tmp_path / "m"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}', "--threads", "1"]) == 0
    before = torch.get_num_threads()
    saved = {}
    try:
        for threads in (1, 2):
            out = tmp_path / f"r{threads}"
            assert main(["compare", str(model), "--reference", str(corpus / "test.jsonl"), "--candidate",
                         f"same={corpus / 'valid.jsonl'}", "--n-bootstrap", "50", "--threads", str(threads),
                         "--out", str(out)]) == 0
            saved[threads] = json.loads((out / "results.json").read_text())
            assert saved[threads]["environment"]["torch_threads"] == threads == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    strip = lambda r: {k: v for k, v in r.items() if k != "environment"}  # noqa: E731
    assert strip(saved[1]) == strip(saved[2])
    try:  # no --threads: one thread (reproducible bytes on a loaded machine), whatever torch had
        torch.set_num_threads(2)
        assert main(["compare", str(model), "--reference", str(corpus / "test.jsonl"), "--candidate",
                     f"same={corpus / 'valid.jsonl'}", "--n-bootstrap", "50", "--out", str(tmp_path / "r")]) == 0
        assert json.loads((tmp_path / "r" / "results.json").read_text())["environment"]["torch_threads"] == 1
    finally:
        torch.set_num_threads(before)


def test_torch_is_seeded_as_torch_manual_seed_seeds_it_and_cuda_only_when_asked():
    """set_up_torch on the CPU: torch's and Python's draws are those after torch.manual_seed / random.seed, and
    nothing is queued for CUDA (torch.manual_seed would queue its seeding, with a formatted stack)."""
    import random

    import torch

    from critic.cli import set_up_torch

    threads = torch.get_num_threads()
    try:
        torch.manual_seed(7)
        random.seed(7)
        want = torch.rand(5), random.random()
        torch.manual_seed(8)
        random.seed(8)
        queued = len(torch.cuda._queued_calls)
        set_up_torch("cpu", 7, 1)
        assert torch.equal(torch.rand(5), want[0]) and random.random() == want[1]
        assert torch.get_num_threads() == 1 and len(torch.cuda._queued_calls) == queued
    finally:
        torch.set_num_threads(threads)


def test_the_command_s_seed_is_the_critic_s_seed(corpus, tmp_path, capsys):
    """critic fit lda --seed S saves seed S as the critic's own setting (fits with other seeds differ under the
    random start; the same seed gives the same state), and a seed in --params is refused in favour of --seed."""
    from critic import Critic

    test = read_jsonl(corpus / "test.jsonl")
    scores = {}
    for name, seed in (("a", 1), ("b", 2), ("c", 1)):
        assert main(["fit", "lda", "--train", str(corpus / "train.jsonl"), "--out", str(tmp_path / name),
                     "--params", '{"num_topics": 3, "init": "random"}', "--seed", str(seed)]) == 0
        critic = Critic.load(tmp_path / name)
        assert critic.get_params()["seed"] == seed
        scores[name] = critic.score(test).latent_nll
    np.testing.assert_array_equal(scores["a"], scores["c"])
    assert np.abs(scores["a"] - scores["b"]).max() > 1e-3  # another seed, another fit
    capsys.readouterr()
    assert main(["fit", "lda", "--train", str(corpus / "train.jsonl"), "--out", str(tmp_path / "d"),
                 "--params", '{"seed": 3}']) == 2
    assert "--params: 'seed' is the run's seed: give --seed 3 instead" in capsys.readouterr().err


def test_run_refuses_a_folder_it_did_not_make_before_writing_anything(tmp_path, manpage_job_config, capsys):
    """The main job pointed at a user's folder with a data/ of theirs (its data stage would replace it): exit 2
    naming the folder, nothing written, nothing removed."""
    config = manpage_job_config(tmp_path / "job.toml")
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "notes.txt").write_text("theirs")
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(mine)]) == 2
    assert f"{mine}: exists and is not a run folder; refusing to write into it: it holds data" \
        in capsys.readouterr().err
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == ["data", "data/notes.txt"]


@pytest.mark.parametrize("flags, message", [
    (["--fdr", "0"], "argument --fdr: must be a number > 0 and <= 1, got 0"),
    (["--fdr", "x"], "argument --fdr: expected a number > 0 and <= 1, got 'x'"),
    (["--fdr", "0.1", "--flag-level", "0.01"], "fdr = 0.1 and flag_level = 0.01 are two flag rules"),
])
def test_the_flag_rule_is_checked_before_any_work(flags, message, tmp_path, capsys):
    assert main(["outliers", str(tmp_path / "c"), "--reference", "r.jsonl", "--input", "i.jsonl", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_fdr_option_says_the_panel_s_default(capsys):
    from critic.settings import FLAG_FDR

    assert main(["report", "--help"]) == 0
    assert f"(default {FLAG_FDR:g})" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("error, said", [
    (KeyError("error"), "critic: error: KeyError: no 'error' where one was expected (rerun with --debug to see "
                        "where)\n"),
    (ValueError(""), "critic: error: ValueError: no message (rerun with --debug to see where)\n"),
    (RuntimeError("error"), "critic: error: RuntimeError: 'error' (rerun with --debug to see where)\n"),
    (KeyError("no set 'c' in the result"), "critic: error: no set 'c' in the result\n"),
])
def test_an_error_of_one_word_says_what_kind_it_is(error, said, monkeypatch, capsys):
    """The issue's case: an error whose whole message was ``error`` (a KeyError's key)."""
    import critic.cli as cli

    def fail(args):
        raise error

    monkeypatch.setattr(cli, "cmd_list", fail)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == said


def test_outliers_says_which_documents_it_could_not_rank(corpus, tmp_path, capsys):
    """The round's case: a document the critic cannot score (no sections) vanished from critic outliers ("0 of 2
    documents flagged"), and with every document skipped it exited 0 with an empty table."""
    model = tmp_path / "model"
    assert main(["fit", "sections", "--train", str(corpus / "train.jsonl"), "--out", str(model),
                 "--params", '{"delta": 0.1}']) == 0
    pages = [json.loads(line) for line in (corpus / "test.jsonl").read_text().splitlines()[:3]]
    pages[1] = {**pages[1], "id": "plainbad", "sections": []}
    some = tmp_path / "some.jsonl"
    some.write_text("".join(json.dumps(p) + "\n" for p in pages))
    capsys.readouterr()
    assert main(["outliers", str(model), "--reference", str(corpus / "valid.jsonl"), "--input", str(some)]) == 0
    captured = capsys.readouterr()
    said = f"{some}: skipped 1: document has no sections (1, e.g. 'plainbad')"
    assert "of 2 documents flagged" in captured.out and said in captured.out and said in captured.err
    none = tmp_path / "none.jsonl"
    none.write_text(json.dumps(pages[1]) + "\n")
    assert main(["outliers", str(model), "--reference", str(corpus / "valid.jsonl"), "--input", str(none)]) == 2
    assert capsys.readouterr().err == (f"critic: error: {none}: no document could be scored, nothing to rank; "
                                       "skipped 1: document has no sections (1, e.g. 'plainbad')\n")


def test_a_missing_input_is_said_before_anything_loads(tmp_path, capsys, monkeypatch):
    """Issue 39: a missing input file was said after 13-25 s (torch, the critic and the plugins loaded first); every
    option naming documents to read is checked when the command starts, before any of them is imported."""
    import sys

    for name in [m for m in sys.modules if m == "torch" or m.startswith(("torch.", "critic.critic"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch now fails: the check must come first
    for args in (["score", str(tmp_path), "--input", str(tmp_path / "no.jsonl")],
                 ["outliers", str(tmp_path), "--reference", str(tmp_path / "no.jsonl"), "--input", str(tmp_path)],
                 ["compare", str(tmp_path), "--reference", str(tmp_path), "--candidate", f"a={tmp_path / 'no.jsonl'}",
                  "--out", str(tmp_path / "o")]):
        capsys.readouterr()
        assert main(args) == 2
        assert capsys.readouterr().err == f"critic: error: {tmp_path / 'no.jsonl'}: no such file or folder\n"


# ------------------------------------------------------------------ -v / -q, --version (issue 41)


def test_version_is_the_package_s_one_version(capsys):
    import critic

    with pytest.raises(SystemExit):  # argparse's own exit, as python -m critic.cli does
        from critic.cli import build_parser

        build_parser([]).parse_args(["--version"])
    assert capsys.readouterr().out == f"critic {critic.__version__}\n"
    assert main(["--version"]) == 0 and capsys.readouterr().out == f"critic {critic.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "critic.cli", "--version"], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout == f"critic {critic.__version__}\n"


def test_quiet_and_verbose_say_less_and_more_on_stderr(corpus, tmp_path, capsys):
    """-q keeps the stdout and drops what critic says beside it (and the progress bars); -v adds debug lines; the
    level holds for this command only; -q and -v go before or after the command."""
    fit = ["fit", "sections", "--train", str(corpus / "train.jsonl"), "--params", '{"delta": 0.1}']
    capsys.readouterr()
    assert main([*fit, "--out", str(tmp_path / "a")]) == 0
    plain = capsys.readouterr()
    assert "critic: fitting sections on 22 documents ..." in plain.err and "critic: debug:" not in plain.err
    assert main(["-q", *fit, "--out", str(tmp_path / "b")]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out.replace(str(tmp_path / "b"), "") == plain.out.replace(str(tmp_path / "a"), "")
    assert main([*fit, "--out", str(tmp_path / "c"), "-v"]) == 0
    verbose = capsys.readouterr().err
    assert "critic: debug: [critic.cli] critic " in verbose and "command 'fit'" in verbose
    assert "critic: fitting sections on 22 documents ..." in verbose
    report = ["report", "--critic", str(tmp_path / "a"), "--reference", str(corpus / "valid.jsonl"), "--candidate",
              f"gens={corpus / 'test.jsonl'}", "--out", str(tmp_path / "r"), "--n-bootstrap", "20",
              "--n-permutations", "20"]
    assert main(report) == 0
    assert "sections: scoring" in capsys.readouterr().err  # the progress bars
    assert main([*report, "-q"]) == 0
    err = capsys.readouterr().err
    assert "scoring" not in err and all(line.startswith("critic: warning: ") for line in err.splitlines())


def test_quiet_keeps_the_one_error_line(tmp_path, capsys):
    missing = tmp_path / "no.jsonl"
    for flags in (["-q"], ["-qq"], []):
        assert main([*flags, "fit", "sections", "--train", str(missing), "--out", str(tmp_path / "c")]) == 2
        assert capsys.readouterr().err == f"critic: error: {missing}: no such file or folder\n"
    assert main(["fit", "sections", "--train", str(missing), "--out", str(tmp_path / "c"), "-v"]) == 2
    *debug, error = capsys.readouterr().err.splitlines()
    assert error == f"critic: error: {missing}: no such file or folder" and debug
    assert all(line.startswith("critic: debug: ") for line in debug)


def test_list_names_the_extra_each_critic_needs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    blocks = dict(re.findall(r"^  (\S+) +[^\n]*\n((?:  {20,}[^\n]*\n)*)", out.split("Metrics")[0], re.M))
    assert "install: pip install 'critic[sections-classifier]'" in blocks["sections-classifier"]
    assert "install: pip install 'critic[lda]'" in blocks["lda"] and "critic[ctm]" in blocks["ctm"]
    assert "install:" not in blocks["sections"]  # the core's dependencies suffice
