"""``critic report``: a user's free-text generations against real documents under several fitted critics (the
man-page section critic and an LDA topic critic), one report; every number checked against scoring the same
documents directly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from critic import Critic
from critic.cli import main
from critic.corrupt import corrupt_all
from critic.document import Document, Section, read_jsonl
from critic.panel import PanelResult, load_results


def markdown(doc: Document) -> str:
    """A generation as a model would write it: Markdown headings over the section texts."""
    return "\n\n".join(f"## {s.title}\n{s.text}" for s in doc.sections)


@pytest.fixture(scope="module")
def job(tmp_path_factory, fixture_manpage_root):
    tmp = tmp_path_factory.mktemp("report")
    data = tmp / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp / "sections"),
                 "--params", '{"delta": 0.1}']) == 0
    assert main(["fit", "lda", "--train", str(data / "train.jsonl"), "--out", str(tmp / "topics"),
                 "--params", '{"passes": 2, "num_topics": 3}']) == 0
    test = read_jsonl(data / "test.jsonl")
    generations = test + corrupt_all(test, "permuted", seed=2)
    lines = [{"text": markdown(d)} for d in generations] + [{"text": "   "}]  # the last one is empty
    gens = tmp / "gens.jsonl"
    gens.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp, data, generations, gens


def test_report_from_free_text_generations(job, capsys):
    tmp, data, generations, gens = job
    out = tmp / "out"
    capsys.readouterr()
    assert main(["report", "--critic", str(tmp / "sections"), "--critic", f"lda={tmp / 'topics'}",
                 "--reference", str(data / "test.jsonl"), "--candidate", f"mymodel={gens}", "--sections", "markdown",
                 "--top", "5", "--flag-level", "0.5", "--n-bootstrap", "50", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    n = len(generations)
    assert f"{gens}: {n} documents (text-jsonl); skipped 1: empty text (first at {gens}:{n + 1}); " \
           f"{n} ids made as mymodel:LINE" in captured.err
    panel = load_results(out)
    assert isinstance(panel, PanelResult) and list(panel.results) == ["sections", "lda"]
    assert panel.reads["mymodel"]["skipped"] == {"empty text": 1} and panel.reads["mymodel"]["generated_ids"] == n
    assert panel.results["lda"].headline == "latent_nll" and panel.results["sections"].headline == "latent_ppl"

    # the free-text path gives each generation exactly the latent the same document gets directly
    as_docs = [Document(f"mymodel:{k}", tuple(Section(s.title, s.text) for s in d.sections))
               for k, d in enumerate(generations, start=1)]
    for label, folder in (("sections", "sections"), ("lda", "topics")):
        direct = Critic.load(tmp / folder).score(as_docs)
        got = {d.id: d.latent_nll for d in panel.results[label].set("mymodel").documents}
        assert got == pytest.approx(dict(zip(direct.doc_ids, direct.latent_nll.tolist())), rel=1e-9)
        assert len(got) + len(panel.results[label].set("mymodel").skipped) == n

    rows = [json.loads(line) for line in (out / "documents.jsonl").read_text().splitlines()]
    assert {(r["critic"], r["set"]) for r in rows} == {(c, s) for c in ("sections", "lda") for s in ("reference", "mymodel")}
    flags = panel.flagged()
    assert flags and len(list((out / "documents").iterdir())) == len(flags)
    assert f"{len(flags)} flagged document(s)" in captured.out
    html = (out / "index.html").read_text()
    assert html.count('<tr data-critic="sections"') == 2 and html.count('<tr data-critic="lda"') == 2
    assert np.isfinite(panel.results["lda"].set("mymodel").latent_nll)


@pytest.fixture(scope="module")
def ctm_dir(job):
    """A small CTM fitted on the same man pages (4 topics, few EM iterations)."""
    tmp, data, _, _ = job
    assert main(["fit", "ctm", "--train", str(data / "train.jsonl"), "--out", str(tmp / "ctm"), "--params",
                 '{"num_topics": 4, "em_iterations": 10, "infer_steps": 50}']) == 0
    return tmp / "ctm"


def test_report_projects_each_set_once_per_critic(job, ctm_dir, monkeypatch):
    """Issue 40: ``critic report`` with the section, CTM and LDA critics projects each set once per critic (the
    scoring's projection); the figures read what scoring kept (the CTM's fig. 6 covariances, the LDA's gammas),
    and are those drawn from the sets projected again, as a report read back (which keeps no posteriors) does."""
    from critic.inputs import InputOptions
    from critic.report import critic_figures
    from critic.workflows import read_sets
    from critics.sections import SectionTransitionCritic
    from critics.topics.ctm_critic import CorrelatedTopicCritic
    from critics.topics.lda import LdaCodeMixCritic

    tmp, data, generations, gens = job
    reference_ids = {d.id for d in read_jsonl(data / "test.jsonl")}
    batches: dict[str, list[list[str]]] = {}

    def counting(cls):
        project = cls.project

        def counted(self, docs):
            batches.setdefault(cls.__name__, []).append([d.id for d in docs])
            return project(self, docs)

        return counted

    classes = (SectionTransitionCritic, CorrelatedTopicCritic, LdaCodeMixCritic)
    for cls in classes:
        monkeypatch.setattr(cls, "project", counting(cls))
    out = tmp / "three"
    assert main(["report", "--critic", str(tmp / "sections"), "--critic", f"ctm={ctm_dir}",
                 "--critic", f"lda={tmp / 'topics'}", "--reference", str(data / "test.jsonl"),
                 "--candidate", f"mymodel={gens}", "--sections", "markdown", "--top", "5", "--flag-level", "0.5",
                 "--n-bootstrap", "50", "--out", str(out)]) == 0
    assert set(batches) == {cls.__name__ for cls in classes}
    for name, calls in batches.items():  # every set fits one batch: one project call per set and critic
        assert [{"reference" if i in reference_ids else "mymodel" for i in ids} for ids in calls] == \
            [{"reference"}, {"mymodel"}], name
        ids = [i for ids in calls for i in ids]
        assert len(ids) == len(set(ids)) == len(reference_ids) + len(generations), name
    monkeypatch.undo()

    # the figures of the report are those of the sets projected again (what the report drew before issue 40)
    panel = load_results(out)
    assert all(s.posterior_summary is None for r in panel.results.values() for s in r.sets)  # never written
    reference, candidates, _ = read_sets(data / "test.jsonl", {"mymodel": gens}, InputOptions(sections="markdown"),
                                         log=lambda line: None)
    critics = {label: Critic.load(folder) for label, folder in
               (("sections", tmp / "sections"), ("ctm", ctm_dir), ("lda", tmp / "topics"))}
    again = critic_figures(critics, panel, {"reference": reference, **candidates})
    assert len(again["ctm"]) == 1 and len(again["lda"]) == 1 and len(again["sections"]) == 1
    html = (out / "index.html").read_text()
    for label, figures in again.items():
        for caption, markup in figures.items():
            assert markup.startswith("<svg") and markup in html, (label, caption)


@pytest.mark.parametrize("args, message", [
    (["--candidate", "reference=GENS"], "'reference' is the reference set's name"),
    (["--candidate", "a=missing.jsonl"], "missing.jsonl: no such file or folder"),
    ([], "give at least one --candidate NAME=FILE"),
    (["--candidate", "a=GENS", "--flag-level", "0"], "--flag-level: must be a number > 0 and <= 1, got 0"),
    (["--candidate", "a=GENS", "--n-bootstrap", "10000000000"], "GiB available: lower --n-bootstrap"),
    (["--candidate", "a=GENS", "--word-ppl", "a=-1"], "--word-ppl: expected NAME=VALUE with a positive number"),
    (["--candidate", "a=GENS", "--word-ppl", "a=nan"], "--word-ppl: expected NAME=VALUE with a positive number"),
    (["--candidate", "a=GENS", "--format", "parquet"], "not a readable Parquet file"),
    (["--candidate", "a=GENS", "--text-field", "generation"], "gens.jsonl:1: cannot tell the format: no 'sections'"),
    (["--candidate", "a=GENS", "--format", "text-jsonl", "--text-field", "generation"],
     "gens.jsonl:1: no 'generation' field (keys: text)"),
])
def test_report_bad_input_is_one_line_and_writes_nothing(job, capsys, args, message):
    tmp, data, _, gens = job
    out = tmp / "never"
    args = [a.replace("GENS", str(gens)) for a in args]
    assert main(["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
                 "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_two_critics_from_folders_of_the_same_name_need_labels(job, capsys):
    tmp, data, _, gens = job
    assert main(["report", "--critic", str(tmp / "sections"), "--critic", str(tmp / "sections"),
                 "--reference", str(data / "test.jsonl"), "--candidate", f"a={gens}", "--out", str(tmp / "x")]) == 2
    assert "the label 'sections' is already used" in capsys.readouterr().err


def test_word_ppl_and_mauve_beside_the_critics(job, capsys, tmp_path):
    """--word-ppl as given; --mauve against mauve-text on the same MiniLM features, or null with its reason for
    sets under 50 documents (this fixture's are)."""
    tmp, data, generations, gens = job
    out = tmp_path / "r"
    assert main(["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
                 "--candidate", f"mymodel={gens}", "--candidate", f"other={gens}", "--sections", "markdown",
                 "--word-ppl", "mymodel=27.5", "--mauve", "--n-bootstrap", "20", "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())["critics"]["sections"]
    assert saved["candidates"]["mymodel"]["word_ppl"] == 27.5 and saved["candidates"]["other"]["word_ppl"] is None
    assert saved["null_reasons"]["candidates.other.word_ppl"] == "not given (--word-ppl NAME=VALUE)"
    assert saved["reference"]["word_ppl"] is None and saved["candidates"]["mymodel"]["mauve"] is None
    assert saved["null_reasons"]["candidates.mymodel.mauve"].startswith(f"{len(generations)} documents against 4 (< 50)")
    html = (out / "index.html").read_text()
    assert "word PPL 27.500" in html and "MAUVE —" in html
    assert main(["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
                 "--candidate", f"mymodel={gens}", "--word-ppl", "nobody=3", "--out", str(tmp_path / "x")]) == 2
    assert "--word-ppl nobody=...: no candidate set 'nobody'" in capsys.readouterr().err


def test_mauve_of_sets_large_enough_is_mauve_text_s(tmp_path, fixture_manpage_root):
    from critic import criticize
    from critic.panel import add_set_statistics
    from critics.metrics.mauve import mauve_text
    from critics.sections import SectionTransitionCritic

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    ref = [Document(f"r{i}", (Section("name", " ".join(words[j % 10] for j in range(i, i + 8))),)) for i in range(60)]
    cand = [Document(f"c{i}", (Section("name", " ".join(words[(j * 3) % 10] for j in range(i, i + 5))),))
            for i in range(55)]
    critic = SectionTransitionCritic(delta=0.1).fit(ref)
    panel = PanelResult({"s": criticize(critic, ref, {"lm": cand}, n_bootstrap=10, n_permutations=10)})
    add_set_statistics(panel, ref, {"lm": cand}, mauve=True, seed=3)
    want = mauve_text([d.text for d in cand], [d.text for d in ref], seed=3)
    assert panel.results["s"].set("lm").statistics["mauve"] == pytest.approx(want, rel=1e-12)


def test_markdown_generations_are_split_at_their_headings_without_being_told(job, capsys):
    """The issue's case: real pages written as Markdown, read with the default --sections (auto), score as the
    same pages do: the candidate set is not a confident false verdict against the reference."""
    tmp, data, generations, gens = job
    test = read_jsonl(data / "test.jsonl")
    real = tmp / "real.jsonl"
    real.write_text("".join(json.dumps({"id": d.id, "text": markdown(d)}) + "\n" for d in test))
    out = tmp / "auto"
    assert main(["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
                 "--candidate", f"markdown={real}", "--n-bootstrap", "20", "--n-permutations", "20",
                 "--out", str(out)]) == 0
    assert f"{len(test)} split at Markdown headings (--sections auto)" in capsys.readouterr().err
    result = load_results(out).results["sections"]
    same = {d.id: d.latent_nll for d in result.reference.documents}
    assert {d.id: d.latent_nll for d in result.candidates["markdown"].documents} == pytest.approx(same)


def test_untitled_generations_against_titled_pages_stop_with_the_fix_unless_asked_for(job, capsys):
    """Every generation one untitled section (no headings to detect) while the reference's pages have titled
    sections: under the default --sections the command stops before scoring, naming the set and the fix; with
    --sections none (said explicitly) it criticises them as they are, and the set's warning leads the report."""
    tmp, data, _, _ = job
    test = read_jsonl(data / "test.jsonl")
    plain = tmp / "plain.jsonl"
    plain.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in test))
    out = tmp / "untitled"
    args = ["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
            "--candidate", f"plain={plain}", "--n-bootstrap", "20", "--n-permutations", "20", "--out", str(out)]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert ("candidate set 'plain': 100% of the documents are one untitled section, against 0% of the reference's: "
            "their sections were not read (--sections markdown or separator:STRING), or the model writes none. Say "
            "how their sections are written (--sections separator:STRING, or markdown), or give --sections none to "
            "criticise each as one untitled section") in err
    assert "Traceback" not in err and not out.exists()
    assert main(args + ["--sections", "none"]) == 0
    panel = load_results(out)
    warning = next(w for w in panel.results["sections"].candidates["plain"].warnings
                   if w.startswith("100% of the documents are one untitled section"))
    assert f"sections: 'plain': {warning}" in (out / "index.html").read_text().replace("&#x27;", "'")


def test_fit_keeps_calibration_documents_and_outliers_says_what_bounds_the_flags(job, capsys, tmp_path):
    """critic fit cross-fits (--calibration-folds) and says so; critic outliers prints the flags at the FDR and,
    against a reference and calibration too small for any flag, says so on stdout and stderr."""
    tmp, data, generations, _ = job
    train = data / "train.jsonl"
    n_train = len(read_jsonl(train))
    assert main(["fit", "sections", "--train", str(train), "--out", str(tmp_path / "c3"), "--params",
                 '{"delta": 0.1}', "--calibration-folds", "3"]) == 0
    assert f"calibration: {n_train} documents ({n_train} cross-fitted in 3 folds)" in capsys.readouterr().out
    critic = Critic.load(tmp_path / "c3")
    assert critic.calibration.folds == 3 and len(critic.calibration) == n_train
    assert main(["fit", "sections", "--train", str(train), "--out", str(tmp_path / "c1"),
                 "--calibration-folds", "1"]) == 2
    assert "--calibration-folds: must be 0 (no cross-fitting) or at least 2, got 1" in capsys.readouterr().err
    assert main(["fit", "sections", "--train", str(train), "--out", str(tmp_path / "c0"), "--params",
                 '{"delta": 0.1}', "--calibration-folds", "0"]) == 0
    capsys.readouterr()
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in generations))
    assert main(["outliers", str(tmp_path / "c0"), "--reference", str(data / "test.jsonl"), "--input", str(gens),
                 "--top", "3"]) == 0
    captured = capsys.readouterr()
    n_ref = len(read_jsonl(data / "test.jsonl"))
    assert f"0 of {len(generations)} documents flagged: q-value at most 0.1" in captured.out
    cannot = (f"cannot flag any document of 'input' at FDR 0.1: the smallest p-value {1 / (n_ref + 1):.3g} is "
              "above it") if 1 / (n_ref + 1) > 0.1 else "a lone outlier needs"
    assert cannot in captured.out
    if cannot.startswith("cannot"):
        assert f"critic: warning: sections: {cannot}" in captured.err


