"""``critic run`` of a report config: the same report as ``critic report`` with the same critics and sets, resumed
stage by stage, and bad configs named by entry."""

from __future__ import annotations

import json

import pytest

from critic.cli import main
from critic.document import read_jsonl


@pytest.fixture(scope="module")
def files(tmp_path_factory, fixture_manpage_root):
    tmp = tmp_path_factory.mktemp("job")
    data = tmp / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    docs = read_jsonl(data / "test.jsonl") + read_jsonl(data / "valid.jsonl")
    gens = tmp / "gens.jsonl"
    gens.write_text("".join(json.dumps({"text": "\n\n".join(f"# {s.title}\n{s.text}" for s in d.sections)}) + "\n"
                            for d in docs))
    return tmp, data, gens


def config(tmp, data, gens, *, lda_passes=2, extra="") -> str:
    path = tmp / f"report-{lda_passes}.toml"
    path.write_text(f'''runner = "report"
[sets]
reference = "{data / 'test.jsonl'}"
candidates = {{mymodel = "{gens}"}}
[inputs]
sections = "markdown"
[[critics]]
label = "sections"
fit = "sections"
train = "{data / 'train.jsonl'}"
params = {{delta = 0.1}}
[[critics]]
label = "topics"
fit = "lda"
train = "{data / 'train.jsonl'}"
params = {{num_topics = 3, passes = {lda_passes}}}
{extra}
[report]
top = 5
flag_level = 0.5
n_bootstrap = 50
n_permutations = 50
''')
    return str(path)


def payload(report_dir) -> dict:
    saved = json.loads((report_dir / "results.json").read_text())
    return {k: v for k, v in saved.items() if k not in ("environment", "run", "critic_dirs")}


def test_run_gives_the_report_command_s_report_and_resumes(files, capsys):
    tmp, data, gens = files
    out = tmp / "run"
    assert main(["run", config(tmp, data, gens), "--out", str(out)]) == 0
    # the same critics fitted by hand, the same sets through `critic report`
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp / "s"),
                 "--params", '{"delta": 0.1}']) == 0
    assert main(["fit", "lda", "--train", str(data / "train.jsonl"), "--out", str(tmp / "t"),
                 "--params", '{"num_topics": 3, "passes": 2}']) == 0
    assert main(["report", "--critic", f"sections={tmp / 's'}", "--critic", f"topics={tmp / 't'}", "--reference",
                 str(data / "test.jsonl"), "--candidate", f"mymodel={gens}", "--sections", "markdown", "--top", "5",
                 "--flag-level", "0.5", "--n-bootstrap", "50", "--n-permutations", "50", "--out", str(tmp / "by-hand")]) == 0
    by_hand = payload(tmp / "by-hand")
    by_run = payload(out / "report")
    assert by_run["critics"] == by_hand["critics"] and by_run["flags"] == by_hand["flags"]
    for page in ("report.md", "index.html"):  # the one writer: the same report from the command and the config
        assert (out / "report" / page).read_text() == (tmp / "by-hand" / page).read_text()

    capsys.readouterr()
    before = (out / "report" / "results.json").read_bytes()
    assert main(["run", config(tmp, data, gens), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert all(f"{what}: up to date" in err for what in ("critic sections", "critic topics", "report"))
    assert (out / "report" / "results.json").read_bytes() == before
    # a changed setting refits that critic only, and redoes the report, which --track logs
    runs = tmp / "runs.jsonl"
    assert main(["run", config(tmp, data, gens, lda_passes=3), "--out", str(out), "--track", f"jsonl:{runs}"]) == 0
    err = capsys.readouterr().err
    assert "critic sections: up to date" in err and "critic topics: fitting lda" in err
    assert "report: up to date" not in err
    (row,) = [json.loads(line) for line in runs.read_text().splitlines()]
    saved = json.loads((out / "report" / "results.json").read_text())["critics"]
    assert row["name"] == "report/report" and row["params"]["critic.topics.params.passes"] == "3"
    assert row["metrics"]["topics.mymodel.latent_ppl"] == saved["topics"]["candidates"]["mymodel"]["latent_ppl"]
    assert row["params"]["critic.sections.dir"] == str(out / "critic-sections")


@pytest.mark.parametrize("edit, message", [
    (("[[critics]]\nlabel = \"sections\"\nfit", "[[critics]]\nlabel = \"sections\"\npath = \"x\"\nfit"),
     "[[critics]] #1 (sections): give either path (a saved critic) or fit"),
    (("label = \"topics\"", "label = \"sections\""), "[[critics]] #2: needs a label of its own"),
    (("fit = \"lda\"", "fit = \"ldaa\""), "unknown critic 'ldaa' (did you mean 'lda'?)"),
    (("num_topics = 3", "num_topiks = 3"), "[[critics]] #2 (topics) params: critic 'lda' has no setting 'num_topiks'"),
    (("params = {delta", "trian = 1\nparams = {delta"), "[[critics]] #1: unknown key(s) trian"),
    (("num_topics = 3", "num_topics = 3, seed = 4"),
     "[[critics]] #2 (topics) params: 'seed' is the run's seed: give the run's --seed 4 instead"),
    (("flag_level = 0.5", "flag_level = 2"), "flag_level"),
    (("flag_level = 0.5", "flag_level = 0.5\noutlier_score = \"short\""), "outlier_score"),
    (("flag_level = 0.5", "flag_level = 0.5\nword_ppl = {nobody = 3}"), "[report] word_ppl: nobody = 3: needs a candidate"),
    (("flag_level = 0.5", "fdr = 0"), "fdr"),
    (("flag_level = 0.5", "flag_level = 0.5\nfdr = 0.2"), "[report] fdr = 0.2 and flag_level = 0.5 are two flag rules"),
    (("params = {delta", "calibration_folds = 1\nparams = {delta"),
     "calibration_folds must be 0 (no cross-fitting) or an integer >= 2, got 1"),
])
def test_bad_report_configs_name_the_entry_and_write_nothing(files, capsys, edit, message):
    tmp, data, gens = files
    path = tmp / "bad.toml"
    text = open(config(tmp, data, gens)).read()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    out = tmp / "never"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (out / "report").exists() and not (out / "critic-sections").exists()
