"""The synthetic study of paper sec. 3 (table 1), end to end.

``critic run experiments/synthetic/cpu.toml --out DIR`` calls :func:`main`:

1. draw the process and the train / valid / test splits (:mod:`.generator`);
2. data Latent PPL in closed form (chain entropy) and by Monte Carlo on the test split;
3. train the HSMM LM (:mod:`critics.hsmm.model`) and the transformer LM
   (:mod:`.transformer`), each resuming from its checkpoint in ``DIR``;
4. word-level PPL of the true process, the transformer and the HSMM on the test split;
5. sample as many sequences from each LM as the test split has, project them with the
   known process (:mod:`.process`) and report their Latent PPL with bootstrap 95% CIs.

Writes ``DIR/results.json`` and ``DIR/table.md``; samples go to ``DIR/samples_*.npz``
so a rerun after an interruption redoes nothing that finished.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from critic.critic import resolve_device
from critic.stats import bootstrap_latent_ppl_ci, latent_ppl
from critics.hsmm.model import Checkpointer, HSMMLM, TrainConfig, evaluate, train_hsmm
from critics.hsmm.ngrams import build_vocab

from .generator import PRESETS, SyntheticConfig, make_dataset
from .process import closed_form_latent_ppl, log_likelihood, project
from .transformer import TransformerConfig, TransformerLM, sequence_log_prob, train_transformer

__all__ = ["main", "data_config"]


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


def _latent(process, tokens, lengths, seed, n_boot) -> dict:
    proj = project(process, tokens, lengths)
    ok = proj.ok
    ppl = latent_ppl(proj.latent_nll[ok], proj.latent_steps[ok])
    lo, hi = bootstrap_latent_ppl_ci(proj.latent_nll[ok], proj.latent_steps[ok], n_resamples=n_boot, seed=seed)
    return {"ppl": ppl, "ci": [lo, hi], **proj.summary()}


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


def main(config: dict, *, out: Path, seed: int = 0, device: str = "cpu", log=print) -> dict:
    t0 = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    dcfg = data_config(config.get("data", {}), int(config.get("data", {}).get("seed", seed)))
    hcfg = _pick(TrainConfig, config.get("hsmm", {}))
    tcfg = _pick(TransformerConfig, config.get("transformer", {}))
    ev = config.get("eval", {})
    n_boot = int(ev.get("bootstrap", 1000))
    process, splits = make_dataset(dcfg)
    train, valid, test = splits["train"], splits["valid"], splits["test"]
    n_samples = int(ev.get("num_samples", len(test)))
    n_test_tokens = float(test.lengths.sum())
    log(f"data: {dcfg.to_dict()} ({time.time() - t0:.0f}s)")

    results: dict = {"config": {"data": dcfg.to_dict(), "hsmm": vars(hcfg), "transformer": vars(tcfg), "eval": ev},
                     "seed": seed, "device": str(dev)}
    results["data_latent_ppl_closed_form"] = closed_form_latent_ppl(process)
    data_lat = _latent(process, test.tokens, test.lengths, seed, n_boot)
    true_ll, _ = log_likelihood(process, test.tokens, test.lengths)
    word = {"true": math.exp(-true_ll.sum() / n_test_tokens)}
    latent = {"data": data_lat["ppl"], "data_ci": data_lat["ci"]}
    projection = {"data": {k: data_lat[k] for k in ("n", "n_scored", "reasons")}}

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
    h_lat = _latent(process, toks, lens, seed, n_boot)
    latent.update(hsmm=h_lat["ppl"], hsmm_ci=h_lat["ci"])
    projection["hsmm"] = {k: h_lat[k] for k in ("n", "n_scored", "reasons")}

    # ---------------------------------------------------------------- transformer LM
    torch.manual_seed(seed)
    tcfg.max_len = max(tcfg.max_len, dcfg.num_segments * dcfg.max_len)
    trans = TransformerLM(dcfg.vocab_size, tcfg).to(dev)
    t_state = train_transformer(trans, train.tokens, train.lengths, seed=seed, device=dev,
                                checkpoint=Checkpointer(out / "transformer.ckpt.pt"), log=log)
    log(f"transformer trained ({time.time() - t0:.0f}s)")
    word["transformer"] = math.exp(-sequence_log_prob(trans, test.tokens, test.lengths, device=dev).sum() / n_test_tokens)
    toks, lens = _samples(out / "samples_transformer.npz", lambda: trans.sample(n_samples, generator=torch.Generator().manual_seed(seed + 2)))
    t_lat = _latent(process, toks, lens, seed, n_boot)
    latent.update(transformer=t_lat["ppl"], transformer_ci=t_lat["ci"])
    projection["transformer"] = {k: t_lat[k] for k in ("n", "n_scored", "reasons")}

    results.update(word_ppl=word, latent_ppl=latent, projection=projection,
                   training={"hsmm": h_state["history"], "transformer": t_state["history"]},
                   hsmm_vocab_size=vocab.size, wall_seconds=time.time() - t0)
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    table = format_table(results)
    (out / "table.md").write_text(table, encoding="utf-8")
    log(table)
    return results
