"""critic.lm_eval against a real lm-evaluation-harness run (issue 41): a tiny random GPT-2 built here (no download)
generates from the prompts of a local JSON-lines file through lm-eval's ``hf`` model, the task written by
:func:`critic.lm_eval.write_task` reports Latent PPL and Latent NLL in lm-eval's own results table and JSON, equal
to ``critic score`` on the samples the run logged, and ``critic report --candidate NAME=DIR`` reads its output
folder."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")  # critic[lm-eval]: installed by .ci/install.sh --test

from critic.cli import main  # noqa: E402
from critic.document import read_jsonl  # noqa: E402
from critic.lm_eval import METRICS, aggregations, process_results, write_task  # noqa: E402

TASK = "critic_toy"


def tiny_gpt2(folder: Path, words: list[str]) -> Path:
    """A GPT-2 of one layer with random weights (seeded) over a word-level tokenizer of ``words``, saved as an
    ``hf`` model folder: lm-eval loads it as it would any checkpoint."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()  # words joined by spaces
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>",
                            pad_token="<eos>").save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(vocab), n_positions=128, n_embd=32, n_layer=1, n_head=2, bos_token_id=1,
                        eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory, fixture_manpage_root):
    """An LDA critic fitted on the man-page fixture, the toy model over the fixture's 300 commonest words, a prompt
    per training page (its first words; 22), the task written by write_task, and one ``lm_eval`` run of it with
    ``--log_samples``: ``(folder, critic, output folder, lm_eval's stdout, prompts)``."""
    tmp = tmp_path_factory.mktemp("lm-eval")
    corpus = tmp / "corpus"
    assert main(["data", "build", "manpages", "--root", str(fixture_manpage_root), "--no-install",
                 "--out", str(corpus)]) == 0
    critic = tmp / "lda"
    assert main(["fit", "lda", "--train", str(corpus / "train.jsonl"), "--out", str(critic),
                 "--params", '{"passes": 2, "num_topics": 3}']) == 0
    pages = read_jsonl(corpus / "train.jsonl")
    words = [re.findall(r"[a-z]+", doc.text.lower()) for doc in pages]
    vocabulary = [w for w, _ in Counter(w for page in words for w in page).most_common(300)]
    model = tiny_gpt2(tmp / "model", vocabulary)
    known = set(vocabulary)
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join([w for w in page if w in known][:4])}) + "\n"
                               for page in words))
    write_task(tmp / "tasks", data=prompts, critic=critic, task=TASK,
               generation_kwargs={"until": ["<eos>"], "do_sample": True, "temperature": 1.0, "max_gen_toks": 48})
    out = tmp / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp / "hf"),
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args",
                           f"pretrained={model},dtype=float32", "--device", "cpu", "--batch_size", "8",
                           "--tasks", TASK, "--include_path", str(tmp / "tasks"), "--output_path", str(out),
                           "--log_samples"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp, critic, out, done.stdout, len(pages)


def logged(out: Path) -> tuple[dict, Path]:
    """The run's results JSON and its samples file (one model folder, one of each)."""
    (model,) = [p for p in out.iterdir() if p.is_dir()]
    (results,) = model.glob("results_*.json")
    (samples,) = model.glob(f"samples_{TASK}_*.jsonl")
    return json.loads(results.read_text()), samples


