"""Document-aligned training windows against a brute-force packing of whole documents."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings, strategies as st

from critic.lm.format import DocumentFormat
from critic.lm.windows import IGNORE, aligned_windows, cut_windows, token_stream

END = 0


def documents(lengths: list[int]) -> list[list[int]]:
    """Documents of the given lengths (>= 2: a rendered document has text; its end token included), every
    other token a distinct id, so a token names its place in the stream."""
    docs, next_id = [], 1
    for length in lengths:
        docs.append(list(range(next_id, next_id + length - 1)) + [END])
        next_id += length - 1
    return docs


def brute_force_windows(docs: list[list[int]], context: int) -> list[list[int]]:
    """The windows (unpadded) of placing documents one by one: a document that does not fit next to what
    the window holds closes it; one longer than the room fills windows and continues; a closed window's
    last token is the next one's first."""
    windows, current = [], [END]
    for doc in docs:
        if len(current) > 1 and len(current) + len(doc) > context:
            windows.append(current)
            current = [current[-1]]
        rest = list(doc)
        while len(current) + len(rest) > context:
            room = context - len(current)
            current, rest = current + rest[:room], rest[room:]
            windows.append(current)
            current = [current[-1]]
        current += rest
    windows.append(current)
    return windows


def unpadded(inputs: torch.Tensor, labels: torch.Tensor) -> list[list[int]]:
    return [row[lab != IGNORE].tolist() for row, lab in zip(inputs, labels)]


def check_aligned(docs: list[list[int]], context: int, pad_id: int) -> None:
    stream = torch.tensor([END] + [t for doc in docs for t in doc])
    inputs, labels = aligned_windows(stream, context, pad_id, END)
    assert inputs.shape == labels.shape and inputs.shape[1] == context and inputs.dtype == torch.long
    windows = unpadded(inputs, labels)
    assert windows == brute_force_windows(docs, context)
    # padding only at the end of a window, as pad_id, never a target
    n_real = (labels != IGNORE).sum(1)
    assert ((labels != IGNORE) == (torch.arange(context) < n_real[:, None])).all()
    assert (inputs[labels == IGNORE] == pad_id).all() and (n_real >= 2).all()
    # each window: the end token and a document's first token, or a continuation of the window before
    firsts = {doc[0] for doc in docs}
    for k, window in enumerate(windows):
        if window[0] == END:
            assert window[1] in firsts, k
        else:
            assert k > 0 and len(windows[k - 1]) == context and windows[k - 1][-1] == window[0], k
    # (previous token, target) pairs: those of the documents rendered one after another after the end token
    rendered = [END] + [t for doc in docs for t in doc]
    expected = Counter(zip(rendered[:-1], rendered[1:]))
    got = Counter((w[t - 1], w[t]) for w in windows for t in range(1, len(w)))
    assert got == expected
    assert sum(len(w) - 1 for w in windows) == len(rendered) - 1       # no target lost or duplicated
    # a document that fits a window is never split; a longer one starts a window
    for doc in docs:
        if len(doc) <= context - 1:
            assert any(doc == w[i:i + len(doc)] for w in windows for i in range(len(w))), doc
        else:
            assert any(w[:2] == [END, doc[0]] for w in windows), doc
    assert len(windows) <= (len(rendered) - 1) / (context - 1) + len(docs)


def test_aligned_windows_by_hand():
    docs = documents([4, 2, 11, 2])                       # e 1 2 3 e | 4 e | 5 .. 14 e | 15 e
    inputs, labels = aligned_windows(torch.tensor([END] + sum(docs, [])), 5, -1, END)
    assert inputs.tolist() == [[0, 1, 2, 3, 0], [0, 4, 0, -1, -1], [0, 5, 6, 7, 8], [8, 9, 10, 11, 12],
                               [12, 13, 14, 0, -1], [0, 15, 0, -1, -1]]
    assert labels[1].tolist() == [0, 4, 0, IGNORE, IGNORE]
    # the stream's windows of the same tokens: three of five start mid-document
    stream_inputs, _ = cut_windows(torch.tensor([END] + sum(docs, [])), 5, -1)
    assert stream_inputs[:, 0].tolist() == [0, 0, 6, 10, 14]


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(2, 30), min_size=1, max_size=12), context=st.integers(2, 12),
       pad_is_end=st.booleans())
