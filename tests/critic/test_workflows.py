"""critic.workflows' reading of the sets: a candidate that is an lm-eval ``--output_path`` folder is a set per
samples file, named by model and task, through ``critic report --candidate NAME=DIR`` (issue 41)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from critic.cli import main
from critic.document import Document, Section, write_jsonl

STAMP = "2024-05-01T12-34-56.123456"


def sample(doc_id: int, text: str) -> dict:
    """One line of an lm-eval 0.4 samples file of a generate_until task."""
    return {"doc_id": doc_id, "doc": {"prompt": "p"}, "target": "",
            "arguments": {"gen_args_0": {"arg_0": "p", "arg_1": {"until": [], "max_gen_toks": 64}}},
            "resps": [[text]], "filtered_resps": [text], "filter": "none", "metrics": ["latent_ppl"]}


def man_page(titles) -> str:
    return "\n".join(f"# {title}\n{title.lower()} text" for title in titles)


def test_report_reads_an_lm_eval_output_folder_as_a_set_per_model_and_task(tmp_path, capsys):
    from critics.sections import SectionTransitionCritic

    def doc(name, titles):
        return Document(name, tuple(Section(t, f"{t} text") for t in titles))

    train = [doc(f"t{i}", ["NAME", "SYNOPSIS", "DESCRIPTION", *(["OPTIONS"] * (i % 2)), "SEE ALSO"]) for i in range(6)]
    SectionTransitionCritic(delta=0.1).fit(train).save(tmp_path / "sections")
    write_jsonl(train, tmp_path / "ref.jsonl")
    out = tmp_path / "lm-eval-out"
    generations = {
        ("org__model-a", "man_pages"): [man_page(["NAME", "SYNOPSIS", "OPTIONS" if k % 2 else "SEE ALSO"])
                                        for k in range(4)],
        ("org__model-a", "short"): [man_page(["NAME", "DESCRIPTION"]), "", man_page(["NAME"])],
        ("model-b", "man_pages"): [man_page(["SYNOPSIS", "NAME"]), man_page(["NAME", "SYNOPSIS", "DESCRIPTION"])],
    }
    for (model, task), texts in generations.items():
        (out / model).mkdir(parents=True, exist_ok=True)
        (out / model / f"results_{STAMP}.json").write_text("{}")
        (out / model / f"samples_{task}_{STAMP}.jsonl").write_text(
            "".join(json.dumps(sample(k, text)) + "\n" for k, text in enumerate(texts)))
    (out / "model-b" / "samples_man_pages_2024-04-01T00-00-00.jsonl").write_text(  # an earlier run: left out
        json.dumps(sample(0, man_page(["NAME"]))) + "\n")

    assert main(["report", "--critic", f"s={tmp_path / 'sections'}", "--reference", str(tmp_path / "ref.jsonl"),
                 "--candidate", f"run={out}", "--n-bootstrap", "20", "--n-permutations", "20",
                 "--out", str(tmp_path / "report")]) == 0
    assert "left out: model-b/samples_man_pages_2024-04-01T00-00-00.jsonl" in capsys.readouterr().err
    saved = json.loads((tmp_path / "report" / "results.json").read_text())
    names = ["run/model-b/man_pages", "run/org__model-a/man_pages", "run/org__model-a/short"]
    sets = saved["critics"]["s"]["candidates"]
    assert list(sets) == names and [sets[n]["n"] for n in names] == [2, 4, 2]
    assert [Path(saved["reads"][n]["path"]).name for n in names] == [
        f"samples_man_pages_{STAMP}.jsonl", f"samples_man_pages_{STAMP}.jsonl", f"samples_short_{STAMP}.jsonl"]
    assert saved["reads"]["run/org__model-a/short"]["skipped"] == {"empty text": 1}
    for name in names:  # each set's Latent PPL is that of `critic score` on its samples file
        model, task = name.split("/")[1:]
        scores = tmp_path / f"{model}-{task}.jsonl"
        assert main(["score", str(tmp_path / "sections"), "--input",
                     str(out / model / f"samples_{task}_{STAMP}.jsonl"), "--out", str(scores)]) == 0
        rows = [row for row in map(json.loads, scores.read_text().splitlines()) if "latent_nll" in row]
        want = math.exp(sum(r["latent_nll"] for r in rows) / sum(r["latent_steps"] for r in rows))
        assert math.isclose(sets[name]["latent_ppl"], want, rel_tol=1e-12)
    assert len({sets[n]["latent_ppl"] for n in names}) == 3  # three different sets, not one read three times
