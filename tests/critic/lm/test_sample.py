"""Sampling: the cached loop against a naive one, seeds, resume after a kill, failures by reason."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from critic.document import DocumentError, read_jsonl
from critic.lm.format import DocumentFormat, GenerationParseError
from critic.lm.generations import read_log
from critic.lm.model import prepare_for_format, save_model_dir
from critic.lm.sample import read_generations, sample
from critic.lm.sampler import Warp, draw, generate_batch

FMT = DocumentFormat(True)
WINDOW = 16


def _boost(model, boosts: dict[int, float]) -> None:
    """Raise token ``i``'s logit by about ``boosts[i]`` at every position: ln_f's bias along the tokens'
    (tied) output rows (random rows of a 32-d model are nearly orthogonal)."""
    w = model.lm_head.weight.detach()
    with torch.no_grad():
        model.transformer.ln_f.bias.copy_(sum(b * w[i] / w[i].norm() ** 2 for i, b in boosts.items()))


@pytest.fixture
def boosted(tiny_pair):
    """A random tiny GPT-2 (window 16) drawing the end token with ~5% and a newline with ~3% per step,
    so that short generations end, parse or fail in several ways."""
    model, tok = tiny_pair(n_positions=WINDOW)
    prepare_for_format(model, tok, FMT)
    end = tok.convert_tokens_to_ids(FMT.end_of_document)
    newline, = tok("\n", add_special_tokens=False)["input_ids"]
    _boost(model, {end: 3.0, newline: 2.5})
    return model.eval(), tok, end


@pytest.fixture
def model_dir(boosted, tmp_path):
    model, tok, _ = boosted
    return save_model_dir(model, tok, FMT, tmp_path / "model", training={"context": WINDOW})


def _naive(model, rows, prompt, end, max_new, window, generator):
    """Reference: every step recomputes the forward pass over the last min(t, W-1) tokens, no cache
    (the same draws: :func:`draw` is tested on its own)."""
    seqs, alive, out = [list(prompt) for _ in range(rows)], list(range(rows)), {}
    with torch.no_grad():
        for step in range(max_new):
            if not alive:
                break
            ctx = torch.tensor([seqs[r][-(window - 1):] for r in alive])
            tokens = draw(model(input_ids=ctx).logits[:, -1], generator, Warp()).tolist()
            for r, t in zip(alive, tokens):
                seqs[r].append(t)
                if t == end or step == max_new - 1:
                    out[r] = (seqs[r][len(prompt):], t == end)
            alive = [r for r in alive if r not in out]
    return out


@pytest.mark.parametrize("start", [None, 5], ids=["end token", "end and start tokens"])
def test_cached_sampling_with_sliding_window_equals_naive_recomputation(boosted, start):
    model, _, end = boosted
    prompt = [end] + ([] if start is None else [start])
    runs = {}
    for name in ("cached", "naive"):
        g = torch.Generator().manual_seed(5)
        if name == "cached":
            runs[name] = {r: (ids, fin) for r, ids, fin in generate_batch(
                model, rows=12, prompt=prompt, end_id=end, max_new_tokens=40, window=WINDOW, generator=g)}
        else:
            runs[name] = _naive(model, 12, prompt, end, 40, WINDOW, g)
    assert runs["cached"] == runs["naive"]
    lengths = [len(ids) for ids, _ in runs["cached"].values()]
    assert max(lengths) >= WINDOW + 5                     # crossed the window: recomputed steps were checked
    finished = [fin for _, fin in runs["cached"].values()]
    assert any(finished) and not all(finished)            # rows left the batch early, others ran to the budget
    assert all(ids[-1] == end for ids, fin in runs["cached"].values() if fin)
    assert all(len(ids) == 40 and end not in ids for ids, fin in runs["cached"].values() if not fin)


def test_warps():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    assert torch.isinf(Warp(top_k=2)(logits)).tolist() == [[True, False, True, False]]
    assert torch.isinf(Warp(top_p=0.5)(logits)).tolist() == [[True, False, True, True]]  # p(1) = 0.64 >= 0.5
    assert torch.allclose(Warp(temperature=2.0)(logits), logits / 2)
    g = torch.Generator().manual_seed(0)
    assert draw(logits.repeat(50, 1), g, Warp(top_k=1)).tolist() == [1] * 50
    for bad in (dict(temperature=0.0), dict(top_k=0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            Warp(**bad)


def test_draw_follows_the_distribution_and_never_draws_zero_probability():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    logits = probs.log().repeat(20000, 1)
    tokens = draw(logits, torch.Generator().manual_seed(1), Warp())
    freq = torch.bincount(tokens, minlength=6).double() / tokens.numel()
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs.double(), atol=0.015)              # 4 standard errors at n = 20000
    a = draw(logits[:5], torch.Generator().manual_seed(7), Warp())
    assert torch.equal(a, draw(logits[:5], torch.Generator().manual_seed(7), Warp()))


def test_masked_tokens_are_never_drawn_and_the_rest_renormalised():
    probs = torch.tensor([0.1, 0.4, 0.2, 0.3])
    warp = Warp(masked=(1, 3))
    assert not warp.plain and Warp().plain
    warped = torch.softmax(warp(probs.log()[None]), -1)[0]
    assert torch.allclose(warped, torch.tensor([1 / 3, 0.0, 2 / 3, 0.0]))    # p_v / (1 - p_masked)
    tokens = draw(probs.log().repeat(20000, 1), torch.Generator().manual_seed(3), warp)
    freq = torch.bincount(tokens, minlength=4).double() / tokens.numel()
    assert freq[1] == freq[3] == 0 and abs(freq[0] - 1 / 3) < 0.015


def test_the_start_of_document_is_masked_it_is_given_never_a_target(tiny_pair):
    from critic.lm.sample import unused_special_ids

    model, tok = tiny_pair(n_positions=WINDOW)
    started = DocumentFormat(True, start_of_document="<|startofdoc|>")
    prepare_for_format(model, tok, started)
    assert unused_special_ids(tok, started) == (tok.convert_tokens_to_ids("<|startofdoc|>"),)


def test_sampling_masks_the_special_tokens_the_format_does_not_use(boosted, tmp_path):
    from critic.lm.sample import unused_special_ids

    model, tok, end = boosted
    foreign = tok.convert_tokens_to_ids(FMT.section_marker)   # FMT's marker: special, but used by the format
    assert unused_special_ids(tok, FMT) == ()                  # the fixture's tokenizer has only the format's two
    other = DocumentFormat(True, section_marker="<|part|>")    # a format that leaves <|section|> unused
    prepare_for_format(model, tok, other)
    assert unused_special_ids(tok, other) == (foreign,)
    _boost(model, {end: 2.0, foreign: 4.0})                    # the unused token is the likeliest
    path = save_model_dir(model, tok, other, tmp_path / "model", training={"context": WINDOW})
    texts = {}
    for mask in (False, True):
        sample(path, tmp_path / f"mask{mask}", n=8, batch_size=8, max_new_tokens=12, seed=0, progress=False,
               mask_special_tokens=mask)
        texts[mask] = [g.text for g in _log(tmp_path / f"mask{mask}").values()]
        settings = json.loads((tmp_path / f"mask{mask}" / "settings.json").read_text())
        assert settings["mask_special_tokens"] is mask
    assert sum(t.count(FMT.section_marker) for t in texts[False]) >= 4    # drawn often unmasked
    assert not any(FMT.section_marker in t for t in texts[True])


def test_draw_at_the_top_of_the_cdf_takes_the_last_possible_token(monkeypatch):
    import critic.lm.sampler as sampler

    monkeypatch.setattr(sampler.torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    logits = torch.tensor([[0.0, 0.0, -float("inf"), -float("inf")], [0.0, 1.0, 2.0, 3.0]])
    assert draw(logits, torch.Generator(), Warp()).tolist() == [1, 3]


def _log(out):
    return {i: g for i, g in read_log(out / "generations.jsonl", repair=False)[0].items()}


def test_seeds_make_runs_reproducible_and_batches_independent(model_dir, tmp_path):
    a = sample(model_dir, tmp_path / "a", n=6, batch_size=4, max_new_tokens=30, seed=1, progress=False)
    torch.manual_seed(1234)                                 # the global RNG plays no part
    sample(model_dir, tmp_path / "b", n=6, batch_size=4, max_new_tokens=30, seed=1, progress=False)
    sample(model_dir, tmp_path / "c", n=6, batch_size=4, max_new_tokens=30, seed=2, progress=False)
    sample(model_dir, tmp_path / "d", n=4, batch_size=4, max_new_tokens=30, seed=1, progress=False)
    la, lb, lc, ld = (_log(tmp_path / x) for x in "abcd")
    assert la == lb and set(la) == set(range(6)) and a.new == 6 == a.written
    assert la != lc
    assert {i: la[i] for i in range(4)} == ld              # batch 0 is the same whatever follows it
    assert (tmp_path / "a" / "documents.jsonl").read_bytes() == (tmp_path / "b" / "documents.jsonl").read_bytes()


def test_a_format_with_a_start_token_samples_after_the_end_and_start_tokens(boosted, tmp_path):
    from critic.lm.runs import derived_seed

    model, tok, end = boosted
    fmt = DocumentFormat(True, start_of_document="<|startofdoc|>")
    prepare_for_format(model, tok, fmt)
    start = tok.convert_tokens_to_ids(fmt.start_of_document)
    save_model_dir(model, tok, fmt, tmp_path / "m", training={"context": WINDOW})
    sample(tmp_path / "m", tmp_path / "s", n=4, batch_size=4, max_new_tokens=30, seed=1, progress=False)
    texts = [g.text for _, g in sorted(_log(tmp_path / "s").items())]
    expected = {}
    for prompt in ([end, start], [end]):
        g = torch.Generator().manual_seed(derived_seed(1, "batch", 0))
        expected[len(prompt)] = [tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                                 for _, ids, _ in sorted(generate_batch(model, rows=4, prompt=prompt, end_id=end,
                                                                        max_new_tokens=30, window=WINDOW, generator=g))]
    assert texts == expected[2] and texts != expected[1]


def test_killed_run_with_a_torn_line_resumes_to_the_clean_run(model_dir, tmp_path, capsys):
    kw = dict(n=10, batch_size=4, max_new_tokens=30, seed=3, progress=False)
    clean = sample(model_dir, tmp_path / "clean", **kw)
    written = []

    def kill_after_5(index):
        written.append(index)
        if len(written) == 5:                              # batch 0 complete, batch 1 partly written
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sample(model_dir, tmp_path / "killed", **kw, on_write=kill_after_5)
    log_path = tmp_path / "killed" / "generations.jsonl"
    assert len(_log(tmp_path / "killed")) == 5 and not (tmp_path / "killed" / "sample.json").exists()
    with open(log_path, "ab") as fh:                       # a kill in the middle of the next line
        fh.write(b'{"index": 9, "text": "half a li')
    with pytest.raises(ValueError, match="sampling has not finished"):
        read_generations(tmp_path / "killed")
    resumed = sample(model_dir, tmp_path / "killed", **kw)
    assert "discarded a torn last line" in capsys.readouterr().err
    assert resumed.torn_lines == 1 and resumed.new == 5 and resumed.resume_mismatches == 0
    assert _log(tmp_path / "killed") == _log(tmp_path / "clean")
    assert log_path.read_bytes().endswith(b"\n") and len(log_path.read_bytes().splitlines()) == 10
    for name in ("documents.jsonl",):
        assert (tmp_path / "killed" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
    assert resumed.failures == clean.failures and resumed.parsed == clean.parsed
    # finished: a rerun does nothing
    again = sample(model_dir, tmp_path / "killed", **kw)
    assert again.new == 0 and again.parsed == clean.parsed and again.failures == clean.failures


def test_failures_are_counted_by_reason_never_dropped(model_dir, tmp_path):
    report = sample(model_dir, tmp_path / "s", n=24, batch_size=8, max_new_tokens=40, seed=0, progress=False)
    log = _log(tmp_path / "s")
    reasons = Counter()
    for i, gen in log.items():
        assert gen.finished == gen.text.endswith(FMT.end_of_document)
        try:
            FMT.parse(gen.text, doc_id="x")
        except GenerationParseError as exc:
            reasons[exc.reason] += 1
            assert gen.parse_error == exc.reason
        else:
            assert gen.parse_error is None
    assert report.failures == reasons and len(reasons) >= 2 and reasons["no end-of-document"] == \
        sum(not g.finished for g in log.values())
    docs, failures = read_generations(tmp_path / "s")
    assert failures == reasons and report.parsed == len(docs) == 24 - sum(reasons.values()) > 0
    assert [d.id for d in docs] == sorted(f"gen-{i:06d}" for i, g in log.items() if g.parse_error is None)
    for d in docs:
        gen = log[d.metadata["index"]]
        assert d.metadata["n_tokens"] == gen.n_tokens and len(d.metadata["generated_titles"]) == len(d.sections)
        assert all(s.title is None for s in d.sections)
    counts = json.loads((tmp_path / "s" / "sample.json").read_text())["counts"]
    assert counts["requested"] == counts["written"] == 24 and counts["failures"] == dict(reasons)
    assert len(read_jsonl(tmp_path / "s" / "documents.jsonl")) == len(docs)


def test_cut_generations_are_read_as_documents_when_asked(model_dir, tmp_path):
    sample(model_dir, tmp_path / "s", n=24, batch_size=8, max_new_tokens=40, seed=0, progress=False)
    log = _log(tmp_path / "s")
    plain, plain_failures = read_generations(tmp_path / "s")
    docs, failures = read_generations(tmp_path / "s", cut=True)
    expected = {}
    for i, gen in log.items():  # a cut generation parses as the text it wrote with the end token added
        text = gen.text if gen.finished else gen.text + FMT.end_of_document
        try:
            expected[i] = FMT.parse(text, doc_id=f"gen-{i:06d}")
        except GenerationParseError:
            pass
    cut = [i for i in expected if not log[i].finished]
    assert cut and len(docs) == len(expected) == len(plain) + len(cut)
    assert [d.metadata["index"] for d in docs] == sorted(expected)
    assert all(d.sections == expected[d.metadata["index"]].sections for d in docs)
    assert sorted(d.metadata["index"] for d in docs if d.metadata.get("cut")) == sorted(cut)
    assert plain_failures["no end-of-document"] >= len(cut) and "no end-of-document" not in failures
    assert sum(failures.values()) == 24 - len(docs)  # a cut generation that does not parse keeps its reason


def test_an_opening_is_sampled_and_the_warp_applies_after_it(boosted):
    model, _, end = boosted
    runs = {}
    for name, warp in (("ancestral", Warp()), ("greedy", Warp(top_k=1, opening=3))):
        g = torch.Generator().manual_seed(11)
        runs[name] = {r: ids for r, ids, _ in generate_batch(model, rows=8, prompt=[end], end_id=end,
                                                             max_new_tokens=12, window=WINDOW, generator=g,
                                                             warp=warp)}
    naive = {}  # reference: the loop by hand, ancestral draws for 3 steps, then the argmax
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for r in range(8):
            naive[r] = []
        seqs, alive = [[end] for _ in range(8)], list(range(8))
        for step in range(12):
            logits = model(input_ids=torch.tensor([seqs[r][-(WINDOW - 1):] for r in alive])).logits[:, -1]
            tokens = draw(logits, g, Warp() if step < 3 else Warp(top_k=1)).tolist()
            if step >= 3:
                assert tokens == logits.argmax(-1).tolist()
            for r, t in zip(alive, tokens):
                seqs[r].append(t)
                naive[r].append(t)
            alive = [r for r in alive if seqs[r][-1] != end]
            if not alive:
                break
    assert runs["greedy"] == naive
    assert all(runs["greedy"][r][:3] == runs["ancestral"][r][:3] for r in range(8))  # one seed, one opening
    assert runs["greedy"] != runs["ancestral"]
    with pytest.raises(ValueError, match="opening must be"):
        Warp(opening=-1)


def test_bad_inputs_are_refused_with_the_folder_named(model_dir, tmp_path):
    sample(model_dir, tmp_path / "s", n=2, batch_size=2, max_new_tokens=5, progress=False)
    with pytest.raises(ValueError, match=r"s: holds a sampling run with other settings \(max_new_tokens"):
        sample(model_dir, tmp_path / "s", n=2, batch_size=2, max_new_tokens=6, progress=False)
    (model_dir / "format.json").unlink()
    with pytest.raises(ValueError, match=r"model: no format\.json"):
        sample(model_dir, tmp_path / "t", n=2, progress=False)
    with pytest.raises(ValueError, match="n must be"):
        sample(model_dir, tmp_path / "t", n=0, progress=False)
    log = tmp_path / "bad.jsonl"
    good = '{"index": 0, "text": "x", "n_tokens": 1, "finished": false, "parse_error": "no end-of-document"}\n'
    log.write_text(good + "not json\n" + good)
    with pytest.raises(DocumentError, match=r"bad\.jsonl:2"):
        read_log(log)
    log.write_text(good + good)
    with pytest.raises(DocumentError, match="written twice"):
        read_log(log)
    log.write_text(good.replace('"index": 0', '"index": 7'))
    with pytest.raises(DocumentError, match="outside"):
        read_log(log, n=5)