def critic_score(critic: Path, samples: Path, out: Path) -> list[dict]:
    assert main(["score", str(critic), "--input", str(samples), "--out", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_latent_ppl_in_lm_eval_s_results_equals_critic_score_on_its_samples(run):
    tmp, critic, out, stdout, n = run
    results, samples = logged(out)
    rows = critic_score(critic, samples, tmp / "scores.jsonl")
    scored = [row for row in rows if "latent_nll" in row]
    assert len(rows) == n == 22 and len(scored) >= 18  # every prompt generated; an empty generation is skipped by both
    assert len({row["latent_nll"] for row in scored}) > 10  # generations that differ, scores that differ
    ppl = math.exp(sum(r["latent_nll"] for r in scored) / sum(r["latent_steps"] for r in scored))
    nll = sum(r["latent_nll"] for r in scored) / len(scored)
    mine = results["results"][TASK]
    assert math.isclose(mine["latent_ppl,none"], ppl, rel_tol=1e-9)
    assert math.isclose(mine["latent_nll,none"], nll, rel_tol=1e-9, abs_tol=1e-12)
    assert mine["sample_len"] == n and results["higher_is_better"][TASK] == {m: False for m in METRICS}
    # lm-eval's own table (its stdout) shows them, to its 4 decimals
    table = {m: line for line in stdout.splitlines() for m in METRICS if re.search(rf"\|\s*{m}\s*\|", line)}
    assert f"{ppl:.4f}" in table["latent_ppl"] and f"{nll:.4f}" in table["latent_nll"]
    # each sample logged the generation it handed the aggregation: the text critic score read
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        assert sample["latent_ppl"] == sample["latent_nll"] == {"generation": sample["resps"][0][0]}


def test_the_aggregation_scores_what_critic_score_scores(run):
    """In process (no lm-eval): the task's functions over the logged generations give the run's numbers to the bit;
    reordered, the same set statistic (LDA's T(x) is exact); nothing scored is NaN, not an error after the run."""
    _, critic, out, _, _ = run
    results, samples = logged(out)
    items = [process_results({}, [json.loads(line)["resps"][0][0]])["latent_ppl"]
             for line in samples.read_text().splitlines()]
    latent_ppl, latent_nll = aggregations(critic, task=TASK)
    assert latent_ppl(items) == results["results"][TASK]["latent_ppl,none"]
    assert latent_nll(items) == results["results"][TASK]["latent_nll,none"]
    assert math.isclose(latent_ppl(items[::-1]), latent_ppl(items), rel_tol=1e-9)
    assert math.isnan(latent_ppl([{"generation": " "}]))
    with pytest.raises(ValueError, match="one generated text per sample"):
        process_results({}, [["a", "b"]])


def test_critic_report_reads_the_run_s_output_folder(run):
    tmp, critic, out, _, _ = run
    results, samples = logged(out)
    assert main(["report", "--critic", f"lda={critic}", "--reference", str(tmp / "corpus" / "test.jsonl"),
                 "--candidate", f"toy={out}", "--n-bootstrap", "20", "--n-permutations", "20",
                 "--sections", "none", "--out", str(tmp / "report")]) == 0  # the pages have sections, the toy none
    saved = json.loads((tmp / "report" / "results.json").read_text())
    name = f"toy/{samples.parent.name}/{TASK}"
    assert list(saved["critics"]["lda"]["candidates"]) == [name]
    assert Path(saved["reads"][name]["path"]) == samples
    assert math.isclose(saved["critics"]["lda"]["candidates"][name]["latent_ppl"],
                        results["results"][TASK]["latent_ppl,none"], rel_tol=1e-9)


def test_write_task_refuses_what_would_fail_after_generating(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="task name 'a.b'"):
        write_task(tmp_path / "t", data=prompts, task="a.b")
    with pytest.raises(FileNotFoundError, match="not a saved critic's folder"):
        write_task(tmp_path / "t", data=prompts, critic=tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        write_task(tmp_path / "t", data=tmp_path / "none.jsonl")
    with pytest.raises(ValueError, match="unknown sections mode"):
        write_task(tmp_path / "t", data=prompts, sections="headings")
    yaml = write_task(tmp_path / "t", data=prompts, task="my-task")  # no critic: $CRITIC_LM_EVAL_CRITIC names it
    assert yaml.name == "my-task.yaml" and "!function my_task_critic.latent_ppl" in yaml.read_text()
    assert "aggregations(None, task='my-task'" in (tmp_path / "t" / "my_task_critic.py").read_text()
    latent_ppl, _ = aggregations(None, task="my-task")
    os.environ.pop("CRITIC_LM_EVAL_CRITIC", None)
    with pytest.raises(ValueError, match=r"name a saved critic's folder in \$CRITIC_LM_EVAL_CRITIC"):
        latent_ppl([{"generation": "x"}])
