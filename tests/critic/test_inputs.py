"""critic.inputs: every input format on real files (Parquet and Arrow written with pyarrow), auto-detection,
sections (auto, and the warning for headings read with none), lm-eval repeats and prompts, made-up ids, the read
report and bad input (a DocumentError naming the file and line or row)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import pytest

from critic import inputs
from critic.document import Document, DocumentError, Section, write_jsonl
from critic.cli_args import add_input_arguments, input_options, read_with_args
from critic.inputs import FORMAT_NAMES, InputOptions, ReadReport, detect_format, iter_documents, read_documents, \
    split_sections

import pyarrow as pa  # noqa: E402  (critic[arrow]: installed by .ci/install.sh, never skipped)
import pyarrow.ipc  # noqa: E402,F401  (pa.ipc)
import pyarrow.parquet as pq  # noqa: E402

PLUGINS = Path(__file__).parent / "plugins"


def write_lines(path, *objs):
    """A JSON-lines file; a string is written as the line itself."""
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs), encoding="utf-8")
    return path


def untitled(doc_id, text):
    return Document(doc_id, (Section(None, text),))


def cli_args(*argv):
    """What a command that reads documents parses from ``argv`` (its reader options only)."""
    parser = argparse.ArgumentParser()
    add_input_arguments(parser)
    return parser.parse_args(list(argv))


def raises(path, options=InputOptions(), **kw) -> str:
    with pytest.raises(DocumentError) as err:
        read_documents(path, options, **kw)
    return str(err.value)


# ------------------------------------------------------------------ documents
def test_documents_are_read_by_the_projects_reader(tmp_path):
    docs = [Document("a", (Section("Intro", "x y"), Section(None, "z")), title="A", metadata={"k": 1}),
            Document("b", (Section("Só", "ünïcode"),))]
    path = write_jsonl(docs, tmp_path / "d.jsonl")
    report = ReadReport()
    back = read_documents(path, report=report)
    assert back == docs
    assert [d.metadata for d in back] == [{"k": 1}, {}]
    assert (report.format, report.n_read, report.generated_ids) == ("documents", 2, 0)
    assert report.summary() == f"{path}: 2 documents (documents)"
    assert "unknown key 'sectons'" in raises(write_lines(tmp_path / "e.jsonl", {"id": "a", "sectons": []}),
                                             InputOptions(format="documents"))


def test_documents_keep_their_own_sections_and_a_misspelt_key_is_named(tmp_path):
    """--sections is for free text: a command reading a reference of documents and free-text generations
    with --sections markdown reads the documents as they are."""
    path = write_jsonl([Document("a", (Section("# not a heading", "x\n# nor this"),))], tmp_path / "d.jsonl")
    assert read_documents(path, InputOptions(sections="markdown")) == read_documents(path)
    typo = write_lines(tmp_path / "t.jsonl", {"id": "a", "sectons": []})  # auto-detected as documents
    assert "unknown key 'sectons' (did you mean 'sections'?)" in raises(typo, InputOptions())


# ------------------------------------------------------------------ text-jsonl
def test_text_jsonl_ids_metadata_and_report(tmp_path):
    path = write_lines(tmp_path / "gens.jsonl", {"id": "a", "text": "first", "model": "m1", "score": 0.5},
                       {"id": 7, "text": "second"}, "", {"text": "third", "prompt": {"p": [1]}},
                       {"id": None, "text": "fourth"}, {"id": "e", "text": "  \n "})
    report = ReadReport()
    docs = read_documents(path, report=report)
    assert docs == [untitled("a", "first"), untitled("7", "second"), untitled("gens:4", "third"),
                    untitled("gens:5", "fourth")]
    assert [d.metadata for d in docs] == [{"model": "m1", "score": 0.5}, {}, {"prompt": {"p": [1]}}, {}]
    assert (report.format, report.n_read, report.generated_ids) == ("text-jsonl", 4, 2)
    assert report.skipped == {"empty text": 1} and report.examples == {"empty text": f"{path}:6"}
    assert report.summary() == (f"{path}: 4 documents (text-jsonl); skipped 1: empty text (first at {path}:6); "
                                "2 ids made as gens:LINE")
    assert report.to_dict() == {"path": str(path), "format": "text-jsonl", "n_read": 4,
                                "skipped": {"empty text": 1}, "examples": {"empty text": f"{path}:6"},
                                "generated_ids": 2, "dropped_metadata": {}, "sectioned_by_headings": 0,
                                "warnings": []}


def test_text_jsonl_other_fields_and_name(tmp_path):
    path = write_lines(tmp_path / "gens.jsonl", {"uid": "u1", "output": "one", "text": "prompt"}, {"output": "two"})
    options = InputOptions(format="text-jsonl", text_field="output", id_field="uid")
    docs = read_documents(path, options, name="run1")
    assert docs == [untitled("u1", "one"), untitled("run1:2", "two")]
    assert docs[0].metadata == {"text": "prompt"}


def test_all_empty_is_an_error_that_says_what_was_skipped(tmp_path):
    path = write_lines(tmp_path / "gens.jsonl", {"text": ""}, {"text": " "})
    assert raises(path) == f"{path}: holds no documents; skipped 2: empty text (first at {path}:1)"


@pytest.mark.parametrize("content, message", [
    (b'{"text": "a"}\n{"text": \n', ":2: invalid JSON"),
    (b'{"text": "a"}\n{"text": "\xff"}\n', ":2: line is not valid UTF-8"),
    (b'{"text": "a"}\n{"output": "b", "id": "x"}\n',
     ":2: no 'text' field (keys: output, id); name the field holding the generation with --text-field"),
    (b'{"text": "a"}\n{"text": ["b"]}\n', ":2: field 'text' is a list, not a string"),
    (b'{"text": "a"}\n{"text": null}\n', ":2: field 'text' is a null, not a string"),
    (b'{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n', ":2: duplicate document id 'x' (first at "),
    (b'{"id": true, "text": "a"}\n', ":1: field 'id' must be a non-empty string or an integer, got True"),
    (b'{"id": 1.5, "text": "a"}\n', ":1: field 'id' must be a non-empty string or an integer, got 1.5"),
    (b'{"text": "a"}\n[1]\n', ":2: expected a JSON object, got a list"),
    (b'', ": holds no documents"),
])
def test_text_jsonl_bad_input(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    text = raises(path, InputOptions(format="text-jsonl"))
    assert text.startswith(str(path)) and message in text
    if "duplicate" in message:
        assert text == f"{path}:2: duplicate document id 'x' (first at {path}:1)"


# ------------------------------------------------------------------ sections
MARKDOWN = """Opening words.

# Intro
First part.

## Method
```python
# a comment, not a heading
x = 1
```
####### seven hashes is text
#no-space is text

