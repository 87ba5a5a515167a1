"""Perplexity against a brute-force, token-by-token computation of the same windows."""

from __future__ import annotations

import math

import pytest
import torch

from critic.document import Section
from critic.lm.format import DocumentFormat
from critic.lm.model import prepare_for_format, save_model_dir
from critic.lm.ppl import perplexity

CONTEXT = 10


def _brute_force_nll(model, stream: list[int], context: int, given: int | None = None) -> tuple[float, int]:
    """sum_j -log p(s_j | s_{start(j)} .. s_{j-1}), start(j) = floor((j - 1) / (W - 1)) (W - 1), one
    forward pass per predicted token, in float64; tokens ``given`` are not predicted."""
    total, n = 0.0, 0
    with torch.no_grad():
        for j in range(1, len(stream)):
            if stream[j] == given:
                continue
            start = (j - 1) // (context - 1) * (context - 1)
            logits = model(input_ids=torch.tensor([stream[start:j]])).logits[0, -1].double()
            total -= float(torch.log_softmax(logits, -1)[stream[j]])
            n += 1
    return total, n


@pytest.mark.parametrize("with_titles, start", [(True, None), (False, None), (False, "<|startofdoc|>")])
def test_perplexity_equals_brute_force(tiny_pair, manpage_docs, tmp_path, with_titles, start):
    fmt = DocumentFormat(with_titles, start_of_document=start)
    model, tok = tiny_pair(n_positions=16)
    prepare_for_format(model, tok, fmt)
    model.eval()
    save_model_dir(model, tok, fmt, tmp_path / "m", training={"context": CONTEXT})
    docs = [d.replace_sections([Section(s.title, s.text[:60]) for s in d.sections[:3]]) for d in manpage_docs[:3]]
    result = perplexity(tmp_path / "m", docs, batch_size=3, progress=False)

    end = tok.convert_tokens_to_ids(fmt.end_of_document)
    given = None if start is None else tok.convert_tokens_to_ids(start)
    stream = [end]
    for doc in docs:
        stream += ([] if given is None else [given]) + tok(fmt.render(doc), add_special_tokens=False)["input_ids"]
    nll, n_tokens = _brute_force_nll(model, stream, CONTEXT, given)
    assert result.n_tokens == n_tokens and result.context == CONTEXT and result.n_documents == 3
    assert result.nll == pytest.approx(nll, rel=1e-5)
    # a window one token longer gives a different total: the test sees the windows
    assert abs(_brute_force_nll(model, stream, CONTEXT + 1, given)[0] - nll) > 1e-3 * nll / n_tokens

    def words(text):
        return len(text.replace(fmt.section_marker, " M ").replace(fmt.end_of_document, " E ").split())

    n_words = sum(words(fmt.render(d)) for d in docs)
    assert result.n_words == n_words
    assert result.word_ppl == pytest.approx(math.exp(nll / n_words), rel=1e-5)
    assert result.token_ppl == pytest.approx(math.exp(nll / n_tokens), rel=1e-5)


def test_perplexity_refuses_folders_without_a_format(tiny_pair, tmp_path, manpage_docs):
    model, tok = tiny_pair()
    model.save_pretrained(tmp_path / "plain")
    tok.save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"plain: no format\.json"):
        perplexity(tmp_path / "plain", manpage_docs[:1], progress=False)
    with pytest.raises(ValueError, match="at least one document"):
        perplexity(tmp_path / "plain", [], progress=False)
