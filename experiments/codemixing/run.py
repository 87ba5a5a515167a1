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
import math
import random
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from critic.config import Divides, Key, Schema, check_config
from critic.critic import Critic
from critic.criticism import criticize
from critic.document import Document, read_jsonl, write_jsonl
from critic.io import atomic_write_text
from critic.registry import get_corpus, register_runner
from critic.report import write_report
from critic.stages import Stage
from experiments.lm_stages import StageChain, read_splits
from experiments.tables import cell, interval

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

SCHEMA = Schema(
    keys={"threads": Key(int, 1, min=1, help="torch threads while training and sampling (1 is fastest on a "
                                              "busy 2-core machine for these small models)")},
    tables={
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
            "num_topics": Key(int, 3, min=3, max=3, help="topics (one per language; fig. 7 needs 3)"),
            "passes": Key(int, 10, min=1, help="gensim passes"),
            "iterations": Key(int, 100, min=1, help="gensim iterations per document"),
            "chunksize": Key(int, 2000, min=1, help="gensim chunk size"),
            "no_below": Key(int, 2, min=1, help="dictionary: words in at least this many documents"),
            "no_above": Key(float, 0.95, gt=0, max=1, help="dictionary: words in at most this share"),
        },
        "translation": _TRANSLATION_KEYS,
        "criticism": {
            "n_bootstrap": Key(int, 1000, min=1, help="bootstrap resamples of the CIs"),
            "n_permutations": Key(int, 2000, min=1, help="permutations of the two-sample test"),
            "top": Key(int, 10, min=1, help="outliers listed"),
            "top_words": Key(int, 20, min=1, help="table 10: words per topic"),
            "mixed_threshold": Key(float, 0.9, gt=0, max=1, help="a document is mixed when its posterior "
                                                                 "mean's largest weight is below this"),
            "figure_samples": Key(int, 1, min=1, help="fig. 7: posterior samples per document"),
        },
    },
    checks=(Divides("translation", "heads", "dim"),),
)


def _log(msg: str) -> None:
    print(f"[codemixing] {msg}", flush=True)


def _subset(docs: list[Document], n: int | None, seed: int, what: str) -> list[Document]:
    if n is None or n >= len(docs):
        return list(docs)
    keep = sorted(random.Random(f"{seed}:{what}").sample(range(len(docs)), n))
    return [docs[i] for i in keep]


def _build(stage: Stage, settings: dict, seed: int) -> None:
    stage.begin()
    report = get_corpus("gettext-pairs").build(stage.path / "corpus", language=",".join(settings["languages"]),
                                               variants=settings["variants"],
                                               valid_fraction=settings["valid_fraction"],
                                               test_fraction=settings["test_fraction"])
    _log(f"built corpus: {json.dumps({k: report.counts[k] for k in ('train', 'valid', 'test', *settings['languages'])})}")
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
    atomic_write_text(stage.path / "test_sources.json", json.dumps(sources, ensure_ascii=False, indent=0) + "\n")
    stage.commit()
    _log(f"pairs used: train {len(train)}, valid {len(valid)}, test {len(test)} targets of {len(sources)} sources")


def _pairs(docs: list[Document]) -> list[tuple[str, str]]:
    return [(d.metadata["source"], d.metadata["target"]) for d in docs]


def _fit(stage: Stage, train: list[Document], settings: dict, seed: int) -> None:
    from critics.topics.lda import LdaCodeMixCritic

    stage.begin()
    start = time.perf_counter()
    critic = LdaCodeMixCritic(**settings, seed=seed).fit(train)
    critic.save(stage.path / "critic")
    stage.commit()
    _log(f"critic: LDA with {critic.num_topics} topics on {critic.training_documents_} documents, "
         f"{critic.training_tokens_} tokens, vocabulary {len(critic.dictionary_)}; skipped "
         f"{len(critic.training_skipped_)} ({time.perf_counter() - start:.0f} s)")


