"""docs/python-api.md run as a notebook (its Python blocks in order, in one namespace) on the man-page fixture, and
its numbers checked against the commands at the end of the page run on the same texts: a list of strings and a
DataFrame criticised by two critics give the DataFrames whose every number is the command line's."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from critic.cli import main
from critic.corrupt import corrupt_all
from critic.document import Document, read_jsonl

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def blocks(language: str) -> list[str]:
    """The page's fenced code blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)


def markdown(doc: Document) -> str:
    """A generation as a model writes it: Markdown headings over the section texts."""
    return "\n\n".join(f"# {s.title}\n{s.text}" for s in doc.sections)


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, fixture_manpage_root):
    """The page's working folder after its Python blocks ran (the namespace they left) and the commands ran."""
    folder = tmp_path_factory.mktemp("python-api")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install",
                     "--out", "data/manpages"]) == 0
        real = read_jsonl("data/manpages/test.jsonl") + read_jsonl("data/manpages/valid.jsonl")
        mine = [{"text": markdown(d)} for d in real] + [{"text": " \n "}]  # the last one is empty: skipped, counted
        other = [{"id": f"other-{k}", "text": markdown(d)} for k, d in enumerate(corrupt_all(real, "permuted", seed=3))]
        for name, lines in (("generations.jsonl", mine), ("other.jsonl", other)):
            Path(name).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        namespace: dict = {}
        for code in blocks("python"):
            exec(compile(code, str(PAGE), "exec"), namespace)
        (commands,) = blocks("bash")
        for line in commands.replace("\\\n", " ").splitlines():
            assert shlex.split(line)[0] == "critic"
            assert main(shlex.split(line)[1:]) == 0, line
    return folder, namespace


def test_the_page_reads_a_list_of_strings_and_a_data_frame(notebook):
    _, ns = notebook
    assert isinstance(ns["texts"], list) and isinstance(ns["other"], pd.DataFrame)
    reads = ns["result"].reads
    assert reads["mymodel"]["skipped"] == {"empty text": 1}
    assert reads["mymodel"]["generated_ids"] == len(ns["texts"]) - 1
    assert reads["other"]["generated_ids"] == 0 and reads["other"]["format"] == "in-memory"
    assert list(ns["result"].results) == ["sections", "lda"]


def test_every_document_s_numbers_are_the_command_line_s(notebook):
    folder, ns = notebook
    rows = [json.loads(line) for line in (folder / "reports/cli/documents.jsonl").read_text().splitlines()]
    cli = pd.DataFrame(rows).set_index(["critic", "set", "id"])
    api = ns["documents"].set_index(["critic", "set", "id"])
    assert len(api) == len(cli) == 2 * (4 + 2 * 8)  # two critics: reference, mymodel and other
    assert sorted(api.index) == sorted(cli.index)
    assert {s for _, s, i in api.index if i.startswith("mymodel:")} == {"mymodel"}
    columns = ["latent_nll", "latent_steps", "latent_nll_per_step", "outlier_p_value", "q_value", "plain_p_value",
               "words", "unknown"]
    for key, row in api.iterrows():
        assert [row[c] for c in columns] == [cli.loc[key, c] for c in columns], key
    counts = ns["result"].flag_counts()
    flags = sum(counts[label][name] for label in ("sections", "lda") for name in ("mymodel", "other"))
    assert int(api["flagged"].sum()) == flags


def _nan_is_none(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def test_every_set_s_statistics_are_the_command_line_s(notebook):
    folder, ns = notebook
    payload = json.loads((folder / "reports/cli/results.json").read_text())
    summary = ns["summary"]
    assert len(summary) == 6
    for _, row in summary.iterrows():
        result = payload["critics"][row["critic"]]
        s = result["reference"] if row["set"] == "reference" else result["candidates"][row["set"]]
        assert row["headline"] == result["critic"]["headline"]
        assert [row["n"], row["n_skipped"], row["n_unknown"]] == [s["n"], s["n_skipped"], s["n_unknown"]]
        for name, comparison in (("latent_ppl", "ppl_comparison"), ("latent_nll", "comparison")):
            assert _nan_is_none(row[name]) == s[name], (row["critic"], row["set"], name)
            assert [_nan_is_none(row[f"{name}_ci_low"]), _nan_is_none(row[f"{name}_ci_high"])] == s[f"{name}_ci"]
            if s[comparison] is None:
                assert math.isnan(row[f"{name}_p_value"]) and math.isnan(row[f"{name}_difference"])
            else:
                assert row[f"{name}_p_value"] == s[comparison]["p_value"]
                assert row[f"{name}_difference"] == s[comparison]["difference"]
                assert [row[f"{name}_difference_ci_low"], row[f"{name}_difference_ci_high"]] == \
                    s[comparison]["difference_ci"]
        assert row["flagged"] == payload["flags"]["counts"][row["critic"]].get(row["set"], 0)


def test_the_saved_report_is_the_command_line_s_and_reads_back(notebook):
    folder, ns = notebook
    saved = folder / "reports/mymodel"
    assert {p.name for p in saved.iterdir()} >= {"results.json", "documents.jsonl", "report.md", "index.html"}
    ours = json.loads((saved / "results.json").read_text())
    theirs = json.loads((folder / "reports/cli/results.json").read_text())
    for label in ("sections", "lda"):  # the same documents read: the sets' hashes are the command line's
        assert [i["sha256"] for i in ours["critics"][label]["inputs"]] == \
            [i["sha256"] for i in theirs["critics"][label]["inputs"]]
    again = ns["again"].to_pandas()
    assert again[["critic", "set", "id"]].equals(ns["documents"][["critic", "set", "id"]])
    assert ns["again"].summary()["latent_ppl"].equals(ns["summary"]["latent_ppl"])
    reused = ns["one"].results["topics"].set("other").latent_nll
    assert reused == ns["result"].results["lda"].set("other").latent_nll
