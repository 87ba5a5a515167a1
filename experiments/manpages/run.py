"""Runner of ``experiments/manpages/sections.toml`` (see the README's first command).

Each finished stage leaves its output in ``out/`` and is reused on a rerun:
``data/`` (the built corpus), ``filtered/`` (after app. E filters), ``critic/``
(the fitted critic); the criticism itself takes seconds and is always redone.
"""

from __future__ import annotations

import json
from pathlib import Path

from critic.corpora.manpages import build_manpages
from critic.corrupt import corrupt_all
from critic.critic import Critic
from critic.criticism import criticize
from critic.document import read_jsonl, write_jsonl
from critic.registry import get_critic
from critic.report import outliers_table, write_report
from critics.sections import CorpusFilter
from critics.sections.analysis import transition_errors_table
from critics.sections.plots import transition_difference_heatmap

SPLITS = ("train", "valid", "test")


def _log(msg: str) -> None:
    print(f"[manpages] {msg}", flush=True)


def prepare_corpus(config: dict, out: Path) -> dict[str, list]:
    """Build (once) and filter (once) the corpus; returns the filtered splits."""
    corpus = config.get("corpus", {})
    raw, filtered = out / "data", out / "filtered"
    if not all((raw / f"{s}.jsonl").exists() for s in SPLITS):
        report = build_manpages(raw, root=Path(corpus.get("root", "/usr/share/man")))
        _log(f"built corpus: {report.counts}")
    if not all((filtered / f"{s}.jsonl").exists() for s in SPLITS):
        splits = {s: read_jsonl(raw / f"{s}.jsonl") for s in SPLITS}
        filt = CorpusFilter(
            min_sections=corpus.get("min_sections", 3),
            min_section_tokens=corpus.get("min_section_tokens", 1),
            max_section_tokens=corpus.get("max_section_tokens"),
            min_title_count=corpus.get("min_title_count", 1),
        )
        kept, report = filt.apply(splits)
        for s in SPLITS:
            write_jsonl(kept[s], filtered / f"{s}.jsonl")
        (filtered / "filter.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
        _log(f"filtered: kept {', '.join(f'{s}={len(kept[s])}' for s in SPLITS)}; "
             f"removed {len(report.removed)} documents (reasons in {filtered / 'filter.json'})")
    return {s: read_jsonl(filtered / f"{s}.jsonl") for s in SPLITS}


def main(config: dict, *, out: Path, seed: int = 0, device: str = "cpu") -> dict:
    out = Path(out)
    splits = prepare_corpus(config, out)
    critic_cfg = dict(config.get("critic", {}))
    name = critic_cfg.pop("name", "sections")
    critic_dir = out / "critic"
    if (critic_dir / "critic.json").exists():
        critic = Critic.load(critic_dir)
        _log(f"loaded fitted critic from {critic_dir}")
    else:
        critic = get_critic(name)(**critic_cfg).fit(splits["train"], validation=splits["valid"])
        critic.save(critic_dir)
        _log(f"fitted {name} critic: {len(critic.vocab_)} states, delta={critic.delta_} "
             f"(validation Latent PPL {critic.validation_ppl_.get(critic.delta_, float('nan')):.4f})")
    crit_cfg = config.get("criticism", {})
    test = splits["test"]
    candidates = {c: corrupt_all(test, c, seed=seed) for c in crit_cfg.get("corruptions", ["permuted"])}
    result = criticize(critic, test, candidates, reference_name="real",
                       n_bootstrap=crit_cfg.get("n_bootstrap", 1000),
                       n_permutations=crit_cfg.get("n_permutations", 2000), seed=seed)
    top = crit_cfg.get("top", 10)
    paths = write_report(result, out, top=top, extra={"run": {"config": config, "seed": seed, "device": device}})
    print(result)
    print(f"\nTop {top} flagged outliers (smallest empirical p-value of T(x)/M(x) against real pages):\n")
    print(outliers_table(result, top=top))
    for name, docs in candidates.items():
        paths[f"transitions_{name}"] = transition_difference_heatmap(
            critic, test, docs, out / f"transitions_{name}.png", name=name)
    errors = ["", "## Top section-transition errors (paper table 12: P_c(z_m | z_{m-1}) < 0.01)", ""]
    for name, docs in {"real": test, **candidates}.items():
        errors += [f"### {name}", "", transition_errors_table(critic, docs, threshold=0.01, top=5), ""]
    with open(paths["report"], "a", encoding="utf-8") as fh:
        fh.write("\n".join(errors))
    print("\n".join(errors))
    print(f"\nwrote {', '.join(str(p) for p in paths.values())}")
    return result.to_dict()