def _translate(stage: Stage, kind: str, data: dict[str, list[Document]], sources: list[str], settings: dict,
               seed: int, threads: int) -> None:
    from .translation import train_and_sample

    stage.begin()  # a pending run under the same key keeps its checkpoint: training resumes
    config = TranslationConfig.from_dict({k: v for k, v in settings.items() if v is not None} |
                                         {"max_tokens": settings.get("max_tokens")})
    start = time.perf_counter()
    result, docs = train_and_sample(_pairs(data["train"]), _pairs(data["valid"]), sources, stage.path, kind=kind,
                                    config=config, seed=seed, log=_log, threads=threads)
    stage.commit()
    _log(f"{kind}: {result.steps} steps, {result.tokens_seen} target tokens, best valid loss "
         f"{result.best_valid_loss:.3f} at step {result.best_step}; {len(docs)} samples "
         f"({time.perf_counter() - start:.0f} s)")


def mixed_share(weights: list[list[float]], threshold: float = 0.9) -> float | None:
    """Share of documents whose posterior mean's largest topic weight is below ``threshold``."""
    if not weights:
        return None
    return float(np.mean([max(w) < threshold for w in weights]))


def table10(words: list[list[str]], languages: list[str | None]) -> str:
    """Paper table 10: a column per topic (with its majority language), the top words in rows."""
    head = "| rank | " + " | ".join(f"topic {k} ({lang or '—'})" for k, lang in enumerate(languages)) + " |"
    lines = [head, "|---:|" + "---|" * len(words)]
    for r in range(max(len(w) for w in words)):
        lines.append(f"| {r + 1} | " + " | ".join(w[r] if r < len(w) else "" for w in words) + " |")
    return "\n".join(lines)


def summary_table(results: dict) -> str:
    """A row per set: n (skipped), Latent NLL [95% CI], Latent PPL, mixed share."""
    lines = ["| set | n (skipped) | Latent NLL ↓ [95% CI] | Latent PPL | mixed share |", "|---|---:|---|---:|---:|"]
    for s in [results["reference"], *results["candidates"].values()]:
        ci_text = interval(s["latent_nll_ci"], ".3f")
        lines.append(f"| {s['name']} | {s['n']} ({s['n_skipped']}) | {cell(s['latent_nll'], '.3f')} {ci_text} | "
                     f"{cell(s['latent_ppl'], '.3g')} | {cell(s.get('mixed_share'), '.3f')} |")
    return "\n".join(lines)


def _report(stage: Stage, critic_stage: Stage, test: list[Document], candidates: dict[str, list[Document]],
            config: dict, seed: int, stages: list[Stage]) -> tuple[dict, str]:
    from critics.topics.lda import top_words, topic_purity
    from critics.topics.lda_plots import code_mixing_figure

    stage.begin()
    settings = config["criticism"]
    critic = Critic.load(critic_stage.path / "critic")
    result = criticize(critic, test, candidates, reference_name="data", n_bootstrap=settings["n_bootstrap"],
                       n_permutations=settings["n_permutations"], seed=seed)
    shares = {s.name: mixed_share([d.extras["topic_weights"] for d in s.documents], settings["mixed_threshold"])
              for s in result.sets}
    result.add_statistic("mixed_share", shares,
                         reasons={k: "no document could be projected" for k, v in shares.items() if v is None})
    by_language = {lang: [d for d in test if d.metadata["language"] == lang] for lang in config["data"]["languages"]}
    purity = topic_purity(critic, by_language)
    words = top_words(critic, settings["top_words"])
    t10 = table10(words, purity.topic_language)
    counts = "\n".join(f"- topic {k} ({purity.topic_language[k] or '—'}): "
                       + ", ".join(f"{lang} {c}" for lang, c in purity.counts[k].items())
                       for k in range(critic.num_topics))
    sections = [
        "## Summary", "", summary_table(json.loads(json.dumps(_plain_sets(result)))), "",
        f"Mixed: the posterior mean's largest topic weight is below {settings['mixed_threshold']}.", "",
        f"## Table 10: top {settings['top_words']} words per topic", "",
        "Majority language of each topic among the test targets (posterior mean's largest weight); "
        f"purity {purity.purity:.3f} over {purity.n} documents:", "", counts, "", t10, "",
        "## Fig. 7", "", "![fig. 7](fig7.png)", "",
    ]
    failures: dict = {}

    def figures(directory: Path) -> dict[str, Path]:
        path = directory / "fig7.png"
        failures.update(code_mixing_figure(critic, {"data": test, **candidates}, path,
                                           samples=settings["figure_samples"], seed=seed))
        return {"fig7": path}

    run = {"config": config, "seed": seed, "stages": {s.name: s.key for s in stages},
           "topic_language": purity.topic_language, "topic_purity": purity.purity, "topic_counts": purity.counts,
           "top_words": words}
    write_report(result, stage.path, top=settings["top"], extra={"run": run}, sections=["\n".join(sections)],
                 figures=figures)
    atomic_write_text(stage.path / "table10.md", t10 + "\n")
    stage.commit()
    return json.loads((stage.path / "results.json").read_text(encoding="utf-8")), t10


