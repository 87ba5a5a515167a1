"""A study in 60 lines: do man pages with their sections shuffled read worse to the section critic?

    critic --plugin docs/examples/shuffled_sections_study.py run shuffled.toml --out runs/shuffled

with ``shuffled.toml`` holding ``runner = "shuffled-sections"`` and, optionally, ``[corpus] root = ...``.
"""

from __future__ import annotations

from pathlib import Path

from critic.config import Key
from critic.corpora.manpages import build_manpages
from critic.corrupt import corrupt_all
from critic.critic import Critic
from critic.document import read_jsonl
from critic.io import atomic_write_text
from critic.results import CriticismResult
from critic.study import Pipeline, load_results, settings_table, register_study, study_schema
from critics.sections import SectionTransitionCritic

SCHEMA = study_schema({
    "corpus": {"root": Key(str, "/usr/share/man", help="man page root")},
    "critic": settings_table(SectionTransitionCritic),  # every setting of the critic, declared once: in its __init__
})


def table(result: CriticismResult) -> str:
    """One row per set: Latent PPL [95% CI], and the shuffled pages' difference with its p-value."""
    rows = ["| set | n | Latent PPL [95% CI] | p (vs real) |", "|---|---:|---|---:|"]
    for s in result.sets:
        lo, hi = s.latent_ppl_ci
        p = "—" if s.ppl_comparison is None else f"{s.ppl_comparison.p_value:.4f}"
        rows.append(f"| {s.name} | {s.n} | {s.latent_ppl:.3f} [{lo:.3f}, {hi:.3f}] | {p} |")
    return "\n".join(rows)


@register_study("shuffled-sections", SCHEMA, "man pages against their section-shuffled copies")
def main(run: Pipeline) -> CriticismResult:
    data = run.stage("data", run.config["corpus"])
    fitted = run.stage("critic", run.config["critic"], upstream=[data])
    report = run.stage("report", run.criticism_key(), upstream=[fitted])
    if run.needs(data):
        with run.computing(data):
            build_manpages(data.path, root=Path(run.config["corpus"]["root"]))
    if run.needs(fitted):
        with run.computing(fitted):
            train, valid = (read_jsonl(data.path / f"{split}.jsonl") for split in ("train", "valid"))
            SectionTransitionCritic(**run.config["critic"]).fit(train, validation=valid).save(fitted.path)
    if run.needs(report):
        with run.computing(report):
            test = read_jsonl(data.path / "test.jsonl")
            shuffled = corrupt_all(test, "permuted", seed=run.seed)
            critic = Critic.load(fitted.path)
            panel = run.criticize(critic, test, {"shuffled": shuffled}, reference_name="real")
            run.write_report(report.path, panel, critics={critic.name: critic},
                             documents={"real": test, "shuffled": shuffled})
    result = load_results(report.path).result
    atomic_write_text(run.out / "table.md", table(result) + "\n")
    run.log(f"table in {run.out / 'table.md'}")
    return result