def test_report_never_replaces_an_lm_eval_output_folder_it_reads_from(job, capsys):
    """The issue's case: --out pointing at the lm-eval folder whose samples file is the candidate (it holds a
    results.json of lm-eval's own) stops before any work, exit 2, and every file stays; a report folder this tool
    wrote is replaced by the next run."""
    tmp, data, generations, _ = job
    folder = tmp / "lm-eval-out"
    folder.mkdir()
    samples = folder / "samples_gen.jsonl"
    samples.write_text("".join(json.dumps({"doc_id": k, "arguments": {"gen_args_0": {"arg_0": "p", "arg_1": {}}},
                                           "resps": [[markdown(d)]], "filtered_resps": [markdown(d)]}) + "\n"
                               for k, d in enumerate(generations[:6])))
    (folder / "results.json").write_text('{"results": {}}')
    (folder / "notes.md").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    args = ["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"),
            "--candidate", f"lm={samples}", "--n-bootstrap", "10", "--n-permutations", "10"]
    capsys.readouterr()
    assert main(args + ["--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{folder}: exists and is not a report directory; refusing to replace it: it holds notes.md, " \
           "results.json, samples_gen.jsonl" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    ours = tmp / "ours"
    assert main(args + ["--out", str(ours)]) == 0 and main(args + ["--out", str(ours)]) == 0


def test_names_of_bytes_that_are_not_utf8(job, capsys, tmp_path):
    """The round's cases: a candidate file or critic folder whose name is not UTF-8 failed with "'utf-8' codec can't
    encode" after all the work; a set name that is not UTF-8 too.  Files and folders of any name are read and
    recorded (\\xNN); a name given for a set must be text, said at once."""
    import os
    import shutil

    tmp, data, _, gens = job
    odd = tmp_path / os.fsdecode(b"g\xff.jsonl")
    shutil.copy(gens, odd)
    critic_dir = tmp_path / os.fsdecode(b"crit\xff")
    shutil.copytree(tmp / "sections", critic_dir)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["report", "--critic", str(critic_dir), "--reference", str(data / "test.jsonl"), "--candidate",
                 f"a={odd}", "--n-bootstrap", "20", "--n-permutations", "20", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert list(results["critics"]) == ["crit\\xff"]
    assert results["critics"]["crit\\xff"]["inputs"][1]["path"] == str(tmp_path / "g\\xff.jsonl")
    capsys.readouterr()
    name = os.fsdecode(b"Z\xff")
    assert main(["report", "--critic", str(tmp / "sections"), "--reference", str(data / "test.jsonl"), "--candidate",
                 f"{name}={gens}", "--out", str(tmp_path / "x")]) == 2
    assert "argument --candidate: the name 'Z\\udcff' is not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_folder_that_is_not_ours_is_refused_before_any_work(job, capsys, tmp_path, command):
    """The round's case: --out a user's folder was refused only after every document was scored.  Now before the
    critic is even loaded (a critic folder that is not there is not reached)."""
    _, data, _, gens = job
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.md").write_text("keep")
    critic = ["--critic", str(tmp_path / "no-critic")] if command == "report" else [str(tmp_path / "no-critic")]
    capsys.readouterr()
    assert main([command, *critic, "--reference", str(data / "test.jsonl"), "--candidate", f"a={gens}",
                 "--out", str(mine)]) == 2
    assert f"{mine}: exists and is not a report directory; refusing to replace it: it holds notes.md" in \
        capsys.readouterr().err


def test_compare_is_report_with_one_critic(job):
    """``critic compare DIR`` and ``critic report --critic DIR`` criticise through the same code and write the
    same report (the one writer): report.md, index.html and the results but for the command's record."""
    tmp, data, _, gens = job
    common = ["--reference", str(data / "test.jsonl"), "--candidate", f"mymodel={gens}", "--sections", "markdown",
              "--top", "4", "--n-bootstrap", "30", "--n-permutations", "30", "--seed", "3"]
    assert main(["compare", str(tmp / "sections"), *common, "--out", str(tmp / "by-compare")]) == 0
    assert main(["report", "--critic", f"sections={tmp / 'sections'}", *common, "--out", str(tmp / "by-report")]) == 0
    for page in ("report.md", "index.html", "documents.jsonl"):
        assert (tmp / "by-compare" / page).read_text() == (tmp / "by-report" / page).read_text()
    compare, report = (json.loads((tmp / name / "results.json").read_text()) for name in ("by-compare", "by-report"))
    assert compare["critics"] == report["critics"] and compare["flags"] == report["flags"]
    assert compare["critics"]["sections"]["config"]["n_permutations"] == 30