def _plain_sets(result) -> dict:
    """The fields :func:`summary_table` reads, from a result in memory."""
    def one(s):
        return {"name": s.name, "n": s.n, "n_skipped": s.n_skipped, "latent_nll": s.latent_nll,
                "latent_nll_ci": [None if not math.isfinite(x) else x for x in s.latent_nll_ci],
                "latent_ppl": s.latent_ppl, "mixed_share": s.statistics.get("mixed_share")}
    return {"reference": one(result.reference), "candidates": {n: one(s) for n, s in result.candidates.items()}}


@register_runner("codemixing", SCHEMA, "paper app. C: code-mixing of AR and NAR translators under an LDA critic")
def main(config: dict, *, out: Path, seed: int = 0, device: str = "cpu") -> dict:
    """Run the study's stages (resumed when unchanged); print the summary and table 10."""
    config = check_config(config, SCHEMA, where="codemixing config", allowed=("runner",))
    if device != "cpu":
        _log(f"device {device!r} ignored: the translators train on the CPU")
    out = Path(out)
    start = time.perf_counter()
    chain = StageChain(_log)
    data_cfg = config["data"]
    data = Stage(out, "data", {**data_cfg, "seed": seed})
    critic = Stage(out, "critic", {**config["critic"], "seed": seed}, upstream=[data])
    translators = {k: Stage(out, k, {**config["translation"], "kind": k, "seed": seed}, upstream=[data])
                   for k in KINDS}
    report = Stage(out, "report", {**config["criticism"], "seed": seed},
                   upstream=[critic, *translators.values()])
    stages = [data, critic, *translators.values(), report]
    if chain.needs(data):
        _build(data, data_cfg, seed)
    splits = read_splits(data.path)
    sources = json.loads((data.path / "test_sources.json").read_text(encoding="utf-8"))
    if chain.needs(critic):
        _fit(critic, splits["train"], config["critic"], seed)
    for kind, stage in translators.items():
        if chain.needs(stage):
            _log(f"training and sampling the {kind.upper()} translator")
            _translate(stage, kind, splits, sources, config["translation"], seed, config["threads"])
    candidates = {k: read_jsonl(s.path / "samples.jsonl") for k, s in translators.items()}
    if chain.needs(report):
        results, t10 = _report(report, critic, splits["test"], candidates, config, seed, stages)
    else:
        results = json.loads((report.path / "results.json").read_text(encoding="utf-8"))
        t10 = (report.path / "table10.md").read_text(encoding="utf-8").strip()
    summary = summary_table(results)
    atomic_write_text(out / "table10.md", "# Code-mixing study: paper table 10 (top words per topic)\n\n" + t10 + "\n")
    atomic_write_text(out / "summary.md", "# Code-mixing study: LDA critic (M = 3) on the test targets and the "
                                          "translators' samples\n\n" + summary + "\n")
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print("\n## Summary\n\n" + summary + "\n\n## Table 10\n\n" + t10)
    _log(f"done in {time.perf_counter() - start:.0f} s")
    return results