# Empty
"""


def test_split_sections_markdown_separator_none():
    assert split_sections(MARKDOWN, "markdown") == [
        Section(None, "Opening words."), Section("Intro", "First part."),
        Section("Method", "```python\n# a comment, not a heading\nx = 1\n```\n####### seven hashes is text\n"
                          "#no-space is text"),
        Section("Empty", "")]
    assert split_sections("\n\n# Only\nbody", "markdown") == [Section("Only", "body")]
    assert split_sections("no headings\n", "markdown") == [Section(None, "no headings")]
    assert split_sections(" a \n---\n\n---\nb\n---", "separator:---") == [Section(None, "a"), Section(None, "b")]
    assert split_sections(" keep \n", "none") == [Section(None, " keep \n")]


def test_sections_option_through_the_reader(tmp_path):
    path = write_lines(tmp_path / "g.jsonl", {"id": "m", "text": MARKDOWN}, {"id": "s", "text": "a||b||"},
                       {"id": "blank", "text": "||  ||"})
    docs = read_documents(path, InputOptions(sections="separator:||"))
    assert docs == [untitled("m", MARKDOWN.strip()), Document("s", (Section(None, "a"), Section(None, "b")))]
    report = ReadReport()
    docs = read_documents(path, InputOptions(sections="markdown"), report=report)
    assert [d.section_titles for d in docs] == [[None, "Intro", "Method", "Empty"], [None], [None]]
    assert report.skipped == {}


MAN_PAGE = "# NAME\nls - list directory contents\n\n# SYNOPSIS\nls [OPTION]... [FILE]...\n"


@pytest.mark.parametrize("text, sections", [
    (MAN_PAGE, [Section("NAME", "ls - list directory contents"), Section("SYNOPSIS", "ls [OPTION]... [FILE]...")]),
    (" plain prose,\nno headings \n", [Section(None, " plain prose,\nno headings \n")]),  # verbatim, as none
    ("# \n# \n# ", [Section(None, "# \n# \n# ")]),  # degenerate: bare '#' lines are no titles
    ("#  \t\nbody", [Section(None, "#  \t\nbody")]),
    ("code:\n```sh\n# install it\nmake\n```\n", [Section(None, "code:\n```sh\n# install it\nmake\n```\n")]),
    ("#no-space\n####### seven\n", [Section(None, "#no-space\n####### seven\n")]),
    ("# \nintro\n## Real\nbody", [Section("", "intro"), Section("Real", "body")]),  # one titled heading: markdown
])
def test_split_sections_auto(text, sections):
    assert split_sections(text, "auto") == sections


def test_markdown_mode_makes_empty_titles_of_bare_hashes_where_auto_does_not():
    assert split_sections("# \n# \n# ", "markdown") == [Section("", "")] * 3
    assert split_sections("# \n# \n# ", "auto") == [Section(None, "# \n# \n# ")]


def test_sections_auto_is_the_default_decided_per_document_and_counted(tmp_path):
    plain = {"id": "plain", "text": "Just prose.\nNo headings here."}
    path = write_lines(tmp_path / "g.jsonl", {"id": "man", "text": MAN_PAGE}, plain,
                       {"id": "junk", "text": "# \n# \n# "}, {"id": "man2", "text": "intro\n## OPTIONS\n-a all"})
    report = ReadReport()
    docs = read_documents(path, report=report)
    assert InputOptions().sections == "auto"
    assert docs == [Document("man", (Section("NAME", "ls - list directory contents"),
                                     Section("SYNOPSIS", "ls [OPTION]... [FILE]..."))),
                    untitled("plain", "Just prose.\nNo headings here."), untitled("junk", "# \n# \n# "),
                    Document("man2", (Section(None, "intro"), Section("OPTIONS", "-a all")))]
    assert report.sectioned_by_headings == 2 and report.warnings == []
    assert report.summary() == f"{path}: 4 documents (text-jsonl); 2 split at Markdown headings (--sections auto)"
    assert report.to_dict()["sectioned_by_headings"] == 2
    alone = read_documents(write_lines(tmp_path / "alone.jsonl", plain))  # no other document changes it
    assert alone == [docs[1]] and alone[0].text == "Just prose.\nNo headings here."


def headed_set(tmp_path, n_headed, n_plain, n_bare=0):
    """A text-jsonl file: n_headed man pages, n_plain prose generations, n_bare degenerate '# ' ones."""
    return write_lines(tmp_path / "g.jsonl", *[{"id": f"h{k}", "text": MAN_PAGE} for k in range(n_headed)],
                       *[{"id": f"p{k}", "text": "prose"} for k in range(n_plain)],
                       *[{"id": f"b{k}", "text": "# \n# "} for k in range(n_bare)])


NONE_WARNING = ("{} of {} documents have Markdown headings but --sections none reads each as one untitled section: "
                "use --sections auto or markdown")


def test_sections_none_on_mostly_headed_documents_is_read_as_asked_with_a_warning(tmp_path):
    path = headed_set(tmp_path, 2, 1)
    report = ReadReport()
    docs = read_documents(path, InputOptions(sections="none"), report=report)
    assert docs == [untitled("h0", MAN_PAGE), untitled("h1", MAN_PAGE), untitled("p0", "prose")]
    assert report.warnings == [NONE_WARNING.format(2, 3)] and report.sectioned_by_headings == 0
    assert report.summary() == f"{path}: 3 documents (text-jsonl); warning: {NONE_WARNING.format(2, 3)}"
    assert report.to_dict()["warnings"] == [NONE_WARNING.format(2, 3)]
    for options in (InputOptions(), InputOptions(sections="markdown")):  # the same file, split: nothing to warn of
        report = ReadReport()
        read_documents(path, options, report=report)
        assert report.warnings == []


@pytest.mark.parametrize("n_headed, n_plain, n_bare", [(1, 1, 0), (1, 0, 2), (0, 0, 3)])
def test_sections_none_warns_only_when_more_than_half_have_titled_headings(tmp_path, n_headed, n_plain, n_bare):
    report = ReadReport()
    read_documents(headed_set(tmp_path, n_headed, n_plain, n_bare), InputOptions(sections="none"), report=report)
    assert report.warnings == []


def test_the_none_warning_comes_once_the_last_document_is_read(tmp_path):
    report = ReadReport()
    docs = iter_documents(headed_set(tmp_path, 2, 0), InputOptions(sections="none"), report=report)
    next(docs), next(docs)
    assert report.warnings == []
    assert list(docs) == [] and report.warnings == [NONE_WARNING.format(2, 2)]


def test_read_with_args_says_the_warning_and_the_auto_splits_on_stderr(tmp_path, capsys):
    path = headed_set(tmp_path, 2, 1)
    docs, read = read_with_args(cli_args("--sections", "none"), path)
    assert len(docs) == 3 and read["warnings"] == [NONE_WARNING.format(2, 3)]
    assert capsys.readouterr().err == (f"critic: {path}: 3 documents (text-jsonl); "
                                       f"warning: {NONE_WARNING.format(2, 3)}\n")
    docs, read = read_with_args(cli_args(), path)
    assert [d.section_titles for d in docs] == [["NAME", "SYNOPSIS"], ["NAME", "SYNOPSIS"], [None]]
    assert read["sectioned_by_headings"] == 2 and read["warnings"] == []
    assert capsys.readouterr().err == f"critic: {path}: 3 documents (text-jsonl); 2 split at Markdown headings " \
                                      "(--sections auto)\n"
    read_with_args(cli_args(), write_lines(tmp_path / "quiet.jsonl", {"id": "a", "text": "prose"}))
    assert capsys.readouterr().err == ""


def test_command_line_defaults_are_the_options_defaults():
    assert input_options(cli_args()) == InputOptions()
    assert input_options(cli_args("--sections", "markdown", "--lm-eval-text", "prompt+continuation")) == \
        InputOptions(sections="markdown", lm_eval_text="prompt+continuation")
    with pytest.raises(SystemExit):
        cli_args("--lm-eval-text", "prompt")


def test_options_are_checked():
    with pytest.raises(DocumentError, match="unknown input format 'csv'; choose auto, documents, lm-eval, text-jsonl"):
        InputOptions(format="csv")
    with pytest.raises(DocumentError, match="unknown sections mode 'separator:'"):
        InputOptions(sections="separator:")
    with pytest.raises(DocumentError) as err:
        InputOptions(sections="headings")
    assert str(err.value) == "unknown sections mode 'headings'; choose auto, none, markdown or separator:STRING"
    with pytest.raises(DocumentError, match="the separator between generations is empty"):
        InputOptions(separator="")
    with pytest.raises(DocumentError) as err:
        InputOptions(lm_eval_text="prompt")
    assert str(err.value) == "unknown lm-eval text 'prompt'; choose continuation or prompt+continuation"


# ------------------------------------------------------------------ lm-eval
def lm_sample(doc_id, resps, *, filtered=None, arguments=None, flt="none", target="t"):
    args = {"gen_args_0": {"arg_0": f"prompt {doc_id}", "arg_1": {"until": ["\n\n"], "do_sample": False}}}
    return {"doc_id": doc_id, "doc": {"question": f"q{doc_id}"}, "target": target,
            "arguments": args if arguments is None else arguments, "resps": resps,
            "filtered_resps": [resps[0][0]] if filtered is None else filtered, "filter": flt,
            "metrics": ["exact_match"], "doc_hash": "h", "prompt_hash": "p", "target_hash": "t", "exact_match": 0.0}


LM_NAME = "samples_story_gen_2024-05-01T12-34-56.123456.jsonl"


def test_lm_eval_generations_every_repeat_a_document(tmp_path):
    path = write_lines(tmp_path / LM_NAME, lm_sample(0, [[" Once upon a time."]], target="42"),
                       lm_sample(1, [["A story.", "Another.", "Third."]]),
                       lm_sample(2, [["Old log."]], arguments=[["prompt", {"until": []}]]),
                       lm_sample(3, [["  "]]), lm_sample(4, [["Kept.", " \n"]]))
    report = ReadReport()
    docs = read_documents(path, report=report)
    assert docs == [untitled("0", " Once upon a time."), untitled("1/0", "A story."), untitled("1/1", "Another."),
                    untitled("1/2", "Third."), untitled("2", "Old log."), untitled("4/0", "Kept.")]
    task = {"task": "story_gen", "target": "t"}
    assert [d.metadata for d in docs] == [{"task": "story_gen", "target": "42"}, {**task, "repeat": 0},
                                          {**task, "repeat": 1}, {**task, "repeat": 2}, task, {**task, "repeat": 0}]
    assert report.format == "lm-eval" and report.generated_ids == 0
    assert report.skipped == {"empty text": 2} and report.examples == {"empty text": f"{path}:4"}
    assert report.summary() == f"{path}: 6 documents (lm-eval); skipped 2: empty text (first at {path}:4)"


def test_lm_eval_prompt_plus_continuation(tmp_path):
    """The generation continues the request's context verbatim: the document is the two joined, nothing between."""
    story = {"gen_args_0": {"arg_0": "Write a story.\n\nStory:", "arg_1": {"until": ["\n\n"]}}}
    man = [["# NAME\nls - list directory contents\n# SYNOPSIS\n", {"until": []}]]  # the older list form
    path = write_lines(tmp_path / LM_NAME, lm_sample(0, [[" Once upon a time."]], arguments=story),
                       lm_sample(1, [["ls [OPTION]...", "ls -la", "  "]], arguments=man))
    report = ReadReport()
    docs = read_documents(path, InputOptions(lm_eval_text="prompt+continuation"), report=report)
    name = Section("NAME", "ls - list directory contents")
    assert docs == [untitled("0", "Write a story.\n\nStory: Once upon a time."),
                    Document("1/0", (name, Section("SYNOPSIS", "ls [OPTION]..."))),
                    Document("1/1", (name, Section("SYNOPSIS", "ls -la")))]
    assert [d.metadata.get("repeat") for d in docs] == [None, 0, 1]
    assert report.skipped == {"empty text": 1}  # a blank generation is skipped, prompt or not
    assert report.summary() == (f"{path}: 3 documents (lm-eval); skipped 1: empty text (first at {path}:2); "
                                "2 split at Markdown headings (--sections auto)")
    assert [d.text for d in read_documents(path)] == [" Once upon a time.", "ls [OPTION]...", "ls -la"]


