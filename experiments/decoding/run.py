"""Runner of the decoding study (issue 42): does greedy or nucleus decoding loop more, and hold on to its entities
less, than ancestral sampling, as the repetition and entity-grid critics see it against real text?

``critic run experiments/decoding/cpu.toml --out DIR`` does, in ``DIR/``:

=====================  ============================================================
``data/``              Wikipedia lead summaries (``critic data build wiki-summaries``)
``tokenizer/``         (``[lm] model = "tiny"``) a BPE tokenizer trained on train
``lm/``                an LM fine-tuned on the summaries (``critic lm``), as the coreference study's
``samples/``           its ancestral samples; ``ppl/`` its word perplexity on the test split
``samples_<decoding>/`` the same LM decoded otherwise (``nucleus``: top-p ``[decoding] top_p``;
                       ``greedy``): after an opening of ``[decoding] opening`` tokens drawn ancestrally with
                       the same seed as ``samples/``, so every decoding continues the same openings
``critic_<name>/``     each critic of ``[critics] names`` fitted on the training split
``report/``            both critics over the test split (the reference) and one set per decoding
=====================  ============================================================

and ``DIR/decoding.md``: per critic and decoding the Latent PPL with its 95% CI and the test against the data,
the share of documents flagged, and beside them two plain counts of each set: seq-rep-4 (Welleck et al. 2020: the
share of a document's 4-grams that repeat an earlier one, mean and 95% CI) and the share of generations cut by
the token budget.  A generation that never ends is a document here (:func:`critic.lm.sample.read_generations`
with ``cut=True``): loops are what keeps a generation from ending, so leaving them out would hide the finding.
"""

from __future__ import annotations

import re
import time
from typing import Sequence

import numpy as np

from critic.config import Key
from critic.critic import Critic
from critic.document import Document
from critic.io import atomic_write_text
from critic.panel import PanelResult
from critic.registry import get_critic
from critic.results import CriticismResult
from critic.stages import Stage
from critic.stats import MEAN, bootstrap_cis
from critic.study import Pipeline, load_results, register_study, study_schema
from critic.workflows import fit_critic
from experiments.lm_stages import LM_CHECK, LM_TABLE, SAMPLE_TABLE, LmStages, read_splits, word_ppl
from experiments.tables import cell, interval

__all__ = ["main", "SCHEMA", "DECODINGS", "seq_rep", "decoding_table"]

DECODINGS = ("ancestral", "nucleus", "greedy")
CRITICS = ("repetition", "entity-grid")

SCHEMA = study_schema({
    "data": {
        "language": Key(str, "en", choices=("en",), help="summaries' language (the entity grid parses English)"),
        "topic": Key(str, "People", help='keep one topic of the summaries ("" keeps all)'),
        "valid_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the validation split"),
        "test_fraction": Key(float, 0.1, gt=0, max=0.5, help="share of documents in the test split"),
        "max_train_documents": Key(int, min=1, help="training documents the critics are fitted on (absent: all)"),
    },
    "lm": LM_TABLE,
    "sample": SAMPLE_TABLE,
    "decoding": {
        "names": Key(list[str], list(DECODINGS), choices=DECODINGS, help="the decodings criticised, each a set"),
        "top_p": Key(float, 0.9, gt=0, max=1, help="nucleus: the smallest set of tokens with this much probability"),
        "opening": Key(int, 8, min=0, help="tokens drawn ancestrally before nucleus or greedy decoding takes over "
                                           "(the same tokens in every decoding: one seed)"),
    },
    "critics": {
        "names": Key(list[str], list(CRITICS), choices=CRITICS, help="the critics, each with its defaults"),
    },
}, checks=(LM_CHECK,))

_WORD = re.compile(r"\w+")


def seq_rep(doc: Document, n: int = 4) -> float:
    """seq-rep-n (Welleck et al. 2020): ``1 - |distinct n-grams| / |n-grams|`` of the document's lower-cased words,
    0 for a document of fewer than ``n`` words."""
    words = _WORD.findall(" ".join(s.text for s in doc.sections).lower())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def _warp(name: str, decoding: dict) -> dict:
    """``critic.lm.sample.sample``'s warp keywords of decoding ``name``."""
    return {"nucleus": {"top_p": decoding["top_p"], "opening": decoding["opening"]},
            "greedy": {"top_k": 1, "opening": decoding["opening"]}}[name]


def _sample(run: Pipeline, stage: Stage, lm_stage: Stage, warp: dict) -> None:
    from critic.lm.sample import sample

    settings = run.config["sample"]
    with run.computing(stage):  # resumes as the ancestral samples do
        report = sample(lm_stage.path / "best", stage.path, n=settings["n"], batch_size=settings["batch_size"],
                        max_new_tokens=settings["max_new_tokens"], seed=run.seed, device=run.device,
                        mask_special_tokens=settings["mask_special_tokens"], **warp)
    run.log(f"{stage.name}: {report.counts()}")


def _fit(run: Pipeline, stage: Stage, name: str, train: list[Document], valid: list[Document]) -> None:
    with run.computing(stage):
        critic = get_critic(name)().to(run.device)
        fit_critic(critic, train, valid, seed=run.seed, log=run.log)
        critic.save(stage.path)