def test_aligned_windows_match_the_brute_force_packing(lengths, context, pad_is_end):
    check_aligned(documents(lengths), context, END if pad_is_end else -1)


@pytest.mark.parametrize("seed", range(5))
def test_aligned_windows_of_many_documents(seed):
    rng = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 300, (200,), generator=rng).tolist()
    check_aligned(documents(lengths), int(torch.randint(2, 130, (1,), generator=rng)), END)


def test_the_brute_force_reference_can_fail():
    docs = documents([4, 2, 11, 2])
    stream = torch.tensor([END] + sum(docs, []))
    assert unpadded(*cut_windows(stream, 5, -1)) != brute_force_windows(docs, 5)


def test_aligned_windows_of_rendered_documents_start_at_document_starts(tiny_pair, manpage_docs):
    _, tok = tiny_pair()
    fmt = DocumentFormat(True)
    end = tok.convert_tokens_to_ids(fmt.end_of_document)
    docs = manpage_docs[:6]
    inputs, labels = aligned_windows(token_stream(docs, tok, fmt, end), 32, end, end)
    starts = [fmt.render(d) for d in docs]
    for row, lab in zip(inputs, labels):
        text = tok.decode(row[lab != IGNORE].tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text.startswith(fmt.end_of_document):
            after = text[len(fmt.end_of_document):]
            assert any(s.startswith(after) or after.startswith(s) for s in starts), text
    decoded = [tok.decode(row[lab != IGNORE].tolist()[1:], skip_special_tokens=False,
                          clean_up_tokenization_spaces=False) for row, lab in zip(inputs, labels)]
    assert "".join(decoded) == "".join(starts)                          # every target once, in order


def test_a_start_token_follows_every_end_token_and_is_never_a_target(tiny_pair, manpage_docs):
    from critic.lm.model import prepare_for_format

    model, tok = tiny_pair()
    fmt = DocumentFormat(False, start_of_document="<|startofdoc|>")
    prepare_for_format(model, tok, fmt)
    end, start = (tok.convert_tokens_to_ids(t) for t in (fmt.end_of_document, fmt.start_of_document))
    docs = manpage_docs[:6]
    stream = token_stream(docs, tok, fmt, end)
    plain = token_stream(docs, tok, DocumentFormat(False), end)
    assert stream.numel() == plain.numel() + len(docs)                # one start token per document
    assert (stream[1:][stream[:-1] == end] == start).all() and int((stream == start).sum()) == len(docs)
    assert stream[stream != start].tolist() == plain.tolist()
    for windows in (aligned_windows(stream, 32, end, end, start_id=start),
                    cut_windows(stream, 32, end, start_id=start)):
        inputs, labels = windows
        assert not (labels == start).any() and int((inputs == start).sum()) >= len(docs)  # given, never predicted
        targets = labels[:, 1:][labels[:, 1:] != IGNORE]
        assert Counter(targets.tolist()) == Counter(plain[1:].tolist())  # the documents' targets, each once
    inputs, _ = aligned_windows(stream, 32, end, end, start_id=start)
    assert all(row[1] == start for row in inputs if row[0] == end)     # a window opens with e, b, the document


@pytest.mark.parametrize("stream, context, message", [
    (torch.tensor([0, 1, 0]), 1, "context must be at least 2"),
    (torch.tensor([5, 1, 0]), 4, "starts with the end token 0, got 5"),
    (torch.tensor([0]), 4, "nothing to predict"),
    (torch.tensor([[0, 1, 0]]), 4, "one-dimensional"),
])
def test_bad_streams_are_refused(stream, context, message):
    with pytest.raises(ValueError, match=message):
        aligned_windows(stream, context, -1, 0)