@pytest.mark.parametrize("sample, shown", [
    ({"doc_id": "d9", "target": "x", "filtered_resps": ["only filtered"]}, "null"),
    (lm_sample(0, [["x"]], arguments={"gen_args_0": {"arg_0": 5, "arg_1": {"until": []}}}),
     '{"gen_args_0": {"arg_0": 5, "arg_1": {"until": []}}}'),
    (lm_sample(0, [["x"]], arguments=[]), "[]"),
])
def test_lm_eval_prompt_plus_continuation_needs_a_prompt(tmp_path, sample, shown):
    path = write_lines(tmp_path / LM_NAME, sample)
    assert raises(path, InputOptions(lm_eval_text="prompt+continuation")) == (
        f"{path}:1: --lm-eval-text prompt+continuation needs the prompt, the first request's context, and this "
        f"sample has none (arguments: {shown}); criticise the generations alone with --lm-eval-text continuation")


def test_lm_eval_reads_the_raw_generation_once_per_document(tmp_path):
    """gsm8k-style: two filters log each document twice; the text is the raw response, not the extracted answer."""
    path = write_lines(tmp_path / "samples_gsm8k_2024-05-01T12-34-56.jsonl",
                       lm_sample(0, [["So 6 * 7 = 42.\n#### 42"]], filtered=["42"], flt="strict-match"),
                       lm_sample(1, [["It is 5."]], filtered=["[invalid]"], flt="strict-match"),
                       lm_sample(0, [["So 6 * 7 = 42.\n#### 42"]], filtered=["42"], flt="flexible-extract"),
                       lm_sample(1, [["It is 5."]], filtered=["5"], flt="flexible-extract"))
    report = ReadReport()
    docs = read_documents(path, InputOptions(sections="none"), report=report)
    assert docs == [untitled("0", "So 6 * 7 = 42.\n#### 42"), untitled("1", "It is 5.")]
    assert docs[0].metadata == {"task": "gsm8k", "target": "t"}
    reason = "filter 'flexible-extract' (same generations as 'strict-match')"
    assert report.skipped == {reason: 2} and report.examples == {reason: f"{path}:3"}
    # gsm8k's answer line '#### 42' is a Markdown heading: --sections auto (the default) splits there
    assert read_documents(path)[0] == Document("0", (Section(None, "So 6 * 7 = 42."), Section("42", "")))


def test_lm_eval_filtered_only_and_unnamed_file(tmp_path):
    sample = {"doc_id": "d9", "target": "x", "filtered_resps": ["only filtered"]}
    docs = read_documents(write_lines(tmp_path / "mine.jsonl", sample))
    assert docs == [untitled("d9", "only filtered")] and docs[0].metadata == {"target": "x"}


