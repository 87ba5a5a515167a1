"""Every ``--device cuda`` path at toy size, in one module: skipped without a CUDA device, run on a GPU machine with

    python -m pytest -q tests/test_cuda.py

A critic fitted on the CPU scores the same Latent NLLs on the GPU (to float rounding), a critic fits on the GPU,
and the commands (fit, score, compare) run with ``--device cuda`` and write what the CPU writes; an LM
fine-tuned on the GPU and killed resumes to the uninterrupted run's weights (the CUDA RNG of dropout is
checkpointed), and its perplexity on the GPU is the CPU's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from critic import Critic
from critic.cli import main
from critic.document import Document, Section, write_jsonl

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (run this module on a GPU machine)")

TITLES = ["name", "synopsis", "description", "options", "errors", "see also"]


def pages(n: int, seed: int) -> list[Document]:
    """Documents of 2-6 titled sections drawn from six titles, in a mostly canonical order."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        titles = sorted(rng.choice(len(TITLES), size=int(rng.integers(2, 7)), replace=False))
        if rng.random() < 0.2:
            rng.shuffle(titles)
        out.append(Document(f"p{seed}-{i}", tuple(Section(TITLES[t], f"text of {TITLES[t]}") for t in titles)))
    return out


def tokens(n: int, seed: int) -> list[Document]:
    """Token sequences of the phrases 'a b .' and 'c d e .' (the HSMM's toy data)."""
    rng = np.random.default_rng(seed)
    phrases = [["a", "b", "."], ["c", "d", "e", "."]]
    return [Document(f"t{seed}-{i}", (Section(None, " ".join(w for _ in range(int(rng.integers(1, 4)))
                                                             for w in phrases[int(rng.integers(0, 2))])),))
            for i in range(n)]


def words(n: int, seed: int) -> list[Document]:
    """Free text over two groups of word types (the topic critics' toy data)."""
    rng = np.random.default_rng(seed)
    groups = [[f"alpha{k}" for k in range(30)], [f"beta{k}" for k in range(30)]]
    return [Document(f"w{seed}-{i}", (Section(None, " ".join(rng.choice(groups[int(rng.integers(0, 2))], 40))),))
            for i in range(n)]


def critics():
    from critics.hsmm import HSMMCritic
    from critics.sections import SectionTransitionCritic
    from critics.topics.ctm_critic import CorrelatedTopicCritic

    return {
        "sections": (lambda: SectionTransitionCritic(delta=0.1), pages),
        "hsmm": (lambda: HSMMCritic(num_states=2, max_len=4, top_k_ngrams=50, end_token=".", epochs=1,
                                    fit_batch_size=8), tokens),
        "ctm": (lambda: CorrelatedTopicCritic(num_topics=3, em_iterations=20), words),   # EM from the NMF start
        "ctm-svi": (lambda: CorrelatedTopicCritic(num_topics=3, fit_method="svi", init="random", steps=100,
                                                  train_batch_size=64, infer_method="adam", infer_steps=50), words),
    }


@pytest.mark.parametrize("name", list(critics()))
def test_a_cpu_fit_scores_the_same_on_the_gpu_and_a_gpu_fit_runs(name):
    make, data = critics()[name]
    train, test = data(60, 0), data(20, 1)
    critic = make().fit(train, validation=data(10, 2))
    on_cpu = critic.score(test, seed=0)
    on_gpu = critic.to("cuda").score(test, seed=0)
    assert on_gpu.doc_ids == on_cpu.doc_ids and on_cpu.n > 0
    # the CTM's Newton path works in float32 and stops each document at a relative gain of tol: a rounding
    # difference can stop it a step apart (measured on an H100: 1.5e-4 relative); other draws on the GPU than
    # on the CPU (the seed's generator on the device) were 6e-3 and 2e-2 relative for Newton and Adam
    rtol = 1e-3 if name == "ctm" else 1e-4
    np.testing.assert_allclose(on_gpu.latent_nll, on_cpu.latent_nll, rtol=rtol, atol=1e-4)
    np.testing.assert_allclose(on_gpu.latent_steps, on_cpu.latent_steps, rtol=1e-9)   # expected segment counts
    gpu_fit = make().to("cuda").fit(train, validation=data(10, 2))
    assert np.isfinite(gpu_fit.score(test, seed=0).latent_nll).all()


