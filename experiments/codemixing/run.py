"""Runner of the code-mixing study (paper app. C; table 10, fig. 7).

``critic run experiments/codemixing/cpu.toml --out DIR`` does, in ``DIR/``:

=============  ==================================================================================
``data/``      English -> de / es / fr message pairs (``critic data build gettext-pairs``) pooled in
               one multi-target set with no language tag (``corpus/``: the full build); ``train``,
               ``valid`` and ``test.jsonl``: the pairs used, optionally capped (``max_train_pairs``,
               ``max_valid_pairs``: seeded random subsets; ``max_test_sources``: a seeded subset of
               the distinct English test messages, with every target of each)
``critic/``    the LDA code-mixing critic (``lda``, M = 3 topics) fitted on the training targets
``ar/``        an autoregressive translator trained on the pooled training pairs and its samples for
               the distinct test sources (:func:`experiments.codemixing.translation.train_and_sample`)
``nar/``       the same for the non-autoregressive translator (same size, same budget)
``report/``    results.json + report.md: sets ``data`` (the test targets), ``ar`` and ``nar``, Latent
               NLL with 95% CIs (M(x) = 1, so Latent PPL = exp(mean Latent NLL)), the share of
               "mixed" documents (posterior mean's largest topic weight < ``mixed_threshold``), table
               10 and fig. 7 (``fig7.png``)
=============  ==================================================================================

and ``DIR/table10.md`` (top words per topic with the topic's majority language among the test targets)
and ``DIR/summary.md`` (set, n, Latent NLL [95% CI], mixed share).  A sample with no word the critic
knows (an empty translation, say) cannot be projected: the critic fails it with a reason, and it is a
counted skip (``n_skipped``).  Every stage is keyed by the config it depends on and resumes.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import fields
from pathlib import Path

from critic.config import Divides, Key
from critic.critic import Critic
from critic.document import Document, read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.registry import get_corpus
from critic.results import CriticismResult
from critic.stages import Stage
from critic.study import Pipeline, load_results, settings_table, read_json, register_study, study_schema
from critic.workflows import fit_critic
from critics.topics.lda import LdaCodeMixCritic
from experiments.lm_stages import read_splits

from .tables import mixed_share, summary_table, table10
from .translation import TranslationConfig

__all__ = ["main", "SCHEMA", "summary_table", "table10", "mixed_share"]

LANGUAGES = ("de", "es", "fr")
KINDS = ("ar", "nar")

_TRANSLATION_KEYS = {
    "layers": Key(int, 2, min=1, help="encoder and decoder layers (AR and NAR alike)"),
    "heads": Key(int, 4, min=1, help="attention heads"),
    "dim": Key(int, 128, min=1, help="model width"),
    "ff": Key(int, 512, min=1, help="feed-forward width"),
    "max_len": Key(int, 64, min=1, help="tokens per side; longer pairs are left out of training"),
    "dropout": Key(float, 0.1, min=0, max=0.99, help="dropout"),
    "vocab_size": Key(int, 4096, min=300, help="BPE vocabulary of both sides"),
    "nar_input": Key(str, "copy", choices=("copy", "position"), help="NAR decoder inputs"),
    "length_weight": Key(float, 1.0, gt=0, help="NAR loss = token CE + length_weight * length CE"),
    "batch_size": Key(int, 32, min=1, help="pairs per step"),
    "learning_rate": Key(float, 5e-4, gt=0, help="AdamW peak learning rate"),
    "weight_decay": Key(float, 0.01, min=0, help="AdamW weight decay"),
    "warmup_steps": Key(int, 200, min=0, help="linear warm-up steps"),
    "max_steps": Key(int, 2000, min=1, help="step budget (linear decay to 0 there)"),
    "max_tokens": Key(int, min=1, help="target-token budget (absent: none)"),
    "eval_every": Key(int, 200, min=1, help="steps between validations and checkpoints"),
    "max_grad_norm": Key(float, 1.0, gt=0, help="gradient clipping"),
    "samples_per_source": Key(int, 1, min=1, help="samples of each test source"),
    "sample_batch_size": Key(int, 64, min=1, help="sources per sampling batch"),
}
assert set(_TRANSLATION_KEYS) == {f.name for f in fields(TranslationConfig)}

SCHEMA = study_schema({
    "data": {
        "languages": Key(list[str], list(LANGUAGES), choices=LANGUAGES, help="target languages pooled"),
        "variants": Key(bool, True, help="also the regional locales (de_CH, es_MX, fr_CA, ...)"),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of English messages in valid"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of English messages in test"),
        "max_train_pairs": Key(int, min=1, help="seeded random subset of the training pairs (absent: all)"),
        "max_valid_pairs": Key(int, min=1, help="seeded random subset of the validation pairs (absent: all)"),
        "max_test_sources": Key(int, min=1, help="seeded random subset of the distinct English test "
                                                 "messages, with all their targets (absent: all)"),
    },
    "critic": {
        **settings_table(LdaCodeMixCritic),
        "num_topics": Key(int, 3, min=3, max=3, help="topics (one per language; fig. 7 needs 3)"),
    },
    "translation": _TRANSLATION_KEYS,
}, criticism={
    "top_words": Key(int, 20, min=1, help="table 10: words per topic"),
    "mixed_threshold": Key(float, 0.9, gt=0, max=1, help="a document is mixed when its posterior "
                                                         "mean's largest weight is below this"),
    "figure_samples": Key(int, 1, min=1, help="fig. 7: posterior samples per document"),
}, checks=(Divides("translation", "heads", "dim"),))


def _subset(docs: list[Document], n: int | None, seed: int, what: str) -> list[Document]:
    if n is None or n >= len(docs):
        return list(docs)
    keep = sorted(random.Random(f"{seed}:{what}").sample(range(len(docs)), n))
    return [docs[i] for i in keep]


def _build(run: Pipeline, stage: Stage) -> None:
    settings, seed = run.config["data"], run.seed
    with run.computing(stage):
        report = get_corpus("gettext-pairs").build(stage.path / "corpus", language=",".join(settings["languages"]),
                                                   variants=settings["variants"],
                                                   valid_fraction=settings["valid_fraction"],
                                                   test_fraction=settings["test_fraction"])
        run.log(f"built corpus: "
                f"{json.dumps({k: report.counts[k] for k in ('train', 'valid', 'test', *settings['languages'])})}")
        splits = read_splits(stage.path / "corpus")
        train = _subset(splits["train"], settings.get("max_train_pairs"), seed, "train")
        valid = _subset(splits["valid"], settings.get("max_valid_pairs"), seed, "valid")
        sources = sorted({d.metadata["source"] for d in splits["test"]})
        n = settings.get("max_test_sources")
        if n is not None and n < len(sources):
            sources = sorted(random.Random(f"{seed}:test").sample(sources, n))
        chosen = set(sources)
        test = [d for d in splits["test"] if d.metadata["source"] in chosen]
        for name, docs in (("train", train), ("valid", valid), ("test", test)):
            write_jsonl(docs, stage.path / f"{name}.jsonl")
        atomic_write_text(stage.path / "test_sources.json",
                          json.dumps(sources, ensure_ascii=False, indent=0) + "\n")
    run.log(f"pairs used: train {len(train)}, valid {len(valid)}, test {len(test)} targets of {len(sources)} sources")


def _pairs(docs: list[Document]) -> list[tuple[str, str]]:
    return [(d.metadata["source"], d.metadata["target"]) for d in docs]


def _fit(run: Pipeline, stage: Stage, train: list[Document]) -> None:
    with run.computing(stage):
        start = time.perf_counter()
        critic = fit_critic(LdaCodeMixCritic(**run.config["critic"], seed=run.seed), train, seed=run.seed, log=run.log)
        critic.save(stage.path / "critic")
    run.log(f"critic: LDA with {critic.num_topics} topics on {critic.training_documents_} documents, "
            f"{critic.training_tokens_} tokens, vocabulary {len(critic.dictionary_)}; skipped "
            f"{len(critic.training_skipped_)} ({time.perf_counter() - start:.0f} s)")


def _translate(run: Pipeline, stage: Stage, kind: str, data: dict[str, list[Document]], sources: list[str]) -> None:
    from .translation import train_and_sample

    settings = run.config["translation"]
    with run.computing(stage):  # a pending run under the same key keeps its checkpoint: training resumes
        config = TranslationConfig.from_dict({k: v for k, v in settings.items() if v is not None} |
                                             {"max_tokens": settings.get("max_tokens")})
        start = time.perf_counter()
        result, docs = train_and_sample(_pairs(data["train"]), _pairs(data["valid"]), sources, stage.path,
                                        kind=kind, config=config, seed=run.seed, log=run.log,
                                        threads=run.config["threads"])
    run.log(f"{kind}: {result.steps} steps, {result.tokens_seen} target tokens, best valid loss "
            f"{result.best_valid_loss:.3f} at step {result.best_step}; {len(docs)} samples "
            f"({time.perf_counter() - start:.0f} s)")


def _report(run: Pipeline, stage: Stage, critic_stage: Stage, test: list[Document],
            candidates: dict[str, list[Document]]) -> None:
    from critics.topics.lda import top_words, topic_purity
    from critics.topics.lda_plots import code_mixing_figure

    settings = run.config["criticism"]
    with run.computing(stage):
        critic = Critic.load(critic_stage.path / "critic")
        panel = run.criticize(critic, test, candidates, reference_name="data")
        result = panel.result
        shares = {s.name: mixed_share([d.extras["topic_weights"] for d in s.documents], settings["mixed_threshold"])
                  for s in result.sets}
        result.add_statistic("mixed_share", shares,
                             reasons={k: "no document could be projected" for k, v in shares.items() if v is None})
        by_language = {lang: [d for d in test if d.metadata["language"] == lang]
                       for lang in run.config["data"]["languages"]}
        purity = topic_purity(critic, by_language)
        words = top_words(critic, settings["top_words"])
        t10 = table10(words, purity.topic_language)
        counts = "\n".join(f"- topic {k} ({purity.topic_language[k] or '—'}): "
                           + ", ".join(f"{lang} {c}" for lang, c in purity.counts[k].items())
                           for k in range(critic.num_topics))
        sections = [
            "## Summary", "", summary_table(result), "",
            f"Mixed: the posterior mean's largest topic weight is below {settings['mixed_threshold']}.", "",
            f"## Table 10: top {settings['top_words']} words per topic", "",
            "Majority language of each topic among the test targets (posterior mean's largest weight); "
            f"purity {purity.purity:.3f} over {purity.n} documents:", "", counts, "", t10, "",
            "## Fig. 7", "", "![fig. 7](fig7.png)", "",
        ]

        def figures(directory: Path) -> dict[str, Path]:
            path = directory / "fig7.png"
            code_mixing_figure(critic, {"data": test, **candidates}, path, samples=settings["figure_samples"],
                               seed=run.seed)
            return {"fig7": path}

        run.write_report(stage.path, panel, critics={critic.name: critic},
                         sections=["\n".join(sections)], figures=figures,
                         record={"topic_language": purity.topic_language, "topic_purity": purity.purity,
                                 "topic_counts": purity.counts, "top_words": words})
        atomic_write_text(stage.path / "table10.md", t10 + "\n")


@register_study("codemixing", SCHEMA, "paper app. C: code-mixing of AR and NAR translators under an LDA critic")
def main(run: Pipeline) -> CriticismResult:
    """Run the study's stages (resumed when unchanged); print the summary and table 10."""
    if run.device != "cpu":
        run.log(f"device {run.device!r} ignored: the translators train on the CPU")
    start = time.perf_counter()
    data = run.stage("data", {**run.config["data"], "seed": run.seed})
    critic = run.stage("critic", {**run.config["critic"], "seed": run.seed}, upstream=[data])
    translators = {k: run.stage(k, {**run.config["translation"], "kind": k, "seed": run.seed}, upstream=[data])
                   for k in KINDS}
    report = run.stage("report", run.criticism_key(), upstream=[critic, *translators.values()])
    if run.needs(data):
        _build(run, data)
    splits = read_splits(data.path)
    sources = read_json(data.path / "test_sources.json")
    if run.needs(critic):
        _fit(run, critic, splits["train"])
    for kind, stage in translators.items():
        if run.needs(stage):
            run.log(f"training and sampling the {kind.upper()} translator")
            _translate(run, stage, kind, splits, sources)
    if run.needs(report):
        _report(run, report, critic, splits["test"], {k: read_jsonl(s.path / "samples.jsonl")
                                                      for k, s in translators.items()})
    result = load_results(report.path).result
    t10 = (report.path / "table10.md").read_text(encoding="utf-8").strip()
    summary = summary_table(result)
    atomic_write_text(run.out / "table10.md",
                      "# Code-mixing study: paper table 10 (top words per topic)\n\n" + t10 + "\n")
    atomic_write_text(run.out / "summary.md", "# Code-mixing study: LDA critic (M = 3) on the test targets and the "
                                              "translators' samples\n\n" + summary + "\n")
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print("\n## Summary\n\n" + summary + "\n\n## Table 10\n\n" + t10)
    run.log(f"done in {time.perf_counter() - start:.0f} s")
    return result