@pytest.mark.parametrize("line2, message", [
    (lm_sample(1, [[["-1.25", "False"]]], filtered=[["-1.25", "False"]],
               arguments={"gen_args_0": {"arg_0": "ctx", "arg_1": " continuation"}}),
     ':2: not the output of a generation task (resps: [[["-1.25", "False"]]]); a loglikelihood task'),
    (lm_sample(1, [["-123.5"]], arguments={"gen_args_0": {"arg_0": "a whole text"}}),
     ':2: not the output of a generation task (resps: [["-123.5"]])'),
    (lm_sample(0, [["again"]]), ":2: duplicate document id '0' (first at "),
    ({"doc": {}, "resps": [["x"]]}, ":2: not an lm-eval sample (an object with 'doc_id'), got keys doc, resps"),
])
def test_lm_eval_bad_input(tmp_path, line2, message):
    path = write_lines(tmp_path / LM_NAME, lm_sample(0, [["fine"]]), line2)
    text = raises(path, InputOptions(format="lm-eval"))
    assert text.startswith(f"{path}:2: ") and message in text
    if "duplicate" in message:
        assert text.endswith(f"(first at {path}:1)")



def lm_eval_output_folder(root: Path) -> Path:
    """A folder laid out as lm-eval 0.4's ``--output_path`` writes it: a folder per model (its name sanitized), in it
    ``results_DATE.json`` and ``samples_TASK_DATE.jsonl`` per run; modelA ran story_gen twice (an earlier run) and
    gsm8k once; a hidden folder and files that are no samples are not read."""
    a, b, hidden = root / "org__modelA", root / "modelB", root / ".cache"
    for folder in (a, b, hidden):
        folder.mkdir(parents=True)
    old, new = "2024-05-01T12-34-56.123456", "2024-05-02T08-00-00.654321"
    for folder, date in ((a, old), (a, new), (b, new)):
        (folder / f"results_{date}.json").write_text("{}")
    write_lines(a / f"samples_story_gen_{old}.jsonl", lm_sample(0, [["An old run."]]))
    write_lines(a / f"samples_story_gen_{new}.jsonl", lm_sample(0, [["Once."]]), lm_sample(1, [["Twice."]]))
    write_lines(a / f"samples_gsm8k_{old}.jsonl", lm_sample(0, [["42"]]))
    write_lines(b / f"samples_story_gen_{new}.jsonl", lm_sample(0, [["B once."]]))
    write_lines(hidden / f"samples_story_gen_{new}.jsonl", lm_sample(0, [["hidden"]]))
    write_lines(a / "samples_notes.jsonl", lm_sample(0, [["no date"]]))
    return root


def test_an_lm_eval_output_folder_is_a_set_per_model_and_task(tmp_path):
    root = lm_eval_output_folder(tmp_path / "out")
    a = root / "org__modelA"
    output = inputs.lm_eval_output(root)
    assert output.sets == {"modelB/story_gen": root / "modelB" / "samples_story_gen_2024-05-02T08-00-00.654321.jsonl",
                           "org__modelA/gsm8k": a / "samples_gsm8k_2024-05-01T12-34-56.123456.jsonl",
                           "org__modelA/story_gen": a / "samples_story_gen_2024-05-02T08-00-00.654321.jsonl"}
    assert output.superseded == (a / "samples_story_gen_2024-05-01T12-34-56.123456.jsonl",)
    assert output.note() == (f"{root}: an lm-eval output folder: each model and task read from its latest run; 1 "
                             "earlier samples file(s) left out: "
                             "org__modelA/samples_story_gen_2024-05-01T12-34-56.123456.jsonl")
    # a model's folder (or an --output_path FILE.json's): its samples files directly, named by task
    assert inputs.lm_eval_output(a).sets == {"gsm8k": a / "samples_gsm8k_2024-05-01T12-34-56.123456.jsonl",
                                             "story_gen": a / "samples_story_gen_2024-05-02T08-00-00.654321.jsonl"}
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_text("x")
    for other in (tmp_path / "none", a / "samples_gsm8k_2024-05-01T12-34-56.123456.jsonl", tmp_path / "plain"):
        assert inputs.lm_eval_output(other) is None


def test_expanding_lm_eval_output_folders_into_named_sets(tmp_path):
    root = lm_eval_output_folder(tmp_path / "out")
    gens = write_lines(tmp_path / "gens.jsonl", {"text": "x"})
    said = []
    named = inputs.expand_lm_eval_outputs({"run": root, "mine": gens}, log=said.append)
    assert list(named) == ["run/modelB/story_gen", "run/org__modelA/gsm8k", "run/org__modelA/story_gen", "mine"]
    assert named["mine"] == gens and said == [inputs.lm_eval_output(root).note()]
    # a folder read in a format that is not lm-eval's is left as given (its reader says what it is)
    assert inputs.expand_lm_eval_outputs({"run": root}, InputOptions(format="text-dir")) == {"run": root}
    with pytest.raises(ValueError, match="the set name 'run/modelB/story_gen' is given twice: .*samples_story_gen_"):
        inputs.expand_lm_eval_outputs({"run": root, "run/modelB/story_gen": gens})


def test_reading_an_lm_eval_output_folder_as_one_input(tmp_path):
    """A folder of one samples file (of its latest run) is that file; of several, an error naming them (critic score
    --input reads one set)."""
    from critic.workflows import read_set

    root = lm_eval_output_folder(tmp_path / "out")
    said = []
    docs, read = read_set(root / "modelB", InputOptions(), "b", log=said.append)
    assert docs == [untitled("0", "B once.")]
    assert read["path"].endswith("samples_story_gen_2024-05-02T08-00-00.654321.jsonl")
    sets = "modelB/story_gen, org__modelA/gsm8k, org__modelA/story_gen"
    want = (f"{root}: an lm-eval output folder of 3 samples file(s) ({sets}): give one of them, e.g. "
            f"{root}/modelB/samples_story_gen_2024-05-02T08-00-00.654321.jsonl, or the folder as candidate sets "
            "(NAME=DIR: each samples file a set)")
    assert raises(root) == want
    for options in (InputOptions(), InputOptions(format="lm-eval")):
        with pytest.raises(DocumentError) as err:
            read_set(root, options, "all", log=said.append)
        assert str(err.value) == want
    assert said == []
    a = root / "org__modelA"  # one task's two runs: the latest read, the earlier one said
    (a / "samples_gsm8k_2024-05-01T12-34-56.123456.jsonl").unlink()
    docs, read = read_set(a, InputOptions(format="lm-eval"), "a", log=said.append)
    assert [d.text for d in docs] == ["Once.", "Twice."] and said == [inputs.lm_eval_output(a).note()]


def test_generations_in_memory_are_read_as_their_samples_file(tmp_path):
    """critic.lm_eval's documents: the k-th generation is document k, as the samples file the run logs gives it
    (sections, skipped empty generations and their ids alike)."""
    texts = [" Once upon a time.", "", "# NAME\nls\n# SYNOPSIS\nls -l", "  \n", "Last."]
    path = write_lines(tmp_path / LM_NAME, *(lm_sample(k, [[text]]) for k, text in enumerate(texts)))
    for options in (InputOptions(), InputOptions(sections="none")):
        from_file, in_memory = ReadReport(skipped_documents=[]), ReadReport(skipped_documents=[])
        want = read_documents(path, options, report=from_file)
        got = list(inputs.lm_eval_generations(texts, options, name="story_gen", report=in_memory))
        assert [(d.id, d.sections) for d in got] == [(d.id, d.sections) for d in want]
        assert [d.metadata for d in got] == [{"task": "story_gen"}] * 3
        assert in_memory.skipped_documents == from_file.skipped_documents == [("1", "empty text"), ("3", "empty text")]
        assert (in_memory.n_read, in_memory.skipped, in_memory.format) == (3, from_file.skipped, "lm-eval")
    with pytest.raises(DocumentError, match="^t sample 1: a generation must be a string, got a number$"):
        list(inputs.lm_eval_generations(["a", 5], name="t", report=ReadReport()))
    with pytest.raises(DocumentError, match="the prompt is not among them"):
        list(inputs.lm_eval_generations(["a"], InputOptions(lm_eval_text="prompt+continuation"), name="t",
                                        report=ReadReport()))