def test_the_commands_run_on_cuda_and_write_what_the_cpu_writes(tmp_path):
    train, test = write_jsonl(pages(80, 0), tmp_path / "train.jsonl"), write_jsonl(pages(30, 1), tmp_path / "test.jsonl")
    out = {}
    for device in ("cpu", "cuda"):
        model = tmp_path / f"model-{device}"
        assert main(["fit", "sections", "--train", str(train), "--out", str(model), "--params", '{"delta": 0.1}',
                     "--device", device]) == 0
        assert main(["score", str(model), "--input", str(test), "--out", str(tmp_path / f"{device}.jsonl"),
                     "--device", device]) == 0
        assert main(["compare", str(model), "--reference", str(test), "--candidate", f"same={train}",
                     "--out", str(tmp_path / f"report-{device}"), "--n-bootstrap", "50", "--device", device]) == 0
        out[device] = ([json.loads(line) for line in (tmp_path / f"{device}.jsonl").read_text().splitlines()],
                       json.loads((tmp_path / f"report-{device}" / "results.json").read_text()))
        assert Critic.load(model).state_sha256()  # a GPU fit saves and loads back on the CPU
    (cpu_rows, cpu_res), (gpu_rows, gpu_res) = out["cpu"], out["cuda"]
    assert [r["id"] for r in gpu_rows] == [r["id"] for r in cpu_rows]
    np.testing.assert_allclose([r["latent_nll"] for r in gpu_rows], [r["latent_nll"] for r in cpu_rows], rtol=1e-9)
    assert gpu_res["candidates"]["same"]["latent_ppl"] == pytest.approx(cpu_res["candidates"]["same"]["latent_ppl"],
                                                                        rel=1e-9)


class Interrupt(Exception):
    pass


def test_an_lm_killed_on_the_gpu_resumes_to_the_uninterrupted_weights(tmp_path):
    from safetensors.torch import load_file

    from critic.corpora.manpages import load_manpages
    from critic.lm.finetune import FinetuneConfig, finetune
    from critic.lm.format import DocumentFormat
    from critic.lm.model import build_tiny_lm, train_tokenizer
    from critic.lm.ppl import perplexity

    fmt = DocumentFormat(True)
    docs = load_manpages(sorted((Path(__file__).parent / "data" / "manpages").glob("man*/*")))
    docs = [d.replace_sections([Section(s.title, s.text[:400]) for s in d.sections]) for d in docs]
    tok = train_tokenizer([p for d in docs for s in d.sections for p in (s.title, s.text) if p], vocab_size=400,
                          special_tokens=fmt.special_tokens)
    config = FinetuneConfig(batch_size=4, learning_rate=1e-2, epochs=2, context=32, eval_every=5, device="cuda")
    train, valid = docs[:4], docs[20:21]

    def pair():
        import copy
        t = copy.deepcopy(tok)
        return build_tiny_lm(t, n_positions=48, seed=0, n_layer=2, n_head=2, n_embd=32), t   # dropout 0.1

    clean = finetune(pair(), None, train, valid, fmt, tmp_path / "clean", config, progress=False)

    def kill_at_7(step):                    # checkpoints at 5, 10, ...: steps 6-7 are redone on resume
        if step == 7:
            raise Interrupt

    with pytest.raises(Interrupt):
        finetune(pair(), None, train, valid, fmt, tmp_path / "killed", config, progress=False, callback=kill_at_7)
    resumed = finetune(pair(), None, train, valid, fmt, tmp_path / "killed", config, progress=False)
    assert resumed.steps == clean.steps and resumed.tokens_seen == clean.tokens_seen
    # CUDA's embedding backward adds with atomics, so equal to float rounding rather than bit for bit; a
    # resume that drew other dropout masks (the CUDA RNG not restored) differs by orders of magnitude more
    np.testing.assert_allclose([v for _, _, v in resumed.history], [v for _, _, v in clean.history], rtol=1e-5)
    a = load_file(tmp_path / "clean" / "best" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "best" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k].numpy(), a[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)

    on_gpu = perplexity(clean.best_dir, valid, device="cuda", progress=False)
    on_cpu = perplexity(clean.best_dir, valid, device="cpu", progress=False)
    assert on_gpu.n_tokens == on_cpu.n_tokens and on_cpu.token_ppl > 1
    assert on_gpu.token_ppl == pytest.approx(on_cpu.token_ppl, rel=1e-4)
    assert on_gpu.word_ppl == pytest.approx(on_cpu.word_ppl, rel=1e-4)
