"""The Python API (critic.api): sets held in memory read as the reader reads the same records from a file, critics
fitted or loaded and labelled as the command line does, bad input named before any work, and ``compare`` giving the
panel's numbers, saved as ``critic report`` saves them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import critic
from critic.api import Criticism, compare, fit_or_load, read_records
from critic.config import ConfigError
from critic.document import Document, DocumentError, Section
from critic.inputs import InputOptions, ReadReport, read_documents
from critic.panel import PanelResult, load_results

TEXTS = [
    "# NAME\nls - list directory contents\n\n# SYNOPSIS\nls [OPTION]... [FILE]...\n",
    "no heading here, one untitled section",
    "  \n ",  # empty: skipped and counted
    "intro before the first heading\n## DESCRIPTION\nList information about the FILEs.\n```\n# a comment\n```",
    "first part||second part|| ||third",
]


def quiet(message: str) -> None:
    raise AssertionError(f"nothing to say, got {message!r}")


def read_file(tmp_path: Path, records: list[dict], options: InputOptions, name: str):
    """What the reader makes of ``records`` written as a JSONL file (the command line's documents and read)."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = ReadReport()
    docs = read_documents(path, options, name=name, report=report)
    return docs, report.to_dict()


def same_read(ours: dict, theirs: dict) -> None:
    keep = ("n_read", "skipped", "generated_ids", "dropped_metadata", "sectioned_by_headings", "warnings")
    assert {k: ours[k] for k in keep} == {k: theirs[k] for k in keep}


@pytest.mark.parametrize("sections", ["auto", "none", "markdown", "separator:||"])
def test_strings_dicts_and_a_data_frame_make_the_documents_a_jsonl_file_makes(tmp_path, sections):
    options = InputOptions(sections=sections)
    want, read = read_file(tmp_path, [{"text": t} for t in TEXTS], options, "gens")
    assert len(want) == 4 and read["skipped"] == {"empty text": 1}
    docs, ours = read_records(TEXTS, options, "gens")
    assert docs == want and [d.id for d in docs] == ["gens:1", "gens:2", "gens:4", "gens:5"]
    same_read(ours, read)
    assert ours["format"] == "in-memory" and ours["path"] == "gens <list>"

    records = [{"id": f"g{k}", "text": t, "model": "m", "k": k} for k, t in enumerate(TEXTS)]
    want, read = read_file(tmp_path, records, options, "named")
    for data in (records, pd.DataFrame(records)):
        docs, ours = read_records(data, options, "named")
        assert docs == want and [d.metadata for d in docs] == [d.metadata for d in want]
        same_read(ours, read)


def test_what_has_to_pandas_is_read_as_its_data_frame():
    class Dataset:  # the shape of datasets.Dataset / pyarrow.Table, without them
        def to_pandas(self):
            return pd.DataFrame({"generation": TEXTS[:2], "id": ["a", "b"]})

    docs, read = read_records(Dataset(), InputOptions(text_field="generation"), "ds")
    assert [d.id for d in docs] == ["a", "b"] and docs[0].section_titles == ["NAME", "SYNOPSIS"]
    assert read["path"] == "ds <Dataset>"


def test_documents_are_kept_and_their_ids_checked():
    docs = [Document("a", (Section("T", "x"),)), Document("b", (Section(None, "y"),))]
    assert read_records(docs, InputOptions(), "set")[0] == docs
    with pytest.raises(DocumentError, match=r"set item 3: duplicate document id 'a' \(first at set item 1\)"):
        read_records([*docs, docs[0]], InputOptions(), "set")
    with pytest.raises(DocumentError, match=r"set item 2: duplicate document id 'set:1' \(first at set item 1\)"):
        read_records(["text", {"id": "set:1", "text": "more"}], InputOptions(), "set")


@pytest.mark.parametrize("data, message", [
    (pd.DataFrame({"generation": ["x"], "model": ["m"]}),
     ("mine: the DataFrame has no column 'text' (columns: generation, model); name the column holding the "
      "generations with text_field=")),
    ([{"text": "x"}, {"generation": "y"}], "mine item 2: no 'text' key (keys: generation); name the key"),
    (["x", 3], "mine item 2: a int: expected a string (a generation), a dict with 'text' or a Document"),
    ({"text": ["x"]}, "mine: a dict is no set of documents: give a path, a list of strings"),
    (3, "mine: a int is no set of documents"),
    (["", " "], "mine <list>: holds no documents; skipped 2: empty text (first at mine item 1)"),
    ([{"text": "x", "id": 1.5}], "mine item 1: field 'id' must be a non-empty string or an integer, got 1.5"),
])
def test_bad_input_in_memory_names_the_set_and_the_item(data, message):
    with pytest.raises(DocumentError, match=re.escape(message)):
        read_records(data, InputOptions(), "mine")


def test_empty_generations_are_said_through_log():
    said = []
    read_records(["a", "", "b"], InputOptions(), "mine", log=said.append)
    assert said == ["mine <list>: 2 documents; skipped 1: empty text (first at mine item 2)"]
    read_records(["a", "b"], InputOptions(), "mine", log=quiet)  # made-up ids are what a list expects: not said


# ------------------------------------------------------------------ critics
def test_critics_are_labelled_as_the_command_line_labels_them(sets, tmp_path):
    critics, _, _ = sets
    folder = critics["sharp"].save(tmp_path / "saved-sharp")
    got, dirs = fit_or_load([critics["smooth"], str(folder)], train=None, log=quiet)
    assert list(got) == ["sections", "saved-sharp"] and got["sections"] is critics["smooth"]
    assert dirs == {"saved-sharp": folder} and got["saved-sharp"].state_sha256() == critics["sharp"].state_sha256()
    got, dirs = fit_or_load({"a": folder, "b": critics["sharp"]}, train=None, log=quiet)
    assert list(got) == ["a", "b"] and dirs == {"a": folder}
    with pytest.raises(ValueError, match=r"critics: the label 'sections' is used twice; name them: critics=\{LABEL"):
        fit_or_load([critics["smooth"], critics["sharp"]], train=None, log=quiet)


def test_a_critic_to_fit_needs_train_and_a_name_must_be_a_folder_or_a_critic(tmp_path):
    from critics.sections import SectionTransitionCritic

    with pytest.raises(ValueError, match=r"critics: 'sections' is not fitted: give train="):
        fit_or_load([SectionTransitionCritic(delta=0.1)], train=None)
    with pytest.raises(ValueError, match=r"critics: 'sectoins' is no saved critic's folder \(no such path\) and "
                                         r"unknown critic 'sectoins'.*did you mean 'sections'"):
        fit_or_load("sectoins", train=None)
    with pytest.raises(ValueError, match="critics: a int is no critic"):
        fit_or_load([3], train=None)
    with pytest.raises(ValueError, match="critics: give at least one critic"):
        fit_or_load([], train=None)


def test_a_critic_named_is_fitted_as_critic_fit_fits_it(sets):
    """``"sections"`` with train and valid in memory: the critic ``critic fit sections --valid`` makes (its default
    settings, delta chosen on valid, calibrated on both), scoring every document as that one does."""
    from critic.workflows import fit_critic
    from critics.sections import SectionTransitionCritic

    _, reference, candidates = sets
    train, valid = reference[:-4], reference[-4:]
    said = []
    got, dirs = fit_or_load("sections", train=train, valid=valid, log=said.append)
    want = fit_critic(SectionTransitionCritic(), train, valid)
    assert dirs == {} and got["sections"].state_sha256() == want.state_sha256()
    assert got["sections"].score(candidates["permuted"]).latent_nll.tolist() == \
        want.score(candidates["permuted"]).latent_nll.tolist()
    assert said[0] == f"fitting sections on {len(train)} documents" and said[-1].startswith("fitted sections: ")


# ------------------------------------------------------------------ compare
@pytest.mark.parametrize("kwargs, error, message", [
    ({"candidates": {}}, ValueError, "candidates: give at least one set to criticise"),
    ({"candidates": {"reference": ["x"]}}, ValueError, "'reference' is the reference set's name; choose another"),
    ({"word_ppl": {"gpt": 3.0}}, ValueError, "word_ppl: no candidate set 'gpt' (the candidates: mine)"),
    ({"n_bootstrap": 0}, ConfigError, "n_bootstrap must be"),
    ({"n_boot": 10}, ConfigError, "no setting 'n_boot' (did you mean 'n_bootstrap'?)"),
    ({"fdr": 0.1, "flag_level": 0.1}, ConfigError, "two flag rules"),
    ({"sections": "headings"}, DocumentError, "unknown sections mode 'headings'"),
])
def test_bad_settings_are_named_before_any_work(kwargs, error, message):
    class Unusable:  # any work would touch it
        def __getattr__(self, name):
            raise AssertionError("work was done")

    call = {"reference": ["x"], "candidates": {"mine": ["y"]}, "critics": Unusable(), **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        compare(call.pop("reference"), call.pop("candidates"), call.pop("critics"), log=quiet, **call)


def test_compare_gives_the_panel_s_numbers(sets, panel):
    """The two section critics over documents in memory: every document's and set's number is the panel's of
    :func:`criticize_panel` (conftest), and the result is a PanelResult that keeps the documents and critics."""
    critics, reference, candidates = sets
    result = compare(reference, candidates, critics, n_bootstrap=50, n_permutations=50, flag_level=0.2, top=5,
                     log=quiet)
    assert isinstance(result, Criticism) and isinstance(result, PanelResult)
    assert result.critics == critics and result.documents == {"reference": reference, **candidates}
    assert result.reads["permuted"]["n_read"] == len(candidates["permuted"])
    ours, theirs = result.to_pandas(), panel.to_pandas()
    numbers = ["latent_nll", "latent_steps", "outlier_p_value", "q_value", "flagged"]
    assert ours[["critic", "set", "id", *numbers]].equals(theirs[["critic", "set", "id", *numbers]])
    assert result.summary()["latent_ppl_p_value"].equals(panel.summary()["latent_ppl_p_value"])
    assert repr(result) == str(result) and str(result).startswith("Critic: `smooth` (sections)")


def test_a_path_is_read_as_the_command_line_reads_it_and_the_result_saves_as_critic_report(sets, tmp_path):
    critics, reference, candidates = sets
    gens = tmp_path / "gens.jsonl"
    texts = ["\n\n".join(f"# {s.title}\n{s.text}" for s in d.sections) for d in candidates["dropped"]]
    gens.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    said = []
    from_file = compare(reference, {"dropped": gens}, {"smooth": critics["smooth"]}, sections="markdown",
                        n_bootstrap=20, n_permutations=20, log=said.append)
    in_memory = compare(reference, {"dropped": texts}, {"smooth": critics["smooth"]}, sections="markdown",
                        n_bootstrap=20, n_permutations=20, log=quiet)
    assert said == [f"{gens}: {len(texts)} documents (text-jsonl); {len(texts)} ids made as dropped:LINE"]
    assert from_file.reads["dropped"]["path"] == str(gens)
    assert [i["path"] for i in from_file.results["smooth"].inputs] == [None, str(gens)]
    numbers = ["id", "latent_nll", "outlier_p_value", "q_value"]
    assert from_file.to_pandas()[numbers].equals(in_memory.to_pandas()[numbers])

    written = from_file.save(tmp_path / "report")
    assert sorted(written) == ["documents", "html", "report", "results"]
    payload = json.loads(written["results"].read_text())
    assert payload["critic_dirs"] == {} and payload["reads"]["dropped"]["path"] == str(gens)
    again = load_results(tmp_path / "report")
    assert again.to_pandas().drop(columns=["reasons"]).equals(from_file.to_pandas().drop(columns=["reasons"]))
    assert critic.load_results is load_results and critic.compare is compare


def test_an_lm_eval_output_folder_is_a_set_per_samples_file_as_critic_report_reads_it(sets, tmp_path):
    critics, reference, candidates = sets
    texts = ["\n\n".join(f"# {s.title}\n{s.text}" for s in d.sections) for d in candidates["permuted"]]
    model = tmp_path / "out" / "org__model"
    model.mkdir(parents=True)
    for task, part in (("alpha", texts[:12]), ("beta", texts[12:24])):
        lines = [{"doc_id": k, "resps": [[t]], "filtered_resps": [t]} for k, t in enumerate(part)]
        (model / f"samples_{task}_2024-05-01T10-00-00.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = compare(reference, {"run": tmp_path / "out", "mine": texts[:12]}, {"smooth": critics["smooth"]},
                     n_bootstrap=20, n_permutations=20, log=lambda message: None)
    assert result.set_names == ["reference", "run/org__model/alpha", "run/org__model/beta", "mine"]
    assert result.reads["run/org__model/beta"]["format"] == "lm-eval"
    frame = result.to_pandas().set_index(["set", "id"])
    assert frame.loc[("run/org__model/alpha", "0"), "latent_nll"] == frame.loc[("mine", "mine:1"), "latent_nll"]