# ------------------------------------------------------------------ parquet
def test_parquet_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "BATCH_ROWS", 2)
    when = datetime.datetime(2024, 5, 1)
    table = pa.table({"id": ["a", "b", None, "d", "e"], "text": ["one", "", "three", "# T\nfour", "five"],
                      "n": [1, 2, 3, 4, 5], "when": [when] * 5, "x": [0.5, float("nan"), 1.0, 2.0, 3.0]})
    path = tmp_path / "gens.parquet"
    pq.write_table(table, path, row_group_size=2)
    report = ReadReport()
    docs = read_documents(path, InputOptions(sections="markdown"), report=report)
    assert docs == [untitled("a", "one"), untitled("gens:3", "three"), Document("d", (Section("T", "four"),)),
                    untitled("e", "five")]
    assert [d.metadata for d in docs] == [{"n": 1, "x": 0.5}, {"n": 3, "x": 1.0}, {"n": 4, "x": 2.0},
                                          {"n": 5, "x": 3.0}]
    assert report.summary() == (f"{path}: 4 documents (parquet); skipped 1: empty text (first at {path} row 2); "
                                "1 ids made as gens:ROW; not JSON, left out of metadata: when ×5, x ×1")


@pytest.mark.parametrize("columns, message", [
    ({"output": ["x"]}, " row 1: no 'text' field (keys: output); name the field"),
    ({"text": [3]}, " row 1: field 'text' is a number, not a string"),
    ({"text": ["x", "y"], "id": [1, 1]}, " row 2: duplicate document id '1' (first at "),
])
def test_parquet_bad_rows(tmp_path, columns, message):
    path = tmp_path / "gens.parquet"
    pq.write_table(pa.table(columns), path)
    text = raises(path, InputOptions(format="parquet"))
    assert text.startswith(str(path)) and message in text


def test_parquet_corrupt_empty_and_no_pyarrow(tmp_path, monkeypatch):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"text": ["x" * 100] * 50}), good)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(good.read_bytes()[:-40])
    assert raises(corrupt).startswith(f"{corrupt}: not a readable Parquet file (")
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    assert raises(empty) == f"{empty}: holds no documents"
    for module in ("pyarrow", "pyarrow.parquet", "pyarrow.ipc"):
        monkeypatch.setitem(sys.modules, module, None)
    assert raises(good) == "reading Parquet and datasets folders needs pyarrow: pip install pyarrow (critic[arrow])"


