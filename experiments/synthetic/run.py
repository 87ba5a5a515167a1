"""The synthetic study of paper sec. 3 (table 1), end to end.

``critic run experiments/synthetic/cpu.toml --out DIR`` calls :func:`main`:

1. draw the process and the train / valid / test splits (:mod:`.generator`);
2. data Latent PPL in closed form (chain entropy) and by Monte Carlo on the test split;
3. train the HSMM LM (:mod:`critics.hsmm.model`) and the transformer LM
   (:mod:`.transformer`), each resuming from its checkpoint in ``DIR``;
4. word-level PPL of the true process, the transformer and the HSMM on the test split;
5. sample as many sequences from each LM as the test split has and criticise them against
   the test split with the known process as the critic (:class:`.process.KnownProcessCritic`,
   :func:`critic.criticize`): Latent PPL of every set with bootstrap 95% CIs.

Writes ``DIR/results.json`` and ``DIR/table.md``; samples go to ``DIR/samples_*.npz``
so a rerun after an interruption redoes nothing that finished.  The config is checked
against :data:`SCHEMA`; checkpoints and samples are one stage keyed by the config and seed
(``DIR/stages/synthetic.json``, :mod:`critic.study`): a rerun with another config starts over.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from critic import CriticismResult
from critic.config import Divides, Key, keys_from_dataclass
from critic.critic import resolve_device
from critic.io import atomic_write_text
from critic.results import json_ready
from critic.study import RUNTIME_KEYS, Pipeline, register_study, study_schema
from critics.hsmm.model import Checkpointer, HSMMLM, TrainConfig, evaluate, train_hsmm
from critics.hsmm.ngrams import build_vocab

from .generator import PRESETS, SyntheticConfig, make_dataset
from .process import KnownProcessCritic, closed_form_latent_ppl, documents, log_likelihood, projection_summary
from .transformer import TransformerConfig, TransformerLM, sequence_log_prob, train_transformer

__all__ = ["main", "data_config", "SCHEMA"]

_POSITIVE = {"min": 1}
_RATE = {"gt": 0}
SCHEMA = study_schema({
    "data": {"preset": Key(str, choices=tuple(PRESETS), help="base settings; the other keys override them"),
             **keys_from_dataclass(SyntheticConfig, defaults=False, seed={"min": 0}, trans_temperature=_RATE,
                                   emit_temperature=_RATE, **{k: _POSITIVE for k in (
                                       "num_states", "num_segments", "num_letters", "num_subsequences",
                                       "min_len", "max_len", "n_train", "n_valid", "n_test")})},
    "hsmm": keys_from_dataclass(TrainConfig, defaults=False, pretrain_epochs={"min": 0}, epochs={"min": 0},
                                pretrain_lr=_RATE, lr=_RATE, min_lr={"min": 0}, init_scale=_RATE,
                                **{k: _POSITIVE for k in ("num_states", "top_k_ngrams", "batch_size",
                                                          "patience", "eval_every", "max_valid")}),
    "transformer": keys_from_dataclass(TransformerConfig, defaults=False, dropout={"min": 0, "max": 0.999},
                                       epochs={"min": 0}, lr=_RATE, warmup_steps={"min": 0},
                                       weight_decay={"min": 0},
                                       **{k: _POSITIVE for k in ("layers", "heads", "dim", "ff_dim", "max_len",
                                                                 "batch_size")}),
}, criticism={"num_samples": Key(int, min=1, help="samples drawn from each LM (default: test split size)")},
   keys={"hsmm_ngrams_end_at_delimiter": Key(bool, help="n-grams hold the delimiter only as last token "
                                                        "(default true)")},
   checks=(Divides("transformer", "heads", "dim"),))
_OUTPUTS = ("hsmm.ckpt.pt", "transformer.ckpt.pt", "samples_hsmm.npz", "samples_transformer.npz",
            "results.json", "table.md")


def data_config(section: dict, seed: int) -> SyntheticConfig:
    """``[data]``: a ``preset`` name plus overrides of any :class:`SyntheticConfig` field."""
    section = dict(section or {})
    preset = section.pop("preset", "paper")
    if preset not in PRESETS:
        raise ValueError(f"unknown synthetic preset {preset!r}; known: {sorted(PRESETS)}")
    base = PRESETS[preset].to_dict()
    base["seed"] = seed
    base.update(section)
    return SyntheticConfig.from_dict(base)


def _pick(cls, section: dict):
    known = cls.__dataclass_fields__
    unknown = set(section) - set(known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} settings: {sorted(unknown)}")
    return cls(**section)


def _latent_rows(criticism: CriticismResult, num_segments: int) -> tuple[dict, dict]:
    """Table 1's Latent PPLs ``{set: ppl, set_ci: [lo, hi]}`` and each set's projection counts."""
    latent, projection = {}, {}
    for s in criticism.sets:
        latent.update({s.name: s.latent_ppl, f"{s.name}_ci": list(s.latent_ppl_ci)})
        projection[s.name] = projection_summary(s, num_segments)
    return latent, projection


def _samples(path: Path, draw) -> tuple[np.ndarray, np.ndarray]:
    if path.exists():
        z = np.load(path)
        return z["tokens"], z["lengths"]
    tokens, lengths = draw()
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez_compressed(tmp, tokens=tokens, lengths=lengths)
    tmp.replace(path)
    return tokens, lengths


def format_table(results: dict) -> str:
    w, l = results["word_ppl"], results["latent_ppl"]

    def ci(key):
        lo, hi = l[f"{key}_ci"]
        return f"{l[key]:.2f} [{lo:.2f}, {hi:.2f}]"

    lines = [
        "| | True process | Trans-LM | HSMM-LM |",
        "|---|---|---|---|",
        f"| Word-level PPL (test) | {w['true']:.3f} | {w['transformer']:.3f} | {w['hsmm']:.3f} |",
        f"| Latent PPL (data, test split) | {ci('data')} | | |",
        f"| Latent PPL (data, closed form) | {results['data_latent_ppl_closed_form']:.2f} | | |",
        f"| Latent PPL (model samples) | | {ci('transformer')} | {ci('hsmm')} |",
    ]
    proj = results["projection"]
    notes = [
        f"{k}: {v['n_scored']}/{v['n']} projected" + "".join(f", {r}={c}" for r, c in v["reasons"].items() if c)
        for k, v in proj.items()
    ]
    return "\n".join(lines) + "\n\nProjection: " + "; ".join(notes) + "\n"


@register_study("synthetic", SCHEMA, "paper sec. 3: HSMM vs transformer LMs on a known latent process")
def main(run: Pipeline) -> dict:
    """Every step in one stage (the LMs resume from their checkpoints, the samples from their files)."""
    config = run.config
    stage = run.stage("synthetic", {"config": {k: v for k, v in config.items() if k not in ("runner", *RUNTIME_KEYS)},
                                    "seed": run.seed}, outputs=_OUTPUTS)
    if not run.needs(stage):
        return json.loads((run.out / "results.json").read_text(encoding="utf-8"))
    with run.computing(stage):
        results = _study(run)
    run.log(format_table(results))
    return results


def _study(run: Pipeline) -> dict:
    t0 = time.time()
    config, seed, log = run.config, run.seed, run.log
    run.out.mkdir(parents=True, exist_ok=True)
    out, dev = run.out, resolve_device(run.device)
    dcfg = data_config(config.get("data", {}), int(config.get("data", {}).get("seed", seed)))
    hcfg = _pick(TrainConfig, config.get("hsmm", {}))
    tcfg = _pick(TransformerConfig, config.get("transformer", {}))
    ev = config["criticism"]
    process, splits = make_dataset(dcfg)
    train, valid, test = splits["train"], splits["valid"], splits["test"]
    n_samples = int(ev.get("num_samples", len(test)))
    n_test_tokens = float(test.lengths.sum())
    log(f"data: {dcfg.to_dict()} ({time.time() - t0:.0f}s)")

    results: dict = {"config": {"data": dcfg.to_dict(), "hsmm": vars(hcfg), "transformer": vars(tcfg), "eval": ev},
                     "seed": seed, "device": str(dev)}
    results["data_latent_ppl_closed_form"] = closed_form_latent_ppl(process)
    true_ll = log_likelihood(process, test.tokens, test.lengths)
    word = {"true": math.exp(-true_ll.sum() / n_test_tokens)}

    # ---------------------------------------------------------------- HSMM LM
    vocab = build_vocab(
        train.tokens, train.lengths, max_len=dcfg.max_len, top_k=hcfg.top_k_ngrams, base=dcfg.vocab_size,
        final_only=dcfg.delimiter if config.get("hsmm_ngrams_end_at_delimiter", True) else None,
    )
    ids = {k: vocab.lookup(d.tokens, d.lengths) for k, d in splits.items()}
    torch.manual_seed(seed)
    hsmm = HSMMLM(vocab, hcfg.num_states, init_scale=hcfg.init_scale, seed=seed).to(dev)
    h_state = train_hsmm(hsmm, ids["train"], train.lengths, ids["valid"], valid.lengths, hcfg, seed=seed, device=dev,
                         checkpoint=Checkpointer(out / "hsmm.ckpt.pt"), log=log)
    log(f"hsmm trained ({time.time() - t0:.0f}s)")
    word["hsmm"] = math.exp(-evaluate(hsmm, ids["test"], test.lengths, 64, dev) / n_test_tokens)
    toks, lens = _samples(out / "samples_hsmm.npz", lambda: hsmm.sample(
        n_samples, stop_token=dcfg.delimiter, stop_count=dcfg.num_segments, max_segments=4 * dcfg.num_segments,
        generator=torch.Generator().manual_seed(seed + 1)))
    samples = {"hsmm": documents(toks, lens, "hsmm")}

    # ---------------------------------------------------------------- transformer LM
    torch.manual_seed(seed)
    tcfg.max_len = max(tcfg.max_len, dcfg.num_segments * dcfg.max_len)
    trans = TransformerLM(dcfg.vocab_size, tcfg).to(dev)
    t_state = train_transformer(trans, train.tokens, train.lengths, seed=seed, device=dev,
                                checkpoint=Checkpointer(out / "transformer.ckpt.pt"), log=log)
    log(f"transformer trained ({time.time() - t0:.0f}s)")
    word["transformer"] = math.exp(-sequence_log_prob(trans, test.tokens, test.lengths, device=dev).sum() / n_test_tokens)
    toks, lens = _samples(out / "samples_transformer.npz", lambda: trans.sample(n_samples, generator=torch.Generator().manual_seed(seed + 2)))
    samples["transformer"] = documents(toks, lens, "transformer")

    # ---------------------------------------------------------------- Latent PPL: the known process as critic
    critic = KnownProcessCritic(dcfg.to_dict()).fit()
    criticism = run.criticize(critic, documents(test.tokens, test.lengths, "test"), samples, reference_name="data").result
    latent, projection = _latent_rows(criticism, dcfg.num_segments)
    log(f"latent criticism done ({time.time() - t0:.0f}s)")

    results.update(word_ppl=word, latent_ppl=latent, projection=projection, criticism=criticism.to_dict(),
                   training={"hsmm": h_state["history"], "transformer": t_state["history"]},
                   hsmm_vocab_size=vocab.size, wall_seconds=time.time() - t0)
    atomic_write_text(out / "results.json", json.dumps(json_ready(results), indent=1, allow_nan=False) + "\n")
    table = format_table(results)
    atomic_write_text(out / "table.md", table)
    return results