def _statistics(result: CriticismResult, sets: dict[str, list[Document]], n_bootstrap: int, seed: int) -> None:
    """seq-rep-4 (mean; its CI as ``seq_rep_4_lo``/``_hi``) and the share of cut generations, per set."""
    for name, docs in sets.items():
        values = np.array([seq_rep(d) for d in docs])
        (lo, hi), = bootstrap_cis(values, [MEAN], n_resamples=n_bootstrap, seed=seed)
        result.add_statistic("seq_rep_4", {name: float(values.mean())})
        result.add_statistic("seq_rep_4_lo", {name: lo})
        result.add_statistic("seq_rep_4_hi", {name: hi})
        result.add_statistic("cut_share", {name: float(np.mean([bool(d.metadata.get("cut")) for d in docs]))})


def decoding_table(panel: PanelResult, decodings: Sequence[str]) -> str:
    """One Markdown table: per critic and set (the data, then each decoding) its size, Latent PPL [95% CI], the
    test of its per-document Latent NLL against the data, the share the panel's rule flags, seq-rep-4 [95% CI]
    and the share of generations cut by the token budget."""
    rows = ["| critic | set | n | Latent PPL [95% CI] | vs data: p | flagged | seq-rep-4 [95% CI] | cut |",
            "|---|---|---|---|---|---|---|---|"]
    for label, result in panel.results.items():
        for name in ("data", *decodings):
            s = result.set(name)
            flagged = (sum(map(panel.is_flagged, s.documents)) / len(s.documents)
                       if name != "data" and s.documents else None)
            stats = s.statistics
            rows.append(f"| {label} | {name} | {s.n} | {cell(s.latent_ppl, '.3f')} {interval(s.latent_ppl_ci, '.3f')} "
                        f"| {cell(s.p_value, '.4f') if name != 'data' else ''} | {cell(flagged, '.2f')} "
                        f"| {cell(stats.get('seq_rep_4'), '.3f')} "
                        f"{interval((stats.get('seq_rep_4_lo'), stats.get('seq_rep_4_hi')), '.3f')} "
                        f"| {cell(stats.get('cut_share'), '.2f')} |")
    return "\n".join(rows)


@register_study("decoding", SCHEMA, "loops and entity coherence of ancestral, nucleus and greedy decoding")
def main(run: Pipeline) -> dict[str, CriticismResult]:
    """Run the study's stages (resumed when unchanged); print the report and the decoding table."""
    from critic.lm.sample import read_generations

    start = time.perf_counter()
    data_cfg, decoding = run.config["data"], run.config["decoding"]
    data = run.stage("data", {k: data_cfg[k] for k in ("language", "topic", "valid_fraction", "test_fraction")})
    lm = LmStages(run, data)
    samples = {"ancestral": lm.samples["lm"],
               **{name: run.stage(f"samples_{name}", {**run.config["sample"], **_warp(name, decoding),
                                                      "seed": run.seed}, upstream=[lm.lms["lm"]])
                  for name in DECODINGS[1:] if name in decoding["names"]}}
    critics = {name: run.stage(f"critic_{name}", {"max_train_documents": data_cfg.get("max_train_documents")},
                               upstream=[data]) for name in run.config["critics"]["names"]}
    report = run.stage("report", run.criticism_key(decoding), upstream=[*critics.values(), *samples.values(),
                                                                        *lm.ppls.values()])
    if run.needs(data):
        run.build_corpus(data, "wiki-summaries", language=data_cfg["language"], topic=data_cfg["topic"] or None,
                         valid_fraction=data_cfg["valid_fraction"], test_fraction=data_cfg["test_fraction"])
    splits = read_splits(data.path)
    lm.compute()  # the LM and its ancestral samples
    for name, stage in samples.items():
        if name != "ancestral" and run.needs(stage):
            run.log(f"sampling {name}")
            _sample(run, stage, lm.lms["lm"], _warp(name, decoding))
    for name, stage in critics.items():
        if run.needs(stage):
            run.log(f"fitting {name}")
            _fit(run, stage, name, splits["train"][:data_cfg.get("max_train_documents")], splits["valid"])
    if run.needs(report):
        sets = {}
        for name in decoding["names"]:
            sets[name], unparsed = read_generations(samples[name].path, cut=True)
            if unparsed:
                run.log(f"{name}: unparseable generations (counted, not scored): {dict(unparsed)}")
        with run.computing(report):
            panel = run.criticize({name: Critic.load(stage.path).to(run.device) for name, stage in critics.items()},
                                  splits["test"], sets, reference_name="data")
            for result in panel.results.values():
                _statistics(result, {"data": splits["test"], **sets}, run.config["criticism"]["n_bootstrap"],
                            run.seed)
            run.write_report(report.path, panel, record={"word_ppl": word_ppl(lm.ppls["lm"])})
    loaded = load_results(report.path)  # one critic's result, or the panel of several
    results = loaded.results if isinstance(loaded, PanelResult) else {loaded.critic_name: loaded}
    table = decoding_table(PanelResult(results, **run.settings.flag_rule), decoding["names"])
    atomic_write_text(run.out / "decoding.md", "# Decoding study\n\n" + table + "\n")
    print((report.path / "report.md").read_text(encoding="utf-8"))
    print("\n## Decodings\n\n" + table)
    run.log(f"done in {time.perf_counter() - start:.0f} s")
    return results