# ------------------------------------------------------------------ datasets (save_to_disk)
def save_to_disk(folder, *tables):
    """The layout datasets' Dataset.save_to_disk writes: Arrow IPC streams, state.json, dataset_info.json."""
    folder.mkdir()
    files = [f"data-{k:05d}-of-{len(tables):05d}.arrow" for k in range(len(tables))]
    for name, table in zip(files, tables):
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1)
    (folder / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": name} for name in files], "_fingerprint": "f00d", "_format_columns": None,
        "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False, "_split": None}))
    (folder / "dataset_info.json").write_text(json.dumps({
        "citation": "", "description": "", "features": {"text": {"dtype": "string", "_type": "Value"}},
        "homepage": "", "license": ""}))
    return folder


def test_datasets_folder(tmp_path):
    folder = save_to_disk(tmp_path / "gens", pa.table({"text": ["one", "two"], "label": [0, 1]}),
                          pa.table({"text": [" ", "four"], "label": [2, 3]}))
    report = ReadReport()
    docs = read_documents(folder, report=report)
    assert docs == [untitled("gens:1", "one"), untitled("gens:2", "two"), untitled("gens:4", "four")]
    assert [d.metadata for d in docs] == [{"label": 0}, {"label": 1}, {"label": 3}]
    assert report.summary() == (f"{folder}: 3 documents (datasets); skipped 1: empty text (first at {folder} row 3); "
                                "3 ids made as gens:ROW")


def test_datasets_reads_files_in_state_json_order(tmp_path):
    folder = save_to_disk(tmp_path / "gens", pa.table({"text": ["a"]}), pa.table({"text": ["b"]}))
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"].reverse()
    (folder / "state.json").write_text(json.dumps(state))
    assert [d.text for d in read_documents(folder)] == ["b", "a"]


def test_datasets_bad_folders(tmp_path):
    folder = save_to_disk(tmp_path / "missing", pa.table({"text": ["a"]}), pa.table({"text": ["b"]}))
    (folder / "data-00001-of-00002.arrow").unlink()
    assert raises(folder) == f"{folder / 'data-00001-of-00002.arrow'}: no such file (state.json lists it)"

    folder = save_to_disk(tmp_path / "corrupt", pa.table({"text": ["a" * 200] * 20}))
    arrow = folder / "data-00000-of-00001.arrow"
    arrow.write_bytes(arrow.read_bytes()[:300])
    assert raises(folder).startswith(f"{arrow}: not a readable Arrow stream (")

    folder = save_to_disk(tmp_path / "nostate", pa.table({"text": ["a"]}))
    (folder / "state.json").write_text('{"_data_files": "data.arrow"}')
    assert raises(folder) == f"{folder / 'state.json'}: '_data_files' is not a list of {{\"filename\": ...}}"

    (folder / "state.json").write_text('{"_data_files": [')
    assert raises(folder) == f"{folder / 'state.json'}:1: invalid JSON (Expecting value)"

    folder = tmp_path / "dd"
    save_to_disk(folder, pa.table({"text": ["a"]})).rename(tmp_path / "train")
    folder.mkdir()
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert detect_format(folder) == "datasets"
    assert raises(folder) == (f"{folder}: a DatasetDict with splits train, test; point at one of its sub-folders, "
                              f"e.g. {folder / 'train'}")


# ------------------------------------------------------------------ text-dir, lines, text
def test_text_dir(tmp_path):
    folder = tmp_path / "stories"
    folder.mkdir()
    (folder / "b.txt").write_text("Bee story.\n")
    (folder / "a.txt").write_text("# Title\nAy story.")
    (folder / "c.txt").write_text("\n")
    (folder / "notes.md").write_text("not read")
    report = ReadReport()
    docs = read_documents(folder, InputOptions(sections="markdown"), report=report)
    assert docs == [Document("a", (Section("Title", "Ay story."),)), untitled("b", "Bee story.")]
    assert report.summary() == (f"{folder}: 2 documents (text-dir); skipped 2: empty text ×1 (first at "
                                f"{folder / 'c.txt'}), not a .txt file ×1 (first at {folder / 'notes.md'})")
    (folder / "d.txt").write_bytes(b"ok\nbad \xff byte")
    assert raises(folder) == f"{folder / 'd.txt'}:2: not valid UTF-8 (invalid start byte at byte 7)"


def test_empty_folders(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert raises(folder) == f"{folder}: empty folder; give --format"
    assert raises(folder, InputOptions(format="text-dir")) == f"{folder}: holds no documents"
    (folder / "x.csv").write_text("a,b\n")
    assert raises(folder) == (f"{folder}: a folder with none of dataset_info.json, state.json, dataset_dict.json, "
                              ".txt files; give --format")


def test_lines(tmp_path):
    path = tmp_path / "gens.txt"
    path.write_text("first generation\n\n  second one  \n   \nthird\n")
    report = ReadReport()
    docs = read_documents(path, InputOptions(format="lines"), report=report)
    assert docs == [untitled("gens:1", "first generation"), untitled("gens:3", "second one"),
                    untitled("gens:5", "third")]
    # a blank line is an empty generation: skipped and counted, as every format does
    assert report.skipped == {"empty text": 2} and report.examples == {"empty text": f"{path}:2"}
    assert report.summary() == (f"{path}: 3 documents (lines); skipped 2: empty text (first at {path}:2); "
                                "3 ids made as gens:LINE")
    path.write_bytes(b"fine\nnot \xc3( fine\n")
    assert raises(path, InputOptions(format="lines")) == f"{path}:2: not valid UTF-8 (invalid continuation byte at byte 4)"
    path.write_bytes(b"\n \n")
    assert raises(path, InputOptions(format="lines")) == (f"{path}: holds no documents; skipped 2: empty text "
                                                          f"(first at {path}:1)")


def test_text_with_separator(tmp_path):
    path = tmp_path / "gens.txt"
    path.write_text("<|sep|>\nOne\ngeneration.\n<|sep|>\n\n# H\nTwo.\n<|sep|>\n  \n<|sep|>Three.\n<|sep|>\n")
    report = ReadReport()
    docs = read_documents(path, InputOptions(separator="<|sep|>", sections="markdown"), report=report)
    assert docs == [untitled("gens:2", "One\ngeneration."), Document("gens:6", (Section("H", "Two."),)),
                    untitled("gens:10", "Three.")]
    assert report.skipped == {"empty text": 1} and report.examples == {"empty text": f"{path}:8"}
    assert read_documents(path, InputOptions(separator="no such separator"))[0].id == "gens:1"


def test_generations_sharing_a_line_get_ids_of_their_own(tmp_path):
    """The issue's case: ``a<s>b`` made two ids gens:1 and stopped as a duplicate id; the second generation
    starting on a line is now gens:1.2 (a generation on a line of its own keeps NAME:LINE)."""
    path = tmp_path / "gens.txt"
    path.write_text("a<s>b<s>c\nd<s>\ne\n")
    report = ReadReport()
    docs = read_documents(path, InputOptions(separator="<s>"), report=report)
    assert [d.id for d in docs] == ["gens:1", "gens:1.2", "gens:1.3", "gens:3"]
    assert [d.sections[0].text for d in docs] == ["a", "b", "c\nd", "e"]
    assert report.summary() == f"{path}: 4 documents (text); 4 ids made as gens:LINE[.K]"


def test_text_needs_a_separator(tmp_path):
    path = tmp_path / "gens.txt"
    path.write_text("a\nb\n")
    assert raises(path) == (f"{path}: a .txt file: give --format lines (one generation per line) or "
                            "--separator STRING (generations separated by STRING)")
    assert raises(path, InputOptions(format="text")) == (
        f"{path}: format 'text' needs the separator between generations (--separator STRING); "
        "for one generation per line use --format lines")
    path.write_bytes(b"a\n---\n\xff")
    assert raises(path, InputOptions(separator="---")) == f"{path}:3: not valid UTF-8 (invalid start byte at byte 6)"


# ------------------------------------------------------------------ auto-detection
def test_detect_format(tmp_path):
    cases = {
        "d.jsonl": {"id": "a", "sections": []},
        "lm.jsonl": {"doc_id": 0, "filtered_resps": ["x"]},
        "t.json": {"text": "x"},
    }
    for name, obj in cases.items():
        write_lines(tmp_path / name, "", obj)
    write_lines(tmp_path / "o.jsonl", {"output": "x"})
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "p.parquet")
    save_to_disk(tmp_path / "ds", pa.table({"text": ["x"]}))
    (tmp_path / "txts").mkdir()
    (tmp_path / "txts" / "a.TXT").write_text("x")
    (tmp_path / "g.txt").write_text("x")
    assert {n: detect_format(tmp_path / n) for n in ("d.jsonl", "lm.jsonl", "t.json", "p.parquet", "ds", "txts")} == {
        "d.jsonl": "documents", "lm.jsonl": "lm-eval", "t.json": "text-jsonl", "p.parquet": "parquet",
        "ds": "datasets", "txts": "text-dir"}
    assert detect_format(tmp_path / "o.jsonl", InputOptions(text_field="output")) == "text-jsonl"
    assert detect_format(tmp_path / "g.txt", InputOptions(separator="\n\n")) == "text"
    assert set(FORMAT_NAMES) == {"auto", "documents", "text-jsonl", "lm-eval", "parquet", "datasets", "text-dir", "lines",
                                 "text"}


@pytest.mark.parametrize("name, content, message", [
    ("o.jsonl", b'\n{"output": "x", "id": 1}\n',
     ":2: cannot tell the format: no 'sections' (documents), no 'doc_id' with 'resps' (lm-eval), no 'text' "
     "(text-jsonl); keys: output, id; name the text field with --text-field or give --format"),
    ("l.jsonl", b'["x"]\n', ":1: expected a JSON object per line, got a list"),
    ("j.jsonl", b'{"text": \n', ":1: invalid JSON"),
    ("e.jsonl", b"\n\n", ": holds no documents (empty, or blank lines only)"),
    ("g.csv", b"text\nx\n", ": cannot tell the format from the suffix '.csv' (auto knows .jsonl, .json, .parquet, "
                            ".txt and folders); give --format"),
])
def test_detect_format_says_what_it_looked_at(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DocumentError) as err:
        detect_format(path)
    assert str(err.value).startswith(f"{path}{message}")


def test_missing_paths(tmp_path):
    assert raises(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: no such file or folder"
    assert raises(tmp_path / "nope.parquet", InputOptions(format="parquet")) == f"{tmp_path / 'nope.parquet'}: no such file"
    assert raises(tmp_path / "nope", InputOptions(format="datasets")).startswith(f"{tmp_path / 'nope'}: no such folder")


def test_iter_documents_is_lazy_and_fills_the_report(tmp_path):
    path = write_lines(tmp_path / "gens.jsonl", {"text": "a"}, {"text": "b"}, "{broken")
    report = ReadReport()
    docs = iter_documents(path, report=report)
    assert next(docs) == untitled("gens:1", "a") and report.n_read == 1
    assert next(docs) == untitled("gens:2", "b") and report.n_read == 2
    with pytest.raises(DocumentError, match=":3: invalid JSON"):
        next(docs)


# ------------------------------------------------------------------ reader faults: BOM, compression, depth, empty, pipes
BOM = b"\xef\xbb\xbf"


def bom_inputs(tmp_path):
    """One file (or folder) per text format, each starting with a UTF-8 byte order mark: (path, options)."""
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(BOM + json.dumps({"id": "a", "sections": [{"title": "T", "text": "first"}]}).encode() + b"\n")
    text_jsonl = tmp_path / "gens.jsonl"
    text_jsonl.write_bytes(BOM + b'{"text": "first"}\n')
    lm_eval = tmp_path / LM_NAME
    lm_eval.write_bytes(BOM + json.dumps(lm_sample(0, [["first"]])).encode() + b"\n")
    lines = tmp_path / "lines.txt"
    lines.write_bytes(BOM + b"first\n")
    text = tmp_path / "text.txt"
    text.write_bytes(BOM + b"first\n<s>\n")
    folder = tmp_path / "txts"
    folder.mkdir()
    (folder / "one.txt").write_bytes(BOM + b"first")
    datasets = save_to_disk(tmp_path / "ds", pa.table({"text": ["first"]}))
    (datasets / "state.json").write_bytes(BOM + (datasets / "state.json").read_bytes())
    return {"documents": (docs, InputOptions()), "text-jsonl": (text_jsonl, InputOptions()),
            "lm-eval": (lm_eval, InputOptions()), "lines": (lines, InputOptions(format="lines")),
            "text": (text, InputOptions(separator="<s>")), "text-dir": (folder, InputOptions()),
            "datasets": (datasets, InputOptions())}


def test_a_byte_order_mark_is_dropped_in_every_text_format(tmp_path):
    """A UTF-8 BOM (Windows editors, some pandas set-ups) was an 'invalid JSON' error, or kept in the text."""
    for fmt, (path, options) in bom_inputs(tmp_path).items():
        report = ReadReport()
        docs = read_documents(path, options, report=report)
        assert report.format == fmt
        assert [d.text for d in docs] == ["first"], fmt
        assert "\ufeff" not in docs[0].id


def gz(path, data: bytes):
    import gzip

    path.write_bytes(gzip.compress(data))
    return path


def test_gzip_is_read_decompressed_in_every_text_format(tmp_path):
    """.gz was read as the bytes of the text: 'line is not valid UTF-8', even with --format given."""
    gens = gz(tmp_path / "gens.jsonl.gz", b'{"text": "one"}\n{"text": "two"}\n')
    report = ReadReport()
    assert read_documents(gens, report=report) == [untitled("gens:1", "one"), untitled("gens:2", "two")]
    assert report.summary() == f"{gens}: 2 documents (text-jsonl); 2 ids made as gens:LINE"
    assert read_documents(gens, InputOptions(format="text-jsonl")) == read_documents(gens)
    docs = [Document("a", (Section("T", "x"),))]
    assert read_documents(gz(tmp_path / "d.jsonl.gz", json.dumps(docs[0].to_dict()).encode() + b"\n")) == docs
    lm = gz(tmp_path / (LM_NAME + ".gz"), BOM + json.dumps(lm_sample(0, [["story"]])).encode() + b"\n")
    report = ReadReport()
    [doc] = read_documents(lm, report=report)
    assert report.format == "lm-eval" and doc.metadata == {"task": "story_gen", "target": "t"}
    lines = gz(tmp_path / "lines.txt.gz", b"one\n\ntwo\n")
    report = ReadReport()
    assert read_documents(lines, InputOptions(format="lines"), report=report) == [
        untitled("lines:1", "one"), untitled("lines:3", "two")]
    assert report.skipped == {"empty text": 1}
    text = gz(tmp_path / "text.txt.gz", b"one\n<s>\ntwo\n")
    assert read_documents(text, InputOptions(separator="<s>")) == [untitled("text:1", "one"), untitled("text:3", "two")]
    assert raises(gz(tmp_path / "t.parquet.gz", b"PAR1")) == (
        f"{tmp_path / 't.parquet.gz'}: a gzip-compressed Parquet file: decompress it first (Parquet compresses its "
        "columns itself)")


def test_damaged_or_false_gzip_names_the_file_and_line(tmp_path):
    import gzip

    whole = gzip.compress(b"".join(b'{"text": "%d"}\n' % i for i in range(20000)), mtime=0)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[:len(whole) // 2])
    for options in (InputOptions(), InputOptions(format="text-jsonl")):
        message = raises(cut, options)
        assert message.startswith(f"{cut}:") and ": gzip-compressed data damaged or cut short (" in message
        assert int(message.split(":")[1]) > 1000  # the line it stopped at, after the lines it read
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(b'{"text": "x"}\n')
    assert raises(plain) == f"{plain}: cannot be read as gzip-compressed text (Not a gzipped file (b'{{\"'))"


def test_other_compressions_are_refused_by_name(tmp_path):
    for suffix, kind in ((".zst", "zstd"), (".bz2", "bzip2"), (".xz", "xz")):
        path = tmp_path / f"gens.jsonl{suffix}"
        path.write_bytes(b"\x28\xb5\x2f\xfd garbled")
        assert f"{path}: {kind}-compressed input is not read here; decompress it first (or gzip it)" in raises(
            path, InputOptions(format="text-jsonl"))

def test_json_nested_too_deep_names_the_file_and_line(tmp_path):
    """It was RecursionError's 'maximum recursion depth exceeded', with no file or line."""
    deep = "[" * 100_000 + "]" * 100_000
    path = write_lines(tmp_path / "gens.jsonl", {"text": "a"}, '{"text": "b", "m": ' + deep + "}")
    expected = f"{path}:2: JSON nested deeper than Python's JSON parser allows"
    assert raises(path) == expected
    assert raises(path, InputOptions(format="text-jsonl")) == expected
    with pytest.raises(DocumentError) as err:
        detect_format(write_lines(tmp_path / "first.jsonl", deep))
    assert str(err.value) == f"{tmp_path / 'first.jsonl'}:1: JSON nested deeper than Python's JSON parser allows"
    folder = save_to_disk(tmp_path / "ds", pa.table({"text": ["a"]}))
    (folder / "state.json").write_text(deep)
    assert raises(folder) == f"{folder / 'state.json'}: JSON nested deeper than Python's JSON parser allows"


def test_iter_documents_refuses_an_input_without_documents_as_read_documents_does(tmp_path):
    """An empty Parquet file or a file of blank lines streamed (critic score) ended with nothing and no word."""
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    for path, options, expected in (
            (empty, InputOptions(), f"{empty}: holds no documents"),
            (blank, InputOptions(format="lines"),
             f"{blank}: holds no documents; skipped 3: empty text (first at {blank}:1)")):
        report = ReadReport()
        with pytest.raises(DocumentError) as err:
            list(iter_documents(path, options, report=report))
        assert str(err.value) == expected and report.n_read == 0
        assert raises(path, options) == expected


def fifo(tmp_path, name, data: bytes | None):
    """A named pipe at ``tmp_path / name`` and, when ``data`` is given, a thread writing it (returned)."""
    import os
    import threading

    path = tmp_path / name
    os.mkfifo(path)
    writer = None
    if data is not None:
        def write():
            with open(path, "wb") as fh:
                fh.write(data)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
    return path, writer


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no named pipes on this system")
def test_a_named_pipe_is_read_with_a_format_given(tmp_path):
    """A pipe was 'no such file'."""
    path, writer = fifo(tmp_path, "gens.jsonl", b'{"text": "one"}\n\n{"text": "two"}\n')
    assert read_documents(path, InputOptions(format="text-jsonl")) == [untitled("gens:1", "one"),
                                                                       untitled("gens:3", "two")]
    writer.join(10)
    assert not writer.is_alive()
    path, writer = fifo(tmp_path, "lines.txt.gz", gz(tmp_path / "x.gz", b"one\n\ntwo\n").read_bytes())
    report = ReadReport()
    assert read_documents(path, InputOptions(format="lines"), report=report) == [untitled("lines:1", "one"),
                                                                                 untitled("lines:3", "two")]
    assert report.skipped == {"empty text": 1}
    writer.join(10)
    path, writer = fifo(tmp_path, "text.txt", b"one\n<s>\ntwo\n")  # auto: told by the suffix alone
    assert read_documents(path, InputOptions(separator="<s>")) == [untitled("text:1", "one"), untitled("text:3", "two")]
    writer.join(10)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no named pipes on this system")
def test_a_named_pipe_that_auto_would_read_twice_is_refused(tmp_path):
    path, _ = fifo(tmp_path, "gens.jsonl", None)  # never opened: no writer needed
    assert raises(path) == (f"{path}: a pipe can be read only with --format FORMAT given (auto would read its first "
                            "line to tell the format, and a pipe can be read only once)")
    pipe, _ = fifo(tmp_path, "gens.parquet", None)
    assert raises(pipe) == (f"{pipe}: a pipe cannot be read as Parquet (it is read from its end, so it must be a "
                            "file): write it to a file first")
    assert raises(tmp_path, InputOptions(format="lines")) == f"{tmp_path}: a folder, not a file"


def test_a_plugin_adds_an_input_format_that_auto_knows(tmp_path, monkeypatch, capsys, fixture_manpage_root):
    """Formats are registered like critics: a plugin's format is read by every command, by name or by ``auto``
    (here by its suffix), in the order registered after the built-in ones."""
    from critic import registry
    from critic.cli import main

    plugin = PLUGINS / "tsv_format.py"
    monkeypatch.setenv("CRITIC_PLUGINS", "")
    monkeypatch.setattr(registry, "_FORMATS", registry._FORMATS.copy())
    monkeypatch.setattr(registry, "_PLUGINS", dict(registry._PLUGINS))
    data = tmp_path / "data"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install", "--out",
                 str(data)]) == 0
    assert main(["fit", "sections", "--train", str(data / "train.jsonl"), "--out", str(tmp_path / "m"),
                 "--params", '{"delta": 0.1}']) == 0
    gens = tmp_path / "gens.tsv"
    gens.write_text("a\t# NAME\\nx - y\\n# DESCRIPTION\\nz\nb\t\n")
    capsys.readouterr()
    assert main(["--plugin", str(plugin), "score", str(tmp_path / "m"), "--input", str(gens)]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"] and rows[0]["latent_steps"] == 3 and rows[1]["read"] is False
    assert f"{gens}: 1 documents (tsv); skipped 1: empty text (first at {gens}:2)" in captured.err
    assert list(registry.list_formats())[-1] == "tsv" and detect_format(gens) == "tsv"
    assert main(["--plugin", str(plugin), "score", str(tmp_path / "m"), "--input", str(gens), "--format", "tvs"]) == 2
    assert "unknown input format 'tvs'; choose auto, documents" in capsys.readouterr().err


def test_a_built_in_format_is_told_without_importing_a_plugin(tmp_path, monkeypatch):
    """``auto`` asks the plugins (which import the critics: torch, gensim, Pyro) only for a path no format
    registered so far knows."""
    from critic import registry

    def no_plugins():
        raise AssertionError("plugins imported")

    write_lines(tmp_path / "t.jsonl", {"text": "x"})
    monkeypatch.setattr(registry, "load_plugins", no_plugins)
    assert detect_format(tmp_path / "t.jsonl") == "text-jsonl"
    (tmp_path / "g.csv").write_text("x\n")
    with pytest.raises(AssertionError, match="plugins imported"):  # unknown to the built-ins: the plugins are asked
        detect_format(tmp_path / "g.csv")


def test_a_line_input_read_span_by_span_gives_the_whole_read_s_documents_and_report(tmp_path):
    """Each span of lines is read on its own (by a Dask worker, say); merged, the parts are the read of the whole
    file: the same documents, made-up ids, skips with their first place, counts and the --sections none warning."""
    from critic.document import UniqueIds
    from critic.inputs import line_input
    from critic.spans import plan_spans

    rows = [{"text": "# a\nx\n# b\ny" if i % 3 else "plain", "id": f"g{i}", "meta": i} for i in range(11)]
    rows[4], rows[7] = {"text": " "}, {"text": "# c\nz"}  # an empty generation, a made-up id
    text_jsonl = tmp_path / "gens.jsonl"
    text_jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = tmp_path / "gens.txt"
    lines.write_text("one\n\ntwo\nthree\n\nfour")
    documents = write_jsonl([Document(f"d{i}", (Section("t", "x"),)) for i in range(7)], tmp_path / "docs.jsonl")
    counts = []
    for path, options in ((text_jsonl, InputOptions(sections="none")), (lines, InputOptions(format="lines")),
                          (documents, InputOptions())):
        whole = ReadReport()
        want = list(iter_documents(path, options, report=whole))
        source = line_input(path, options)
        assert source.options.format == whole.format and source.name == whole.name
        for per_span in (1, 2, 5):
            merged, ids, got = source.report(), UniqueIds(), []
            for span in plan_spans(path, per_span):
                part = source.read(span)
                got += part.documents
                merged.merge(part.report)
                ids.claim_all(part.ids)
            merged.finish()
            assert got == want and [d.metadata for d in got] == [d.metadata for d in want]
            assert merged.to_dict() == whole.to_dict() and list(ids.where) == [d.id for d in want]
        counts.append((whole.n_read, whole.skipped.total(), whole.generated_ids, len(whole.warnings)))
    assert counts == [(10, 1, 1, 1), (4, 2, 4, 0), (7, 0, 0, 0)]


def test_only_a_plain_file_of_a_line_format_is_a_line_input(tmp_path):
    import gzip

    from critic.inputs import line_input

    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"text": "a"}\n')
    (tmp_path / "gens.jsonl.gz").write_bytes(gzip.compress(gens.read_bytes()))
    lm = tmp_path / "samples_t_2024-01-01T00-00-00.jsonl"
    lm.write_text(json.dumps({"doc_id": 0, "resps": [["a"]], "filtered_resps": ["a"]}) + "\n")
    assert line_input(gens).options.format == "text-jsonl"
    assert line_input(tmp_path / "gens.jsonl.gz") is None  # read by one reader, as it decompresses
    assert line_input(lm) is None  # an lm-eval line depends on the first one's filter
    assert line_input(tmp_path) is None
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert line_input(fifo, InputOptions(format="text-jsonl")) is None


def test_ids_are_unique_across_spans_read_apart(tmp_path):
    from critic.document import UniqueIds
    from critic.inputs import line_input
    from critic.spans import plan_spans

    path = tmp_path / "gens.jsonl"
    path.write_text("".join(json.dumps({"id": i % 3, "text": "x"}) + "\n" for i in range(4)))
    source, ids = line_input(path), UniqueIds()
    first, second = plan_spans(path, 3)
    ids.claim_all(source.read(first).ids)
    with pytest.raises(DocumentError, match=rf"^{path}:4: duplicate document id '0' \(first at {path}:1\)$"):
        ids.claim_all(source.read(second).ids)
